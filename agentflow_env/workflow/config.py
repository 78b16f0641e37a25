"""The settings of one episode: ``SessionConfig`` (limits, prompts, observations, who ends it),
``RewardConfig`` (the answer score, its costs and the shaping) and the ``AnswerJudge`` protocol.

These own the session's settings: their names, types and defaults. An env's config
(``agentflow_env.envs.config.EnvConfig``) takes its defaults from here and builds a
``SessionConfig`` from its own fields by name (``SessionConfig.from_settings``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentflow_env.tools.texts import AgentFlowWikipedia
from agentflow_env.workflow.action_input import DEFAULT_MAX_ACTION_TOKENS
from agentflow_env.workflow.observations import ObservationMode, check_observation_mode
from agentflow_env.workflow.outcome import Termination, check_termination
from agentflow_env.workflow.prompt_pack import PromptPack
from agentflow_env.workflow.prompts import PromptStyle
from agentflow_env.workflow.rewards import RewardName, check_reward
from agentflow_env.workflow.shaping import REWARD_SHAPINGS, RewardShaping

__all__ = [
    "AgentFlowScript",
    "DEFAULT_MAX_ACTION_TOKENS",
    "DEFAULT_MAX_PROMPT_TOKENS",
    "AnswerJudge",
    "RewardConfig",
    "SessionConfig",
]

AgentFlowScript = Literal["eval", "train"]
"""AgentFlow's evaluation script or its training rollout (``SessionConfig.agentflow_script``)."""

DEFAULT_MAX_PROMPT_TOKENS = 32768
"""Safe default cap on one observation; a longer one truncates the episode ("prompt_budget")."""


class AnswerJudge(Protocol):
    """Scores a final answer in [0, 1] (e.g. an LLM judge); used when ``reward="llm_judge"``.

    ``options`` (a multiple-choice task's listed options, ``answer_options``) is passed only
    for such a task, so a judge without the parameter still scores every other task.
    """

    async def judge(
        self,
        question: str,
        answer: str | None,
        gold_answers: Sequence[str],
        *,
        options: Sequence[str] = (),
    ) -> float: ...


@dataclass(frozen=True)
class RewardConfig:
    """``reward`` names the answer score; the lambdas weigh costs subtracted from it.

    ``reward_shaping="progress"`` adds per-turn potential-based rewards ``shaping_weight *
    (Phi(s') - Phi(s))`` (``agentflow_env.workflow.shaping``) to the step rewards; the terminal
    reward (the outcome's ``reward``) is the same with or without them.
    """

    reward: RewardName = "exact_match"
    lambda_calls: float = 0.0
    lambda_tokens: float = 0.0
    lambda_errors: float = 0.0
    reward_shaping: RewardShaping = "none"
    shaping_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.reward_shaping not in REWARD_SHAPINGS:
            raise ValueError(
                f"unknown reward shaping {self.reward_shaping!r}; "
                f"choose one of {list(REWARD_SHAPINGS)}"
            )
        check_reward(self.reward)

    def terminal_reward(self, score: float, metrics: Mapping[str, float]) -> float:
        """The answer's ``score`` less the costs of the episode's ``metrics``."""
        return (
            score
            - self.lambda_calls * metrics.get("tool_calls", 0)
            - self.lambda_tokens * metrics.get("action_tokens", 0)
            - self.lambda_errors * metrics.get("invalid_actions", 0)
        )


@dataclass(frozen=True)
class SessionConfig:
    """How one episode runs: its limits, the reward, the planner's prompts and observations, and
    who may end it. Build one from an env's settings with ``from_settings``."""

    max_turns: int = 10
    reward: RewardConfig = field(default_factory=RewardConfig)
    tool_timeout_s: float = 10.0
    max_tool_output_chars: int = 8000
    prompt_style: PromptStyle = "full"
    observation_mode: ObservationMode = "structured"
    """Names the session's default observation strategy (``make_observations``)."""
    max_action_tokens: int | None = DEFAULT_MAX_ACTION_TOKENS
    max_prompt_tokens: int | None = DEFAULT_MAX_PROMPT_TOKENS
    max_total_tokens: int | None = None
    judge: AnswerJudge | None = None
    show_sub_questions: bool = True
    """The analysis's sub-questions and the verifier's open questions appear in the planner's
    prompt (with rule modules they come from the task: a hint AgentFlow never gives)."""
    verify_invalid_turns: bool = False
    """The verifier also judges a turn whose action named no usable tool (AgentFlow does)."""
    termination: Termination = "verifier"
    """Who ends the episode before its limits: the verifier's STOP (``"verifier"``), the
    planner's finish action (``"planner"``; the verdict is still shown) or either (``"both"``).
    A finish is recorded as a turn with no tool and the status STOP, ``end_reason
    "planner_stop"``; where the planner may not finish, it names an unknown tool."""
    time_limit_s: float | None = None
    """Wall-clock seconds an episode may run from its start (under ``agentflow_script="eval"``
    from the end of the query analysis, as AgentFlow's evaluation script counts); the turn that
    ends past it ends the episode (``end_reason="time_limit"``), as AgentFlow's limit does."""
    budget_curve: bool = False
    """Add ``success_by_budget`` to the diagnostics at the end (``Session.success_by_budget``:
    one generalist call per budget shorter than the episode)."""
    agentflow_script: AgentFlowScript | None = None
    """Which of AgentFlow's own scripts the episode reproduces where the two differ: its
    evaluation (``"eval"``, ``test/solve.py``) or its training rollout (``"train"``, its
    solver and ``train/rollout.py``); set by the ``agentflow_eval`` and ``agentflow_train``
    presets. ``None``: this project's own behaviour."""
    agentflow_wikipedia: AgentFlowWikipedia | None = None
    """Which result AgentFlow's Wikipedia tool gives under ``prompt_style="agentflow"``:
    ``"as_run"``, the one its published code returns (no page picked), or ``"as_intended"``,
    the picked pages answered (``agentflow_env.tools.texts``). ``None``: this project's."""
    agentflow_wording: PromptPack | None = None
    """AgentFlow's own words, read from the user's checkout (``agentflow_source``), for the
    ``"agentflow"`` prompt style, as ``agentflow_script`` renders them
    (``PromptPack.for_script``, which ``EnvConfig.agentflow_wording`` applies); ``None``: this
    project's own wording."""

    def __post_init__(self) -> None:
        # Types and bounds are the caller's to keep (an env's typed config checks each field);
        # these are the checks no type states: a positive limit, and names the session's
        # strategies must know.
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be positive or None, got {self.time_limit_s}")
        check_observation_mode(self.observation_mode)
        check_termination(self.termination)

    @classmethod
    def from_settings(cls, settings: Any, **given: Any) -> SessionConfig:
        """The session settings that the dataclass ``settings`` (e.g. an ``EnvConfig``) has a
        field of the same name for, the reward's (``RewardConfig``) included; ``given`` (objects
        the caller builds, such as a judge) win over them, and the rest keep their defaults."""
        given.setdefault("reward", RewardConfig(**_named(RewardConfig, settings, given={})))
        return cls(**_named(cls, settings, given), **given)


def _named(cls: type, settings: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``settings``'s fields that ``cls`` has a field of the same name for."""
    own = {item.name for item in dataclasses.fields(settings)}
    return {
        item.name: getattr(settings, item.name)
        for item in dataclasses.fields(cls)
        if item.name in own and item.name not in given
    }
