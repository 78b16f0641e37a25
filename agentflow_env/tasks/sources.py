"""Choosing where an environment's tasks come from."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np

from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.tasks.base import Task, TaskSource


class ListTaskSource:
    """A fixed list of tasks, sampled uniformly."""

    def __init__(self, tasks: Sequence[Task]):
        if not tasks:
            raise ValueError("a task list must hold at least one task")
        self.tasks = tuple(tasks)

    def sample(self, rng: np.random.Generator) -> Task:
        return self.tasks[int(rng.integers(len(self.tasks)))]

    def __len__(self) -> int:
        return len(self.tasks)


def _as_tuple(value: int | Sequence[int] | Sequence[str] | None) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, int | str):
        return (value,)
    return tuple(value)


def synthetic_source(
    *,
    world_seed: int = 0,
    world_size: str | None = None,
    hops: int | Sequence[int] | None = None,
    kinds: str | Sequence[str] | None = None,
    split: str = "train",
    fresh_world: bool = False,
) -> TaskSource:
    """The embedded synthetic world, shared by every env of the process with the same settings.

    ``world_size`` defaults to ``"small"`` for fresh per-episode worlds and ``"default"`` otherwise.
    """
    if world_size is None:
        world_size = "small" if fresh_world else "default"
    return _cached_synthetic(
        world_seed, world_size, _as_tuple(hops), _as_tuple(kinds), split, fresh_world
    )


@functools.lru_cache(maxsize=32)
def _cached_synthetic(
    world_seed: int,
    world_size: str,
    hops: tuple | None,
    kinds: tuple | None,
    split: str,
    fresh_world: bool,
) -> TaskSource:
    from agentflow_env.tasks.synthetic import SyntheticTaskSource, WorldConfig

    sizes = {"default": WorldConfig, "small": WorldConfig.small}
    if world_size not in sizes:
        raise ValueError(f"world_size must be one of {sorted(sizes)}, got {world_size!r}")
    return SyntheticTaskSource(
        world_seed=world_seed,
        config=sizes[world_size](),
        hops=hops,
        kinds=kinds,
        split=split,
        fresh_world=fresh_world,
    )


def dataset_source(
    dataset: str | os.PathLike[str],
    corpus: str | os.PathLike[str] | Corpus | None = None,
    *,
    split: str | None = None,
    limit: int | None = None,
    index_cache_dir: str | os.PathLike[str] | None = None,
    warm_index: bool = True,
) -> TaskSource:
    """Tasks from a QA file; its corpus gets a BM25 index cached on disk and shared in-process."""
    from agentflow_env.tasks.datasets import DatasetTaskSource

    source = DatasetTaskSource(dataset, corpus=corpus, split=split, limit=limit)
    if warm_index and source.corpus is not None:
        from agentflow_env.retrieval.index_store import load_or_build_index

        load_or_build_index(source.corpus, index_cache_dir)
    return source
