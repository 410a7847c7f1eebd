"""The ``tfcluster`` command, the composition root: :func:`main` parses the command line, runs
the subcommand's handler (:mod:`tfcluster.cli.commands`; ``launch`` through
:mod:`tfcluster.cli.launching`) and turns what goes wrong into one line and an exit code;
:func:`console` is the console script. TensorFlow is imported only by the subcommands that run
it (``launch`` does not either: its tasks do)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence

from tfcluster.cli.commands import COMMANDS, cmd_exec, cmd_launch, cmd_serve
from tfcluster.cli.launching import launch_request, run_launch
from tfcluster.cli.parser import build_parser as build_grammar
from tfcluster.cli.parser import glue_arg_values
from tfcluster.cli.parser_kit import RecordingParser
from tfcluster.core import messages
from tfcluster.errors import UserError, print_error


def build_parser() -> RecordingParser:
    """The command line's parser (:func:`tfcluster.cli.parser.build_parser`) with each
    subcommand's handler as its ``func``."""
    p = build_grammar()
    for name, sub in p.subcommands.items():
        sub.set_defaults(func=COMMANDS[name])
    return p


def console() -> None:
    """The ``tfcluster`` command (the console script, ``python -m tfcluster``): :func:`main`,
    then the process ends without the interpreter's teardown of every module and object, which
    took 0.1-0.25 s after a launch here (the launcher's exit is the run's end for whoever waits
    on it). What an exit must do is done first: other threads that are not daemons are joined,
    the ``atexit`` functions run, stdout and stderr are flushed. An exception ends it the
    usual way (its traceback)."""
    from tfcluster.drivers import network
    network.MOVE_THIS_PROCESS = True    # this process is the launcher: it may move into a run's network
    code = main()
    import atexit
    import threading
    # what the interpreter's exit does first: its exit hooks (concurrent.futures), then join the
    # non-daemon threads, then the atexit functions. These are not public names of threading and
    # atexit: where a Python release lacks them, the interpreter's own (slower) exit does it all.
    shutdown = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exitfuncs is None:
        sys.exit(code)
    shutdown()
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe (`tfcluster ... | head`)
            pass
    os._exit(code if isinstance(code, int) else 1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tfcluster ARGV`` (default: ``sys.argv[1:]``) in this process; returns the exit code.
    argparse's usage errors, ``--help`` and ``--version`` raise SystemExit as argparse does."""
    argv = list(sys.argv[1:] if argv is None else argv)
    program: List[str] = []
    if argv and argv[0] in ("launch", "exec") and "--" in argv:
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    if argv and argv[0] in ("launch", "commands", "render"):
        hint = messages.arg_value_hint(argv[1:])
        if hint:
            print(f"tfcluster {argv[0]}: error: {hint}", file=sys.stderr)
            return 2
    argv = glue_arg_values(argv)
    parser = build_parser()
    args = _parse(parser, argv, program)
    if isinstance(args, int):
        return args
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if args.func is cmd_launch:
            return int(run_launch(launch_request(args, program, argv)) or 0)
        if args.func is cmd_exec:
            args.command = program
        return int(args.func(args) or 0)
    except UserError as e:
        print_error(e)
        return e.exit_code
    except KeyboardInterrupt:
        print("tfcluster: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tfcluster ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:   # no /dev/null: Python's own flush at exit may complain, once
            pass
        return 0


def _parse(parser: RecordingParser, argv: List[str], program: List[str]) -> "argparse.Namespace | int":
    """``argv`` parsed, or the exit code (2) when ``launch`` got words it does not know (said
    with a hint: the program goes after '--'). argparse's own errors raise SystemExit."""
    try:
        if argv and argv[0] == "serve":
            # every word after "serve" is the serve program's own (its flags, --help): argparse's
            # REMAINDER would refuse a first word that starts with "-"
            return argparse.Namespace(func=cmd_serve, rest=argv[1:])
        if argv and argv[0] == "launch" and not program:
            args, unknown = parser.parse_known_args(argv)
            if unknown:
                launch = messages.launch_command(args.file) if args.file else "tfcluster launch"
                print(f"tfcluster launch: error: unrecognized arguments: {' '.join(unknown)}\n"
                      f"tfcluster launch: hint: put the program after '--': {launch} -- "
                      f"{' '.join(unknown)}", file=sys.stderr)
                return 2
            return args
        return parser.parse_args(argv)
    except SystemExit as e:
        hint = messages.sbatch_hint(argv) if e.code == 2 else None
        if hint:
            print(f"tfcluster: hint: {hint}", file=sys.stderr)
        raise
