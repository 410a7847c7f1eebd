"""Raw loopback TCP bandwidth between two processes: a forked sender streams ``SECONDS``
seconds of 4 MiB writes to a receiver on 127.0.0.1 (port 0). Prints
``{"bytes": N, "seconds": S, "bytes_per_s": B}``."""
import json
import os
import socket
import sys
import time


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
    chunk = 4 << 20
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # sender
        try:
            srv.close()
            s = socket.create_connection(("127.0.0.1", port))
            buf = b"\0" * chunk
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                s.sendall(buf)
            s.shutdown(socket.SHUT_WR)
            s.close()
        finally:
            os._exit(0)
    conn, _ = srv.accept()
    buf = bytearray(chunk)
    view = memoryview(buf)
    total, t0 = 0, None
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        if t0 is None:
            t0 = time.monotonic()
        total += n
    dt = time.monotonic() - (t0 or time.monotonic())
    os.waitpid(pid, 0)
    print(json.dumps({"bytes": total, "seconds": dt, "bytes_per_s": total / dt if dt > 0 else 0.0}))


if __name__ == "__main__":
    main()
