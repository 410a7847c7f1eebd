"""trainer.py, unchanged, with every training step recorded for the benchmark ``elastic``
(scripts/bench_elastic.py): each task appends ``<time.time()> <global step>`` after each of its
steps to ``$BENCH_STEPS_DIR/<job>-<index>-<host>-<pid>.steps`` (host: the task's address in its
``TF_CONFIG``, i.e. its Ray node). trainer.py's ``ProgressReporter`` is wrapped: it is called
after every step (``due()`` always true, so each step also fetches the loss), records the step,
and prints its ``@tfcluster progress`` lines as before (at most every ``--progress_secs``).

    python elastic_trainer.py [trainer.py's flags]
"""
import json
import os
import runpy
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "trainer.py")


def _name() -> str:
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    job, index = task.get("type", "single"), int(task.get("index", 0))
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    endpoint = (cluster.get(job) or [""])[index] if index < len(cluster.get(job) or []) else ""
    return f"{job}-{index}-{endpoint.rsplit(':', 1)[0] or 'local'}-{os.getpid()}"


def main() -> None:
    import tfcluster.runtime as rt

    folder = os.environ["BENCH_STEPS_DIR"]
    base = rt.ProgressReporter

    class Recording(base):
        out = None

        def due(self) -> bool:
            return True

        def __call__(self, step, force=False, **kw):
            if Recording.out is None:
                Recording.out = open(os.path.join(folder, _name() + ".steps"), "a", buffering=1)
            Recording.out.write(f"{time.time():.4f} {int(step)}\n")
            return super().__call__(step, force=force, **kw)

    rt.ProgressReporter = Recording
    sys.argv = [TRAINER] + sys.argv[1:]
    runpy.run_path(TRAINER, run_name="__main__")


if __name__ == "__main__":
    main()
