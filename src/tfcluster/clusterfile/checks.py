"""The cluster file's checks that its models (:mod:`tfcluster.clusterfile.models`) do not make,
each message naming its field: the cluster itself (job names, endpoints, ports used twice, a
loopback address beside other machines), ``jobs.<job>`` and ``hosts.<name>`` naming what
``cluster:`` holds, GPU ids, commands that split into words, and names and paths that end up in
shell lines, ssh arguments and scripts (no control characters, no leading '-'). Also text no
program can receive (NUL bytes, lone surrogates) anywhere in the file."""
from __future__ import annotations

import difflib
import os
import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.clusterfile.cluster import format_endpoint, parse_endpoint
from tfcluster.clusterfile.vocabulary import KNOWN_JOBS, SINGLE_TASK_JOBS
from tfcluster.clusterfile.wording import did_you_mean, field_path, kind_of, short
from tfcluster.clusterfile.yaml_lines import MAX_EXPANDED_VALUES
from tfcluster.errors import UserError
from tfcluster.net.addresses import endpoint_key, is_loopback
from tfcluster.terminal import has_control, printable

# TensorFlow's rule for job names (tensorflow/core/util/device_name_utils.cc: IsJobName):
# a letter, then letters, digits or underscores.
# \Z, not $: "$" would also match before a trailing newline.
JOB_NAME = re.compile(r"\A[A-Za-z][A-Za-z0-9_]*\Z")
# A job name becomes part of file names (worker-1.log), Slurm and Kubernetes names (63 there).
MAX_JOB_NAME = 40
#: the most tasks a job may have (a count, or ``launch --workers N``)
MAX_JOB_TASKS = 100000
# A GPU entry of CUDA_VISIBLE_DEVICES: an index, a list of them, a UUID (GPU-..., MIG-...).
GPU_ENTRY = re.compile(r"\A[A-Za-z0-9_.:/-]+(,[A-Za-z0-9_.:/-]+)*\Z")
# Near-misses of TensorFlow's job names: TFJob's replica types, plurals, the seed's flag names.
JOB_SPELLINGS = {"master": "chief", "workers": "worker", "chiefs": "chief", "evaluators": "evaluator",
                 "parameter_server": "ps", "parameter_servers": "ps", "ps_hosts": "ps",
                 "worker_hosts": "worker", "chief_hosts": "chief", "evaluator_hosts": "evaluator"}


def check_file(data: Dict[str, Any], warnings: List[str]) -> List[str]:
    """Every problem these checks find in a parsed file (a dict); what is legal but probably
    not meant (a job named 'PS') goes to ``warnings``."""
    problems: List[str] = []
    if "cluster" in data:
        problems.extend(_check_cluster(data["cluster"], warnings))
        problems.extend(_check_jobs(data.get("jobs"), data["cluster"]))
        problems.extend(_check_hosts(data.get("hosts"), data["cluster"]))
    for where, value in _command_fields(data):
        problems.extend(_check_command(where, value))
    problems.extend(_check_names(data))
    return problems


def job_hint(job: str) -> Optional[str]:
    """The TensorFlow job a name probably means ('Worker', 'workers', 'PS', 'ps_hosts'), or None."""
    if job in KNOWN_JOBS:
        return None
    low = job.lower()
    guess = JOB_SPELLINGS.get(low, low)
    if guess in KNOWN_JOBS:
        return guess
    close = difflib.get_close_matches(low, KNOWN_JOBS, n=1, cutoff=0.8)
    return close[0] if close else None


