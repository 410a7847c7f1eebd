"""A worker of known speed: ``steady_steps.py TOTAL STEP_SECONDS FIRST_STEP_SECONDS [STALL_AT
STALL_SECONDS]``. It reports step 0, takes FIRST_STEP_SECONDS for its first step (a graph
built, a session opened, the first step warmed up), then STEP_SECONDS for each of the others,
reporting its step every 0.25 s, and exits 0 at TOTAL. With STALL_AT, it stands still for
STALL_SECONDS at that step (reports stop, then go on). Prints ``done at UNIX_TIME`` at the end."""
import sys
import time

from tfcluster.plan.progress import report_progress

total, per_step, first = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
stall_at = int(sys.argv[4]) if len(sys.argv) > 4 else None
stall_for = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0

report_progress(0, total)
time.sleep(first)
step, start, last = 1, time.time(), 0.0
while step < total:
    if step == stall_at:
        time.sleep(stall_for)
        start = time.time() - (step - 1) * per_step
    now = time.time()
    if now - last >= 0.25:
        report_progress(step, total)
        last = now
    step += 1
    time.sleep(max(0.0, start + (step - 1) * per_step - time.time()))   # no drift
report_progress(total, total)
print(f"done at {time.time():.3f}", flush=True)
