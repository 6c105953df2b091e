"""``ep-host completion SHELL``: a static completion script for the command's parser, generated
by shtab (completing runs no Python), with file and folder arguments completed as paths."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from ep_host.cli import build_parser, output_file, output_folder


def cmd_completion(args: argparse.Namespace) -> int:
    """``ep-host completion SHELL``: shtab's script for this parser, paths completed as paths."""
    from ep_host.errors import HostError

    try:
        import shtab
    except ImportError:
        raise HostError("ep-host completion needs shtab, one of ep-host's dependencies: "
                        "pip install shtab") from None
    parser = build_parser()
    path_kinds = {"file": shtab.FILE, "folder": shtab.DIRECTORY}
    for action in _every_action(parser):
        kind = _path_kind(action)
        if kind:
            action.complete = path_kinds[kind]  # what shtab reads
    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return 0


def _every_action(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _every_action(sub)


def _path_kind(action: argparse.Action) -> str | None:
    """Whether an argument names a file or a folder (completed as paths), else ``None``."""
    if action.type is output_folder or action.metavar == "DIR":
        return "folder"
    if action.type is output_file or action.dest == "model" or action.metavar in ("FILE",
                                                                                  "MODEL"):
        return "file"
    return None
