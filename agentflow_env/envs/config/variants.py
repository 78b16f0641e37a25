"""The environment variants: ``SearchEnvConfig`` (``AgentFlow-Search-v0``) and
``CodeEnvConfig`` (``AgentFlow-Code-v0``), each ``EnvConfig`` plus where its tasks come from."""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, get_args

from agentflow_env.envs.config.checks import check_dataset_corpus
from agentflow_env.envs.config.choices import CODE_TOOLS, CodeKind, SearchKind, Split, WorldSize
from agentflow_env.envs.config.fields import equals_default, field_defaults, setting
from agentflow_env.envs.config.shared import EnvConfig, tools_setting
from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.tasks.base import ListTaskSource, Task, TaskSource
from agentflow_env.tasks.code import CHECKED_KINDS, FACT_MATH, CodeTaskSource
from agentflow_env.tasks.sources import (
    check_distractors,
    check_hops,
    dataset_source,
    synthetic_source,
)
from agentflow_env.tools.base import Tool
from agentflow_env.workflow.rewards import CHECKED, JUDGE


# -- the synthetic-world settings both variants have -------------------------------------------
def _split() -> Any:
    return setting("train", help="task split", section="tasks")


def _fresh_world() -> Any:
    return setting(False, help="a new small world per episode", section="tasks")


def _world_size() -> Any:
    return setting(
        None,
        help="size of the synthetic world",
        section="tasks",
        none_means="'small' with fresh_world=True, else 'default'",
    )


_WORLD_SEED_HELP = "seed of the synthetic world"
_KINDS_HELP = "question kinds"


@dataclass(frozen=True, kw_only=True)
class SearchEnvConfig(EnvConfig):
    """``AgentFlow-Search-v0``: the synthetic multi-hop world (default), a QA dataset with its
    corpus, or given tasks. Settings the chosen task source would ignore are rejected."""

    env_id: ClassVar[str] = "AgentFlow-Search-v0"
    tasks_note: ClassVar[str] = (
        "its tasks come from the synthetic world, dataset=, tasks= or task_source="
    )

    # -- tasks: the synthetic world
    hops: int | Sequence[int] | None = setting(
        None,
        help="documents each question needs",
        section="tasks",
        none_means="any",
        check=check_hops,
    )
    kinds: SearchKind | Sequence[SearchKind] | None = setting(
        None, help=_KINDS_HELP, section="tasks", none_means="all"
    )
    split: Split = _split()
    world_seed: int = setting(0, help=_WORLD_SEED_HELP, section="tasks")
    world_size: WorldSize | None = _world_size()
    fresh_world: bool = _fresh_world()
    distractors: float = setting(
        0.0,
        help="near-miss density of the synthetic world, in [0, 1]: the fraction of people, "
        "organisations and works that get a twin with a shared name part and close facts, "
        "in a document of its own (0: none)",
        section="tasks",
        check=check_distractors,
    )
    # -- tasks given in Python
    task_source: TaskSource | None = setting(
        None, help="tasks from this TaskSource instead of the synthetic world", section="tasks"
    )
    tasks: Sequence[Task] | None = setting(
        None, help="a fixed list of Task objects instead of the synthetic world", section="tasks"
    )
    # -- dataset
    dataset: str | os.PathLike[str] | None = setting(
        None,
        help="a QA file instead of the synthetic world (FlashRAG/Search-R1 JSONL, AgentFlow "
        "JSON, Parquet)",
        section="dataset",
    )
    corpus: str | os.PathLike[str] | Corpus | None = setting(
        None,
        help="the corpus JSONL the Search tool retrieves from, with dataset=",
        section="dataset",
        json_form="a corpus is a JSONL path",
    )
    dataset_split: str | None = setting(
        None, help="keep only this split of the dataset", section="dataset"
    )
    dataset_limit: int | None = setting(
        None, help="keep only the first N tasks of the dataset", section="dataset", minimum=1
    )
    answer_tag_suffix: bool = setting(
        False,
        help="append the instruction to answer inside <answer></answer> tags to each question "
        "(AgentFlow's training setup)",
        section="dataset",
    )
    index_cache_dir: str | os.PathLike[str] | None = setting(
        None,
        help="where the dataset corpus's BM25 index is cached",
        section="dataset",
        none_means="$AGENTFLOW_ENV_CACHE/indexes, else ~/.cache/agentflow_env/indexes",
    )

    def check(self) -> None:
        if sum(x is not None for x in (self.task_source, self.tasks, self.dataset)) > 1:
            raise ValueError("give at most one of task_source, tasks and dataset")
        if self.corpus is not None and self.dataset is None:
            raise ValueError("corpus= goes with dataset= (synthetic worlds bring their own)")
        origins = {"dataset=": self.dataset, "tasks=": self.tasks, "task_source=": self.task_source}
        origin = next((name for name, given in origins.items() if given is not None), None)
        stray = [
            name
            for name in ("dataset_split", "dataset_limit", "index_cache_dir")
            if getattr(self, name) is not None
        ]
        if self.answer_tag_suffix:
            stray.append("answer_tag_suffix")
        if stray and origin != "dataset=":
            raise ValueError(f"{', '.join(f'{n}=' for n in stray)} only apply with dataset=")
        if origin is None:
            return
        unused = [name for name in _WORLD_SETTINGS if self.given(name)]
        if unused:
            hint = ""
            if origin == "dataset=":
                hint = " (dataset_split= and dataset_limit= filter a dataset)"
            raise ValueError(
                f"{', '.join(f'{n}=' for n in unused)} only apply to the synthetic world, but the "
                f"tasks come from {origin}{hint}"
            )

    def given(self, name: str) -> bool:
        """Whether setting ``name`` differs from its default."""
        return not equals_default(getattr(self, name), field_defaults(type(self))[name])

    def make_task_source(self) -> TaskSource:
        if self.tasks is not None:
            return ListTaskSource(self.tasks)
        if self.task_source is not None:
            return self.task_source
        if self.dataset is not None:
            check_dataset_corpus(self.corpus, self.tools, self.retriever_url)
            # With a checkout, the sentence is AgentFlow's own, appended as its rollout does.
            wording = self.agentflow_wording() if self.answer_tag_suffix else None
            source = dataset_source(
                self.dataset,
                self.corpus,
                split=self.dataset_split,
                limit=self.dataset_limit,
                index_cache_dir=self.index_cache_dir,
                warm_index=not self.retriever_url,
                answer_tag_suffix=self.answer_tag_suffix and wording is None,
                # AgentFlow's scripts send a question as its file has it.
                strip_questions=self.agentflow_script is None,
            )
            if wording is not None:
                source = with_question_suffix(source, wording.answer_suffix)
            return source
        return synthetic_source(
            world_seed=self.world_seed,
            world_size=self.world_size,
            hops=self.hops,
            kinds=self.kinds,
            split=self.split,
            fresh_world=self.fresh_world,
            distractors=self.distractors,
        )


