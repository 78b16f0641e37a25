"""Where an evaluation writes: an output folder that is never overwritten, and can be resumed.

``eval`` and ``ablate`` write into a folder: ``settings.json`` (the run's settings, first, so a
resume can check them), ``turns.jsonl`` (the trajectory log, one line per turn as it happens),
``episodes.jsonl`` (one row per finished episode, flushed as each ends) and the summary files at
the end. A folder that already holds results is refused, so a re-run never overwrites (or
silently mixes into) an earlier result; ``resume_output_dir`` instead continues the run a folder
holds when its settings are the same, keeping every finished episode.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentflow_env.workflow.turn_log import encode_line

__all__ = [
    "EPISODES",
    "SETTINGS",
    "SUMMARY",
    "TURN_LOG",
    "UNSET",
    "EpisodeRows",
    "OutputExistsError",
    "ResumeError",
    "Resumed",
    "SettingsMismatchError",
    "as_json",
    "prepare_output_dir",
    "resume_output_dir",
    "settings_differences",
    "start_output_dir",
    "write_json",
]

SETTINGS = "settings.json"
TURN_LOG = "turns.jsonl"
EPISODES = "episodes.jsonl"
SUMMARY = "summary.json"
OUTPUTS = (TURN_LOG, EPISODES, SUMMARY, "results.json", "results.md")
"""The files that hold results (``settings.json`` alone holds none: a run that failed before
its first episode can simply be run again)."""


class _Unset:
    def __repr__(self) -> str:
        return "unset"


UNSET: Any = _Unset()
"""Stands for a setting that one of two compared runs does not record."""


class OutputExistsError(ValueError):
    """The output folder holds an earlier result (``taken``: the files it holds)."""

    def __init__(self, message: str, taken: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.taken = taken


class ResumeError(ValueError):
    """The folder cannot be resumed: it records no settings, or its episode rows are damaged."""


class SettingsMismatchError(ValueError):
    """The folder's run had other settings: ``differences`` holds (path, before, now) for each,
    ``UNSET`` where one side lacks it."""

    def __init__(self, differences: list[tuple[tuple[str, ...], Any, Any]]) -> None:
        super().__init__(", ".join(".".join(path) for path, _, _ in differences))
        self.differences = differences


def prepare_output_dir(path: str | Path) -> Path:
    """``path`` created if needed; ``OutputExistsError`` if it holds an earlier result."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"{folder} is a file: give a folder for the results")
    taken = _results(folder)
    if taken:
        raise OutputExistsError(
            f"{folder} already holds {', '.join(taken)}: choose a new folder (results are never "
            "overwritten)",
            taken,
        )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _results(folder: Path) -> tuple[str, ...]:
    """The result files ``folder`` holds (an empty one holds nothing)."""
    return tuple(
        name
        for name in OUTPUTS
        if (folder / name).exists()
        and not ((folder / name).is_file() and (folder / name).stat().st_size == 0)
    )


def start_output_dir(path: str | Path, settings: Mapping[str, Any]) -> Path:
    """A fresh folder (``prepare_output_dir``) with ``settings.json`` written before any episode,
    so that a run killed part-way can be resumed and checked."""
    folder = prepare_output_dir(path)
    write_json(folder / SETTINGS, as_json(settings))
    return folder


@dataclass
class Resumed:
    """A folder to go on writing into: the rows of its finished episodes, in file order."""

    folder: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    torn_lines: int = 0
    """Lines cut off by the kill (the last line of ``episodes.jsonl``), dropped."""
    dropped_turn_lines: int = 0
    """Trajectory-log lines of episodes that did not finish (they run again), dropped."""


