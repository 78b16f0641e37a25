"""The trajectory log: one JSON line per event of an episode, written as it happens.

``TurnLog`` appends an ``episode_start`` line when an episode starts, a ``turn`` line after each
planner turn and an ``episode_end`` line when it ends. Each line is written with one ``write``
system call on a file opened for appending, and nothing is buffered in the process: a run killed
with ``SIGKILL`` leaves every finished turn on disk, and the only line it can lose is the one
being written (which the reader skips). The log never truncates a file; many envs (threads or
processes) may append to the same one, and their lines interleave whole.

``read_turn_log`` rebuilds the episodes, complete and partial. The line formats are documented
in ``docs/metrics.md``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentflow_env.tasks.base import Task
from agentflow_env.workflow.action_input import ActionInput
from agentflow_env.workflow.actions import ActionParseError, parse_planner_action
from agentflow_env.workflow.memory import MemoryEntry, QueryAnalysis

logger = logging.getLogger("agentflow_env.turn_log")

__all__ = [
    "EpisodeLogger",
    "LoggedEpisode",
    "TurnLog",
    "TurnLogContents",
    "new_episode_id",
    "read_turn_log",
]

EVENTS = ("episode_start", "turn", "episode_end")


def new_episode_id() -> str:
    """A unique id for one episode's lines (episodes of many envs share one file)."""
    return uuid.uuid4().hex


def encode_line(record: Mapping[str, Any]) -> bytes:
    """``record`` as one line of ASCII JSON: untrusted text (lone surrogates, control
    characters, newlines) can neither break the line nor make it undecodable."""
    return (json.dumps(record, ensure_ascii=True, default=repr) + "\n").encode("ascii")


class TurnLog:
    """An append-only JSON Lines file of episode events.

    Opened lazily on the first line (so an env that is built but never run creates no file) and
    shared by every session of an env. ``close`` releases the file; writing again reopens it.
    """

    def __init__(self, path: str | os.PathLike[str], *, sync: bool = False) -> None:
        self.path = Path(path)
        self.sync = sync
        """``fsync`` after every line: survives a machine crash, not only a killed process."""
        self._fd: int | None = None
        self._lock = threading.Lock()
        if self.path.is_dir():
            raise ValueError(f"log_path {self.path} is a directory: give a file path")
        if not self.path.parent.is_dir():
            raise ValueError(
                f"log_path {self.path}: the directory {self.path.parent} does not exist"
            )

    def write(self, event: str, episode_id: str, **fields: Any) -> None:
        """Append one line ``{"event", "episode_id", "time", **fields}``."""
        if event not in EVENTS:
            raise ValueError(f"unknown log event {event!r}; expected one of {EVENTS}")
        data = encode_line(
            {"event": event, "episode_id": episode_id, "time": time.time(), **fields}
        )
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            written = os.write(self._fd, data)
            while written < len(data):  # a short write (rare on regular files): finish the line
                written += os.write(self._fd, data[written:])
            if self.sync:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __repr__(self) -> str:
        return f"TurnLog({str(self.path)!r})"


@dataclass
class LoggedEpisode:
    """One episode read back from a log; ``end`` is ``None`` if the run died before it ended."""

    episode_id: str
    start: dict[str, Any] | None = None
    turns: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return self.start is not None and self.end is not None

    @property
    def run(self) -> str | None:
        """The eval run (variant) the episode belongs to, if any."""
        return (self.start or {}).get("run")


@dataclass
class TurnLogContents:
    """Every episode of a log, in the order their first lines appear."""

    episodes: list[LoggedEpisode]
    bad_lines: int = 0
    """Lines that are not a JSON object with a known event (e.g. a line torn by a kill)."""

    @property
    def complete(self) -> list[LoggedEpisode]:
        return [episode for episode in self.episodes if episode.complete]

    @property
    def partial(self) -> list[LoggedEpisode]:
        return [episode for episode in self.episodes if not episode.complete]


def read_turn_log(path: str | os.PathLike[str]) -> TurnLogContents:
    """Rebuild the episodes of a log written by ``TurnLog`` (a missing file is an ``OSError``)."""
    episodes: dict[str, LoggedEpisode] = {}
    bad = 0
    with open(path, "rb") as file:
        for raw in file:
            record = _parse(raw)
            if record is None:
                bad += bool(raw.strip())
                continue
            key = record["episode_id"]
            episode = episodes.setdefault(key, LoggedEpisode(key))
            event = record["event"]
            if event == "episode_start":
                episode.start = record
            elif event == "turn":
                episode.turns.append(record)
            else:
                episode.end = record
    for episode in episodes.values():
        episode.turns.sort(key=_turn_number)
    return TurnLogContents(list(episodes.values()), bad)


