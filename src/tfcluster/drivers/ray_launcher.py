"""``launch --backend ray``: the Ray side of the launcher seam
(:class:`tfcluster.backends.base.Launcher`). Ray places the tasks
(:class:`tfcluster.backends.ray_placement.RayPlacement`); tfcluster's own supervisor then runs the plan,
with the endpoints Ray gave, over :class:`tfcluster.backends.ray.RayBackend`."""
from __future__ import annotations

from typing import List

from tfcluster.backends.base import Launcher


class RayLauncher(Launcher):
    def __init__(self, plan, cluster):
        from tfcluster.clusterfile.ray import RaySpec
        self.plan = plan
        self.spec = getattr(cluster.spec, "ray", None) or RaySpec()
        self.base_dir = cluster.base_dir

    def describe(self) -> str:
        """The placement asked for, then each task as a local launch shows it (the endpoints
        are placeholders until Ray has placed the tasks)."""
        from tfcluster.backends.ray import RayBackend
        from tfcluster.backends.ray_placement import is_spare
        from tfcluster.clusterfile.ray import address, bundles, describe_bundle, runtime_env
        from tfcluster.drivers.describe import describe
        out = [f"# ray: address {address(self.spec) or '(Ray default: a cluster on this machine)'}; "
               f"one placement group, strategy {self.spec.strategy}, placement timeout "
               f"{self.spec.placement_timeout:g}s"]
        tasks = self.plan.selected_tasks
        for t, b in zip(tasks, bundles(self.spec, [t.job for t in tasks])):
            spare = (" (spare: a placement group of its own, placed when the cluster has room; "
                     "elastic.scale adds it once placed)") if is_spare(self.plan, t) else ""
            out.append(f"# ray: {t.name} bundle: {describe_bundle(b)}{spare}")
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
        from tfcluster.backends.ray_placement import RayPlacement
        from tfcluster.drivers.launcher import SupervisedLauncher
        with RayPlacement(self.plan, self.spec, self.base_dir) as placed:
            return SupervisedLauncher(placed.plan, placed.backend).run(view)
