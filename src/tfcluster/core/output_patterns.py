"""What well-known programs print, read without TensorFlow: progress, start-up noise, errors.

The launcher's own signals come first (the progress protocol, its pipe, its own knowledge of
who started a task); this module reads a program's output only as the fallback, the way real
programs write it:

- :class:`ProgressParser` turns Keras' and TensorFlow 1's lines into the progress model of
  :mod:`tfcluster.plan.progress` (a step, a total where known, metrics, an ``epoch`` metric):
  Keras' ``Epoch 3/10`` and its batch bar, ``70/70 [======] - 2s 25ms/step - loss: 0.31``
  (tf_keras) or ``70/70 ━━━━━━ 2s 25ms/step - accuracy: 0.9 - loss: 0.31`` (Keras 3), redrawn
  with carriage returns (``verbose=1``) or one line per epoch (``verbose=2``) -- an epoch
  header is a sign of life, the bar gives the step; TensorFlow 1's
  ``INFO:tensorflow:global_step/sec: 41.7`` (a rate, no step) and ``loss = 0.12, step = 1200``
  (LoggingTensorHook), ``Saving checkpoints for 1200 into ...``. A bar's step is counted across
  epochs (the batches of the epochs before it plus this batch); its total is epochs x steps
  when Keras knows both, else none (no invented ETA).
- :func:`is_noise`: TensorFlow's known-harmless lines (no GPU on a CPU machine, the oneDNN
  note, absl's pre-init warning, the coordination service's INFO lines, TF1's aborted
  rendezvous at the end, its warnings about deprecated APIs (with their "Instructions for
  updating" lines: :func:`noise_continues`) and tf.function retracing, ...), folded on the
  console, by ``logs`` and ``hello`` and in failure tails
  (:class:`tfcluster.core.task_output.NoiseFold`), kept in the logs.
- :func:`failure_tail`: the lines worth showing from the end of a failed task's output:
  progress and noise left out; a Python traceback's exception line first, then its frames
  that matter, in order.
- :func:`failure_cause`: why a failed task ended, in one line (its exception, as
  ``NotFoundError: Key ... not found in checkpoint``); :func:`exception_lines`: that
  exception's lines as the tail shows them first.
- :func:`failure_hint`: one line naming the fix for a known cause (a Keras 3 failure, from
  :mod:`tfcluster.core.keras_hints`; a checkpoint that no longer matches the model; a module
  TensorFlow 2 removed): the one the drivers ask.
- :func:`clean_segment`: one carriage-return segment as a terminal shows it (ANSI sequences
  removed, backspaces applied); :func:`latest_bar_state`: a line redrawn with carriage returns
  (Keras' ``verbose=1`` bar) as a terminal last shows it.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from tfcluster.plan.progress import Progress, split_progress
from tfcluster.terminal import strip_escapes, terminal_text

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


def latest_bar_state(line: str) -> str:
    """What a terminal last shows for ``line`` (no newline) when it redraws with carriage
    returns, as Keras' ``verbose=1`` progress bar does: the last CR segment that is not blank,
    with backspaces applied as a terminal does (the cursor moves back, what follows
    overwrites), ANSI sequences (erase-line, colours) removed and trailing blanks
    dropped. A line without ``\\r``, ``\\b`` or ESC is returned unchanged."""
    if "\r" not in line and "\b" not in line and "\x1b" not in line:
        return line
    line = line.rstrip("\r\n")
    for segment in reversed(line.split("\r")):
        shown = clean_segment(segment)
        if shown.strip():
            return shown
    return ""


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


def keras_sums_over(cluster) -> int:
    """How many workers' values tf_keras adds up in a step's metrics for a task of ``cluster``
    (TF_CONFIG's ``cluster``): under MultiWorkerMirroredStrategy (a cluster with no ``ps``) its
    chief and workers, every one of which runs ``fit``; else 1 (a ParameterServerStrategy step
    runs on one worker; TF1 prints no bar). See :class:`ProgressParser`. A string is read as
    TF_CONFIG's JSON."""
    if isinstance(cluster, str):
        try:
            cluster = json.loads(cluster).get("cluster")
        except (ValueError, AttributeError):
            return 1
    if not isinstance(cluster, dict) or cluster.get("ps"):
        return 1
    return max(1, sum(len(cluster.get(job) or ()) for job in ("chief", "worker")))


def _whole_ratio(step: dict, end: dict, most: int) -> Optional[int]:
    """The whole number n (1..``most``) with ``step`` = n x ``end`` for every metric both show
    (at Keras' 4 decimals), else None."""
    keys = [k for k in end if k in step and abs(end[k]) > 1e-3 and k not in ("epoch", "epochs")]
    if not keys:
        return None
    n = round(step[keys[0]] / end[keys[0]])
    if not 1 <= n <= most:
        return None
    if any(abs(step[k] - n * end[k]) > 1e-4 * (n + 1) for k in keys):
        return None
    return n


class ProgressParser:
    """Reads a task's output pieces (lines and carriage-return segments, in order) into
    progress. One per task attempt: it remembers the epoch and the batches of past epochs.

    Figures are shown the way the program computed them. Under MultiWorkerMirroredStrategy
    tf_keras' ``fit`` logs each step's metrics summed over the workers (its ``"auto"``
    reduction is a sum: see :mod:`tfcluster.runtime.keras`), and its ``verbose=1`` bar redraws
    with those sums (``accuracy: 1.4``), while the line that ends the epoch holds the metrics'
    own values. So a bar's redraw (``redraw=True``: a piece that a carriage return ended) is
    divided by ``summed_over`` (:func:`keras_sums_over`: the workers each running ``fit``): the
    per-worker mean, as ``ProgressCallback`` reports it. At an epoch's end, when the last
    redraw was of the same step, the ratio of its values to the epoch line's says how many
    values Keras really added, and that is used from then on. Keras 3's bar (``━``) from
    3.3 averages: divided only once an epoch's end has shown a sum."""

    def __init__(self, summed_over: int = 1):
        self.epoch: Optional[int] = None
        self.epochs: Optional[int] = None
        self.done_before = 0          # batches of the epochs before this one
        self.batch = 0                # the last batch of this epoch
        self.steps: Optional[int] = None
        self.last_key = None          # (epoch, batch) or a global step last reported
        self.summed_over = max(1, int(summed_over or 1))   # the workers fit runs on
        self.learned: Optional[int] = None   # what an epoch's end showed Keras adds
        self._redrawn: Optional[Tuple[int, dict]] = None   # the last redraw: batch, raw values

    def _life(self, key) -> bool:
        moved = key != self.last_key
        self.last_key = key
        return moved

    def _divisor(self, rest: str) -> int:
        if self.learned is not None:
            return self.learned
        return 1 if "━" in rest else self.summed_over

    def _per_worker(self, batch: int, rest: str, metrics: dict, redraw: bool) -> dict:
        """A bar's values as one worker's: a redraw divided by what Keras added; an epoch's
        end as it is (and what it shows Keras added, learned)."""
        if redraw:
            self._redrawn = (batch, dict(metrics))
            n = self._divisor(rest)
            return {k: v / n for k, v in metrics.items()} if n > 1 else metrics
        last, self._redrawn = self._redrawn, None
        if last is not None and last[0] == batch:
            n = _whole_ratio(last[1], metrics, max(self.summed_over, 1))
            if n is not None:
                self.learned = n
        return metrics

    def feed(self, text: str, redraw: bool = False) -> Reading:
        """``text``: one cleaned piece (:func:`clean_segment`) with protocol reports removed;
        ``redraw``: a carriage return ended it (a bar's state within an epoch)."""
        m = _EPOCH.match(text)
        if m:
            return self._epoch(int(m.group(1)), int(m.group(2)))
        m = _BAR.match(text)
        if m and _BAR_REST.match(m.group(3)):
            return self._bar(m, redraw)
        return self._step_line(text)

    def _epoch(self, epoch: int, epochs: int) -> Reading:
        """Keras' ``Epoch 3/10`` header."""
        if self.epoch is not None and epoch != self.epoch:
            self.done_before += self.batch
        elif self.epoch is None and epoch > 1 and self.steps:
            self.done_before = (epoch - 1) * self.steps
        self.epoch, self.epochs, self.batch = epoch, epochs, 0
        # life, not a step: a header arms no stall watchdog before the epoch's first batch
        # (with verbose=2 that is the epoch's end, which sets the run's cadence)
        return Reading(None, life=self._life(("epoch", epoch)))

    def _bar(self, m: "re.Match[str]", redraw: bool) -> Reading:
        """A Keras progress bar (``_BAR``'s match): the batch, its metrics and its rate."""
        batch = int(m.group(1))
        steps = None if m.group(2) == "Unknown" else int(m.group(2))
        if batch < self.batch and self.epoch is None:
            self.done_before += self.batch      # a new fit/epoch without an Epoch line
        self.batch = batch
        if steps:
            self.steps = steps
        metrics = {k: float(v) for k, v in _METRIC.findall(m.group(3))
                   if k not in ("ETA", "step", "total")}
        metrics = self._per_worker(batch, m.group(3), metrics, redraw)
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

    def _step_line(self, text: str) -> Reading:
        """TF1's and the Estimator's lines: a loss at a step, a rate, a step, a checkpoint."""
        if "step" in text:
            m = _LOSS_STEP.search(text)
            if m:
                step = int(m.group(2))
                metrics = {}
                try:
                    metrics["loss"] = float(m.group(1))
                except ValueError:   # a loss TF printed as no float ("nan(ind)"): the step counts
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
# registrations, TensorRT absent, the profiler server's start. Matched on the message (after the glog/absl prefix).
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
    # the runtime's profiler server (TFCLUSTER_PROFILER_PORT), started in every task
    r"profiler_server\.cc:\d+\] Profiler server listening on ",
    # MultiWorkerMirroredStrategy's coordination service: its routine INFO lines (connects,
    # shutdown barriers, error polling; about ten per worker); its warnings and errors stay
    r"^I\d{4} [\d:.]+\s+\d+ (?:coordination_service(?:_agent|_rpc_handler)?|preemption_notifier)"
    r"\.cc:\d+\] ",
    # TensorFlow 1 at the end of a session or of an input: cancelled receives, end of sequence
    r"local_rendezvous\.cc:\d+\] Local rendezvous is aborting with status: ",
    # LoggingTensorHook/StepCounterHook on a worker whose optimizer steps the global step
    # elsewhere (SyncReplicasOptimizer, a stopped chief): said five times, harmless
    r"It seems that global step \(tf\.train\.get_global_step\) has not been increased\.",
    # a cached dataset whose iterator was stopped before the end (training ended mid-epoch)
    r"dataset\.cc:\d+\] The calling iterator did not fully read the dataset being cached\.",
    # TensorFlow's Python warnings about itself: an API it deprecated (TF1 savers call
    # remove_checkpoint; its "Instructions for updating:" lines follow: noise_continues),
    # tf.function retracing (MultiDeviceSaver.save with save_checkpoint_secs)
    r"^(?:WARNING:tensorflow:|W\d{4} [\d:.]+\s+\d+ deprecation\.py:\d+\] )From .+ is deprecated "
    r"and will be removed",
    r"^(?:WARNING:tensorflow:|W\d{4} [\d:.]+\s+\d+ \w+\.py:\d+\] )\d+ out of the last \d+ calls "
    r"to <.*> triggered tf\.function retracing\.",
]))
_DEPRECATED = re.compile(r"\bFrom .+ is deprecated and will be removed")
_INSTRUCTIONS = "Instructions for updating:"