def with_question_suffix(source: TaskSource, suffix: str) -> TaskSource:
    """``source`` with ``suffix`` appended to every question as it is (AgentFlow's training
    rollout appends its answer-format sentence so, with no check and no trimming)."""
    if not isinstance(source, ListTaskSource):
        raise TypeError(f"cannot append to the questions of a {type(source).__name__}")
    tagged = copy.copy(source)
    tagged.tasks = tuple(
        dataclasses.replace(task, question=task.question + suffix) for task in source.tasks
    )
    return tagged


_WORLD_SETTINGS = (
    "hops",
    "kinds",
    "split",
    "world_seed",
    "world_size",
    "fresh_world",
    "distractors",
)
"""``SearchEnvConfig`` settings that shape the synthetic world, in the order messages name them."""


@dataclass(frozen=True, kw_only=True)
class CodeEnvConfig(EnvConfig):
    """``AgentFlow-Code-v0``: make-24 puzzles, arithmetic over synthetic-world facts and small
    computations (``agentflow_env.tasks.code``), with the Python tool (sandboxed), Calculator and
    Search. ``world_seed`` (older name ``seed``) and ``world_size`` pick the world of the
    ``fact_math`` questions, so they need ``"fact_math"`` among ``kinds``."""

    env_id: ClassVar[str] = "AgentFlow-Code-v0"
    tasks_note: ClassVar[str] = "it generates its own tasks"
    aliases: ClassVar[Mapping[str, str]] = {"seed": "world_seed"}

    tools: Sequence[str | Mapping[str, Any] | Tool] = tools_setting(CODE_TOOLS)
    # -- tasks
    kinds: CodeKind | Sequence[CodeKind] | None = setting(
        None, help=_KINDS_HELP, section="tasks", none_means="all"
    )
    split: Split = _split()
    fresh_world: bool = _fresh_world()
    world_seed: int | None = setting(None, help=_WORLD_SEED_HELP, section="tasks", none_means="0")
    world_size: WorldSize | None = _world_size()

    def kinds_tuple(self) -> tuple[str, ...]:
        """The kinds drawn from (``None``: all of them)."""
        if self.kinds is None:
            return get_args(CodeKind)
        return (self.kinds,) if isinstance(self.kinds, str) else tuple(self.kinds)

    def check(self) -> None:
        checked = [kind for kind in self.kinds_tuple() if kind in CHECKED_KINDS]
        if checked and self.reward not in (*CHECKED, JUDGE):
            raise ValueError(
                f"reward={self.reward!r} cannot score {', '.join(checked)} tasks: their checker "
                f"decides (any valid expression is right, which gold answers cannot list); use "
                f"{', '.join(CHECKED)} (both give way to the checker) or {JUDGE}, or leave "
                f"{', '.join(checked)} out of kinds"
            )
        world = {"world_seed": self.world_seed, "world_size": self.world_size}
        given = [f"{name}=" for name, value in world.items() if value is not None]
        kinds = self.kinds_tuple()
        if given and FACT_MATH not in kinds:
            raise ValueError(
                f"{', '.join(given)} only shape the world of fact_math questions, and "
                f"kinds={list(kinds)} has none: add 'fact_math' to kinds or drop them"
            )

    def make_task_source(self) -> TaskSource:
        return CodeTaskSource(
            seed=self.world_seed or 0,
            kinds=self.kinds,
            split=self.split,
            fresh_world=self.fresh_world,
            world_size=self.world_size,
        )
