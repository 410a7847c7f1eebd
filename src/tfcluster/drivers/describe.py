"""``launch --dry-run``: each task as the backend will run it, from the same plan and the same
contract as a real launch. Starts nothing, writes nothing."""
from __future__ import annotations

import shlex

from tfcluster.backends.base import Backend, ProcessSpec
from tfcluster.clusterfile import secrets
from tfcluster.plan import contract
from tfcluster.plan.runplan import RunPlan


def describe(plan: RunPlan, backend: Backend) -> str:
    out = [f"# run {plan.run_id} (backend {backend.name}); logs would go to {plan.run_dir}"]
    declared, values = plan.secret_names, plan.secret_values()
    for t in plan.selected_tasks:
        argv = contract.resolve_argv(plan.argv(t), backend.python(t.host))
        spec = ProcessSpec(name=t.name, argv=argv, env=plan.env(t), cwd=t.cwd,
                           host=t.host)
        view = backend.describe(spec)
        spare = plan.sizing is not None and plan.sizing.spare(t.job, t.index)
        out.append(f"{t.name}  ({t.endpoint})  {view['where']}"
                   + ("; spare: started when elastic.scale adds it" if spare else ""))
        out.append("  argv: " + " ".join(shlex.quote(a) for a in secrets.mask_argv(view["argv"], declared, values)))
        out.append(f"  cwd:  {view['cwd']}")
        for k, v in secrets.mask_env(spec.env, declared, values).items():
            out.append(f"  env:  {k}={v}")
    for t in plan.skipped_tasks:
        out.append(f"{t.name}  ({t.endpoint})  skipped: "
                   + (f"not on --host {', '.join(plan.only_hosts)}" if plan.only_hosts else "not this machine"))
    return "\n".join(out)
