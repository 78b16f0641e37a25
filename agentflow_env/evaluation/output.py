"""Where an evaluation writes: an output folder that is never overwritten.

``eval`` and ``ablate`` write into a folder: ``turns.jsonl`` (the trajectory log, one line per
turn as it happens), ``episodes.jsonl`` (one row per finished episode, flushed as each ends) and
the summary files at the end. A folder that already holds any of them is refused, so a re-run
never overwrites (or silently mixes into) an earlier result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentflow_env.workflow.turn_log import encode_line

TURN_LOG = "turns.jsonl"
EPISODES = "episodes.jsonl"
SUMMARY = "summary.json"
OUTPUTS = (TURN_LOG, EPISODES, SUMMARY, "results.json", "results.md")


class OutputExistsError(ValueError):
    """The output folder holds an earlier result."""


def prepare_output_dir(path: str | Path) -> Path:
    """``path`` created if needed; ``OutputExistsError`` if it holds an earlier result."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"{folder} is a file: give a folder for the results")
    taken = [name for name in OUTPUTS if (folder / name).exists()]
    if taken:
        raise OutputExistsError(
            f"{folder} already holds {', '.join(taken)}: choose a new folder (results are never "
            "overwritten)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class EpisodeRows:
    """``episodes.jsonl``: one line per finished episode, written and flushed as it ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "ab")  # noqa: SIM115 - closed by close()

    def write(self, row: Mapping[str, Any]) -> None:
        self._file.write(encode_line(row))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def write_json(path: Path, data: Any) -> None:
    """Strict JSON (NaN and infinities as ``null``), indented."""
    path.write_text(json.dumps(_finite(data), indent=2, ensure_ascii=False) + "\n", "utf-8")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
