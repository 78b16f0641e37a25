"""``EvalSuite``: a frozen evaluation suite (env id, env settings, episode seeds) and its
fingerprint.

A suite's episode with seed ``s`` runs the task ``reset(seed=s)`` draws, which is what a
``TaskSpec`` with that seed names and what ``evaluate(..., seeds=suite.seeds)`` runs, so the CLI,
``evaluate`` and the batched rollout driver all run the same episodes. The fingerprint is a
hash over the env settings and every episode's task as generated (seed, id, question, gold
answers, kind, hops, split): if the task generator changes, the fingerprint does, and the suite's
published numbers no longer apply. The published suites are in ``agentflow_env.evaluation.suites``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agentflow_env.envs.registration import config_class
from agentflow_env.rollout.labels.spec import TaskSpec, check_env_kwargs, env_kwargs_from_json
from agentflow_env.tasks.base import Task

FINGERPRINT_CHARS = 16
"""Hex digits of the SHA-256 a fingerprint keeps (64 bits)."""
_VERSIONED_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*-v[0-9]+$")


class SuiteChangedError(RuntimeError):
    """A suite's tasks no longer hash to its published fingerprint: the generator changed."""


@dataclass(frozen=True)
class EvalSuite:
    """A named, versioned set of episodes: ``env_id`` built with ``env_kwargs`` (JSON forms,
    checked by the env's config), one episode per seed of ``seeds`` (distinct, in episode
    order), and the ``fingerprint`` published with it. Never change a published suite: publish
    a new version (``-v2``) instead."""

    name: str
    env_id: str
    env_kwargs: Mapping[str, Any]
    seeds: tuple[int, ...]
    fingerprint: str
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not _VERSIONED_NAME.match(self.name):
            raise ValueError(f"suite name {self.name!r} needs a version suffix, e.g. 'name-v1'")
        seeds = tuple(self.seeds)
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"suite {self.name}: seeds must be distinct, and at least one")
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
            raise ValueError(f"suite {self.name}: seeds must be integers >= 0")
        check_env_kwargs(self.env_id, self.env_kwargs)
        kwargs = MappingProxyType(copy.deepcopy(dict(self.env_kwargs)))
        object.__setattr__(self, "env_kwargs", kwargs)
        object.__setattr__(self, "seeds", seeds)

    # -- the episodes ------------------------------------------------------------------------
    @property
    def episodes(self) -> int:
        return len(self.seeds)

    def settings(self) -> dict[str, Any]:
        """A copy of the env kwargs (JSON forms)."""
        return copy.deepcopy(dict(self.env_kwargs))

    def _seeds(self, limit: int | None) -> tuple[int, ...]:
        if limit is None:
            return self.seeds
        if limit < 1 or limit > self.episodes:
            raise ValueError(
                f"suite {self.name} has {self.episodes} episodes: limit must be in "
                f"1..{self.episodes}, got {limit}"
            )
        return self.seeds[:limit]

    def task_specs(self, limit: int | None = None) -> list[TaskSpec]:
        """One ``TaskSpec`` label per episode (the first ``limit``), naming its env and seed:
        labels for ``agentflow_env.rollout.training.driver.run_episodes`` or a trainer's data file."""
        return [
            TaskSpec(env_id=self.env_id, env_kwargs=self.settings(), seed=seed)
            for seed in self._seeds(limit)
        ]

    def seed_pairs(self, limit: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(seed, env kwargs)`` pairs (kwargs as objects); they name no env id, so run them
        with ``run_episodes(pairs, ..., env_id=suite.env_id)``."""
        return [(seed, env_kwargs_from_json(self.settings())) for seed in self._seeds(limit)]

    def tasks(self, limit: int | None = None) -> list[Task]:
        """The episodes' tasks as the generator draws them now (no env, tools or modules)."""
        config = config_class(self.env_id)
        if config is None:  # only this package's env ids pass ``check_env_kwargs``' reading
            raise ValueError(f"suite {self.name}: {self.env_id} is not an AgentFlow env id")
        source = config.from_dict(self.settings()).make_task_source()
        return [spec.resolve(source) for spec in self.task_specs(limit)]

    # -- the fingerprint ---------------------------------------------------------------------
    def compute_fingerprint(self) -> str:
        """The hash of the env settings and every episode's task as generated now."""
        return suite_fingerprint(self.env_id, self.env_kwargs, self.seeds, self.tasks())

    def check_fingerprint(self) -> None:
        """Raise ``SuiteChangedError`` if the tasks no longer match the published fingerprint."""
        found = self.compute_fingerprint()
        if found != self.fingerprint:
            raise SuiteChangedError(
                f"suite {self.name}'s tasks hash to {found}, not its published fingerprint "
                f"{self.fingerprint}: the task generator changed, so its published numbers no "
                "longer apply (publish a new version of the suite)"
            )

    def describe(self) -> dict[str, Any]:
        """The suite as JSON-ready data (for listings and result summaries)."""
        return {
            "name": self.name,
            "env_id": self.env_id,
            "env_kwargs": self.settings(),
            "episodes": self.episodes,
            "seeds": seed_ranges(self.seeds),
            "fingerprint": self.fingerprint,
            "description": self.description,
        }


def suite_fingerprint(
    env_id: str, env_kwargs: Mapping[str, Any], seeds: Sequence[int], tasks: Sequence[Task]
) -> str:
    """The first ``FINGERPRINT_CHARS`` hex digits of a SHA-256 over the env id and settings,
    then one JSON line per episode: its seed and its task's plain fields (``Task.describe``)."""
    digest = hashlib.sha256(json.dumps([env_id, dict(env_kwargs)], sort_keys=True).encode())
    for seed, task in zip(seeds, tasks, strict=True):
        line = json.dumps([seed, task.describe()], sort_keys=True, ensure_ascii=False)
        digest.update(b"\n" + line.encode("utf-8"))
    return digest.hexdigest()[:FINGERPRINT_CHARS]


def seed_range(first: int, count: int, skip: Sequence[int] = ()) -> tuple[int, ...]:
    """``count`` seeds from ``first`` upward, leaving out ``skip`` (e.g. seeds whose task
    repeats an earlier episode's)."""
    left_out = set(skip)
    seeds: list[int] = []
    seed = first
    while len(seeds) < count:
        if seed not in left_out:
            seeds.append(seed)
        seed += 1
    return tuple(seeds)


def seed_ranges(seeds: Sequence[int]) -> str:
    """Seeds as runs, in order: ``"10-14, 16-20"``."""
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][1] + 1:
            runs[-1][1] = seed
        else:
            runs.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


__all__ = [
    "FINGERPRINT_CHARS",
    "EvalSuite",
    "SuiteChangedError",
    "suite_fingerprint",
    "seed_range",
    "seed_ranges",
]
