"""Not TensorFlow: binds its TF_CONFIG port like a server would and behaves as told by MODE:
sleep (forever), exit:N (after a moment), ignore-term (ignores SIGTERM, sleeps), child (also
starts a grandchild that sleeps)."""
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
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen()
mode = os.environ.get(f"MODE_{job}_{index}", os.environ.get("MODE", "sleep"))
print(f"{job}:{index} listening on {port} mode={mode}", flush=True)
if mode.startswith("exit:"):
    time.sleep(float(os.environ.get("DELAY", "0.3")))
    print(f"exiting with {mode[5:]}", file=sys.stderr, flush=True)
    sys.exit(int(mode[5:]))
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "child":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
while True:
    time.sleep(1)