def _check_cluster(raw: Any, warnings: Optional[List[str]] = None) -> List[str]:
    if not isinstance(raw, dict):
        return [f"cluster: must be a mapping of job -> list of host:port, not {kind_of(raw)}"]
    if not raw:
        return ["cluster: no jobs; give at least a worker (or chief) job"]
    problems = []
    seen: Dict[Tuple[str, int], str] = {}
    loopback: Optional[Tuple[str, str]] = None     # (where, endpoint) of the first loopback entry
    remote: Optional[Tuple[str, str]] = None       # the same for the first other machine
    hints: Dict[str, str] = {}
    for job, entries in raw.items():
        where = f"cluster.{job}"
        if not isinstance(job, str) or not JOB_NAME.match(job):
            problems.append(f"cluster: job name {short(job)} is not valid in TensorFlow "
                            f"(a letter, then letters, digits or '_')")
            continue
        if len(job) > MAX_JOB_NAME:   # it names log files, Slurm and Kubernetes objects
            problems.append(f"cluster: job name {short(job)} is {len(job)} characters long; "
                            f"at most {MAX_JOB_NAME}")
            continue
        hint = job_hint(job)
        if hint and hint not in raw:
            hints[job] = hint
        if isinstance(entries, bool) or entries is None:
            problems.append(f"{where}: empty job; give a list of host:port or a task count")
            continue
        if isinstance(entries, int):
            if entries < 1:
                problems.append(f"{where}: a task count must be at least 1, not {entries}")
            elif entries > MAX_JOB_TASKS:
                problems.append(f"{where}: {entries} tasks is more than tfcluster supports "
                                f"({MAX_JOB_TASKS})")
            elif job in SINGLE_TASK_JOBS and entries > 1:
                problems.append(f"{where}: at most one {job} task ({entries} given)")
            continue
        if isinstance(entries, str):
            entries = [e.strip() for e in entries.split(",")] if "," in entries else [entries]
            problems.append(f"{where}: must be a list, for example {job}: [{', '.join(entries)}]")
            continue
        if not isinstance(entries, list):
            problems.append(f"{where}: must be a list of host:port or a task count, not {kind_of(entries)}")
            continue
        if not entries:
            problems.append(f"{where}: empty job; give at least one host:port")
            continue
        if job in SINGLE_TASK_JOBS and len(entries) > 1:
            problems.append(f"{where}: at most one {job} task ({len(entries)} given)")
        for i, entry in enumerate(entries):
            try:
                host, port = parse_endpoint(entry)
            except ValueError as e:
                problems.append(f"{where}[{i}]: {e}")
                continue
            key = endpoint_key(host, port)
            if key in seen:
                problems.append(f"{where}[{i}]: {format_endpoint(host, port)} is already used by {seen[key]}"
                                + (" (the same port on this machine)" if key[0] == "<local>" else ""))
            else:
                seen[key] = f"{where}[{i}]"
            if loopback is None and is_loopback(host):
                loopback = (f"{where}[{i}]", format_endpoint(host, port))
            elif remote is None and key[0] != "<local>":
                remote = (f"{where}[{i}]", format_endpoint(host, port))
    if loopback and remote:
        problems.append(f"{loopback[0]}: {loopback[1]} is this machine's loopback address, but "
                        f"{remote[0]} ({remote[1]}) is another machine: its tasks would dial their "
                        f"own loopback and hang; write this machine's name or address instead")
    others = [j for j in raw if j not in KNOWN_JOBS and j not in hints]
    if not problems and "worker" not in raw and "chief" not in raw and not others:
        problems.append(f"cluster: no worker and no chief job (jobs: {', '.join(map(str, raw))}); "
                        f"a run needs a worker or a chief")
        for job, hint in hints.items():
            problems.append(f"cluster.{job}: did you mean '{hint}'? (TensorFlow's job names are "
                            f"lowercase: {', '.join(KNOWN_JOBS)})")
    elif warnings is not None:
        for job, hint in hints.items():
            warnings.append(f"cluster.{job}: a job named '{job}' is an ordinary job to TensorFlow and "
                            f"tfcluster, not '{hint}' (job names are case-sensitive); rename it if "
                            f"you meant '{hint}'")
    return problems


def _check_jobs(jobs: Any, raw_cluster: Any) -> List[str]:
    if not isinstance(jobs, dict) or not isinstance(raw_cluster, dict):
        return []
    problems = []
    for job, spec in jobs.items():
        if job not in raw_cluster:
            problems.append(f"jobs.{job}: no job '{job}' in cluster{did_you_mean(job, raw_cluster)}")
            continue
        entries = raw_cluster[job]
        n = entries if isinstance(entries, int) and not isinstance(entries, bool) else (
            len(entries) if isinstance(entries, list) else None)
        gpus = spec.get("gpus") if isinstance(spec, dict) else None
        for i, entry in enumerate(gpus if isinstance(gpus, list) else []):
            if isinstance(entry, str) and entry.strip() and not GPU_ENTRY.match(entry.strip()):
                problems.append(f"jobs.{job}.gpus[{i}]: {short(entry)} is not a GPU id (an index "
                                f"like 0 or '0,1', or a GPU-/MIG- UUID; no spaces or control "
                                f"characters)")
        if n is not None and isinstance(gpus, list) and len(gpus) > n:
            problems.append(f"jobs.{job}.gpus: {len(gpus)} entries for {n} "
                            f"task{'s' if n != 1 else ''}; give one entry per task")
    return problems


