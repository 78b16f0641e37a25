"""Building an environment's task sources: the synthetic world and QA datasets.

Which source an env uses, and which settings go with it, is its config's business
(``agentflow_env.envs.config``)."""

from __future__ import annotations

import dataclasses
import functools
import numbers
import os
from collections.abc import Sequence
from typing import Any

from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.retrieval.index_store import load_or_build_index
from agentflow_env.tasks.base import TaskSource
from agentflow_env.tasks.datasets import DatasetTaskSource
from agentflow_env.tasks.synthetic import SyntheticTaskSource, WorldConfig
from agentflow_env.tasks.synthetic.program import KINDS
from agentflow_env.tasks.synthetic.sampling import BUCKETS


def _as_tuple(value: int | Sequence[int] | Sequence[str] | None) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, int | str):
        return (value,)
    return tuple(value)


WORLD_SIZES: tuple[str, ...] = ("default", "small")
SYNTHETIC_SPLITS: tuple[str, ...] = ("train", "test")


def check_world_size(world_size: str | None) -> None:
    """``world_size`` is ``None`` (chosen from ``fresh_world``) or one of ``WORLD_SIZES``."""
    if world_size is not None and world_size not in WORLD_SIZES:
        raise ValueError(
            f"world_size must be one of {list(WORLD_SIZES)} (or None: 'small' with "
            f"fresh_world=True, else 'default'), got {world_size!r}"
        )


def _check_synthetic_settings(
    hops: tuple | None, kinds: tuple | None, split: str, world_size: str | None
) -> None:
    check_world_size(world_size)
    if split not in SYNTHETIC_SPLITS:
        raise ValueError(f"split must be one of {list(SYNTHETIC_SPLITS)}, got {split!r}")
    if kinds is not None:
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not kinds:
            found = f"unknown kinds {unknown}" if unknown else "no kinds"
            raise ValueError(f"{found}; expected some of {list(KINDS)}")
    check_hops(hops)


def check_hops(hops: Any) -> None:
    """``hops`` is ``None`` (any), or one or more of the hop counts some question kind has."""
    if hops is None:
        return
    hops = tuple(hops) if isinstance(hops, Sequence) and not isinstance(hops, str) else (hops,)
    allowed = sorted({h for bucket in BUCKETS.values() for h in bucket})
    wrong = [h for h in hops if isinstance(h, bool) or h not in allowed]
    if wrong or not hops:
        per_kind = ", ".join(f"{k}: {list(v)}" for k, v in BUCKETS.items())
        raise ValueError(
            f"hops (documents a question needs) must be among {allowed} ({per_kind}), "
            f"got {wrong or list(hops)}"
        )


def check_distractors(distractors: Any) -> None:
    """``distractors`` (near-miss density of the synthetic world) is a number in [0, 1]."""
    is_number = isinstance(distractors, numbers.Real) and not isinstance(distractors, bool)
    if not is_number or not 0.0 <= float(distractors) <= 1.0:
        raise ValueError(
            "distractors (the fraction of people, organisations and works that get a near-miss "
            f"twin) must be a number in [0, 1], got {distractors!r:.80}"
        )


def synthetic_source(
    *,
    world_seed: int = 0,
    world_size: str | None = None,
    hops: int | Sequence[int] | None = None,
    kinds: str | Sequence[str] | None = None,
    split: str = "train",
    fresh_world: bool = False,
    distractors: float = 0.0,
) -> TaskSource:
    """The embedded synthetic world, shared by every env of the process with the same settings.

    ``world_size`` defaults to ``"small"`` for fresh per-episode worlds and ``"default"`` otherwise.
    ``distractors`` is the near-miss density (``WorldConfig.distractors``). Invalid settings raise
    ``ValueError`` naming the allowed values.
    """
    hops_tuple, kinds_tuple = _as_tuple(hops), _as_tuple(kinds)
    _check_synthetic_settings(hops_tuple, kinds_tuple, split, world_size)
    check_distractors(distractors)
    if world_size is None:
        world_size = "small" if fresh_world else "default"
    return _cached_synthetic(
        world_seed, world_size, hops_tuple, kinds_tuple, split, fresh_world, float(distractors)
    )


@functools.lru_cache(maxsize=32)
def _cached_synthetic(
    world_seed: int,
    world_size: str,
    hops: tuple | None,
    kinds: tuple | None,
    split: str,
    fresh_world: bool,
    distractors: float = 0.0,
) -> TaskSource:
    sizes = {"default": WorldConfig, "small": WorldConfig.small}
    check_world_size(world_size)
    return SyntheticTaskSource(
        world_seed=world_seed,
        config=dataclasses.replace(sizes[world_size](), distractors=distractors),
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
    answer_tag_suffix: bool = False,
    strip_questions: bool = True,
) -> TaskSource:
    """Tasks from a QA file; its corpus gets a BM25 index cached on disk and shared in-process.
    ``answer_tag_suffix`` asks each question for an answer in ``<answer>`` tags;
    ``strip_questions=False`` keeps each question's surrounding whitespace."""
    source = DatasetTaskSource(
        dataset,
        corpus=corpus,
        split=split,
        limit=limit,
        answer_tag_suffix=answer_tag_suffix,
        strip_questions=strip_questions,
    )
    if warm_index and source.corpus is not None:
        load_or_build_index(source.corpus, index_cache_dir)
    return source
