"""``SyntheticTaskSource``: the package's default, offline task source."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator, Sequence

import numpy as np

from agentflow_env.tasks.base import Task
from agentflow_env.tasks.synthetic.program import KINDS
from agentflow_env.tasks.synthetic.questions import build_task, generate_tasks
from agentflow_env.tasks.synthetic.sampling import BUCKETS, sample_program
from agentflow_env.tasks.synthetic.world import World, WorldConfig, generate_world

SPLITS: tuple[str, ...] = ("train", "test")
TASKS_PER_BUCKET = 100
_FRESH_SEED_RANGE = 2**31 - 1
_FRESH_ATTEMPTS = 50


@functools.lru_cache(maxsize=8)
def _fixed_world_tasks(seed: int, config: WorldConfig) -> tuple[World, tuple[Task, ...]]:
    """One world and all its tasks, shared by every source on the same (seed, config)."""
    world = generate_world(seed, config)
    return world, tuple(generate_tasks(world, TASKS_PER_BUCKET))


class SyntheticTaskSource:
    """Multi-hop questions over a generated fictional world.

    With a fixed world (the default) tasks are generated once and filtered by ``hops``, ``kinds``
    and ``split`` (a stable hash of each question's program). With ``fresh_world=True`` every
    sample builds a new small world from a seed drawn from ``rng`` (train and test draw from
    disjoint seed streams), so a planner must read names it has never seen.
    """

    def __init__(
        self,
        world_seed: int = 0,
        config: WorldConfig | None = None,
        hops: int | Sequence[int] | None = None,
        kinds: Sequence[str] | None = None,
        split: str = "train",
        fresh_world: bool = False,
    ) -> None:
        if isinstance(kinds, str):
            kinds = (kinds,)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        unknown = sorted(set(kinds or ()) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown kinds {unknown}; expected some of {list(KINDS)}")
        self.world_seed = world_seed
        self.split = split
        self.fresh_world = fresh_world
        self.hops: tuple[int, ...] | None = (hops,) if isinstance(hops, int) else _tuple(hops)
        self.kinds: tuple[str, ...] | None = _tuple(kinds)
        self.buckets = [
            (kind, h)
            for kind, bucket_hops in BUCKETS.items()
            for h in bucket_hops
            if (self.kinds is None or kind in self.kinds) and (self.hops is None or h in self.hops)
        ]
        if not self.buckets:
            raise ValueError(
                f"no synthetic questions have kinds={self.kinds} and hops={self.hops}; "
                f"available: {BUCKETS}"
            )
        if fresh_world:
            self.config = config or WorldConfig.small()
            self.world: World | None = None
            self.tasks: tuple[Task, ...] = ()
            return
        self.config = config or WorldConfig()
        self.world, every_task = _fixed_world_tasks(world_seed, self.config)
        self.tasks = tuple(
            t for t in every_task if t.split == split and (t.kind, t.hops) in self.buckets
        )
        if not self.tasks:
            raise ValueError(
                f"the world (seed {world_seed}) has no {split} tasks with kinds={self.kinds} "
                f"and hops={self.hops}"
            )

    def __len__(self) -> int:
        return _FRESH_SEED_RANGE if self.fresh_world else len(self.tasks)

    def sample(self, rng: np.random.Generator) -> Task:
        if not self.fresh_world:
            return self.tasks[int(rng.integers(len(self.tasks)))]
        while True:
            world = generate_world(
                self._fresh_seed(int(rng.integers(_FRESH_SEED_RANGE))), self.config
            )
            task = self._sample_from(world, random.Random(int(rng.integers(2**63))))
            if task is not None:
                return task

    def _fresh_seed(self, draw: int, split: str | None = None) -> int:
        """Train worlds get even seeds, test worlds odd ones: the streams never meet."""
        parity = SPLITS.index(split or self.split)
        return 2 * (self.world_seed * _FRESH_SEED_RANGE + draw) + parity

    def _sample_from(self, world: World, rng: random.Random) -> Task | None:
        kind, hops = rng.choice(self.buckets)
        for _ in range(_FRESH_ATTEMPTS):
            program = sample_program(world, rng, kind, hops)
            if program is not None:
                return build_task(world, program, rng, split=self.split)
        return None

    def training_text(self, n_worlds: int = 4) -> Iterator[str]:
        """Documents and train questions of a few worlds, e.g. to fit a tokenizer."""
        for i in range(n_worlds):
            if i == 0 and not self.fresh_world:
                world, tasks = _fixed_world_tasks(self.world_seed, self.config)
            else:
                world = generate_world(self._fresh_seed(i, "train"), self.config)
                tasks = tuple(generate_tasks(world, per_bucket=10))
            for doc in world.corpus.documents:
                yield doc.contents
            for task in tasks:
                if self.fresh_world or task.split == "train":
                    yield task.question


def _tuple(values: Sequence | None) -> tuple | None:
    return None if values is None else tuple(values)


def training_text(n_worlds: int = 4) -> Iterator[str]:
    """Documents and train questions of the default world and a few more (for the tokenizer)."""
    return SyntheticTaskSource().training_text(n_worlds)
