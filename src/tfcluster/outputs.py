"""What well-known programs print, read without TensorFlow: progress, start-up noise, errors.

The launcher's own signals come first (the progress protocol, its pipe, its own knowledge of
who started a task); this module reads a program's output only as the fallback, the way real
programs write it:

- :class:`ProgressParser` turns Keras' and TensorFlow 1's lines into the progress model of
  :mod:`tfcluster.progress` (a step, a total where known, metrics, an ``epoch`` metric):
  Keras' ``Epoch 3/10`` and its batch bar, ``70/70 [======] - 2s 25ms/step - loss: 0.31``
  (tf_keras) or ``70/70 ━━━━━━ 2s 25ms/step - accuracy: 0.9 - loss: 0.31`` (Keras 3), redrawn
  with carriage returns (``verbose=1``) or one line per epoch (``verbose=2``) -- an epoch
  header is a sign of life, the bar gives the step; TensorFlow 1's
  ``INFO:tensorflow:global_step/sec: 41.7`` (a rate, no step) and ``loss = 0.12, step = 1200``
  (LoggingTensorHook), ``Saving checkpoints for 1200 into ...``. A bar's step is counted across
  epochs (the batches of the epochs before it plus this batch); its total is epochs x steps
  when Keras knows both, else none (no invented ETA).
- :func:`is_noise`: TensorFlow's known-harmless start-up lines (no GPU on a CPU machine, the
  oneDNN note, absl's pre-init warning, ...), folded on the console, kept in the logs.
- :func:`failure_tail`: the lines worth showing from the end of a failed task's output:
  progress and noise left out, a Python traceback's last frame and exception line first.
- :func:`clean_segment`: one carriage-return segment as a terminal shows it (ANSI sequences
  removed, backspaces applied).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence

from .progress import Progress, split_progress
from .terminal import strip_escapes, terminal_text

# ---------------------------------------------------------------------------- segments



def _apply_backspaces(text: str) -> str:
    """A terminal's backspace: the cursor moves left, what follows overwrites."""
    out: list = []
    cursor = 0
    for ch in text:
        if ch == "\b":
            cursor = max(0, cursor - 1)
        elif cursor < len(out):
            out[cursor] = ch
            cursor += 1
        else:
            out.append(ch)
            cursor += 1
    return "".join(out)


def clean_segment(text: str) -> str:
    """One segment between carriage returns/newlines as a terminal shows it, and safe to show
    on one (:mod:`tfcluster.terminal`): escape sequences (colours, erase-line, but also resets,
    OSC titles, the one-byte CSI) removed, backspaces applied, other control characters
    escaped, trailing blanks dropped. Printable text is only right-stripped."""
    if text.isprintable():
        return text.rstrip()
    text = strip_escapes(text)
    if "\b" in text:
        text = _apply_backspaces(text)
    return terminal_text(text).rstrip()


# ---------------------------------------------------------------------------- progress

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf)"
_EPOCH = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
# a Keras bar: "  3/70 [==>...] - ETA: 2s - loss: ..." (tf_keras), "3/70 ━━━━ 2s 25ms/step -
# loss: ..." (Keras 3), "70/70 - 1s - 25ms/step - loss: ..." (verbose=2), "12/Unknown ..."
_BAR = re.compile(r"^\s*(\d+)/(\d+|Unknown)(?=\s|$)(.*)$")
_BAR_REST = re.compile(r"^\s*(?:\[[=>.]*\]|━+|-\s|\d+(?:\.\d+)?(?:ms|us|s|m|h)\b)")
_METRIC = re.compile(r"(?:^|\s)-\s+([A-Za-z_][\w.]*):\s+(" + _NUM + r")(?=\s|$)")
_PER_STEP = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s)/step\b")
# TensorFlow 1 hooks (tf.compat.v1.logging / absl: "INFO:tensorflow:" or "I1201 ...] ")
_RATE = re.compile(r"\bglobal_step/sec: (" + _NUM + r")")
_LOSS_STEP = re.compile(r"\bloss = (" + _NUM + r"), step = (\d+)\b")
_STEP_ANY = re.compile(r"(?:^|[\s:\]])step = (\d+)\b")
_CKPT = re.compile(r"Saving checkpoints for (\d+) into ")
_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


