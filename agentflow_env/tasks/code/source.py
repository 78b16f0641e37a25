"""``CodeTaskSource``: tasks that need computation, drawn from a seeded rng."""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Sequence

import numpy as np

from agentflow_env.tasks.base import Task
from agentflow_env.tasks.code.compute import COMPUTE, build_compute_task, compute_key, draw_compute
from agentflow_env.tasks.code.fact_math import (
    FACT_MATH,
    build_fact_task,
    fact_key,
    sample_fact_program,
)
from agentflow_env.tasks.code.make24 import MAKE24, build_make24_task, draw_numbers, puzzle_key
from agentflow_env.tasks.synthetic.world import World, WorldConfig, generate_world

KINDS: tuple[str, ...] = (MAKE24, FACT_MATH, COMPUTE)
CHECKED_KINDS: tuple[str, ...] = (MAKE24,)
"""The kinds whose tasks a checker decides (``Task.checker``): any valid expression is right."""
SPLITS: tuple[str, ...] = ("train", "test")
TEST_FRACTION_PERCENT = 20
GENERATED_TASKS = 2**31 - 1
_MAX_DRAWS = 2000


def split_of(key: str) -> str:
    """Train or test, from a stable hash of what a task asks (not of its phrasing)."""
    digest = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16)
    return "test" if digest % 100 < TEST_FRACTION_PERCENT else "train"


WORLD_SIZES: tuple[str, ...] = ("default", "small")


def _world_config(world_size: str) -> WorldConfig:
    return WorldConfig.small() if world_size == "small" else WorldConfig()


@functools.lru_cache(maxsize=4)
def fixed_world(seed: int, world_size: str = "default") -> World:
    """The world of ``seed`` (``"default"`` or ``"small"`` size), built once per process."""
    return generate_world(seed, _world_config(world_size))


class CodeTaskSource:
    """Make-24 puzzles, arithmetic over synthetic-world facts, and program-shaped questions.

    ``kinds`` picks among ``"make24"``, ``"fact_math"`` and ``"compute"`` (default: all, drawn
    uniformly). ``seed`` selects the synthetic world the fact questions are about and
    ``world_size`` its size (``"default"`` or ``"small"``; default: ``"small"`` with
    ``fresh_world=True``, else ``"default"``). Train and test are disjoint: make-24 and compute tasks split by a hash of their numbers/parameters;
    fact questions by a hash of their program in a fixed world, or, with ``fresh_world=True``
    (a new small world per sample), by the parity of the world's seed.
    """

    def __init__(
        self,
        seed: int = 0,
        kinds: str | Sequence[str] | None = None,
        split: str = "train",
        fresh_world: bool = False,
        world_size: str | None = None,
    ) -> None:
        kinds = (kinds,) if isinstance(kinds, str) else tuple(KINDS if kinds is None else kinds)
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or not kinds:
            found = f"unknown kinds {unknown}" if unknown else "no kinds"
            raise ValueError(f"{found}; expected some of {list(KINDS)}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        if world_size is not None and world_size not in WORLD_SIZES:
            raise ValueError(
                f"world_size must be one of {list(WORLD_SIZES)} (or None: 'small' with "
                f"fresh_world=True, else 'default'), got {world_size!r}"
            )
        self.seed = seed
        self.kinds: tuple[str, ...] = kinds
        self.split = split
        self.fresh_world = fresh_world
        self.world_size = world_size or ("small" if fresh_world else "default")

    def __len__(self) -> int:
        return GENERATED_TASKS  # generated on demand: effectively unbounded

    def sample(self, rng: np.random.Generator) -> Task:
        draws = random.Random(int(rng.integers(2**63)))
        kind = draws.choice(self.kinds)
        for _ in range(_MAX_DRAWS):
            task = self._draw(kind, draws)
            if task is not None:
                return task
        raise RuntimeError(f"no {self.split} task of kind {kind!r} in {_MAX_DRAWS} draws")

    def _draw(self, kind: str, rng: random.Random) -> Task | None:
        """One task of ``kind`` in this source's split, or ``None`` if the draw missed it."""
        if kind == MAKE24:
            numbers = draw_numbers(rng)
            if split_of(puzzle_key(numbers)) != self.split:
                return None
            return build_make24_task(numbers, rng, self.split)
        if kind == COMPUTE:
            family, params = draw_compute(rng)
            if split_of(compute_key(family, params)) != self.split:
                return None
            return build_compute_task(family, params, self.split)
        world = self._world(rng)
        program = sample_fact_program(world, rng)
        if program is None:
            return None
        if not self.fresh_world and split_of(fact_key(world, program)) != self.split:
            return None
        return build_fact_task(world, program, rng, self.split)

    def _world(self, rng: random.Random) -> World:
        if not self.fresh_world:
            return fixed_world(self.seed, self.world_size)
        parity = SPLITS.index(self.split)  # train worlds have even seeds, test worlds odd ones
        draw = rng.randrange(GENERATED_TASKS)
        return generate_world(
            2 * (self.seed * GENERATED_TASKS + draw) + parity, _world_config(self.world_size)
        )