def resume_output_dir(path: str | Path, settings: Mapping[str, Any]) -> Resumed:
    """The run ``path`` holds, to be finished: its settings must equal ``settings``.

    A folder without results (missing, empty, or only ``settings.json``) is started afresh.
    Otherwise ``settings.json`` is compared with ``settings`` (``SettingsMismatchError`` naming
    each difference), the finished episodes are read from ``episodes.jsonl`` (a last line cut
    off by a kill is dropped, duplicates keep the first row) and the files are rewritten to hold
    exactly them: ``episodes.jsonl`` without the torn line, ``turns.jsonl`` without the lines of
    episodes that did not finish (they run again under new ids). Both rewrites replace the file
    atomically.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"{folder} is a file: give a folder for the results")
    if not _results(folder):
        return Resumed(start_output_dir(folder, settings))
    recorded = _read_settings(folder / SETTINGS)
    differences = settings_differences(recorded, as_json(settings))
    if differences:
        raise SettingsMismatchError(differences)
    rows, lines, torn = _read_rows(folder / EPISODES)
    if (folder / EPISODES).exists():
        _replace(folder / EPISODES, lines)
    dropped = _keep_turn_lines(folder / TURN_LOG, {str(row.get("episode_id")) for row in rows})
    return Resumed(folder, rows, torn, dropped)


def _read_settings(path: Path) -> Any:
    if not path.exists():
        raise ResumeError(
            f"{path.parent} holds results but no {SETTINGS} (written before resuming existed, "
            "or by something else), so its settings cannot be checked: choose a new folder"
        )
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as error:
        raise ResumeError(f"cannot read {path} ({error}): choose a new folder") from error


def settings_differences(
    before: Any, now: Any, path: tuple[str, ...] = (), depth: int = 2
) -> list[tuple[tuple[str, ...], Any, Any]]:
    """Where two settings records differ: objects are compared key by key down to ``depth``
    levels, anything deeper as a whole."""
    if depth > 0 and isinstance(before, Mapping) and isinstance(now, Mapping):
        found: list[tuple[tuple[str, ...], Any, Any]] = []
        for key in [*before, *(k for k in now if k not in before)]:
            found += settings_differences(
                before.get(key, UNSET), now.get(key, UNSET), (*path, str(key)), depth - 1
            )
        return found
    return [] if before == now else [(path, before, now)]


def _read_rows(path: Path) -> tuple[list[dict[str, Any]], list[bytes], int]:
    """The finished episodes' rows and their lines (each ending in a newline), and how many torn
    lines were left out: only the last line may be torn; damage elsewhere is a ``ResumeError``."""
    if not path.exists():
        return [], [], 0
    with open(path, "rb") as file:
        raw_lines = list(file)
    rows: list[dict[str, Any]] = []
    lines: list[bytes] = []
    seen: set[tuple[Any, int]] = set()
    torn = 0
    for number, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            continue
        row = _episode_row(raw)
        if row is None:
            if number == len(raw_lines) and not raw.endswith(b"\n"):
                torn += 1  # cut off mid-write by the kill
                continue
            raise ResumeError(
                f"{path} line {number} is not an episode row, so the file is damaged: choose a "
                "new folder"
            )
        key = (row.get("run"), row["index"])
        if key in seen:
            continue
        seen.add(key)
        rows.append(row)
        lines.append(raw if raw.endswith(b"\n") else raw + b"\n")
    return rows, lines, torn


def _episode_row(raw: bytes) -> dict[str, Any] | None:
    try:
        row = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return None
    if not isinstance(row, dict) or not isinstance(row.get("diagnostics"), dict):
        return None
    if not isinstance(row.get("run"), str | None):
        return None
    index = row.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        return None
    return row


def _keep_turn_lines(path: Path, episode_ids: Collection[str]) -> int:
    """Rewrite the trajectory log with only the lines of ``episode_ids``; how many were dropped."""
    if not path.exists():
        return 0
    dropped = 0
    temporary = path.with_name(path.name + ".resume")
    with open(path, "rb") as source, open(temporary, "wb") as target:
        for raw in source:
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if isinstance(record, dict) and record.get("episode_id") in episode_ids:
                target.write(raw if raw.endswith(b"\n") else raw + b"\n")
            elif raw.strip():
                dropped += 1
    os.replace(temporary, path)
    return dropped


def _replace(path: Path, lines: list[bytes]) -> None:
    """``path`` holding ``lines``, swapped in whole (a kill now leaves the old file or the new)."""
    temporary = path.with_name(path.name + ".resume")
    temporary.write_bytes(b"".join(lines))
    os.replace(temporary, path)


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


def as_json(data: Any) -> Any:
    """``data`` as ``write_json`` stores it and ``json.load`` reads it back (for comparing)."""
    return json.loads(json.dumps(_finite(data), ensure_ascii=False, default=repr))


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
