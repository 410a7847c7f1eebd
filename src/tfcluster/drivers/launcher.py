"""The local and ssh side of the launcher seam (:class:`tfcluster.backends.base.Launcher`):
tfcluster's own supervisor drives the run machine over a process backend (the Ray launcher,
:mod:`tfcluster.drivers.ray_launcher`, runs one over the tasks Ray placed)."""
from __future__ import annotations

from dataclasses import replace
from typing import List

from tfcluster.backends.base import Backend, Launcher
from tfcluster.plan.runplan import RunPlan


class SupervisedLauncher(Launcher):
    def __init__(self, plan: RunPlan, backend: Backend):
        self.plan, self.backend = plan, backend

    def describe(self) -> str:
        from tfcluster.drivers.describe import describe
        return describe(self.plan, self.backend) + "\n"

    def warnings(self) -> List[str]:
        from tfcluster.drivers.preflight import preflight
        return list(preflight(self.plan, self.backend))

    def run(self, view) -> int:
        from tfcluster.drivers.display import OutputOptions
        from tfcluster.drivers.network import run_in_network
        self.plan = self.backend.place(self.plan)     # ports chosen on the hosts (ssh agents)
        from tfcluster.drivers.supervisor import Supervisor
        if getattr(view, "output", None) is None or not view.output.hosts:
            out = getattr(view, "output", None) or OutputOptions()
            view = replace(view, output=replace(out, hosts=OutputOptions.hosts_of(self.plan)))
        return run_in_network(self.plan, lambda plan, note: Supervisor(plan, self.backend, view,
                                                                        network_note=note).run())
