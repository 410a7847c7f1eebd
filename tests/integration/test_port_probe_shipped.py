"""What is shipped with the port probe's text runs where tfcluster is not installed (``-I -S``:
no site-packages), and doctor's shipped probe finds a taken port taken
(tests/unit/test_port_probe.py checks the text itself)."""
import json
import socket
import subprocess
import sys

from tfcluster.backends import doctor, ssh


def test_the_shipped_agent_runs_with_the_standard_library_only():
    # -I -S: no tfcluster on the module path (no site-packages); the end of stdin ends the agent
    r = subprocess.run([sys.executable, "-I", "-S", "-c", ssh.agent_source()], input=b"",
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()


def test_the_shipped_doctor_probe_finds_a_taken_port_taken():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("0.0.0.0", 0))
    s.listen(1)
    try:
        port = s.getsockname()[1]
        head = json.dumps({"mode": "facts", "files": [], "ports": [port]})
        r = subprocess.run([sys.executable, "-I", "-S", "-c", doctor.PROBE], input=head.encode() + b"\n",
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode()
        assert json.loads(r.stdout)["ports"] == {str(port): "in use"}
    finally:
        s.close()
