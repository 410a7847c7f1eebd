"""Not TensorFlow: binds its TF_CONFIG port like a server would and behaves as told by MODE
(or MODE_<job>_<index>): sleep (forever), exit:N (after a moment), ignore-term (ignores
SIGTERM, sleeps), child (also starts a grandchild that sleeps), nobind (never opens its port),
wait-ps (prints TensorFlow's 'still waiting' line about ps:0), bind-fail (TensorFlow's bind error;
bind-fail-once: on the first run only, then exit 0), stall (reports step 5, then
nothing), exit-once:N (exit N on the first run, then run forever: a restart marker file)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

cfg = json.loads(os.environ["TF_CONFIG"])
job, index = cfg["task"]["type"], cfg["task"]["index"]
port = int(cfg["cluster"][job][index].rsplit(":", 1)[1])
mode = os.environ.get(f"MODE_{job}_{index}", os.environ.get("MODE", "sleep"))
if mode == "bind-fail-once":   # the port taken on the first run only; then done at once
    marker = os.path.join(os.environ["TFCLUSTER_RUN_DIR"], f"bound-{job}-{index}")
    if os.path.exists(marker):
        mode = "exit:0"
    else:
        open(marker, "w").close()
        mode = "bind-fail"
if mode == "bind-fail":  # what TensorFlow says when another process took the port meanwhile
    print("tensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server",
          file=sys.stderr, flush=True)
    sys.exit(1)
if mode != "nobind":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen()
print(f"{job}:{index} listening on {port} mode={mode}", flush=True)
if mode.startswith("exit:"):
    time.sleep(float(os.environ.get("DELAY", "0.3")))
    print(f"exiting with {mode[5:]}", file=sys.stderr, flush=True)
    sys.exit(int(mode[5:]))
if mode == "wait-ps":
    while True:
        print("CreateSession still waiting for response from worker: /job:ps/replica:0/task:0",
              flush=True)
        time.sleep(0.3)
if mode == "stall":
    print('@tfcluster progress {"step": 5, "total": 100}', flush=True)
if mode.startswith("exit-once:"):
    marker = os.path.join(os.environ["TFCLUSTER_RUN_DIR"], f"ran-{job}-{index}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(0.3)
        sys.exit(int(mode.split(":")[1]))
    print("second run: staying up", flush=True)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "child":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
while True:
    time.sleep(1)