def is_noise(line: str) -> bool:
    """A known-harmless TensorFlow start-up line (hidden on the console, kept in the log)."""
    return bool(line) and _NOISE.search(line) is not None


def noise_continues(previous: Optional[str], line: str) -> bool:
    """Whether ``line`` goes on with the noise message whose line before it (same task, folded)
    was ``previous``: a deprecation warning's ``Instructions for updating:`` and the one line
    of instructions after it."""
    if previous is None:
        return False
    if line.strip() == _INSTRUCTIONS:
        return _DEPRECATED.search(previous) is not None
    return previous.strip() == _INSTRUCTIONS


def without_noise(lines: Sequence[str]) -> List[str]:
    """``lines`` without TensorFlow's noise (:func:`is_noise`, :func:`noise_continues`)."""
    out: List[str] = []
    previous = None
    for line in lines:
        if is_noise(line) or noise_continues(previous, line):
            previous = line
            continue
        previous = None
        out.append(line)
    return out


# ---------------------------------------------------------------------------- failure tail

_FRAME = re.compile(r'^\s*File "([^"]*)", line \d+')
_EXC = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning|"
                  r"Failure|NotFound|Abort)\w*(?::|$)")
_TRACEBACK = "Traceback (most recent call last):"
# lines of a TensorFlow error message that repeat where it happened, not what happened
_MESSAGE_NOISE = re.compile(
    r"^\s*(?:$|File \"|Detected at node|Node: |=+$|Original stack trace for|\.\.\.which was originally"
    r"|\[elided |During handling of|Traceback \(|Additional GRPC error information|:?UNKNOWN:"
    r"|\[\[|(?:[A-Z_]+: )?From /job:\S*:?$|[A-Z_]+: From /job:|Errors may have originated from|Graph execution error:?$"
    r"|\d+ (?:root|derived) error|\(\d+\) [A-Z_]+:|0 successful operations|\[Op:)")
