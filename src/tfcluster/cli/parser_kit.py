"""An ``argparse.ArgumentParser`` that remembers what was added to it, through argparse's
public methods only, so that completion and ``help COMMAND`` read the CLI's own flags without
reaching into argparse's private lists (which a Python release may change)."""
from __future__ import annotations

import argparse
from typing import Any, Dict, List


class RecordingParser(argparse.ArgumentParser):
    """``actions``: every action added, groups included, in order; ``subcommands``: the
    parsers ``add_subparsers().add_parser`` made, by name."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.actions: List[argparse.Action] = []      # before argparse adds -h
        self.subcommands: Dict[str, "RecordingParser"] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.actions.append(action)
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        return self._recorded(super().add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> Any:
        return self._recorded(super().add_mutually_exclusive_group(*args, **kwargs))

    def add_subparsers(self, *args: Any, **kwargs: Any) -> Any:
        subs = super().add_subparsers(*args, **kwargs)
        add_parser = subs.add_parser

        def recorded_add_parser(name: str, *a: Any, **k: Any) -> "RecordingParser":
            parser = add_parser(name, *a, **k)
            self.subcommands[name] = parser
            return parser
        subs.add_parser = recorded_add_parser
        return subs

    def _recorded(self, group: Any) -> Any:
        add = group.add_argument

        def recorded_add(*a: Any, **k: Any) -> argparse.Action:
            action = add(*a, **k)
            self.actions.append(action)
            return action
        group.add_argument = recorded_add
        return group
