"""A task that never ends by itself: says it is up, then (workers) reports a step every 0.2 s.
For tests that end a run from outside (a host or node lost, a stop)."""
import os
import time

task = os.environ["TFCLUSTER_TASK"]
print("up", task, flush=True)
step = 0
while True:
    step += 1
    if task != "ps:0":
        print('@tfcluster progress {"step": %d, "total": 100000}' % step, flush=True)
    time.sleep(0.2)
