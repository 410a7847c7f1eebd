#!/usr/bin/env python3
"""Chaos test: train with restarts on, kill tasks with SIGKILL at random moments, check nothing is lost.

Each trial launches trainer.py on 1 ps + 2 workers (worker:0 is the chief) with restart policy
on-failure, waits until training runs, then kills (SIGKILL) a random task — worker, ps or the
chief — at a random moment, possibly twice. It checks that:

  * the launcher exits 0;
  * the final checkpoint is at (or, in async mode, just past) the target step;
  * the chief's summary line reports global_step >= target;
  * after each kill the global step went back no further than the last checkpoint;
  * no process of the trial is left, and no port of the trial is still bound.

  python scripts/chaos.py                     # 20 trials
  python scripts/chaos.py --trials 3 --seed 7 --train-steps 1500
  python scripts/chaos.py --kill worker:1@0.3 --kill ps:0@0.6   # a fixed plan instead of chance

Prints a table and the totals; exit 0 when every trial passed. See docs/FAULT_TOLERANCE.md.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(ROOT, "trainer.py")
TASKS = ["ps:0", "worker:0", "worker:1"]


def free_ports(n: int) -> List[int]:
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from tfcluster.net.ports import free_ports as free
    return free(n)


def latest_checkpoint_step(ckpt_dir: str) -> Optional[int]:
    try:
        with open(os.path.join(ckpt_dir, "checkpoint")) as f:
            m = re.search(r'model_checkpoint_path: ".*-(\d+)"', f.read())
        return int(m.group(1)) if m else None
    except OSError:
        return None


def read_record(runs: str) -> Optional[dict]:
    files = sorted(glob.glob(os.path.join(runs, "*", "run.json")))
    if not files:
        return None
    try:
        with open(files[-1]) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def leftovers(trial_dir: str, ports: List[int]) -> List[str]:
    import psutil

    from tfcluster.net.ports import port_in_use
    left = []
    for p in psutil.process_iter(["pid", "environ", "cmdline"]):
        try:
            env = p.info["environ"] or {}
        except psutil.Error:
            continue
        if env.get("TFCLUSTER_RUN_DIR", "").startswith(trial_dir):
            left.append(f"pid {p.info['pid']}")
    deadline = time.time() + 5
    busy = [p for p in ports if port_in_use(p)]
    while busy and time.time() < deadline:
        time.sleep(0.2)
        busy = [p for p in ports if port_in_use(p)]
    left += [f"port {p}" for p in busy]
    return left


def run_trial(n: int, args, rng: random.Random, plan: List[Tuple[str, float]]) -> Dict:
    trial_dir = tempfile.mkdtemp(prefix=f"tfcluster-chaos-{n}-")
    ports = free_ports(3)
    ckpt = os.path.join(trial_dir, "ckpt")
    runs = os.path.join(trial_dir, "runs")
    cfg = os.path.join(trial_dir, "cluster.yaml")
    with open(cfg, "w") as f:
        f.write(f"cluster:\n  ps: [localhost:{ports[0]}]\n"
                f"  worker: [localhost:{ports[1]}, localhost:{ports[2]}]\n"
                f"restart: {{policy: on-failure, max_restarts: 4, backoff: 0.5}}\n"
                f"watchdog: {{stall_timeout: {args.stall_timeout}}}\n"
                f"logdir: {runs}\n")
    if not plan:
        kills = 2 if rng.random() < args.double else 1
        plan = sorted(((rng.choice(TASKS), rng.uniform(0.1, 0.8)) for _ in range(kills)),
                      key=lambda x: x[1])
    argv = [sys.executable, "-m", "tfcluster", "launch", cfg, "--no-live", "--quiet", "--",
            "python", TRAINER, f"--train_steps={args.train_steps}", f"--checkpoint_dir={ckpt}",
            f"--save_checkpoint_steps={args.checkpoint_every}", f"--mode={args.mode}"]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.time()
    proc = subprocess.Popen(argv, cwd=trial_dir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    result = {"trial": n, "plan": " ".join(f"{t}@{f:.2f}" for t, f in plan), "killed": [],
              "exit": None, "final_step": None, "restarts": 0, "ok": False, "problems": []}
    try:
        kills_left = list(plan)
        ckpt_at_kill: Optional[int] = None
        low_after_kill: Optional[int] = None
        killed_at = 0.0
        while proc.poll() is None and time.time() - t0 < args.timeout:
            rec = read_record(runs)
            step = None
            if rec:
                steps = [t["progress"]["step"] for t in rec["tasks"] if t.get("progress")
                         and t["state"] == "running"]
                step = max(steps) if steps else None
                if ckpt_at_kill is not None:  # steps reported after the kill
                    fresh = [t["progress"]["step"] for t in rec["tasks"] if t.get("progress")
                             and (t["progress"].get("at") or 0) > killed_at + 0.2]
                    if fresh:
                        low = min(fresh)
                        low_after_kill = low if low_after_kill is None else min(low_after_kill, low)
            if kills_left and rec and step is not None and step >= kills_left[0][1] * args.train_steps:
                task, _ = kills_left.pop(0)
                t = next(x for x in rec["tasks"] if x["task"] == task)
                if t["state"] == "running" and t["pid"]:
                    if ckpt_at_kill is not None and low_after_kill is not None and low_after_kill < ckpt_at_kill:
                        result["problems"].append(
                            f"step went back to {low_after_kill}, before checkpoint {ckpt_at_kill}")
                    ckpt_at_kill = latest_checkpoint_step(ckpt) or 0
                    low_after_kill = None
                    killed_at = time.time()
                    try:
                        os.kill(t["pid"], signal.SIGKILL)
                        result["killed"].append(f"{task}@{step}")
                    except ProcessLookupError:
                        pass
            time.sleep(0.25)
        if proc.poll() is None:
            result["problems"].append(f"no end within {args.timeout}s")
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0]
        result["exit"] = proc.returncode
        if proc.returncode != 0:
            result["problems"].append(f"exit code {proc.returncode}")
        final = latest_checkpoint_step(ckpt)
        result["final_step"] = final
        slack = 0 if args.mode == "sync" else 2
        if final is None or not args.train_steps <= final <= args.train_steps + slack:
            result["problems"].append(f"final checkpoint at {final}, target {args.train_steps}")
        m = re.findall(r"global_step=(\d+)", out + _log(runs, "worker-0.log"))
        if not m or int(m[-1]) < args.train_steps:
            result["problems"].append("no summary line with global_step >= target")
        if ckpt_at_kill is not None and low_after_kill is not None and low_after_kill < ckpt_at_kill:
            result["problems"].append(f"step went back to {low_after_kill}, before checkpoint {ckpt_at_kill}")
        rec = read_record(runs)
        if rec:
            result["restarts"] = rec.get("total_restarts", 0)
        left = leftovers(trial_dir, ports)
        if left:
            result["problems"].append("left behind: " + ", ".join(left))
        if result["problems"] and args.verbose:
            print(out[-3000:], file=sys.stderr)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        result["seconds"] = round(time.time() - t0, 1)
        result["ok"] = not result["problems"]
        if result["ok"] and not args.keep:
            shutil.rmtree(trial_dir, ignore_errors=True)
        else:
            result["dir"] = trial_dir
    return result


def _log(runs: str, name: str) -> str:
    text = ""
    for path in glob.glob(os.path.join(runs, "*", name)):
        with open(path, errors="replace") as f:
            text += f.read()
    return text


def parse_kill(text: str) -> Tuple[str, float]:
    m = re.fullmatch(r"((?:ps|worker):\d+)@(0?\.\d+|1(?:\.0)?)", text)
    if not m or m.group(1) not in TASKS:
        raise argparse.ArgumentTypeError(f"'{text}': write TASK@FRACTION, e.g. worker:1@0.4 "
                                         f"(tasks: {', '.join(TASKS)})")
    return m.group(1), float(m.group(2))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--train-steps", type=int, default=3000)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--mode", choices=["async", "sync"], default="async")
    p.add_argument("--double", type=float, default=0.4, help="chance of a second kill in a trial")
    p.add_argument("--kill", action="append", type=parse_kill, default=[],
                   help="TASK@FRACTION: kill TASK when the step reaches FRACTION of the target "
                   "(repeatable; replaces the random plan)")
    p.add_argument("--timeout", type=float, default=240, help="seconds per trial")
    p.add_argument("--stall-timeout", type=float, default=60)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep every trial's folder")
    p.add_argument("--verbose", "-v", action="store_true")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"chaos: {args.trials} trial(s), seed {seed}, {args.mode}, target step {args.train_steps}",
          flush=True)
    header = f"{'trial':>5}  {'plan':<26} {'killed':<26} {'exit':>4} {'step':>6} {'restarts':>8} {'secs':>6}  result"
    print(header, flush=True)
    results = []
    for n in range(1, args.trials + 1):
        r = run_trial(n, args, rng, list(args.kill))
        results.append(r)
        print(f"{n:>5}  {r['plan']:<26} {' '.join(r['killed']) or '-':<26} {str(r['exit']):>4} "
              f"{str(r['final_step']):>6} {r['restarts']:>8} {r['seconds']:>6}  "
              f"{'ok' if r['ok'] else 'FAIL: ' + '; '.join(r['problems'])}", flush=True)
    passed = sum(r["ok"] for r in results)
    kills = sum(len(r["killed"]) for r in results)
    print(f"{passed} passed, {len(results) - passed} failed ({kills} kills, "
          f"{sum(r['restarts'] for r in results)} restarts, seed {seed})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "args": {k: v for k, v in vars(args).items() if k != "kill"},
                       "results": results}, f, indent=2)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