_GENERIC = re.compile(r":\s*(?:Graph execution error:?|)\s*$")


def _tfcluster_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_frame(line: str) -> bool:
    """A frame in an installed package, the standard library or tfcluster itself: not where
    the program's own code went wrong."""
    m = _FRAME.match(line)
    path = m.group(1) if m else ""
    return (not path or "site-packages" in path or "dist-packages" in path or path.startswith("<")
            or path.startswith(_tfcluster_dir())
            or re.search(r"[/\\]lib[/\\]python\d[\d.]*[/\\]", path) is not None)


def _traceback(kept: List[str]) -> Optional[Tuple[int, List[Tuple[int, int]]]]:
    """The last Python traceback in ``kept``: (the exception line's index, its frames as
    (start, end) line ranges, outermost first); None when there is none."""
    exc = None
    for i in range(len(kept) - 1, -1, -1):
        line = kept[i]
        if line[:1] in (" ", "\t") or not _EXC.match(line):
            continue
        j = i - 1        # a traceback's exception line follows its frames (code, carets)
        while j >= 0 and (kept[j][:1] in (" ", "\t")) and not _FRAME.match(kept[j]):
            j -= 1
        if j >= 0 and _FRAME.match(kept[j]):
            exc = i
            break
        if exc is None:
            exc = i      # an exception line without its frames (a tensor dump before it)
    if exc is None:
        return None
    frames: List[Tuple[int, int]] = []
    j, end = exc - 1, exc
    while j >= 0 and (kept[j][:1] in (" ", "\t") or _FRAME.match(kept[j])):
        if _FRAME.match(kept[j]):
            frames.append((j, end))
            end = j
        j -= 1
    frames.reverse()
    return exc, frames


