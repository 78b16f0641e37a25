"""``Curriculum``: a Gymnasium wrapper that makes tasks harder as the planner gets better.

Levels are task settings of the wrapped env's variant (``hops``, ``distractors``, ``kinds``, ...).
At each reset the wrapper samples a task from the current level's task source (built once per
level, from the wrapped env's config with the level's settings) and starts the episode on it
through ``reset(options={"task": task})``, so the wrapped env, its tools and modules are never
rebuilt. When an episode ends, its ``info["success"]`` joins a running window; after
``min_episodes`` episodes at a level, a running success rate at or above ``promote_at`` moves to
the next level, and one below ``demote_at`` (when given) moves back.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.utils import RecordConstructorArgs, seeding

from agentflow_env.envs.config import EnvConfig
from agentflow_env.envs.env import PlannerInput, unwrap_agentflow
from agentflow_env.tasks.base import TaskSource

DEFAULT_LEVELS: tuple[Mapping[str, Any], ...] = (
    {"hops": 1, "distractors": 0.0},
    {"hops": 2, "distractors": 0.0},
    {"hops": 2, "distractors": 0.5},
    {"hops": 3, "distractors": 0.5},
    {"hops": 3, "distractors": 1.0},
    {"hops": 4, "distractors": 1.0},
)
"""The default ladder for ``AgentFlow-Search-v0``'s synthetic world: more documents per question
first, then more near-miss documents around them."""

Observation = dict[str, Any]


class Curriculum(
    gym.Wrapper[Observation, PlannerInput, Observation, PlannerInput], RecordConstructorArgs
):
    """Raises task difficulty level by level as the running success rate crosses thresholds.

    Args:
        env: an ``AgentFlowEnv``, possibly wrapped (e.g. what ``gym.make`` returns).
        levels: one mapping of task settings per level, easiest first (``DEFAULT_LEVELS`` when
            ``None``). A setting a level leaves out keeps the wrapped env's value. Each must be
            a task setting of the env's variant that its task source uses: anything else
            (``hops`` on a dataset env, ``max_turns``) raises ``ValueError`` naming it.
        promote_at: move up a level when the running success rate is at least this.
        window: how many of the latest episodes at the current level the rate is over.
        demote_at: move down a level when the rate is below this (``None``: never).
        min_episodes: episodes at a level before it may change (``None``: ``window``).

    Every ``info`` (reset and step) carries ``info["curriculum"]``: ``level`` (the episode's
    level), ``settings`` (its settings), ``running_success`` (over the window, 0.0 before the
    first episode at the level), ``episodes_at_level`` (episodes counted at it so far) and
    ``next_level`` (the level the next reset samples from: it differs from ``level`` only in
    the final step of an episode that moved the curriculum). An episode counts when its final
    step is taken; one abandoned by an early reset, or started on a task given in
    ``reset(options={"task": ...})``, does not count.

    Task sampling has its own random generator, seeded by ``reset(seed=...)`` as the env's is:
    the same seeds and actions give the same tasks and level changes. ``state_dict`` and
    ``load_state_dict`` save and restore the curriculum (level, window, counts, generator)
    between episodes, so a trainer can resume.
    """

    def __init__(
        self,
        env: gym.Env,
        levels: Sequence[Mapping[str, Any]] | None = None,
        *,
        promote_at: float = 0.7,
        window: int = 20,
        demote_at: float | None = None,
        min_episodes: int | None = None,
    ) -> None:
        RecordConstructorArgs.__init__(
            self,
            _disable_deepcopy=True,  # a level may hold tasks or a task source: share, not copy
            levels=levels,
            promote_at=promote_at,
            window=window,
            demote_at=demote_at,
            min_episodes=min_episodes,
        )
        gym.Wrapper.__init__(self, env)
        _check_thresholds(promote_at, window, demote_at, min_episodes)
        self.levels: tuple[dict[str, Any], ...] = _check_levels(
            DEFAULT_LEVELS if levels is None else levels
        )
        self.promote_at = float(promote_at)
        self.demote_at = None if demote_at is None else float(demote_at)
        self.window = int(window)
        self.min_episodes = self.window if min_episodes is None else int(min_episodes)
        config = unwrap_agentflow(env).config
        self.sources: tuple[TaskSource, ...] = tuple(
            _level_source(config, i, level) for i, level in enumerate(self.levels)
        )
        self.level = 0
        self.episodes = 0
        """Episodes counted over all levels."""
        self._outcomes: collections.deque[bool] = collections.deque(maxlen=self.window)
        self._episodes_at_level = 0
        self._task_rng: np.random.Generator | None = None
        self._episode_level: int | None = None
        """The level of the episode in progress, while it counts; ``None`` otherwise."""

    # -- Gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode on a task of the current level (or on ``options["task"]``, which
        then does not count)."""
        options = dict(options or {})
        if seed is not None or self._task_rng is None:
            self._task_rng, _ = seeding.np_random(seed)
        self._episode_level = None
        if options.get("task") is None:
            options["task"] = self.sources[self.level].sample(self._task_rng)
            self._episode_level = self.level
        observation, info = self.env.reset(seed=seed, options=options)
        return observation, {**info, "curriculum": self._report()}

    def step(
        self, action: PlannerInput
    ) -> tuple[Observation, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        report = self._report()
        if (terminated or truncated) and self._episode_level is not None:
            self._episode_level = None
            report = self._count(bool(info.get("success", False)))
        return observation, reward, terminated, truncated, {**info, "curriculum": report}

    # -- the running rate ----------------------------------------------------------------------
    @property
    def settings(self) -> dict[str, Any]:
        """The current level's task settings."""
        return dict(self.levels[self.level])

    @property
    def running_success(self) -> float:
        """Success rate over the latest ``window`` episodes at the current level (0.0 if none)."""
        return sum(self._outcomes) / len(self._outcomes) if self._outcomes else 0.0

    def _count(self, success: bool) -> dict[str, Any]:
        """Count a finished episode and move a level when the rate says so; the report is the
        episode's level after counting it, with the level that comes next."""
        self._outcomes.append(success)
        self._episodes_at_level += 1
        self.episodes += 1
        report = self._report()
        rate = self.running_success
        if self._episodes_at_level >= self.min_episodes:
            if rate >= self.promote_at and self.level + 1 < len(self.levels):
                self._move_to(self.level + 1)
            elif self.demote_at is not None and rate < self.demote_at and self.level > 0:
                self._move_to(self.level - 1)
        report["next_level"] = self.level
        return report

    def _move_to(self, level: int) -> None:
        self.level = level
        self._outcomes.clear()
        self._episodes_at_level = 0

    def _report(self) -> dict[str, Any]:
        """``info["curriculum"]`` as things stand (levels change only between episodes)."""
        return {
            "level": self.level,
            "settings": dict(self.levels[self.level]),
            "running_success": self.running_success,
            "episodes_at_level": self._episodes_at_level,
            "next_level": self.level,
        }

    # -- saving and restoring ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The curriculum's state as JSON-ready data (an episode in progress is not part of it)."""
        return {
            "levels": _plain(self.levels),
            "level": self.level,
            "outcomes": list(self._outcomes),
            "episodes_at_level": self._episodes_at_level,
            "episodes": self.episodes,
            "rng": None if self._task_rng is None else self._task_rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` saved; ``ValueError`` if it was saved with other levels."""
        if state.get("levels") != _plain(self.levels):
            raise ValueError(
                f"the curriculum state was saved with levels {state.get('levels')!r:.200}, "
                f"not {_plain(self.levels)!r:.200}"
            )
        level = state["level"]
        if not isinstance(level, int) or not 0 <= level < len(self.levels):
            raise ValueError(f"level must be in 0..{len(self.levels) - 1}, got {level!r}")
        self.level = level
        self._outcomes = collections.deque((bool(x) for x in state["outcomes"]), maxlen=self.window)
        self._episodes_at_level = int(state["episodes_at_level"])
        self.episodes = int(state["episodes"])
        self._episode_level = None
        rng_state = state.get("rng")
        if rng_state is None:
            self._task_rng = None
        else:
            generator, _ = seeding.np_random(0)
            generator.bit_generator.state = rng_state
            self._task_rng = generator


# -- checks ------------------------------------------------------------------------------------
def _check_thresholds(
    promote_at: float, window: int, demote_at: float | None, min_episodes: int | None
) -> None:
    if not _is_number(promote_at) or not 0.0 < promote_at <= 1.0:
        raise ValueError(f"promote_at must be a success rate in (0, 1], got {promote_at!r}")
    if demote_at is not None and (not _is_number(demote_at) or not 0.0 <= demote_at < promote_at):
        raise ValueError(
            f"demote_at must be None or a success rate in [0, promote_at={promote_at}), "
            f"got {demote_at!r}"
        )
    for name, value in (("window", window), ("min_episodes", min_episodes)):
        if value is None and name == "min_episodes":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_levels(levels: Any) -> tuple[dict[str, Any], ...]:
    if isinstance(levels, str | bytes | Mapping) or not isinstance(levels, Sequence):
        raise ValueError(f"levels must be a list of task-setting mappings, got {levels!r:.80}")
    if not levels:
        raise ValueError("levels must name at least one level")
    checked = []
    for i, level in enumerate(levels):
        if not isinstance(level, Mapping) or not all(isinstance(k, str) for k in level):
            raise ValueError(
                f"curriculum level {i} must map setting names to values, got {level!r:.80}"
            )
        checked.append(dict(level))
    return tuple(checked)


def _level_source(config: EnvConfig, index: int, level: Mapping[str, Any]) -> TaskSource:
    """The task source of one level: the env's config with the level's settings."""
    allowed = (*type(config).task_settings(), *type(config).aliases)
    wrong = [name for name in level if name not in allowed]
    if wrong:
        raise ValueError(
            f"curriculum level {index} names {', '.join(f'{n}=' for n in wrong)}, which "
            f"{'is' if len(wrong) == 1 else 'are'} not a task setting of {config.variant()} "
            f"(its task settings: {', '.join(type(config).task_settings())})"
        )
    try:
        return config.updated(**level).make_task_source()
    except ValueError as error:
        raise ValueError(f"curriculum level {index} {dict(level)!r:.120}: {error}") from None


def _plain(levels: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Levels as JSON would write them (tuples as lists), to compare saved ones with."""

    def plain(value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return [{name: plain(value) for name, value in level.items()} for level in levels]
