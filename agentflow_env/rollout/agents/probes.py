"""The probes' warm starts and labels: seeded random demonstrators whose SFT start is at chance,
their records in ``expert_demonstrations``' format, and task labels naming a probe env.

Each demonstrator plays the probe badly on purpose, the way an untrained planner would, so that
what the planner gets right after GRPO it learned from reward:

- ``tool_choice`` and ``delayed_credit``: the question's colour as the Context, as the expert
  writes it, and a uniformly random drawer each turn (chance: 1/N). Restating the colour in its
  own output is what lets the tiny planner tie it to the tool name from reward in a few dozen
  steps (without that line it did not learn the tie in 40 steps);
- ``stop``: finishes at a uniformly random turn, 1 to ``max_turns`` (chance: 1/``max_turns``);
- ``copying``: writes the name exactly, cut short by two letters, or run on into the one or
  two question words after it, uniformly (chance: 1/4). The greedy mode of that mix is a run-on
  name, so a model that imitates it greedily starts near 0.

The expert (``planners.ExpertPlanner``, the task's gold plan, then the finish action where the
planner may finish) solves every probe task.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.rollout.agents.demonstrations import DemoEpisode, demonstration_episode
from agentflow_env.rollout.labels.probe_labels import probe_env
from agentflow_env.tools.drawer import drawer_colour
from agentflow_env.workflow.actions import FINISH_TOOL_NAME

Demonstrator = Callable[[AgentFlowEnv, random.Random], str]
"""The next action's text for the env's current state, drawn from the episode's ``rng``."""


def _drawers(env: AgentFlowEnv) -> list[str]:
    return [name for name in env.tools.names if drawer_colour(name) is not None]


def random_drawer(env: AgentFlowEnv, rng: random.Random) -> str:
    """The colour the question names as the Context (as the expert writes it), and a uniformly
    random drawer among the env's tools."""
    colour = drawer_colour(str(env.task.metadata["target"]))
    return f"Context: {colour}\nTool Name: {rng.choice(_drawers(env))}"


def random_stop(env: AgentFlowEnv, rng: random.Random) -> str:
    """Finish with probability ``1 / (turns left)``, else open the first drawer: over an
    episode, the finish falls on a uniformly random turn, whatever the verdicts said."""
    session = env.session
    assert session is not None  # the demonstration has reset the env
    left = env.session_config.max_turns - session.turn
    tool = FINISH_TOOL_NAME if rng.random() < 1 / left else _drawers(env)[0]
    return f"Tool Name: {tool}"


def random_copy(env: AgentFlowEnv, rng: random.Random) -> str:
    """The Search query: the name exactly, cut short by two letters, or run on into one or two
    of the question words after it, uniformly."""
    task = env.task
    name = str(task.metadata["entity"])
    after = task.question.split(name, 1)[1].split()
    variants = [name, name[:-2], " ".join([name, *after[:1]]), " ".join([name, *after[:2]])]
    return f"Context: {rng.choice(variants)}\nTool Name: Search"


RANDOM_DEMONSTRATORS: dict[str, Demonstrator] = {
    "tool_choice": random_drawer,
    "stop": random_stop,
    "delayed_credit": random_drawer,
    "copying": random_copy,
}
"""Probe name -> its random demonstrator."""


def random_episodes(
    probe: str,
    seeds: Iterable[int],
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
) -> list[DemoEpisode]:
    """``probe``'s random demonstrator on the episodes of ``seeds``, every turn recorded;
    ``seed`` seeds the demonstrator (each episode draws from its own ``random.Random``)."""
    env = probe_env(probe, **dict(env_kwargs or {}))  # checks the probe's name
    demonstrator = RANDOM_DEMONSTRATORS[probe]
    episodes = []
    try:
        for episode_seed in seeds:
            rng = random.Random(f"{seed}/{episode_seed}")
            episodes.append(demonstration_episode(env, episode_seed, _drawing(demonstrator, rng)))
    finally:
        env.close()
    return episodes


def _drawing(demonstrator: Demonstrator, rng: random.Random) -> Callable[[AgentFlowEnv], str]:
    return lambda env: demonstrator(env, rng)


def probe_demonstrations(
    probe: str,
    seeds: Iterable[int],
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """SFT records (one per turn, ``expert_demonstrations``' format) of ``probe``'s random
    demonstrator (``random_episodes``), failed episodes included: the warm start at chance."""
    episodes = random_episodes(probe, seeds, env_kwargs, seed=seed)
    return [turn.as_record() for episode in episodes for turn in episode.turns]


__all__ = [
    "RANDOM_DEMONSTRATORS",
    "Demonstrator",
    "probe_demonstrations",
    "random_copy",
    "random_drawer",
    "random_episodes",
    "random_stop",
]