def _check_hosts(hosts: Any, raw_cluster: Any) -> List[str]:
    """``hosts.<name>`` must name a host of ``cluster:`` (as ``jobs.<job>`` must name a job),
    unless it has ``slots`` (it takes tasks of jobs given as a count)."""
    if not isinstance(hosts, dict) or not isinstance(raw_cluster, dict):
        return []
    names = []
    for entries in raw_cluster.values():
        for entry in entries if isinstance(entries, list) else []:
            try:
                host = parse_endpoint(entry)[0]
            except ValueError:
                continue
            if host not in names:
                names.append(host)
    problems = []
    for host in hosts:
        spec = hosts[host]
        if isinstance(spec, dict) and spec.get("slots") is not None:
            continue                 # a host of slots: the tasks of count jobs go there
        if host not in names:
            known = f"hosts in cluster: {', '.join(names[:10])}" if names else "cluster: has no host:port entries"
            problems.append(f"hosts.{host}: no host '{host}' in cluster ({known}){did_you_mean(host, names)}")
    return problems


def _command_fields(data: Dict[str, Any]):
    program = data.get("program")
    if isinstance(program, dict) and "command" in program:
        yield "program.command", program["command"]
    jobs = data.get("jobs")
    if isinstance(jobs, dict):
        for job, spec in jobs.items():
            if isinstance(spec, dict) and "command" in spec:
                yield f"jobs.{job}.command", spec["command"]


def _check_command(where: str, value: Any) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as e:
            return [f"{where}: cannot be split into words ({e})"]
        return [] if words else [f"{where}: empty command"]
    if isinstance(value, list):
        if not value:
            return [f"{where}: empty command"]
        for i, w in enumerate(value):
            if not isinstance(w, str):
                return [f"{where}[{i}]: must be a string, not {kind_of(w)}"]
        return []
    return [f"{where}: must be a list of words or a string, not {kind_of(value)}"]


# Names that end in a shell line, an ssh argv or a script: no control characters, no leading '-'.
_NAME_FIELDS = ("ssh_host", "user")
#: ssh options that run a command (or load code) on this machine when ssh connects, as ssh
#: spells them (matched without case); ``allow_ssh_commands`` names the ones a file may use
SSH_COMMAND_OPTIONS = ("ProxyCommand", "ProxyJump", "LocalCommand", "PermitLocalCommand",
                       "KnownHostsCommand", "PKCS11Provider", "SecurityKeyProvider", "XAuthLocation",
                       "Match", "Include")
#: ssh options that make ssh connect through, read from, or listen at a path or port that
#: another user could own or reach: a control socket (another user's multiplexer would get the
#: session and print what it likes), an agent socket, a key or known-hosts file, a forwarded
#: port. Refused in a file, always: tfcluster makes its own shared connection, its socket in a
#: folder only the caller can write (``backends.ssh``), and ssh's own config stays the user's
SSH_PATH_OPTIONS = ("ControlPath", "ControlMaster", "ControlPersist", "IdentityAgent",
                    "ForwardAgent", "LocalForward", "RemoteForward", "DynamicForward",
                    "GatewayPorts", "StreamLocalBindUnlink", "StreamLocalBindMask", "Tunnel",
                    "TunnelDevice", "ForwardX11", "ForwardX11Trusted")
#: ssh options that read a file: refused where another user could own or write the file, or
#: make it where it is missing (:func:`foreign_path`)
SSH_FILE_OPTIONS = ("IdentityFile", "CertificateFile", "UserKnownHostsFile",
                    "GlobalKnownHostsFile", "RevokedHostKeys")
_PATH_FIELDS = ("identity_file", "workdir")


