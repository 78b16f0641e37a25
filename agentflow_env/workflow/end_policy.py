"""When an episode ends: ``EndPolicy``, asked after each turn and after each new prompt.

An episode ends on a stop (the planner's finish, the verifier's STOP, as ``termination``
allows; it terminates) or at a limit (a failed module, the last turn, the time limit, a prompt or
a grown conversation past its token cap; it is truncated). Its ``EndReason`` says which.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import FINISH_TOOL_NAME
from agentflow_env.workflow.config import SessionConfig
from agentflow_env.workflow.memory import MemoryEntry, VerificationStatus
from agentflow_env.workflow.observations import Observation
from agentflow_env.workflow.outcome import (
    EndReason,
    Termination,
    planner_may_finish,
    verifier_may_stop,
)


@dataclass(frozen=True)
class EndPolicy:
    """The session settings that end an episode (same names as ``SessionConfig``'s)."""

    termination: Termination = "verifier"
    max_turns: int = 10
    time_limit_s: float | None = None
    max_prompt_tokens: int | None = None
    max_total_tokens: int | None = None

    @classmethod
    def from_config(cls, config: SessionConfig) -> EndPolicy:
        return cls(**{item.name: getattr(config, item.name) for item in dataclasses.fields(cls)})

    @property
    def planner_may_finish(self) -> bool:
        """Whether the planner's finish action ends the episode (else it names an unknown tool)."""
        return planner_may_finish(self.termination)

    def check_tools(self, tools: ToolSet) -> None:
        """Refuse a tool that takes the name of the planner's finish where the planner may
        finish (``ValueError``)."""
        clash = tools.get(FINISH_TOOL_NAME) if self.planner_may_finish else None
        if clash is not None:
            raise ValueError(
                f"the tool {clash.name!r} takes the name of the planner's finish action "
                f"({FINISH_TOOL_NAME}): rename it, or use termination='verifier'"
            )

    def after_turn(
        self,
        entry: MemoryEntry,
        turn: int,
        finished: bool,
        module_errors: Sequence[str],
        started_at: float,
    ) -> EndReason | None:
        """Why turn ``turn`` (recorded as ``entry``) ends the episode, if it does: a stop first,
        then a limit. ``finished``: the planner's finish was this turn's action."""
        return self.stop_reason(entry, finished) or self.limit_reason(
            turn, module_errors, started_at
        )

    def stop_reason(self, entry: MemoryEntry, finished: bool) -> EndReason | None:
        """The stop that ends the episode on this turn, if any (``termination``)."""
        if finished:
            return EndReason.PLANNER_STOP
        stop = entry.verification_status == VerificationStatus.STOP
        if stop and verifier_may_stop(self.termination):
            return EndReason.VERIFIER_STOP
        return None

    def limit_reason(
        self, turn: int, module_errors: Sequence[str], started_at: float
    ) -> EndReason | None:
        """The limit the episode reached with turn ``turn``, if any."""
        if module_errors:
            return EndReason.MODULE_ERROR
        if turn >= self.max_turns:
            return EndReason.MAX_TURNS
        limit = self.time_limit_s
        if limit is not None and time.monotonic() - started_at > limit:
            return EndReason.TIME_LIMIT
        return None

    def budget_reason(self, prompt: Observation, grows: bool) -> EndReason | None:
        """The token budget the next ``prompt`` exceeds, if any; ``grows``: the prompt is the
        whole conversation so far (then its length is the episode's total)."""
        length = len(prompt.token_ids)
        if self.max_prompt_tokens is not None and length > self.max_prompt_tokens:
            return EndReason.PROMPT_BUDGET
        if grows and self.max_total_tokens is not None and length > self.max_total_tokens:
            return EndReason.TOTAL_BUDGET
        return None