_OPEN, _CLOSE = "([{", ")]}"


def _message_end(kept: List[str], exc: int) -> Optional[str]:
    """The line that ends an exception's message which opened a bracket on its first line and
    dumped a value over many lines (``ValueError: Attempt to convert a value (PerReplica:{``
    ... ``}) with an unsupported type (...) to a Tensor.``): the first later line that starts
    with the closing bracket; None when the first line closes what it opens."""
    line = kept[exc]
    if sum(line.count(c) for c in _OPEN) <= sum(line.count(c) for c in _CLOSE):
        return None
    for later in kept[exc + 1:exc + 2000]:
        if later[:1] in _CLOSE:
            return later.strip()
    return None


def _exception_head(kept: List[str], exc: int) -> List[str]:
    """The exception line at ``kept[exc]`` and, when it ends with ':' (TensorFlow's "Graph
    execution error:", "Original error:"), the lines after it that say what happened (two
    when its first line is generic, else one); a message that dumps a value over many lines
    gets its last line (after '... ')."""
    end = _message_end(kept, exc)
    if end is not None:
        return [kept[exc], "... " + end]
    details: List[str] = []
    for line in kept[exc + 1:] if kept[exc].rstrip().endswith(":") else ():
        if len(details) >= 2 or (line[:1] not in (" ", "\t") and _EXC.match(line)):
            break
        if not _MESSAGE_NOISE.match(line) and line.strip() not in details \
                and line.strip() not in kept[exc]:
            details.append(line.strip())
    if details and not _GENERIC.search(kept[exc]):
        details = details[:1]
    return [kept[exc]] + details