def _check_names(data: Dict[str, Any]) -> List[str]:
    problems: List[str] = []
    logdir = data.get("logdir")
    if isinstance(logdir, str):
        problems.extend(_check_path("logdir", logdir))
    program = data.get("program")
    if isinstance(program, dict):
        problems.extend(_check_env("program.env", program.get("env")))
        if isinstance(program.get("cwd"), str):
            problems.extend(_check_path("program.cwd", program["cwd"]))
    jobs = data.get("jobs")
    for job, spec in (jobs.items() if isinstance(jobs, dict) else ()):
        if isinstance(spec, dict):
            problems.extend(_check_env(f"jobs.{job}.env", spec.get("env")))
            if isinstance(spec.get("cwd"), str):
                problems.extend(_check_path(f"jobs.{job}.cwd", spec["cwd"]))
    secrets = data.get("secrets")
    if isinstance(secrets, list):
        for i, name in enumerate(secrets):
            if isinstance(name, str):
                problems.extend(_check_env_name(f"secrets[{i}]", name))
    remotes = [("remote", data.get("remote"))]
    hosts = data.get("hosts")
    remotes += [(f"hosts.{h}", v) for h, v in (hosts.items() if isinstance(hosts, dict) else ())]
    for where, spec in remotes:
        if not isinstance(spec, dict):
            continue
        for key in _NAME_FIELDS:
            value = spec.get(key)
            if isinstance(value, str):
                if not value.strip() or value.startswith("-") or has_control(value) or " " in value:
                    problems.append(f"{where}.{key}: {short(value)} is not a host or user name "
                                    f"(no spaces or control characters, not starting with '-')")
        for key in _PATH_FIELDS:
            if isinstance(spec.get(key), str):
                problems.extend(_check_path(f"{where}.{key}", spec[key]))
        options = spec.get("ssh_options")
        allowed = _allowed_ssh_commands(spec) | _allowed_ssh_commands(data.get("remote"))
        for i, opt in enumerate(options if isinstance(options, list) else []):
            if isinstance(opt, str) and (has_control(opt) or opt.startswith("-")):
                problems.append(f"{where}.ssh_options[{i}]: {short(opt)} is not an ssh -o option "
                                f"(Key=value, no control characters)")
            elif isinstance(opt, str):
                key = ssh_option_key(opt)
                path = ssh_path_option(key)
                if path:
                    problems.append(f"{where}.ssh_options[{i}]: {path} makes ssh connect through, "
                                    f"read or open a path or port that another user could own or "
                                    f"reach; it is refused (tfcluster shares one connection per "
                                    f"host itself, its socket in a folder only you can write; a "
                                    f"key: {where}.identity_file; your own ~/.ssh/config applies)")
                    continue
                why = _foreign_ssh_file(key, opt)
                if why:
                    problems.append(f"{where}.ssh_options[{i}]: {why}")
                    continue
                known = next((k for k in SSH_COMMAND_OPTIONS if k.lower() == key.lower()), None)
                if known and known.lower() not in allowed:
                    problems.append(f"{where}.ssh_options[{i}]: {known} runs a command on this "
                                    f"machine when ssh connects (launch, doctor); allow it by "
                                    f"name: {where}.allow_ssh_commands: [{known}]")
        if where == "remote" and spec.get("slots") is not None:
            problems.append("remote.slots: slots are a host's own: hosts.<name>.slots")
        names = spec.get("allow_ssh_commands")
        for i, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str) and name.lower() not in {k.lower() for k in SSH_COMMAND_OPTIONS}:
                problems.append(f"{where}.allow_ssh_commands[{i}]: {short(name)} is not an ssh "
                                f"option that runs a command ({', '.join(SSH_COMMAND_OPTIONS)})")
        python = spec.get("python")
        if isinstance(python, str):
            try:
                words = shlex.split(python)
            except ValueError as e:
                problems.append(f"{where}.python: cannot be split into words ({e})")
            else:
                if not words:
                    problems.append(f"{where}.python: empty; give the remote interpreter, e.g. python3")
                elif has_control(python):
                    problems.append(f"{where}.python: contains a control character")
    return problems


def ssh_option_key(option: str) -> str:
    """The option's name in an ssh ``-o`` word (``Key=value`` or ``Key value``)."""
    return option.strip().replace("=", " ", 1).split(" ", 1)[0].strip()


def ssh_path_option(key: str) -> Optional[str]:
    """The name of :data:`SSH_PATH_OPTIONS` that ``key`` is (matched without case), or None."""
    return next((k for k in SSH_PATH_OPTIONS if k.lower() == key.strip().lower()), None)


def _foreign_ssh_file(key: str, option: str) -> Optional[str]:
    name = next((k for k in SSH_FILE_OPTIONS if k.lower() == key.strip().lower()), None)
    if name is None:
        return None
    value = option.strip()[len(key):].strip().lstrip("=").strip().strip('"')
    home = os.path.expanduser("~")
    paths = [os.path.expanduser(v.replace("%d", home)) for v in value.split()] or [""]
    for path in paths:
        if path.lower() == "none" or path == os.devnull:
            continue
        why = foreign_path(path)
        if why:
            return (f"{name} {short(path)}: {why}: ssh would read what another user put there; "
                    f"keep it in a folder of yours")
    return None


