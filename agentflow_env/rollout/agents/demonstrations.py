"""Expert trajectories exported as supervised fine-tuning data, token-exact.

The expert planner (``planners.ExpertPlanner``) follows each task's gold plan; any other
demonstrator (``demonstration_episode``; the probes' random ones, ``rollout.probes``) is recorded
the same way, as a planner in the one episode loop (``episodes.play_episode``). Its actions are given to the environment as token ids ending with the end-of-turn
token, exactly as a model would emit them, so every exported record holds the prompt the
planner saw and the completion it should produce:

- ``prompt`` / ``completion``: text (TRL's prompt-completion format; the completion ends with the
  end-of-turn token, so TRL adds nothing). In flat observation mode the prompt of turn k is the
  whole conversation so far, so multi-turn episodes give one record per turn.
- ``prompt_ids`` / ``completion_ids``: the same as ids under the env's tokenizer.
- ``messages`` (one per episode, from ``expert_conversations``): the chat-format conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.rollout.agents.episodes import Stepped, play_episode_sync
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.workflow.prompts import step_feedback
from agentflow_env.workflow.session import Session

ActionStyle = Literal["full", "compact", "minimal"]
ACTION_STYLES: tuple[str, ...] = ("full", "compact", "minimal")


def expert_action_text(env: AgentFlowEnv, style: ActionStyle = "minimal") -> str:
    """The expert's next action in ``style``.

    ``full``: the four AgentFlow fields; ``compact``: Context, Sub-Goal, Tool Name (what the
    compact prompt asks for); ``minimal``: Context and Tool Name only, the shortest action the
    parser accepts (short actions make tiny models learn and sample faster).
    """
    if style not in ACTION_STYLES:
        raise ValueError(f"style must be one of {ACTION_STYLES}, got {style!r}")
    if style == "full":
        return ExpertPlanner(env).act()
    task = env.task
    step = task.gold_plan[min(len(_session(env).memory), len(task.gold_plan) - 1)]
    if style == "compact":
        return f"Context: {step.context}\nSub-Goal: {step.sub_goal}\nTool Name: {step.tool}"
    return f"Context: {step.context}\nTool Name: {step.tool}"


@dataclass(frozen=True)
class DemoTurn:
    """One expert turn: the exact prompt and completion, as text and ids."""

    prompt: str
    completion: str
    prompt_ids: list[int]
    completion_ids: list[int]

    def as_record(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DemoEpisode:
    seed: int
    question: str
    success: bool
    turns: list[DemoTurn]
    messages: list[dict[str, str]]


def _session(env: AgentFlowEnv) -> Session:
    if env.session is None:
        raise RuntimeError("call reset() first")
    return env.session


def flat_env(**env_kwargs: Any) -> AgentFlowEnv:
    """An env in flat observation mode (the mode whose prompts a trainer can extend by ids)."""
    return AgentFlowEnv(**{**env_kwargs, "observation_mode": "flat"})


def expert_episode(env: AgentFlowEnv, seed: int, style: ActionStyle = "minimal") -> DemoEpisode:
    """Run the expert on ``env`` (flat mode) from ``reset(seed=seed)`` and record every turn."""
    return demonstration_episode(env, seed, lambda current: expert_action_text(current, style))


def demonstration_episode(
    env: AgentFlowEnv, seed: int, act: Callable[[AgentFlowEnv], str]
) -> DemoEpisode:
    """Run the demonstrator ``act`` (the next action's text for the env's current state) on
    ``env`` (flat mode) from ``reset(seed=seed)`` and record every turn."""
    if not env.observations.grows:
        raise ValueError("demonstrations need observation_mode='flat' (exact growing prompts)")
    tokenizer = env.tokenizer
    eos_text = tokenizer.decode([tokenizer.eos_token_id])
    observation, info = env.reset(seed=seed)
    session = _session(env)
    messages = [dict(m) for m in session.messages()]
    turns: list[DemoTurn] = []

    async def step(text: str) -> Stepped:
        nonlocal observation, info
        ids = tokenizer.encode(text) + [tokenizer.eos_token_id]
        turns.append(
            DemoTurn(
                prompt=observation["text"],
                completion=text + eos_text,
                prompt_ids=[int(i) for i in observation["token_ids"]],
                completion_ids=ids,
            )
        )
        messages.append({"role": "assistant", "content": text})
        observation, reward, terminated, truncated, info = env.step(ids)  # ids, as a model emits
        if not (terminated or truncated):
            config = env.session_config
            feedback = step_feedback(session.memory, session.turn + 1, config.max_turns)
            messages.append({"role": "user", "content": feedback})
        return observation, reward, terminated, truncated, info

    play_episode_sync(session, _Demonstrator(env, act), step)
    return DemoEpisode(seed, info["question"], bool(info["success"]), turns, messages)


class _Demonstrator:
    """A demonstrator ``act(env)`` as a planner of ``env``'s episode."""

    def __init__(self, env: AgentFlowEnv, act: Callable[[AgentFlowEnv], str]) -> None:
        self.env = env
        self.demonstrator = act

    async def next_action(self, session: Session) -> str:
        return self.demonstrator(self.env)


def expert_demonstrations(
    seeds: Iterable[int],
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    style: ActionStyle = "minimal",
    successful_only: bool = True,
    env: AgentFlowEnv | None = None,
) -> list[dict[str, Any]]:
    """Prompt-completion SFT records (one per expert turn) for the episodes of ``seeds``.

    ``env_kwargs`` go to ``AgentFlowEnv`` (flat mode is forced); pass ``fresh_world=True`` so
    every episode has new names. Failed expert episodes are dropped unless ``successful_only``
    is false.
    """
    own = env is None
    env = env or flat_env(**dict(env_kwargs or {}))
    records: list[dict[str, Any]] = []
    try:
        for seed in seeds:
            episode = expert_episode(env, seed, style)
            if successful_only and not episode.success:
                continue
            records.extend(turn.as_record() for turn in episode.turns)
    finally:
        if own:
            env.close()
    return records


def expert_conversations(
    seeds: Iterable[int],
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    style: ActionStyle = "minimal",
    env: AgentFlowEnv | None = None,
) -> list[dict[str, Any]]:
    """Chat-format records ``{"messages": [...]}``, one per successful expert episode.

    The conversation renders (with the tokenizer's chat template) to the flat-mode text the
    planner sees; train on assistant turns only.
    """
    own = env is None
    env = env or flat_env(**dict(env_kwargs or {}))
    out = []
    try:
        for seed in seeds:
            episode = expert_episode(env, seed, style)
            if episode.success:
                out.append({"messages": episode.messages, "seed": seed})
    finally:
        if own:
            env.close()
    return out


__all__ = [
    "ACTION_STYLES",
    "DemoEpisode",
    "DemoTurn",
    "demonstration_episode",
    "expert_action_text",
    "expert_conversations",
    "expert_demonstrations",
    "expert_episode",
    "flat_env",
]