def _kept(lines: Sequence[str]) -> List[str]:
    return [ln for ln in without_noise(lines) if ln.strip() and not is_progress_line(ln)]


def exception_lines(lines: Sequence[str]) -> List[str]:
    """The last Python exception in ``lines`` as :func:`failure_tail` shows it first (its line
    and what happened), without the frames; [] without one."""
    kept = _kept(lines)
    found = _traceback(kept) if kept else None
    return _exception_head(kept, found[0]) if found else []


CAUSE_CHARS = 300


def failure_cause(lines: Sequence[str]) -> Optional[str]:
    """Why a failed task ended, in one line, from its output: the last Python exception as
    ``NotFoundError: Key model/hidden3/bias not found in checkpoint`` -- its class without its
    module, and its message, or where the message only says that something failed (it ends
    with ':': "Graph execution error:", "Restoring from checkpoint failed. ... Original
    error:") the line after it that says what; None without an exception."""
    head = exception_lines(lines)
    if not head:
        return None
    name, _, message = head[0].strip().partition(":")
    name = name.rsplit(".", 1)[-1]
    message = message.strip()
    if len(head) > 1 and head[1].startswith("... "):      # a value dumped: its start and end
        message = f"{message} {head[1]}"
    elif len(head) > 1 and (not message or message.endswith(":")):
        message = head[1].strip()
    cause = f"{name}: {message}" if message else name
    return cause if len(cause) <= CAUSE_CHARS else cause[:CAUSE_CHARS - 1] + "\u2026"


def failure_tail(lines: Sequence[str], n: int = 10) -> List[str]:
    """The lines to show for a failed task from the end of its output (at most ``n``), with
    progress and TensorFlow's noise (:func:`is_noise`) left out. When a Python traceback is
    there: its exception line first (with the line that says what happened when TensorFlow's
    first line says only "Graph execution error"), then the frames that matter, in order: the
    program's own (not in installed packages, the standard library or tfcluster), else the
    last one. TensorFlow's "Original stack trace" (inside the message) is never taken for the
    traceback. Without one: the last lines."""
    kept = _kept(lines)
    if not kept:
        return []
    found = _traceback(kept)
    if found is None:
        return kept[-n:]
    exc, frames = found
    head = _exception_head(kept, exc)
    mine = [(a, b) for a, b in frames if not _library_frame(kept[a])] or frames[-1:]
    shown: List[str] = []
    for a, b in mine:
        block = [kept[a]] + [ln for ln in kept[a + 1:b]
                             if ln.strip() and not set(ln.strip()) <= set("^~")][:1]
        shown.append("\n".join(block))
    room = n - len(head)
    if len(shown) * 2 > room:          # the innermost frames, where it went wrong
        keep: List[str] = []
        used = 1
        for block in reversed(shown):
            size = block.count("\n") + 1
            if used + size > room:
                break
            keep.insert(0, block)
            used += size
        shown = ["..."] + keep if len(keep) < len(shown) else keep
    out = head + [ln for block in shown for ln in block.split("\n")]
    return out[:n]


# ---------------------------------------------------------------------------- failure hints

