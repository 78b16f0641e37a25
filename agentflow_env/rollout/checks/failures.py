"""Zero-reward failure samples: what a trajectory that raised still tells the trainer.

A rollout never lets one episode's exception (a bad label, an env that cannot be built, a bug)
kill the batch: the episode ends as a reward-0 sample, logged with the reason, and every sample
carries the same numeric logs so a trainer can stack them. These helpers are shared by the
batched driver and the adapters; the sample's shape is the trainer's. ``AdapterError`` is the
exception: it stops the run (the adapter cannot work as set up).
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

from agentflow_env.remote import RemoteSession
from agentflow_env.workflow.outcome import EndReason
from agentflow_env.workflow.session import Session


class AdapterError(RuntimeError):
    """Stops the run instead of failing one trajectory: the adapter cannot work as set up."""


class SeamError(AdapterError):
    """The trainer no longer samples through the engine the adapter hands it (or the engine's
    outputs lack the sampled ids), so the ids cannot reach the env."""


class SeamLatch:
    """A process's first ``SeamError``, logged once on ``log``; after it, ``check`` fails every
    later trajectory at once (``what`` says what the adapter cannot do)."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log, self.what = log, what
        self.message: str | None = None

    def error(self, message: str) -> SeamError:
        """A ``SeamError`` to raise; the first one is logged and remembered."""
        if self.message is None:
            self.message = message
            self.log.error("%s: %s", self.what, message)
        return SeamError(message)

    def check(self) -> None:
        if self.message is not None:
            raise SeamError(self.message)


EPISODE_LOG_KEYS = (
    "turns",
    "tool_calls",
    "tool_errors",
    "invalid_actions",
    "action_tokens",
    "success",
    "budget_exhausted",
    "error",
    "failed",
)
"""The numeric logs of every sample, failed or not (trainers stack them across samples)."""


def episode_logs(session: Session | RemoteSession | None, error: bool = False) -> dict[str, float]:
    """Numeric per-trajectory logs, always the keys ``EPISODE_LOG_KEYS``: the session's metrics,
    ``success`` (only of an episode that ended and did not fail), ``budget_exhausted`` (the
    trainer's token budget ran out before the episode ended), ``error`` (the trajectory raised)
    and ``failed`` (it raised, or ``trajectory_failure`` finds its episode failed: the rate a
    trainer logs as ``env/failed``)."""
    metrics = session.metrics.as_dict() if session is not None else {}
    logs = {key: float(metrics.get(key, 0.0)) for key in EPISODE_LOG_KEYS}
    done = session is not None and session.done
    outcome = session.outcome if session is not None else None
    success = done and outcome is not None and outcome.success
    logs["success"] = float(success and not error)
    logs["budget_exhausted"] = float(not done and not error)
    logs["error"] = float(error)
    logs["failed"] = float(error or trajectory_failure(session) is not None)
    return logs


def trajectory_failure(
    session: Session | RemoteSession | None = None, error: BaseException | str | None = None
) -> str | None:
    """Why a finished trajectory counts as failed, as one line, or ``None`` when it ran.

    ``error``: the exception (or its one-line reason) that ended the trajectory. Without one, a
    trajectory also failed when its episode ended on a frozen module's error, or when every tool
    call it made failed because the tool's service is broken (``ToolResult.service_broken``)."""
    if isinstance(error, BaseException):
        return failure_reason(error)
    if error:
        return str(error)
    if session is None:
        return None
    outcome = session.outcome
    if outcome is not None and outcome.end_reason == EndReason.MODULE_ERROR:
        first = outcome.module_errors[0] if outcome.module_errors else "no error text"
        return f"module error: {first}"
    broken, calls = session.service_errors, session.metrics.tool_calls
    if broken and len(broken) >= calls:
        return f"every tool call failed: {broken[0]}"
    return None


def failure_reason(exc: BaseException) -> str:
    """One line: the exception and the innermost place it was raised."""
    reason = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        path = "/".join(Path(last.filename).parts[-2:])
        reason += f" (at {path}:{last.lineno} in {last.name})"
    return reason[:2000]


def warn_failed(log: logging.Logger, exc: BaseException, actions: int, label: Any) -> None:
    """Log one warning for a trajectory that raised and counts as reward 0."""
    log.warning(
        "AgentFlow trajectory failed after %d action(s); it counts as reward 0: %s | label: %.200s",
        actions,
        failure_reason(exc),
        label,
    )


def filler_token_id(tokenizer: Any) -> int:
    """The token that pads a failure sample: the tokenizer's end-of-turn (else pad) id, else 0."""
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


__all__ = [
    "EPISODE_LOG_KEYS",
    "AdapterError",
    "SeamError",
    "episode_logs",
    "failure_reason",
    "filler_token_id",
    "trajectory_failure",
]
