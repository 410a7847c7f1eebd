"""The local and ssh side of the launcher seam (:class:`tfcluster.backends.base.Launcher`):
tfcluster's own supervisor drives the run machine over a process backend."""
from __future__ import annotations

from dataclasses import replace
from typing import List

from ..backends.base import Backend, Launcher
from ..plan import RunPlan


class SupervisedLauncher(Launcher):
    def __init__(self, plan: RunPlan, backend: Backend):
        self.plan, self.backend = plan, backend

    def describe(self) -> str:
        from .describe import describe
        return describe(self.plan, self.backend) + "\n"

    def warnings(self) -> List[str]:
        from .preflight import preflight
        return list(preflight(self.plan, self.backend))

    def run(self, view) -> int:
        from .display import OutputOptions
        from .supervisor import Supervisor
        if getattr(view, "output", None) is None or not view.output.hosts:
            out = getattr(view, "output", None) or OutputOptions()
            view = replace(view, output=replace(out, hosts=OutputOptions.hosts_of(self.plan)))
        return Supervisor(self.plan, self.backend, view).run()
