"""Shell completion for bash and zsh, generated from the CLI's own parser.

``tfcluster completion bash`` prints a bash function that completes subcommands, each
subcommand's flags and the choices of their value flags (``doctor --backend``), the task names
of a run or a cluster file (``logs RUN worker:1``, ``stack RUN worker:1 ps:0``, ``profile RUN
--tasks``, ``tf-config FILE worker:1``, ``launch FILE --tasks``; with no run or file on the line,
those of ./cluster.yaml, as the commands themselves default to it: ``logs worker:1``,
``tf-config worker:1``) and run ids from the per-user run index (``logs``, ``stop``,
``status``, ``report``, ``tensorboard``, ``stack``, ``attach``, ``profile``); file names for
the file arguments (``launch``, ``doctor``, ``import`` ...). ``tfcluster completion zsh``
prints the same function under zsh's ``bashcompinit``. Task names and run ids come from
``tfcluster completion --values tasks|runs [FILE]`` at completion time. No TensorFlow.

Install (bash): ``eval "$(tfcluster completion bash)"`` in ~/.bashrc;
(zsh): ``eval "$(tfcluster completion zsh)"`` in ~/.zshrc, after ``compinit``.
"""
from __future__ import annotations

import argparse
import re
from typing import Dict, List

from tfcluster.cli.parser_kit import RecordingParser

RUN_COMMANDS = ("logs", "stop", "status", "report", "tensorboard", "stack", "attach", "profile")
#: commands whose first positional is a run and whose next ones are task names
RUN_TASK_COMMANDS = ("logs", "stack")
# first words of subcommands whose positional has no ``choices`` in the parser
FIXED_CHOICES = {"completion": ["bash", "zsh"], "help": ["security"]}


def fixed_choices(subs: Dict[str, RecordingParser]) -> Dict[str, List[str]]:
    """The fixed first words of each subcommand: the parser's own ``choices`` for its first
    positional (``render``'s kinds), else :data:`FIXED_CHOICES`."""
    out = dict(FIXED_CHOICES)
    for name, sp in subs.items():
        for a in sp.actions:
            if not a.option_strings and a.choices:
                out[name] = [str(c) for c in a.choices]
                break
    return out


def subcommands(parser: RecordingParser) -> Dict[str, RecordingParser]:
    return dict(parser.subcommands)


def _flags(parser: RecordingParser) -> List[str]:
    out: List[str] = []
    for a in parser.actions:
        if a.help == argparse.SUPPRESS:
            continue
        for s in a.option_strings:
            if s.startswith("--") and s not in out:
                out.append(s)
    return out


def _value_flags(subs: Dict[str, RecordingParser]) -> List[str]:
    """Flags that take a value (the word after them is not a positional)."""
    out: List[str] = []
    for sp in subs.values():
        for a in sp.actions:
            if a.option_strings and a.nargs != 0:
                out.extend(s for s in a.option_strings if s not in out)
    return out


def _flag_choices(subs: Dict[str, RecordingParser]) -> List[str]:
    """bash ``case`` arms ``CMD:FLAG) _tfcluster_reply 'CHOICES'`` for value flags with choices."""
    out: List[str] = []
    for name, sp in subs.items():
        for a in sp.actions:
            if a.option_strings and a.choices and a.help != argparse.SUPPRESS:
                words = " ".join(str(c) for c in a.choices)
                for flag in a.option_strings:
                    out.append(f"        {name}:{flag}) _tfcluster_reply {words!r}; return 0 ;;")
    return out


