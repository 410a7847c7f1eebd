"""``launch --backend ray``: the Ray side of the launcher seam
(:class:`tfcluster.backends.base.Launcher`). Ray places the tasks
(:class:`tfcluster.backends.ray.RayPlacement`); tfcluster's own supervisor then runs the plan,
with the endpoints Ray gave, over :class:`tfcluster.backends.ray.RayBackend`."""
from __future__ import annotations

from typing import List

from tfcluster.backends.base import Launcher
from tfcluster.errors import UserError


def check_plan(plan) -> None:
    """What the Ray backend cannot run yet, refused (exit 2, one line naming the field) before
    anything starts or is shown: the tf.data service (``data_service:``; docs/CLUSTER_YAML.md)."""
    from tfcluster.spec.vocabulary import DATA_SERVICE_JOBS
    if any(t.job in DATA_SERVICE_JOBS for t in plan.tasks):
        raise UserError("data_service: the tf.data service does not run with --backend ray yet; "
                        "use --backend local, ssh or slurm, or leave data_service: out")


class RayLauncher(Launcher):
    def __init__(self, plan, cluster):
        from tfcluster.spec.ray import RaySpec
        check_plan(plan)
        self.plan = plan
        self.spec = getattr(cluster.spec, "ray", None) or RaySpec()
        self.base_dir = cluster.base_dir

    def describe(self) -> str:
        """The placement asked for, then each task as a local launch shows it (the endpoints
        are placeholders until Ray has placed the tasks)."""
        from tfcluster.backends.ray import RayBackend
        from tfcluster.spec.ray import address, bundles, describe_bundle, runtime_env
        from tfcluster.drivers.describe import describe
        out = [f"# ray: address {address(self.spec) or '(Ray default: a cluster on this machine)'}; "
               f"one placement group, strategy {self.spec.strategy}, placement timeout "
               f"{self.spec.placement_timeout:g}s"]
        tasks = self.plan.selected_tasks
        for t, b in zip(tasks, bundles(self.spec, [t.job for t in tasks])):
            out.append(f"# ray: {t.name} bundle: {describe_bundle(b)}")
        env = runtime_env(self.spec, self.base_dir)
        if env:
            out.append(f"# ray: runtime_env: {env}")
        out.append("# ray: the endpoints below are placeholders: each task gets its node's address "
                   "and a free port there once placed")
        return "\n".join(out) + "\n" + describe(self.plan, RayBackend({})) + "\n"

    def warnings(self) -> List[str]:
        from tfcluster.backends.local import LocalBackend
        from tfcluster.drivers.preflight import preflight
        return list(preflight(self.plan, LocalBackend()))

    def run(self, view) -> int:
        from tfcluster.backends.ray import RayPlacement
        from tfcluster.drivers.launcher import SupervisedLauncher
        with RayPlacement(self.plan, self.spec, self.base_dir) as placed:
            return SupervisedLauncher(placed.plan, placed.backend).run(view)
