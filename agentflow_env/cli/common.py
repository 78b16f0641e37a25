"""What every subcommand shares: the one-line usage error, the parser and option types."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn


class UsageError(Exception):
    """A mistake on the command line: reported as one line on stderr, without a traceback."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except empty ones (``None``, ``False``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Argument errors as one line (what is wrong, and where the usage is), exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def clip(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_out_path(out: str | None, flag: str = "--out") -> None:
    if out is None:
        return
    path = Path(out)
    if path.is_dir():
        raise UsageError(
            f"{flag} {out} is a directory: give a file path, e.g. {path / 'runs.jsonl'}"
        )
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(
            f"{flag} {out}: the directory {folder} does not exist; create it first or write "
            "somewhere else"
        )