def bash_script(parser: RecordingParser) -> str:
    subs = subcommands(parser)
    flag_choices = "\n".join(_flag_choices(subs))
    vflags = " ".join(_value_flags(subs))
    names = " ".join(n for n in subs if n != "serve")
    cases = []
    for name, sp in subs.items():
        cases.append(f"        {name}) opts={' '.join(_flags(sp))!r} ;;")
    fixed = "\n".join(f"        {k}) [[ $npos -eq 0 ]] && _tfcluster_reply {' '.join(v)!r} && return ;;"
                      for k, v in fixed_choices(subs).items())
    return f"""# tfcluster shell completion (bash). Install: eval "$(tfcluster completion bash)" in ~/.bashrc
_tfcluster_reply() {{
    # The words of $1 are data (run ids, task names read from records): split and compared,
    # never evaluated -- compgen -W would expand $(...) and backticks in them.
    local -a words
    local v
    if [[ -n "$ZSH_VERSION" ]]; then words=( ${{=1}} ); else read -r -d '' -a words <<< "$1"; fi
    COMPREPLY=()
    for v in "${{words[@]}}"; do
        # zsh matches the word itself (bashcompinit); bash gets the words that start with it
        if [[ -n "$ZSH_VERSION" || "$v" == "$cur"* ]]; then COMPREPLY+=("$v"); fi
    done
    # bash splits words at ':' (COMP_WORDBREAKS): hand back only what follows the last ':'
    if [[ "$cur" == *:* && "$COMP_WORDBREAKS" == *:* ]]; then
        local pre="${{cur%"${{cur##*:}}"}}" k
        for ((k=0; k<${{#COMPREPLY[@]}}; k++)); do COMPREPLY[k]="${{COMPREPLY[k]#"$pre"}}"; done
    fi
    return 0
}}
_tfcluster() {{
    # zsh (through bashcompinit): arrays from 0 as in bash, for this function only
    [[ -n "$ZSH_VERSION" ]] && setopt localoptions ksharrays
    local line="${{COMP_LINE:0:$COMP_POINT}}" cur prev cmd="" opts="" npos=0 i dd=0
    local -a w pos
    local vflags=" {vflags} " skip=0
    if [[ -n "$ZSH_VERSION" ]]; then w=( ${{=line}} ); else read -r -a w <<< "$line"; fi
    [[ "$line" =~ [[:space:]]$ ]] && w+=("")
    cur="${{w[${{#w[@]}}-1]}}"
    prev=""
    (( ${{#w[@]}} > 1 )) && prev="${{w[${{#w[@]}}-2]}}"
    for ((i=1; i<${{#w[@]}}-1; i++)); do
        if [[ $dd -eq 1 ]]; then continue; fi
        if [[ $skip -eq 1 ]]; then skip=0; continue; fi
        case "${{w[i]}}" in
            --) dd=1 ;;
            --*=*) ;;
            -*) [[ "$vflags" == *" ${{w[i]}} "* ]] && skip=1 ;;
            *) if [[ -z "$cmd" ]]; then cmd="${{w[i]}}"; else pos+=("${{w[i]}}"); fi ;;
        esac
    done
    npos=${{#pos[@]}}
    COMPREPLY=()
    if [[ $dd -eq 1 ]]; then COMPREPLY=( $(compgen -f -- "$cur") ); return 0; fi
    if [[ -z "$cmd" ]]; then _tfcluster_reply "{names} --help --version"; return 0; fi
    case "$cmd" in
{chr(10).join(cases)}
    esac
    case "$cmd:$prev" in
{flag_choices}
    esac
    if [[ "$prev" == --tasks ]]; then
        # the tasks of the run (profile RUN) or the file (launch FILE) on the line, else ./cluster.yaml's
        if [[ $npos -ge 1 && " {' '.join(RUN_COMMANDS)} " == *" $cmd "* ]]; then
            _tfcluster_reply "$(command tfcluster completion --values tasks --run "${{pos[0]}}" 2>/dev/null)"
        elif [[ $npos -ge 1 ]]; then
            _tfcluster_reply "$(command tfcluster completion --values tasks "${{pos[0]}}" 2>/dev/null)"
        else
            _tfcluster_reply "$(command tfcluster completion --values tasks 2>/dev/null)"
        fi
        return 0
    fi
    if [[ "$prev" == --file || "$prev" == --save || "$prev" == --output || "$prev" == -o ]]; then
        COMPREPLY=( $(compgen -f -- "$cur") ); return 0
    fi
    if [[ "$cur" == -* ]]; then _tfcluster_reply "$opts"; return 0; fi
    case "$cmd" in
{fixed}
        {'|'.join(RUN_TASK_COMMANDS)})
            # RUN, or (the latest run) a task of ./cluster.yaml; after RUN: that run's tasks
            if [[ $npos -eq 0 ]]; then
                _tfcluster_reply "$(command tfcluster completion --values runs 2>/dev/null) \\
$(command tfcluster completion --values tasks 2>/dev/null)"
                COMPREPLY+=( $(compgen -d -- "$cur") ); return 0
            elif [[ "$cmd" == stack || $npos -eq 1 ]]; then
                _tfcluster_reply \\
                    "$(command tfcluster completion --values tasks --run "${{pos[0]}}" 2>/dev/null)"; return 0
            fi ;;
        {'|'.join(c for c in RUN_COMMANDS if c not in RUN_TASK_COMMANDS)})
            if [[ $npos -eq 0 ]]; then
                _tfcluster_reply "$(command tfcluster completion --values runs 2>/dev/null)"
                COMPREPLY+=( $(compgen -d -- "$cur") ); return 0
            fi ;;
        tf-config)
            # [FILE] TASK: ./cluster.yaml's tasks and file names, then the tasks of FILE
            if [[ $npos -eq 0 ]]; then
                _tfcluster_reply "$(command tfcluster completion --values tasks 2>/dev/null)"
                COMPREPLY+=( $(compgen -f -- "$cur") ); return 0
            elif [[ $npos -eq 1 ]]; then
                _tfcluster_reply "$(command tfcluster completion --values tasks "${{pos[0]}}" 2>/dev/null)"; return 0
            fi ;;
    esac
    COMPREPLY=( $(compgen -f -- "$cur") )
    return 0
}}
complete -o default -F _tfcluster tfcluster
"""


