"""Secret values held back from the Slurm batch script: the script shows them masked (or not
at all), and the submitting shell's environment carries them to the job (sbatch and srun pass it
on), where the node agent puts them back into the plan."""
from __future__ import annotations

from typing import Any, Dict, List

SECRET_PREFIX = "TFCLUSTER_SECRET__"


def secret_var(job: str, key: str) -> str:
    """The variable that carries a secret value of ``job``'s env from the submitting shell to
    the job (sbatch and srun pass the submitting environment on): the script never holds it."""
    return f"{SECRET_PREFIX}{job}__{key}"


def argv_var(job: str, i: int) -> str:
    """The variable that carries word ``i`` of ``job``'s argv when it holds a secret."""
    return f"{SECRET_PREFIX}{job}__ARGV{i}"


def hold_back_secrets(data: Dict[str, Any]) -> Dict[str, str]:
    """Take secret values (:mod:`tfcluster.clusterfile.secrets`' policy) out of the plan data,
    in place: a secret env value becomes null in the script; a program argument that holds one
    (``--api-key=V``, ``--password V``, ``DB_TOKEN=V``, or a word holding a secret env value) is
    shown masked, and its index is listed in the job's ``held_argv``. Returns {carrier
    variable: value} for the submitting environment (sbatch and srun pass it on); the job gets
    the real values back from there (:func:`fill_secrets`)."""
    from tfcluster.clusterfile import secrets
    declared = data.get("secret_names") or ()
    carried: Dict[str, str] = {}
    for job, j in data["jobs"].items():
        env_values = secrets.secret_values({k: v for k, v in j["env"].items() if v}, declared=declared)
        # a non-secret variable that holds a secret of the argv or the env is held back too
        inside = secrets.Masker(secrets.argv_secret_values([str(w) for w in j["argv"]], declared)
                                + env_values)
        for k, v in list(j["env"].items()):
            if v and (secrets.is_secret(k, declared)
                      or (inside.pattern is not None and inside.pattern.search(str(v)))):
                carried[secret_var(job, k)] = v
                j["env"][k] = None
        argv = [str(w) for w in j["argv"]]
        masked = secrets.mask_argv(argv, declared, env_values)
        held = [i for i, (a, b) in enumerate(zip(argv, masked)) if a != b]
        for i in held:
            carried[argv_var(job, i)] = argv[i]
        if held:
            j["argv"] = masked
            j["held_argv"] = held
    return carried


def held_variables(data: Dict[str, Any]) -> List[str]:
    """The carrier variables the job needs from the submitting environment."""
    return [secret_var(job, k) for job, j in data["jobs"].items()
            for k, v in j["env"].items() if v is None] + \
        [argv_var(job, i) for job, j in data["jobs"].items() for i in j.get("held_argv") or ()]


def fill_secrets(data: Dict[str, Any], environ: Dict[str, str]) -> List[str]:
    """In the job: put the carried secret values back into the plan data (env values and
    program arguments); returns the carrier variables that are missing."""
    missing = []
    for job, j in data["jobs"].items():
        for k, v in j["env"].items():
            if v is None:
                value = environ.get(secret_var(job, k))
                if value is None:
                    missing.append(secret_var(job, k))
                j["env"][k] = value or ""
        for i in j.pop("held_argv", None) or ():
            value = environ.get(argv_var(job, i))
            if value is None:
                missing.append(argv_var(job, i))
            else:
                j["argv"][i] = value
    return missing