# A checkpoint written by another model: a variable missing from it, or of another shape
_RESTORE_FAILED = re.compile(
    r"Restoring from checkpoint failed|Key \S+ not found in checkpoint"
    r"|when attempting to restore variable with shape|Received incompatible tensor with shape")
_SHAPE_MISMATCH = re.compile(
    r"Input to reshape is a tensor with \d+ values, but the requested shape has \d+"
    r"|Assign requires shapes of both tensors to match|Incompatible shapes: \[|"
    r"Matrix size-incompatible|shapes must be equal rank|Dimensions must be equal")
_RESTORED = re.compile(r"(?:\brestored |Restoring parameters from |Restoring from )(\S+)")
# modules TensorFlow 2 removed, and what replaces them
_REMOVED_MODULES = (
    (re.compile(r"No module named '(tensorflow\.examples[\w.]*)'"),
     "{0} left TensorFlow in 2.0 (the old MNIST tutorials' input_data): load MNIST with "
     "tf.keras.datasets.mnist.load_data(), or tensorflow_datasets (tfds.load('mnist'))"),
    (re.compile(r"No module named '(tensorflow\.contrib[\w.]*)'|module 'tensorflow(?:\.compat\.v1)?' "
                r"has no attribute '(contrib)'"),
     "tf.contrib left TensorFlow in 2.0: most of it is in tf.compat.v1, tf_slim (pip install "
     "tf_slim) or TensorFlow Addons"),
)


def checkpoint_in_log(lines: Sequence[str]) -> Optional[str]:
    """The folder of the checkpoint the program said it restored (``restored DIR/model.ckpt-N``,
    TensorFlow's ``Restoring parameters from DIR/model.ckpt-N``), or None."""
    for line in reversed(lines):
        m = _RESTORED.search(line)
        if m:
            return os.path.dirname(m.group(1).rstrip(".,;")) or None
    return None


def failure_hint(lines: Sequence[str], checkpoint_dir: Optional[str] = None,
                 flag: str = "--checkpoint_dir", launch: Optional[str] = None) -> Optional[str]:
    """One ``hint: ...`` line naming the fix when a failed task's output (a generous tail of
    it) shows a known cause, else None -- the one question a driver asks:

    - a known Keras 3 failure (:func:`tfcluster.core.keras_hints.keras_failure_hint`);
    - a checkpoint that does not match the model (TensorFlow's "Restoring from checkpoint
      failed", or a shape mismatch after a restore) names the folder (``checkpoint_dir``: the
      task's checkpoint folder when it holds a checkpoint; else the one the log says it
      restored; ``flag``: the flag that names it) and how to clear it or train into another
      (``--arg``, on ``launch``: the command that launched the run's file,
      :func:`tfcluster.core.messages.launch_command`);
    - a module TensorFlow 2 removed names its replacement."""
    from tfcluster.core.keras_hints import keras_failure_hint  # only when a run has failed
    lines = list(lines)
    keras = keras_failure_hint(lines)
    if keras:
        return keras
    text = "\n".join(lines)
    restored = checkpoint_in_log(lines)
    if _RESTORE_FAILED.search(text) or ((restored or checkpoint_dir) and _SHAPE_MISMATCH.search(text)):
        folder = checkpoint_dir or restored
        again = f"{launch} --arg" if launch else "--arg"
        if folder:
            other = folder.rstrip("/") + "-2"
            return (f"hint: the checkpoint in {folder} no longer matches the model (a variable "
                    f"is missing from it or has another shape: the model was changed after it "
                    f"was saved); clear it (rm -r {folder}) to train from scratch, or train into "
                    f"another folder: {again} {flag}={other}")
        return ("hint: the checkpoint the program restores no longer matches the model (a variable "
                "is missing from it or has another shape: the model was changed after it was "
                f"saved); clear the checkpoint folder, or give another one ({again} "
                f"{flag}=NEW_FOLDER)")
    for pattern, words in _REMOVED_MODULES:
        m = pattern.search(text)
        if m:
            return "hint: " + words.format(next(g for g in m.groups() if g))
    return None
