"""The Ray backend's placement (:class:`RayPlacement`): the run's hold on a Ray cluster -- which
cluster (:func:`ray_address`), the placement groups and one actor per task in its bundle
(:class:`tfcluster.backends.ray.TaskRunner`), placed again when a node is lost, a sized run's
spare workers placed when there is room. What the actors do and how the launcher talks to them
is :mod:`tfcluster.backends.ray`'s docstring.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.backends.ray import RayBackend, _first_line, _ray, _runner_class
from tfcluster.errors import UserError


def bootstrap_file(environ=None) -> str:
    """Where Ray keeps the address of the cluster started last on this machine (its own rule:
    ``$RAY_TMPDIR``, else ``$TMPDIR``, else /tmp, then ``ray/ray_current_cluster``)."""
    environ = os.environ if environ is None else environ
    base = environ.get("RAY_TMPDIR") or environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray", "ray_current_cluster")


def ray_address(spec, environ=None) -> Optional[str]:
    """The Ray cluster to connect to: ``RAY_ADDRESS``, else the file's ``ray.address``, else
    the one in Ray's bootstrap file -- read here, and only when it is a regular file of the
    caller's (or root's) that nobody else can write, in a folder nobody else can swap it in
    (another user could otherwise name the cluster, and the launcher would send the run's
    program and secrets there). No file: None (Ray starts a cluster here)."""
    import stat

    from tfcluster.clusterfile.ray import address
    given = address(spec, environ)
    if given:
        return given
    path = bootstrap_file(environ)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    folder = os.stat(os.path.dirname(path))
    mine = (os.geteuid(), 0)
    why = ("is a link" if stat.S_ISLNK(st.st_mode) else
           "is not a regular file" if not stat.S_ISREG(st.st_mode) else
           f"belongs to another user (uid {st.st_uid})" if st.st_uid not in mine else
           "can be written by others" if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) else
           f"is in {os.path.dirname(path)}, which others can change" if (
               folder.st_uid not in mine or (folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                                            and not folder.st_mode & stat.S_ISVTX)) else "")
    if why:
        raise UserError(f"ray: Ray's bootstrap file {path} {why}; it is not followed: set "
                        f"RAY_ADDRESS (or ray.address in the file) to the cluster you mean")
    from tfcluster import safe_files
    text = (safe_files.read_bytes(path, 4096) or b"").decode("utf-8", "replace").strip()
    return text or None


#: actors tried for one spare worker that are lost before they answer, before it is given up
SPARE_TRIES = 3


def is_spare(plan, task) -> bool:
    """A spare worker of a sized run: placed in a group of its own, not with the run."""
    return plan.sizing is not None and plan.sizing.spare(task.job, task.index)


class RayPlacement:
    """A run's hold on a Ray cluster, as a context manager: connect (``ray.address``), place one
    bundle per task (one placement group; a sized run's spare workers: one group each, placed
    when there is room), start one actor per task in its bundle; on leaving, end every actor
    (each ends its task) and remove the placement groups, then disconnect. ``plan`` is then the
    plan with the endpoints actually used; ``backend`` starts its tasks."""

    def __init__(self, plan, spec, base_dir: str):
        self.plan, self.spec, self.base_dir = plan, spec, base_dir
        self.env: Dict[str, Any] = {}
        self.placements = 0        # placement groups made (a lost node: one more each time)
        self.returns = 0           # workers brought back (elastic runs): a new actor name each time
        self.pg = None             # the run's group (the tasks it starts with)
        self.actors: List[Tuple[Any, Any]] = []      # (actor, the group its bundle is in)
        #: task -> (its group, its bundle's index there, the bundle)
        self.slots: Dict[str, Tuple[Any, int, Dict[str, float]]] = {}
        self.spare_groups: List[Any] = []            # sized runs: one group per spare worker
        self.spare_refs: Dict[str, Tuple[Any, Any]] = {}   # spare -> (actor, its where()), unanswered
        self.unanswered: set = set()      # id() of the actors whose where() has not answered yet
        self.spare_failures: Dict[str, int] = {}           # spare -> actors of it lost unanswered
        self.given_up: Dict[str, str] = {}                 # spare -> why no actor is tried again
        self.backend: Optional[RayBackend] = None

    def _tasks(self, spare: bool) -> list:
        return [t for t in self.plan.selected_tasks if is_spare(self.plan, t) == spare]

    def bundles(self, spare: bool = False) -> List[Dict[str, float]]:
        """The bundles of the tasks the run starts with (``spare``: of its spare workers)."""
        from tfcluster.clusterfile.ray import bundles
        return bundles(self.spec, [t.job for t in self._tasks(spare)])

    def __enter__(self) -> "RayPlacement":
        from tfcluster.clusterfile.ray import runtime_env
        ray = _ray()
        where = ray_address(self.spec)
        env = self.env = runtime_env(self.spec, self.base_dir)
        try:
            ray.init(address=where, runtime_env=env or None, log_to_driver=False,
                     logging_level="ERROR", configure_logging=True)
        except ConnectionError as e:
            raise UserError(f"ray.address: cannot connect to the Ray cluster at {where or 'auto'} "
                            f"({_first_line(e)}); start one (ray start --head) or set RAY_ADDRESS")
        try:
            self._place(ray, env)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        import ray
        try:
            self._release(ray, everything=True)
        finally:
            ray.shutdown()

    def _release(self, ray, everything: bool = False) -> None:
        """End the actors of the run's group (``everything``: the spare workers' too; each ends
        its task and its reaper; a dead one answers at once) and remove the group(s)."""
        from ray.util.placement_group import remove_placement_group
        actors = [a for a, g in self.actors if everything or g is self.pg]
        self.actors = [(a, g) for a, g in self.actors if not (everything or g is self.pg)]
        # an actor that never answered started nothing (its bundle may never have been placed,
        # and then it would never answer a close either): killed without waiting on it
        started = [a for a in actors if id(a) not in self.unanswered]
        if started:
            ray.wait([a.close.remote() for a in started], num_returns=len(started), timeout=15)
        for a in actors:
            self.unanswered.discard(id(a))
            ray.kill(a, no_restart=True)
        groups = [self.pg] if self.pg is not None else []
        if everything:
            groups += self.spare_groups
            self.spare_groups, self.spare_refs = [], {}
        for g in groups:
            remove_placement_group(g)
        self.pg = None

    def place_again(self) -> Dict[str, Tuple[Any, Dict[str, Any]]]:
        """A node was lost and every task has stopped: release the run's group and its actors,
        place its tasks again (Ray places no bundle on a dead node) and reserve new ports; task
        name -> (actor, where). A spare worker's group is Ray's to place again on its own, and
        keeps its actor. UserError when the cluster left cannot hold the run."""
        import ray
        self._release(ray)
        return self._reserve(ray)

    def _place(self, ray, env) -> None:
        runners = self._reserve(ray)
        got = {t.name: (t.host, t.port) for t in self.plan.tasks}   # (spares: placeholders)
        got.update({name: (info["ip"], info["port"]) for name, (_, info) in runners.items()})
        self.plan = self.plan.with_endpoints(
            got, {name: info["profiler_port"] for name, (_, info) in runners.items() if info.get("profiler_port")}
            if self.plan.profiler else None)
        self._ask_for_spares(ray)
        self.backend = RayBackend(runners, (env.get("working_dir") or "").rstrip("/"), self)

    def _group(self, ray) -> None:
        """One placement group for the run, ready within ray.placement_timeout (UserError
        naming what each task needs otherwise)."""
        from ray.util.placement_group import placement_group, remove_placement_group

        from tfcluster.clusterfile.ray import describe_bundle
        tasks = self._tasks(spare=False)
        bundles = self.bundles()
        pg = placement_group(bundles, strategy=self.spec.strategy,
                             name=f"tfcluster-{self.plan.run_id}"
                             + (f"-{self.placements}" if self.placements else ""))
        ready, _ = ray.wait([pg.ready()], timeout=self.spec.placement_timeout)
        if not ready:
            remove_placement_group(pg)
            have = {k: v for k, v in ray.cluster_resources().items()
                    if k in ("CPU", "GPU", "memory") or any(k in b for b in bundles)}
            nodes = len([n for n in ray.nodes() if n.get("Alive")])
            need = "; ".join(f"{t.name}: {describe_bundle(b)}" for t, b in zip(tasks, bundles))
            raise UserError(
                f"ray: the run's {len(tasks)} tasks could not be placed within "
                f"{self.spec.placement_timeout:g}s (ray.placement_timeout, strategy "
                f"{self.spec.strategy}): they need {need}; the cluster has {nodes} node(s) with "
                f"{describe_bundle(have)} in all (ray.jobs.<job>: num_cpus, num_gpus, memory, "
                f"resources)")
        self.pg = pg

    def _reserve(self, ray) -> Dict[str, Tuple[Any, Dict[str, Any]]]:
        """One actor per task of the run's group in its bundle of the placed group; each
        reserves a port."""
        self._group(ray)
        # an actor's name is freed asynchronously once it is killed: a new one for each placement
        again = f" #{self.placements}" if self.placements else ""
        self.placements += 1
        tasks = self._tasks(spare=False)
        runner = _runner_class()
        actors = []
        for i, (t, b) in enumerate(zip(tasks, self.bundles())):
            self.slots[t.name] = (self.pg, i, b)
            actors.append(self._actor(runner, t.name, again))
        infos = ray.get([a.where.remote(self._profiled(t)) for t, a in zip(tasks, actors)])
        self.answered(actors)
        return {t.name: (a, info) for t, a, info in zip(tasks, actors, infos)}

    def _profiled(self, task) -> bool:
        return bool(self.plan.profiler) and task.job != "evaluator"

    def _actor(self, runner, name: str, again: str):
        """The actor of task ``name`` in its bundle (:attr:`slots`)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        pg, i, bundle = self.slots[name]
        custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
        opts: Dict[str, Any] = dict(
            num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0), resources=custom or None,
            # named for the dashboard; owned by this job (not detached): they die with it
            name=f"tfcluster {name}{again}", lifetime=None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i, placement_group_capture_child_tasks=False))
        if bundle.get("memory"):
            opts["memory"] = bundle["memory"]
        actor = runner.options(**opts).remote(bool(bundle.get("GPU")))
        self.actors.append((actor, pg))
        self.unanswered.add(id(actor))
        return actor

    def answered(self, actors: List[Any]) -> None:
        """These actors' where() answered: they may start a task, and are closed at the end."""
        for a in actors:
            self.unanswered.discard(id(a))

    def _ask_for_spares(self, ray) -> None:
        """Sized runs: a placement group of one bundle for each spare worker, and its actor,
        not waited for: Ray places the group when the cluster has room (now, or once a node
        with room joins) and the actor then reserves a port (:meth:`spares_answered`)."""
        from ray.util.placement_group import placement_group
        tasks = self._tasks(spare=True)
        if not tasks:
            return
        runner = _runner_class()
        for t, b in zip(tasks, self.bundles(spare=True)):
            pg = placement_group([b], strategy="PACK", name=f"tfcluster-{self.plan.run_id}-{t.name}")
            self.spare_groups.append(pg)
            self.slots[t.name] = (pg, 0, b)
            self._spare_actor(runner, t)

    def _spare_actor(self, runner, task, again: str = "") -> None:
        actor = self._actor(runner, task.name, again)
        self.spare_refs[task.name] = (actor, actor.where.remote(self._profiled(task)))

    def spares_answered(self) -> Dict[str, Tuple[Any, Dict[str, Any]]]:
        """The spare workers whose actors answered since the last call (their groups were
        placed): task -> (actor, where). One whose actor was lost before it answered gets a new
        actor in its group (Ray places the group again), asked on a later call."""
        import ray
        if not self.spare_refs:
            return {}
        refs = [ref for _, ref in self.spare_refs.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        out = {}
        for name, (actor, ref) in list(self.spare_refs.items()):
            if ref not in ready:
                continue
            del self.spare_refs[name]
            try:
                out[name] = (actor, ray.get(ref))
                self.answered([actor])
            except ray.exceptions.RayError as e:
                ray.kill(actor, no_restart=True)
                self.spare_failures[name] = self.spare_failures.get(name, 0) + 1
                if self.spare_failures[name] >= SPARE_TRIES:
                    self.given_up[name] = (f"its actor was lost {SPARE_TRIES} times before it "
                                           f"answered ({_first_line(e)})")
                    continue
                self.returns += 1
                self._spare_actor(_runner_class(), self.plan.task(name), f" again #{self.returns}")
        return out

    def come_back(self, names: List[str]) -> Dict[str, Tuple[Any, Any]]:
        """Elastic runs: new actors for ``names`` (workers whose node was lost), each in its own
        bundle (of the run's group, or a spare worker's own group), which Ray places again on a
        node with room (a node that joined): task -> (actor, the reference of its
        :meth:`tfcluster.backends.ray.TaskRunner.where`), not waited for."""
        runner = _runner_class()
        self.returns += 1
        out = {}
        for t in self.plan.selected_tasks:
            if t.name in names and t.name in self.slots:
                actor = self._actor(runner, t.name, f" back #{self.returns}")
                out[t.name] = (actor, actor.where.remote(self._profiled(t)))
        return out
