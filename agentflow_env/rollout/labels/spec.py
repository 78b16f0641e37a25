"""A task named in one JSON string: which env, built with which kwargs, and which of its tasks.

Trainers that read prompts from a data file (OpenRLHF's ``label`` field) carry this string; a
rollout worker rebuilds the same env and the same task from it. A task is named in one of three
ways:

- ``seed``: ``env.task_source.sample(numpy.random.default_rng(seed))``: any source, including
  fresh synthetic worlds (the draw is a pure function of the seed).
- ``task_id``: a task of the source's fixed list (``source.tasks``), e.g. a fixed synthetic world.
- ``record``: the task itself, inline (question, gold answers, ...): QA datasets.

Which of the first two a variant's labels use is its row's (``Variant.label_tasks`` in
``agentflow_env.envs.registration``): ``variant_specs`` writes them so, and a label naming a task
of a variant that generates its tasks by ``task_id`` is refused when read.

``env_kwargs`` must be JSON: the ``to_dict`` form of the env id's config
(``agentflow_env.envs.config``), checked by its ``from_dict`` when the spec is made, so a label
naming an unknown setting, an invalid value or a setting the env would ignore is rejected with a
``TaskSpecError`` (specs with ``env_id=None`` are checked when their env is built).
``env_kwargs_from_json`` turns the JSON forms of tools and module endpoints into objects.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import numpy as np

from agentflow_env.envs.config import build_tool, check_tools, module_choice
from agentflow_env.envs.config.fields import NoJSONForm, json_value
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import Variant, config_class, variant_of
from agentflow_env.retrieval.corpus import resolve_corpus
from agentflow_env.tasks.base import Task, TaskSource
from agentflow_env.tasks.datasets import load_tasks

DEFAULT_ENV_ID = "AgentFlow-Search-v0"
_RECORD_KEYS = ("task_id", "question", "gold_answers", "kind", "hops", "split", "corpus")


class TaskSpecError(ValueError):
    """A label does not name a task (bad JSON, no task, unknown task id)."""


@dataclass(frozen=True)
class TaskSpec:
    """Which env (``env_id`` + JSON ``env_kwargs``) and which task; exactly one of ``seed``,
    ``task_id``, ``record``. ``env_id=None`` means the reader's default env."""

    env_id: str | None = DEFAULT_ENV_ID
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    task_id: str | None = None
    record: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        named = [k for k in ("seed", "task_id", "record") if getattr(self, k) is not None]
        if len(named) != 1:
            raise TaskSpecError(f"name exactly one of seed, task_id, record; got {named or 'none'}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise TaskSpecError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.env_kwargs, Mapping):
            raise TaskSpecError(f"env_kwargs must be an object, got {self.env_kwargs!r:.80}")
        if self.env_id is not None:
            check_env_kwargs(self.env_id, self.env_kwargs)
            variant = variant_of(self.env_id)
            if self.task_id is not None and variant and variant.label_tasks == "seed":
                raise TaskSpecError(
                    f"{self.env_id} generates its tasks: a label names one by seed (or carries "
                    f"it as a record), not by task_id {self.task_id!r}"
                )
        if self.record is not None:
            _check_record(self.record)

    # -- JSON --------------------------------------------------------------------------------
    def to_json(self) -> str:
        data: dict[str, Any] = {"env_id": self.env_id, "env_kwargs": dict(self.env_kwargs)}
        for key in ("seed", "task_id", "record"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return json.dumps(data, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, label: str | Mapping[str, Any]) -> TaskSpec:
        """Read a spec from its JSON string (or the already-parsed object)."""
        data: Any = label
        if isinstance(label, str | bytes):
            try:
                data = json.loads(label)
            except json.JSONDecodeError as exc:
                raise TaskSpecError(f"label is not JSON ({exc.msg}): {label!r:.120}") from None
        if not isinstance(data, Mapping):
            raise TaskSpecError(f"label must be a JSON object naming a task, got {data!r:.120}")
        unknown = sorted(set(data) - {"env_id", "env_kwargs", "seed", "task_id", "record"})
        if unknown:
            raise TaskSpecError(f"unknown label keys {unknown}")
        return cls(
            env_id=data.get("env_id", DEFAULT_ENV_ID),
            env_kwargs=data.get("env_kwargs") or {},
            seed=data.get("seed"),
            task_id=data.get("task_id"),
            record=data.get("record"),
        )

    @classmethod
    def for_task(
        cls,
        task: Task,
        env_id: str | None = DEFAULT_ENV_ID,
        env_kwargs: Mapping[str, Any] | None = None,
        corpus_path: str | None = None,
    ) -> TaskSpec:
        """A spec carrying ``task`` inline. A corpus travels only as a file path
        (``corpus_path``); privileged plans and solvers do not travel."""
        record: dict[str, Any] = task.describe()
        if corpus_path:
            record["corpus"] = str(corpus_path)
        return cls(env_id=env_id, env_kwargs=dict(env_kwargs or {}), record=record)

    # -- resolving ---------------------------------------------------------------------------
    def resolve(self, source: TaskSource) -> Task:
        """The task this spec names, drawn from (or checked against) ``source``."""
        if self.seed is not None:
            return source.sample(np.random.default_rng(self.seed))
        if self.task_id is not None:
            return task_by_id(source, self.task_id)
        assert self.record is not None
        return task_from_record(self.record)

    def make_env(self, default_env_id: str = DEFAULT_ENV_ID, **overrides: Any) -> AgentFlowEnv:
        """A new env for this spec: ``overrides`` (objects, not JSON) win over ``env_kwargs``."""
        kwargs = {**env_kwargs_from_json(self.env_kwargs), **overrides}
        # The env ids are registered by ``agentflow_env/__init__.py``, run before any submodule.
        env = gym.make(self.env_id or default_env_id, **kwargs).unwrapped
        if not isinstance(env, AgentFlowEnv):
            raise TaskSpecError(f"{self.env_id!r} is not an AgentFlowEnv")
        return env


def task_from_record(record: Mapping[str, Any]) -> Task:
    """A ``Task`` from an inline record (see ``TaskSpec.for_task``)."""
    _check_record(record)
    corpus = None
    if record.get("corpus"):
        corpus = resolve_corpus(str(record["corpus"]))
    gold = record["gold_answers"]
    return Task(
        task_id=str(record.get("task_id") or ""),
        question=str(record["question"]),
        gold_answers=tuple(str(a) for a in ([gold] if isinstance(gold, str) else gold)),
        corpus=corpus,
        kind=str(record.get("kind", "qa")),
        hops=int(record.get("hops", 1)),
        split=str(record.get("split", "test")),
    )


def _check_record(record: Any) -> None:
    if not isinstance(record, Mapping):
        raise TaskSpecError(f"record must be an object, got {record!r:.80}")
    unknown = sorted(set(record) - set(_RECORD_KEYS))
    if unknown:
        raise TaskSpecError(f"unknown record keys {unknown}; expected some of {_RECORD_KEYS}")
    if not isinstance(record.get("question"), str) or not record["question"].strip():
        raise TaskSpecError("record needs a non-empty 'question'")
    gold = record.get("gold_answers")
    if not isinstance(gold, str | list | tuple) or not gold:
        raise TaskSpecError("record needs 'gold_answers' (a string or a non-empty list)")


_ID_INDEXES: weakref.WeakKeyDictionary[Any, dict[str, Task]] = weakref.WeakKeyDictionary()


def task_by_id(source: TaskSource, task_id: str) -> Task:
    """The task ``task_id`` names in ``source``'s fixed task list (``TaskSpecError`` when the
    source has none, or no such task)."""
    tasks = getattr(source, "tasks", None)
    if not tasks:
        raise TaskSpecError(
            f"task_id {task_id!r} needs a source with a fixed task list; "
            f"{type(source).__name__} has none (name the task by seed instead)"
        )
    index = _ID_INDEXES.get(source)
    if index is None:
        index = {t.task_id: t for t in tasks}
        _ID_INDEXES[source] = index
    if task_id not in index:
        raise TaskSpecError(f"no task {task_id!r} in the env's task source ({len(index)} tasks)")
    return index[task_id]


# -- env kwargs as JSON ------------------------------------------------------------------------
def check_env_kwargs(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Check JSON env kwargs with the config of ``env_id`` (ids of other packages: not checked).

    Raises ``TaskSpecError`` naming the setting and, for an unknown one, the valid settings.
    """
    config = config_class(env_id)
    if config is None:
        return
    try:
        config.from_dict(kwargs)
    except ValueError as error:
        raise TaskSpecError(f"env_kwargs for {env_id}: {error}") from None


def env_kwargs_from_json(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``AgentFlowEnv`` kwargs from their JSON form.

    - ``"tools"``: names, or objects ``{"name": "Search", "retriever_url": "http://..."}`` whose
      other keys go to the tool's factory.
    - ``"modules"``: ``"rule"``, ``"llm"`` (endpoints from ``AGENTFLOW_LLM_*``), or per role
      ``"rule"``, ``"llm"`` or an endpoint object ``{"base_url": ..., "model": ..., ...}``.
    - anything else is passed as is (``hops``, ``split``, ``max_turns``, ``tokenizer`` path, ...).
    """
    out = dict(kwargs)
    if "tools" in out:
        out["tools"] = [_tool(t) for t in out["tools"]]
    modules = out.get("modules")
    if isinstance(modules, Mapping):
        out["modules"] = {role: _module_choice(choice) for role, choice in modules.items()}
    return out


def _tool(entry: Any) -> Any:
    if isinstance(entry, str):
        return entry
    try:
        check_tools([entry])
    except ValueError as error:
        raise TaskSpecError(str(error)) from None
    return build_tool(entry)


def _module_choice(choice: Any) -> Any:
    try:
        return module_choice(choice)
    except ValueError as error:
        raise TaskSpecError(str(error)) from None


# -- building specs in bulk ----------------------------------------------------------------------
def synthetic_specs(
    count: int,
    *,
    split: str = "train",
    hops: int | Sequence[int] | None = None,
    kinds: str | Sequence[str] | None = None,
    world_seed: int = 0,
    world_size: str | None = None,
    fresh_world: bool = False,
    seed: int = 0,
    env_id: str | None = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
) -> Iterator[tuple[TaskSpec, Task]]:
    """``count`` specs over the synthetic world of ``AgentFlow-Search-v0`` (``variant_specs``
    with the world settings as arguments), each with its task.

    A fixed world yields its tasks by ``task_id`` in a seeded order, cycling when ``count`` is
    larger than the split; fresh worlds yield seeds ``seed, seed + 1, ...``. ``env_kwargs`` (JSON,
    no world settings) go into every label beside the world settings.
    """
    world: dict[str, Any] = {"split": split, "world_seed": world_seed}
    for key, value in (("hops", hops), ("kinds", kinds), ("world_size", world_size)):
        if value is not None:
            world[key] = value
    if fresh_world:
        world["fresh_world"] = True
    both = sorted(set(env_kwargs or {}) & {*world, "hops", "kinds", "world_size", "fresh_world"})
    if both:
        raise ValueError(f"give {both} as synthetic_specs arguments, not in env_kwargs")
    return variant_specs(
        count, env_id=env_id, env_kwargs={**(env_kwargs or {}), **world}, seed=seed
    )


def variant_specs(
    count: int,
    *,
    env_id: str | None = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> Iterator[tuple[TaskSpec, Task]]:
    """``count`` specs of the tasks ``env_id``'s own source draws (built from ``env_kwargs``,
    JSON), each with its task, named as the variant's row says (``Variant.label_naming``).

    By ``task_id``: the source's fixed list in a seeded order, cycling when ``count`` is larger;
    by ``seed``: seeds ``seed, seed + 1, ...``. Every label carries ``env_kwargs`` and the row's
    ``label_settings`` at their values. ``env_id=None`` writes labels for the reader's default
    env, drawn here from ``DEFAULT_ENV_ID``'s. Raises ``TaskSpecError`` for an id not registered
    or settings its config refuses.
    """
    variant = _variant(env_id or DEFAULT_ENV_ID)
    try:
        config = variant.config.from_dict(json_value(dict(env_kwargs or {})))
        kwargs = {
            **json_value(dict(env_kwargs or {})),
            **{name: json_value(getattr(config, name)) for name in variant.label_settings},
        }
    except (ValueError, NoJSONForm) as error:
        raise TaskSpecError(f"env_kwargs for {variant.env_id}: {error}") from None
    source = config.make_task_source()
    return _named_specs(variant, source, count, env_id, kwargs, seed)


def _variant(env_id: str) -> Variant:
    variant = variant_of(env_id)
    if variant is None:
        raise TaskSpecError(f"{env_id!r} is not a registered variant (register_variant adds one)")
    return variant


def _named_specs(
    variant: Variant,
    source: TaskSource,
    count: int,
    env_id: str | None,
    env_kwargs: Mapping[str, Any],
    seed: int,
) -> Iterator[tuple[TaskSpec, Task]]:
    if variant.label_naming(source) == "seed":
        for i in range(count):
            spec = TaskSpec(env_id=env_id, env_kwargs=env_kwargs, seed=seed + i)
            yield spec, spec.resolve(source)
        return
    tasks = list(getattr(source, "tasks", ()))
    if not tasks:
        raise TaskSpecError(f"{variant.env_id} names tasks by task_id, but its source has none")
    order = np.random.default_rng(seed).permutation(len(tasks))
    for i in range(count):
        task = tasks[int(order[i % len(tasks)])]
        yield TaskSpec(env_id=env_id, env_kwargs=env_kwargs, task_id=task.task_id), task


def dataset_specs(
    path: str,
    *,
    corpus: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    env_id: str | None = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    answer_tag_suffix: bool = False,
    question_suffix: str | None = None,
    strip_questions: bool = True,
) -> Iterator[tuple[TaskSpec, Task]]:
    """One inline-record spec per task of a QA data file (see ``agentflow_env.tasks.datasets``).

    ``corpus`` (a corpus JSONL path) is recorded in each task, for local search; leave it out
    when the Search tool asks a retriever server. ``answer_tag_suffix`` writes each question
    with the ``<answer>`` instruction (an inline record is never given it by the env);
    ``question_suffix`` instead appends that text to every question as it is (AgentFlow's own
    sentence, read from a checkout: ``PromptPack.answer_suffix``). ``strip_questions=False``
    writes each question as the file has it (as the env reads it under AgentFlow's presets).
    """
    own = answer_tag_suffix and question_suffix is None
    tasks = load_tasks(
        path, split=split, limit=limit, answer_tag_suffix=own, strip_questions=strip_questions
    )
    for task in tasks:
        if question_suffix is not None:
            task = replace(task, question=task.question + question_suffix)
        yield TaskSpec.for_task(task, env_id, env_kwargs, corpus_path=corpus), task


__all__ = [
    "DEFAULT_ENV_ID",
    "TaskSpec",
    "TaskSpecError",
    "check_env_kwargs",
    "dataset_specs",
    "env_kwargs_from_json",
    "synthetic_specs",
    "task_from_record",
    "variant_specs",
]