def zsh_script(parser: RecordingParser) -> str:
    return ("# tfcluster shell completion (zsh). Install: eval \"$(tfcluster completion zsh)\" in "
            "~/.zshrc, after compinit\n"
            "autoload -U +X bashcompinit && bashcompinit\n"
            + bash_script(parser).split("\n", 1)[1])


#: what a completion value may hold: a word of letters, digits and ``._:@+=,%/-`` (no blank, no
#: quote, no ``$``/backtick, no control character). Values come from records another user may
#: have written; the script never evaluates them either, this is the second fence.
SAFE_VALUE = re.compile(r"[\w.:@+=,%/-]+", re.ASCII)


def values(kind: str, file: str = None, run: str = None) -> List[str]:
    """What ``--values`` prints: run ids from the index, or the task names of a cluster file
    (default ./cluster.yaml) or of a run, each a plain word (:data:`SAFE_VALUE`; others are left
    out). Errors give an empty list (completion stays quiet)."""
    return [v for v in _values(kind, file, run) if SAFE_VALUE.fullmatch(v)]


def _values(kind: str, file: str = None, run: str = None) -> List[str]:
    from tfcluster.errors import UserError
    if kind == "runs":
        from tfcluster.runs.index import run_ids
        try:
            return run_ids()
        except UserError:
            return []
    try:
        if run:
            from tfcluster.runs.index import is_run_dir, lookup, resolve_run
            from tfcluster.runs.logs import looks_like_task
            from tfcluster.runs.run_file import read_run
            if not (looks_like_task(run) and not is_run_dir(run) and lookup(run) is None):
                record = read_run(resolve_run(run))
                return [t["task"] for t in record.get("tasks") or []
                        if isinstance(t.get("task"), str)] + ["launcher"]
            # ``stack worker:1 <TAB>``: the word is a task of the latest run, not a run
        from tfcluster.clusterfile import config
        cluster = config.load(file or "cluster.yaml")
        if not cluster.resolved:
            from tfcluster.plan.runplan import assign_local_ports
            cluster = assign_local_ports(cluster)
        return [t.name for t in cluster.tasks]
    except (UserError, OSError):
        return []
