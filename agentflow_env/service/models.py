"""The served env's typed OpenEnv models: its action, observation and state.

Field by field they are ``agentflow_env.remote.wire``'s (the one description of what crosses);
OpenEnv validates every incoming action against ``AgentFlowAction`` and answers a malformed one
with a ``VALIDATION_ERROR``, the session living on.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError


class AgentFlowAction(Action):
    """The planner's reply: its ``text``, or its sampled ``token_ids`` (kept verbatim) with
    optional ``logprobs``."""

    text: str | None = Field(default=None, description="The planner's reply as text")
    token_ids: list[int] | None = Field(default=None, description="The sampled token ids")
    logprobs: list[float] | None = Field(
        default=None, description="The sampling log-prob of each of token_ids"
    )

    @model_validator(mode="after")
    def _one_form(self) -> AgentFlowAction:
        # PydanticCustomError, not ValueError: OpenEnv sends the errors back as JSON, and a
        # ValueError in their context would not serialise (the session would end).
        if (self.text is None) == (self.token_ids is None):
            raise PydanticCustomError("action_form", "give exactly one of text and token_ids")
        if self.logprobs is not None and self.token_ids is None:
            raise PydanticCustomError("action_form", "logprobs go with token_ids")
        return self


class AgentFlowObservation(Observation):
    """The planner's next prompt and what the in-process env's step returns beside it."""

    text: str = Field(default="", description="The prompt, chat-rendered")
    token_ids: list[int] = Field(default_factory=list, description="The prompt's token ids")
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info, JSON-safe")
    metrics: dict[str, int | float] = Field(default_factory=dict, description="The running counts")
    messages: list[dict[str, str]] | None = Field(
        default=None, description="The prompt's plain chat messages (when the reset asked)"
    )
    feedback_text: str = Field(
        default="", description="The text the step appended to the prompt (flat observations)"
    )
    turn: dict[str, Any] | None = Field(
        default=None, description="The turn just taken, less its prompt ids (a step's answer)"
    )
    task: dict[str, Any] | None = Field(default=None, description="The task (a reset's answer)")
    episode_id: str | None = None
    session_config: dict[str, Any] | None = Field(
        default=None, description="The session's limits a driver reads (a reset's answer)"
    )
    end: dict[str, Any] | None = Field(
        default=None, description="The outcome and tool service errors (the last step's answer)"
    )


class AgentFlowState(State):
    """The served session's state: its turn and whether it is over; for scripted planners the
    privileged ``expert_action`` (the gold plan's next step)."""

    turn: int = 0
    done: bool = False
    task: dict[str, Any] | None = None
    expert_action: str | None = None