def foreign_path(path: str) -> Optional[str]:
    """Why another user could choose what ``path`` holds (None: only the caller or root): the
    file, or a folder above it, belongs to another user or is writable by others (a folder
    with the sticky bit counts for a file that exists and is the caller's or root's); a missing
    file in a folder others can write. Relative paths and ssh's %-tokens: not knowable here,
    refused."""
    import stat
    if not os.path.isabs(path) or "%" in path:
        return "not an absolute path tfcluster can check"
    me = os.geteuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"cannot be checked ({e.strerror or e})"
    if st is not None:
        if st.st_uid not in (me, 0):
            return f"belongs to another user (uid {st.st_uid})"
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
            return f"can be written by others (mode {stat.S_IMODE(st.st_mode):04o})"
        if stat.S_ISLNK(st.st_mode):
            why = foreign_path(os.path.join(os.path.dirname(path), os.readlink(path)))
            if why:
                return f"links to a file that {why}" if why.startswith("is ") else why
    folder = os.path.dirname(os.path.abspath(path))
    child_there = st is not None         # the entry below this folder exists (and is trusted)
    while True:
        try:
            d = os.stat(folder)
        except OSError:
            d = None
        if d is not None:
            if d.st_uid not in (me, 0):
                return f"is in {short(folder)}, which belongs to another user (uid {d.st_uid})"
            # a sticky folder (/tmp) keeps an entry that exists as its owner's; a missing one
            # anyone there can make
            if d.st_mode & 0o022 and not (d.st_mode & stat.S_ISVTX and child_there):
                return f"is in {short(folder)}, which others can write (mode {stat.S_IMODE(d.st_mode):04o})"
        child_there = d is not None
        up = os.path.dirname(folder)
        if up == folder:
            return None
        folder = up


def _allowed_ssh_commands(spec: Any) -> set:
    names = spec.get("allow_ssh_commands") if isinstance(spec, dict) else None
    return {n.lower() for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _check_path(where: str, value: str) -> List[str]:
    if not value.strip():
        return [f"{where}: empty path"]
    if has_control(value):
        return [f"{where}: {short(value)} contains a control character (a newline?); "
                f"paths reach shell lines and scripts"]
    return []


def _check_env(where: str, env: Any) -> List[str]:
    if not isinstance(env, dict):
        return []
    problems = []
    for key in env:
        if isinstance(key, str):
            problems.extend(_check_env_name(f"{where}.{key}", key))
    return problems


def _check_env_name(where: str, name: str) -> List[str]:
    if not name:
        return [f"{where}: empty variable name"]
    if "=" in name:
        return [f"{where}: a variable name cannot contain '=' ({short(name)})"]
    if has_control(name) or name != name.strip():
        return [f"{where}: {short(name)} is not a variable name (control characters or spaces)"]
    if name.startswith("-"):
        return [f"{where}: {short(name)} is not a variable name (it starts with '-')"]
    return []


def check_strings(data: Any, limit: int = 10) -> List[str]:
    """NUL bytes and lone surrogates anywhere (keys and values): no program can receive them."""
    problems: List[str] = []
    stack: List[Tuple[Tuple[Any, ...], Any]] = [((), data)]
    visited = 0
    # YAML aliases give the same object many times (a 100 KB string referenced 1,000 times):
    # each distinct object is checked once, so the cost follows the file, not its expansion.
    checked: Dict[int, str] = {}
    keep: List[Any] = []   # holds the checked objects, so that their ids stay theirs

    def bad(text: str) -> str:
        why = checked.get(id(text))
        if why is None:
            why = checked[id(text)] = _bad_text(text)
            keep.append(text)
        return why

    expanded: set = set()
    while stack and len(problems) < limit and visited < 2 * MAX_EXPANDED_VALUES:
        loc, value = stack.pop()
        visited += 1
        if isinstance(value, (dict, list)):
            if id(value) in expanded:   # an aliased mapping or list: its contents were seen
                continue
            expanded.add(id(value))
            keep.append(value)
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str):
                    why = bad(k)
                    if why:
                        problems.append(f"{field_path(loc + (printable(k),))}: the key {why}")
                        continue
                stack.append((loc + (k,), v))
        elif isinstance(value, list):
            stack.extend((loc + (i,), v) for i, v in enumerate(value))
        elif isinstance(value, str):
            why = bad(value)
            if why:
                problems.append(f"{field_path(loc) or 'the file'}: {why}")
    return sorted(problems)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _bad_text(text: str) -> str:
    if "\0" in text:
        return "contains a NUL byte, which no program argument, path or variable can hold"
    m = _SURROGATE.search(text)
    if m:
        return f"contains U+{ord(m.group(0)):04X}, a lone surrogate (not a character)"
    return ""


def check_text(where: str, value: Optional[str]) -> Optional[str]:
    """For values that end in a shell line, a script or a manifest (Slurm's --job-name,
    --partition, --time, a run id): raise UserError naming ``where`` when ``value`` holds a
    control character (a newline would start a new command). Returns ``value``."""
    if value is not None and has_control(str(value)):
        raise UserError(f"{where}: {short(value)} contains a control character (a newline?); "
                        f"it would end up on a line of its own in the script")
    return value