@dataclass
class Reading:
    """What one piece of output said about progress."""

    progress: Optional[Progress] = None     # a step to show (None: nothing new to show)
    life: bool = False                      # a sign of progress: a step that moved, a rate > 0
    rate: Optional[float] = None            # steps per second, when the program says it


class ProgressParser:
    """Reads a task's output pieces (lines and carriage-return segments, in order) into
    progress. One per task attempt: it remembers the epoch and the batches of past epochs."""

    def __init__(self):
        self.epoch: Optional[int] = None
        self.epochs: Optional[int] = None
        self.done_before = 0          # batches of the epochs before this one
        self.batch = 0                # the last batch of this epoch
        self.steps: Optional[int] = None
        self.last_key = None          # (epoch, batch) or a global step last reported

    def _life(self, key) -> bool:
        moved = key != self.last_key
        self.last_key = key
        return moved

    def feed(self, text: str) -> Reading:
        """``text``: one cleaned piece (:func:`clean_segment`) with protocol reports removed."""
        m = _EPOCH.match(text)
        if m:
            epoch, epochs = int(m.group(1)), int(m.group(2))
            if self.epoch is not None and epoch != self.epoch:
                self.done_before += self.batch
            elif self.epoch is None and epoch > 1 and self.steps:
                self.done_before = (epoch - 1) * self.steps
            self.epoch, self.epochs, self.batch = epoch, epochs, 0
            # life, not a step: a header arms no stall watchdog before the epoch's first batch
            # (with verbose=2 that is the epoch's end, which sets the run's cadence)
            return Reading(None, life=self._life(("epoch", epoch)))
        m = _BAR.match(text)
        if m and _BAR_REST.match(m.group(3)):
            batch = int(m.group(1))
            steps = None if m.group(2) == "Unknown" else int(m.group(2))
            if batch < self.batch and self.epoch is None:
                self.done_before += self.batch      # a new fit/epoch without an Epoch line
            self.batch = batch
            if steps:
                self.steps = steps
            metrics = {k: float(v) for k, v in _METRIC.findall(m.group(3))
                       if k not in ("ETA", "step", "total")}
            if self.epoch is not None:
                metrics["epoch"] = float(self.epoch)
                if self.epochs:
                    metrics["epochs"] = float(self.epochs)
            rate = None
            r = _PER_STEP.search(m.group(3))
            if r and float(r.group(1)) > 0:
                rate = 1.0 / (float(r.group(1)) * _UNIT[r.group(2)])
            p = Progress(step=self.done_before + batch, total=self._total(), metrics=metrics)
            return Reading(p, life=self._life((self.epoch, batch)), rate=rate)
        if "step" in text:
            m = _LOSS_STEP.search(text)
            if m:
                step = int(m.group(2))
                metrics = {}
                try:
                    metrics["loss"] = float(m.group(1))
                except ValueError:
                    pass
                return Reading(Progress(step=step, metrics=metrics), life=self._life(step))
            m = _RATE.search(text)
            if m:
                try:
                    rate = float(m.group(1))
                except ValueError:
                    rate = None
                return Reading(None, life=bool(rate and rate > 0), rate=rate)
            m = _STEP_ANY.search(text) if "INFO" in text or "] " in text else None
            if m:
                step = int(m.group(1))
                return Reading(Progress(step=step), life=self._life(step))
        if "Saving checkpoints for " in text:
            m = _CKPT.search(text)
            if m:
                step = int(m.group(1))
                return Reading(Progress(step=step), life=self._life(step))
        return Reading()

    def _total(self) -> Optional[int]:
        if self.epochs and self.steps:
            return self.epochs * self.steps
        return None


