"""``agentflow-env view LOG``: a static HTML report of a trajectory log."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentflow_env.cli.common import UsageError
from agentflow_env.evaluation.plots import INSTALL_HINT, plots_available
from agentflow_env.evaluation.viewer.site import EmptyLogError, write_report


def add_view_command(commands: Any) -> None:
    view = commands.add_parser(
        "view",
        help="write a static HTML report of a trajectory log",
        description="Write a static HTML report (index, one page per episode, plots) of a "
        "trajectory log; open the printed index.html in a browser, no server needed.",
    )
    view.add_argument("log", help="trajectory log (JSON Lines, as the env's log_path writes)")
    view.add_argument(
        "-o", "--out", default=None, help="report folder (default: LOG without suffix + _report)"
    )
    view.add_argument(
        "--summary", default=None, help="an eval run's summary.json, shown on the index"
    )
    view.set_defaults(handler=_view_command)


def default_out_dir(log: Path) -> Path:
    return log.with_name(log.stem + "_report")


def _view_command(args: argparse.Namespace) -> int:
    log = Path(args.log)
    if not log.is_file():
        reason = "is a directory" if log.is_dir() else "does not exist"
        raise UsageError(f"log {log} {reason}")
    out = Path(args.out) if args.out is not None else default_out_dir(log)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out} is a file: give a folder for the report")
    summary = _read_summary(args.summary)
    try:
        index = write_report(log, out, summary=summary)
    except EmptyLogError as error:
        raise UsageError(str(error)) from error
    except OSError as error:
        raise UsageError(
            f"cannot write the report into {out}: {error.strerror or error}"
        ) from error
    print(index)
    if not plots_available():
        print(f"no plots: matplotlib is not installed ({INSTALL_HINT})")
    return 0


def _read_summary(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--summary {path}: cannot read it ({error.strerror})") from error
    except ValueError as error:
        raise UsageError(f"--summary {path}: not JSON ({error})") from error
    if not isinstance(summary, dict):
        raise UsageError(f"--summary {path}: expected a JSON object, got {type(summary).__name__}")
    return summary