def _turn_number(line: Mapping[str, Any]) -> int:
    """A turn line's number for sorting (0 when it is not an integer: the file is untrusted)."""
    number = line.get("turn")
    return number if isinstance(number, int) and not isinstance(number, bool) else 0


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return None
    if (
        not isinstance(record, dict)
        or record.get("event") not in EVENTS
        or not isinstance(record.get("episode_id"), str)
    ):
        return None
    return record


class EpisodeLogger:
    """Writes one episode's lines to a ``TurnLog`` (``None``: writes nothing).

    ``context`` is copied into the ``episode_start`` line (e.g. ``run``, ``env_id``). A write
    that fails (a full disk, a removed folder) is logged once as a warning and the episode goes
    on: losing the log must not crash a training run.
    """

    def __init__(
        self,
        log: TurnLog | None,
        context: Mapping[str, Any] | None = None,
        *,
        line_fields: Mapping[str, Any] | None = None,
    ) -> None:
        self.log = log
        self.context = dict(context or {})
        self.line_fields = dict(line_fields or {})
        """Fields every line carries (a forked episode's ``fork_of``)."""
        self.episode_id = new_episode_id()
        self.error: OSError | None = None
        """The first failed write, if any."""

    def fork(self, *, log: bool, turn: int) -> EpisodeLogger:
        """The logger of an episode forked from this one after ``turn`` turns.

        Without ``log`` it writes nothing. With it, it writes to the same file under its own
        episode id; every line carries ``fork_of`` (this episode's id) and its ``episode_start``
        line ``forked_at_turn``. Its turn lines are the fork's own turns only: the turns before
        ``turn`` are the parent episode's lines.
        """
        if not log:
            return EpisodeLogger(None)
        if self.log is None:
            raise ValueError("fork(log=True) needs a trajectory log, and this episode has none")
        return EpisodeLogger(
            self.log,
            {**self.context, "forked_at_turn": turn},
            line_fields={**self.line_fields, "fork_of": self.episode_id},
        )

    def start(
        self,
        task: Task,
        analysis: QueryAnalysis | None,
        *,
        seed: int | None,
        initializer_error: str | None,
        max_turns: int,
        tools: Sequence[str],
        observation_mode: str,
    ) -> None:
        self._write(
            "episode_start",
            **self.context,
            seed=seed,
            task=task.describe(),
            analysis=None if analysis is None else analysis.as_dict(),
            initializer_error=initializer_error,
            max_turns=max_turns,
            tools=list(tools),
            observation_mode=observation_mode,
        )

    def turn(
        self,
        entry: MemoryEntry,
        read: ActionInput,
        *,
        expected_tool: str | None,
        chose_expected_tool: bool | None,
        redundant: bool,
        latency_s: Mapping[str, float],
        prompt_tokens: int,
    ) -> None:
        try:
            parsed = parse_planner_action(read.text)
            plan = {
                "justification": parsed.justification,
                "context": parsed.context,
                "sub_goal": parsed.sub_goal,
                "tool_name": parsed.tool_name,
            }
        except ActionParseError:
            plan = dict.fromkeys(("justification", "context", "sub_goal", "tool_name"), "")
        self._write(
            "turn",
            turn=entry.turn,
            action={
                "text": read.text,
                "token_ids": list(read.ids),
                "given_as_ids": read.given_as_ids,
                "cut": read.cut,
            },
            plan=plan,
            tool=entry.selected_tool,
            arguments=dict(entry.tool_arguments),
            result=entry.tool_result,
            tool_ok=entry.tool_ok,
            verification=entry.verification_status.value,
            open_questions=list(entry.open_questions),
            errors=list(entry.errors),
            memory_entry=entry.as_dict(),
            expected_tool=expected_tool,
            chose_expected_tool=chose_expected_tool,
            redundant=redundant,
            latency_s=dict(latency_s),
            prompt_tokens=prompt_tokens,
            action_tokens=len(read.ids),
        )

    def end(self, **fields: Any) -> None:
        self._write("episode_end", **fields)

    def _write(self, event: str, **fields: Any) -> None:
        if self.log is None:
            return
        try:
            self.log.write(event, self.episode_id, **{**fields, **self.line_fields})
        except OSError as error:
            if self.error is None:
                logger.warning("trajectory log %s: cannot write (%s)", self.log.path, error)
            self.error = error