def is_progress_line(text: str) -> bool:
    """A line that only shows progress (a Keras bar or epoch header, a TF1 rate or step line,
    a protocol report): left out of failure tails."""
    visible, found = split_progress(text)
    if found and not visible.strip():
        return True
    visible = clean_segment(visible)
    if _EPOCH.match(visible):
        return True
    m = _BAR.match(visible)
    if m and _BAR_REST.match(m.group(3)):
        return True
    return bool(_RATE.search(visible) or _LOSS_STEP.search(visible))


# ---------------------------------------------------------------------------- noise

# TensorFlow's start-up lines that say nothing about the program: a CPU machine has no GPU,
# oneDNN and CPU-feature notes, absl's "before InitializeLog" warning, duplicate plugin
# registrations, TensorRT absent. Matched on the message (after the glog/absl prefix).
_NOISE = re.compile("|".join([
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    r"oneDNN custom operations are on\.",
    r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, GPU will not be used\.",
    r"cuda_platform\.cc:\d+\] failed call to cuInit: ",
    r"cuda_executor\.cc:\d+\] failed call to cuInit",
    r"cuda_diagnostics\.cc:\d+\] (?:retrieving CUDA diagnostic information for host|hostname: |"
    r"kernel driver does not appear to be running on this host|libcuda reported version is|"
    r"kernel reported version is)",
    r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized to use available CPU "
    r"instructions",
    r"^To enable the following instructions: .*, in other operations, rebuild TensorFlow with the "
    r"appropriate compiler flags\.$",
    r"Unable to register cu(?:DNN|FFT|BLAS) factory: Attempting to register factory for plugin",
    r"computation_placer\.cc:\d+\] computation placer already registered",
    r"TF-TRT Warning: Could not find TensorRT",
    r"Could not find TensorRT$",
    r"^WARNING: All log messages before absl::InitializeLog",
]))


def is_noise(line: str) -> bool:
    """A known-harmless TensorFlow start-up line (hidden on the console, kept in the log)."""
    return bool(line) and _NOISE.search(line) is not None


# ---------------------------------------------------------------------------- failure tail

_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
_EXC = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning|"
                  r"Failure|NotFound|Abort)\w*(?::|$)")
_TRACEBACK = "Traceback (most recent call last):"


def failure_tail(lines: Sequence[str], n: int = 10) -> List[str]:
    """The lines to show for a failed task from the end of its output (at most ``n``):
    progress lines and TensorFlow's start-up noise left out; when a Python traceback is there,
    its last frame (the ``File ...`` line and its code line) and the exception line come
    first, then ``...`` and the last lines before the end."""
    kept = [ln for ln in lines if ln.strip() and not is_progress_line(ln) and not is_noise(ln)]
    if not kept:
        return []
    head: List[str] = []
    skip = set()
    last_frame = None
    for i in range(len(kept) - 1, -1, -1):
        if _FRAME.match(kept[i]):
            last_frame = i
            break
    exc = None
    if last_frame is not None:
        head.append(kept[last_frame])
        skip.add(last_frame)
        j = last_frame + 1
        if j < len(kept) and kept[j].startswith("    ") and not _FRAME.match(kept[j]):
            head.append(kept[j])
            skip.add(j)
            j += 1
        # carets and the rest of an indented code line, then the exception line
        while j < len(kept) and (kept[j][:1] in (" ", "\t") or set(kept[j].strip()) <= set("^~")):
            j += 1
        if j < len(kept):
            exc = j
    else:
        for i in range(len(kept) - 1, -1, -1):
            if _EXC.match(kept[i]):
                exc = i
                break
    if exc is not None:
        head.append(kept[exc])
        skip.add(exc)
    if not head:
        return kept[-n:]
    if len(head) >= n:
        return head[:n]
    rest = [ln for k, ln in enumerate(kept) if k not in skip and ln.strip() != _TRACEBACK]
    room = n - len(head) - 1
    tail = rest[-room:] if room > 0 else []
    return head + (["..."] + tail if tail else [])
