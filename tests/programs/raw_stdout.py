"""Runs a Python program (``raw_stdout.py RAW_FILE PROGRAM ARGS...``) as ``python PROGRAM ARGS``
would, and also copies everything it writes to ``sys.stdout`` to ``RAW_FILE`` (this task's own
name is appended: ``RAW_FILE.worker-0``) exactly as written: carriage returns and backspaces
included. tfcluster's task log keeps only the last redraw of a line redrawn with carriage
returns (Keras' ``verbose=1`` bar); the tests read every redraw from this copy."""
import json
import os
import runpy
import sys


class Tee:
    def __init__(self, stream, raw):
        self._stream = stream
        self._raw = raw

    def write(self, text):
        self._raw.write(text)
        self._raw.flush()
        return self._stream.write(text)

    def flush(self):
        self._raw.flush()
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main():
    raw_path, program, *args = sys.argv[1:]
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    if task:
        raw_path += f".{task['type']}-{task['index']}"
    raw = open(raw_path, "a", encoding="utf-8", newline="")
    sys.stdout = Tee(sys.stdout, raw)
    sys.argv = [program, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
