"""The published evaluation suites: fixed episodes that every learning number is measured on.

- ``search-h{1..4}-d{0,0.5,1}-v1``: ``AgentFlow-Search-v0`` questions needing 1-4 documents
  (``hops``) amid near-miss distractors: density 0 / 0.5 / 1 is the ``distractors`` setting, the
  fraction of people, organisations and works that get a near-miss twin (a shared name part and
  close facts, in a document of its own). Each episode is a fresh small world of the test
  split, so a planner reads names it has never seen; all cells share seeds, so cell ``h, d`` and
  cell ``h', d'`` start from the same world seeds. 200 episodes each.
- ``code-v1``: ``AgentFlow-Code-v0`` (make-24, fact arithmetic in fresh small worlds, short
  programs), test split. 200 episodes (one seed left out: it repeats an earlier puzzle).
- ``tiny-bridge-v1``: the tiny CPU planner's suite (``examples/trl``): 1- and 2-hop bridge
  questions in fresh small worlds, compact prompts, 4 turns, test split. 1000 episodes.

Published suites never change (``tests/evaluation/test_eval_suites.py`` pins their fingerprints); a changed
suite is a new version. Numbers for each: ``docs/benchmark.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from agentflow_env.evaluation.eval_suite import EvalSuite, seed_range
from agentflow_env.rollout.labels.spec import TaskSpec

SEARCH_ENV = "AgentFlow-Search-v0"
CODE_ENV = "AgentFlow-Code-v0"
SEARCH_FIRST_SEED = 10_000_000
CODE_FIRST_SEED = 11_000_000
TINY_FIRST_SEED = 2_000_000
"""The tiny suite starts where ``examples/trl/train_tiny_cpu.py``'s evaluation seeds do."""
SEARCH_EPISODES = 200
CODE_EPISODES = 200
TINY_EPISODES = 1000
MAX_TURNS = 10


class UnknownSuiteError(ValueError):
    """No published suite has this name."""


def _density(distractors: float) -> str:
    return f"{distractors:g}"


def _search(hops: int, distractors: float, fingerprint: str) -> EvalSuite:
    return EvalSuite(
        name=f"search-h{hops}-d{_density(distractors)}-v1",
        env_id=SEARCH_ENV,
        env_kwargs={
            "hops": hops,
            "distractors": distractors,
            "fresh_world": True,
            "world_size": "small",
            "split": "test",
            "max_turns": MAX_TURNS,
        },
        seeds=seed_range(SEARCH_FIRST_SEED, SEARCH_EPISODES),
        fingerprint=fingerprint,
        description=f"{hops}-hop questions, near-miss density {_density(distractors)}, "
        "fresh small test worlds",
    )


_PUBLISHED: tuple[EvalSuite, ...] = (
    _search(1, 0.0, "ed582bc1d7e48b3b"),
    _search(1, 0.5, "468ba1b8baa8f0f4"),
    _search(1, 1.0, "f2ec4b739f4614b3"),
    _search(2, 0.0, "9fff6c6e7725aff6"),
    _search(2, 0.5, "980ecdf265b37be0"),
    _search(2, 1.0, "8542522ca378924a"),
    _search(3, 0.0, "b1f275b203d1cd3e"),
    _search(3, 0.5, "f09c430c5a4d5e0f"),
    _search(3, 1.0, "5e82d589b0bdf238"),
    _search(4, 0.0, "181d54b68e92dd11"),
    _search(4, 0.5, "e3cf129d3a51168b"),
    _search(4, 1.0, "7b995c6d9b9db0d3"),
    EvalSuite(
        name="code-v1",
        env_id=CODE_ENV,
        env_kwargs={
            "fresh_world": True,
            "world_size": "small",
            "split": "test",
            "max_turns": MAX_TURNS,
        },
        # 11_000_160 draws the make-24 puzzle of 11_000_155 again
        seeds=seed_range(CODE_FIRST_SEED, CODE_EPISODES, skip=[11_000_160]),
        fingerprint="538ad6f9bbcff381",
        description="make-24, fact arithmetic in fresh small test worlds, short programs",
    ),
    EvalSuite(
        name="tiny-bridge-v1",
        env_id=SEARCH_ENV,
        env_kwargs={
            "hops": [1, 2],
            "kinds": "bridge",
            "fresh_world": True,
            "world_size": "small",
            "prompt_style": "compact",
            "max_turns": 4,
            "split": "test",
        },
        seeds=seed_range(TINY_FIRST_SEED, TINY_EPISODES),
        fingerprint="96c5fa0b93f78147",
        description="the tiny CPU planner's suite: 1- and 2-hop bridge questions, compact "
        "prompts, 4 turns",
    ),
)

SUITES: Mapping[str, EvalSuite] = MappingProxyType({s.name: s for s in _PUBLISHED})
"""Every published suite by name, in listing order."""


def suite_names() -> list[str]:
    """The published suites' names, in listing order."""
    return list(SUITES)


def get_suite(name: str) -> EvalSuite:
    """The published suite ``name``; ``UnknownSuiteError`` lists the known names."""
    try:
        return SUITES[name]
    except KeyError:
        raise UnknownSuiteError(
            f"unknown suite {name!r}: the suites are {', '.join(SUITES)}"
        ) from None


def suite_specs(name: str, limit: int | None = None) -> list[TaskSpec]:
    """The ``TaskSpec`` labels of suite ``name``'s episodes (the first ``limit``), e.g. for a
    trainer's eval hook: ``run_episodes(suite_specs("tiny-bridge-v1"), generate, tokenizer)``."""
    return get_suite(name).task_specs(limit)


__all__ = [
    "SUITES",
    "UnknownSuiteError",
    "get_suite",
    "suite_names",
    "suite_specs",
]
