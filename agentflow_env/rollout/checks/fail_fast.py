"""Fail fast on a setup that makes every trajectory fail the same way.

One bad trajectory is a zero-reward sample (``failures``): the batch goes on. But a wrong label
column, a tokenizer of another vocabulary, an unreachable module endpoint or retriever makes
*every* trajectory such a sample, and a job then burns GPU hours learning nothing with one
warning per trajectory. ``FailFast`` watches the first trajectories of a process: when
``limit`` of them in a row fail for the same reason before any trajectory has run, it raises one
``SystemicFailure`` naming the reason and the setting to look at. Once one trajectory has run,
it stands down: later failures stay zero-reward samples (they show in the ``env/failed`` rate
each adapter logs), so a transient outage never kills a long job.

``AGENTFLOW_FAIL_FAST`` sets the limit for the adapters (default 16; ``0`` turns it off).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

from agentflow_env.base.settings import ENV_VARS, read_env_var
from agentflow_env.rollout.checks.failures import AdapterError, trajectory_failure

FAIL_FAST_VARIABLE = "AGENTFLOW_FAIL_FAST"
DEFAULT_FAIL_FAST: int = ENV_VARS[FAIL_FAST_VARIABLE].default
"""How many trajectories in a row, failing the same way at a process's start, stop the run."""

_HINTS: tuple[tuple[str, str], ...] = (
    ("TaskSpecError", "the dataset's label column (each row's label must name a task)"),
    ("label", "the dataset's label column (each row's label must name a task)"),
    ("TokenMismatchError", "the tokenizer: AGENTFLOW_TOKENIZER must be the policy's"),
    ("tokenizer", "the tokenizer: AGENTFLOW_TOKENIZER must be the policy's"),
    ("retriever", "the retriever: its URL in AGENTFLOW_ENV_KWARGS, and that it is up"),
    ("module error", "the module endpoint: its base URL and model in AGENTFLOW_ENV_KWARGS"),
    ("LLMError", "the module endpoint: its base URL and model in AGENTFLOW_ENV_KWARGS"),
    ("sandbox", "the code sandbox settings in AGENTFLOW_ENV_KWARGS"),
    ("search_api", "the web search API key and endpoint"),
    ("UnknownSettingError", "AGENTFLOW_ENV_KWARGS or the labels' env kwargs"),
)


class SystemicFailure(AdapterError):
    """The first trajectories of a process all failed the same way: the setup is wrong."""


def reason_key(reason: str) -> str:
    """What two failures must share to count as the same: the text without numbers, ids and
    quoted values (which differ per task), so "task 17" and "task 18" match."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "<v>", reason)
    text = re.sub(r"0x[0-9a-fA-F]+|\d+", "<n>", text)
    return text[:300]


def hint(reason: str) -> str:
    """The setting most likely at fault for ``reason``."""
    lowered = reason.lower()
    for pattern, text in _HINTS:
        if pattern.lower() in lowered:
            return text
    return "the adapter's settings (AGENTFLOW_ENV_ID, AGENTFLOW_ENV_KWARGS, AGENTFLOW_TOKENIZER)"


class FailFast:
    """Counts the failures at the start of a process (thread-safe); see the module docstring.

    ``record(reason)`` after every trajectory: ``None`` for one that ran (which stands the
    guard down), else the one-line reason (``failures.trajectory_failure``)."""

    def __init__(self, limit: int = DEFAULT_FAIL_FAST, what: str = "AgentFlow") -> None:
        if limit < 0:
            raise ValueError(f"the fail-fast limit must be >= 0 (0 turns it off), got {limit}")
        self.limit, self.what = limit, what
        self._lock = threading.Lock()
        self._armed = limit > 0
        self._key: str | None = None
        self._streak = 0
        self.failed = 0
        self.trajectories = 0

    @property
    def armed(self) -> bool:
        """Whether no trajectory has run yet (the guard still watches)."""
        return self._armed

    def record(self, reason: str | None) -> None:
        """Count one finished trajectory; raises ``SystemicFailure`` on the ``limit``-th failure
        in a row with the same reason while no trajectory has run."""
        with self._lock:
            self.trajectories += 1
            if reason is None:
                self._armed, self._key, self._streak = False, None, 0
                return
            self.failed += 1
            if not self._armed:
                return
            key = reason_key(reason)
            self._streak = self._streak + 1 if key == self._key else 1
            self._key = key
            if self._streak < self.limit:
                return
            self._armed = False  # raise once per process
        raise SystemicFailure(
            f"{self.what}: the first {self.limit} trajectories of this process all failed the same "
            f"way, and none has run: {reason[:500]}. Check {hint(reason)}. (One bad trajectory "
            "is a zero-reward sample; this many in a row at the start means the setup is wrong. "
            "AGENTFLOW_FAIL_FAST sets how many, 0 turns this check off.)"
        )


def fail_fast_limit(environ: Mapping[str, str] | None = None) -> int:
    """``AGENTFLOW_FAIL_FAST`` as an integer >= 0 (default ``DEFAULT_FAIL_FAST``)."""
    return int(read_env_var(FAIL_FAST_VARIABLE, environ))


__all__ = [
    "DEFAULT_FAIL_FAST",
    "FailFast",
    "SystemicFailure",
    "fail_fast_limit",
    "hint",
    "reason_key",
    "trajectory_failure",
]
