"""The typed settings of each environment variant: one frozen dataclass per registered env id.

``EnvConfig`` holds what every variant shares (tools, frozen modules, reward, episode limits,
observations); ``SearchEnvConfig`` (``AgentFlow-Search-v0``) and ``CodeEnvConfig``
(``AgentFlow-Code-v0``) add where their tasks come from. Each field has its help text and its
section in ``metadata``; mode-like settings are ``Literal`` types. ``__post_init__`` checks every
field against its type, choices and bounds, then the rules between fields, so a config that
exists is valid (change one with ``updated`` or ``dataclasses.replace``, which check again).

Everything else derives from these classes:

- ``AgentFlowEnv(config)``; its keyword settings and ``gym.make(id, **settings)`` are sugar for
  ``<variant config>.from_kwargs(**settings)``, which names the variant's valid settings when
  given one it lacks;
- ``to_dict`` / ``from_dict``: the JSON form a ``TaskSpec`` label carries as ``env_kwargs``;
- ``add_config_arguments``: the options of ``agentflow-env run`` and of the OpenRLHF
  ``prepare_data.py`` script, one per field (name, type, default, help, ``Literal`` choices).

A config may hold objects that have no JSON form (``Tool`` instances, a ``Modules`` bundle, a
tokenizer object, a task source, an ``LLMEndpoint``); ``to_dict`` says which one it cannot write.
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
import functools
import math
import numbers
import os
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from agentflow_env.llm.client import LLMEndpoint
from agentflow_env.modules import ROLES
from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.tasks.base import ListTaskSource, Task, TaskSource
from agentflow_env.tasks.code import FACT_MATH, CodeTaskSource
from agentflow_env.tasks.sources import check_hops, dataset_source, synthetic_source
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import canonical_tool_name, make_tool
from agentflow_env.tools.search import RETRIEVER_URL_ENV_VAR, SearchTool
from agentflow_env.workflow.frozen_modules import Modules
from agentflow_env.workflow.session import (
    DEFAULT_MAX_ACTION_TOKENS,
    DEFAULT_MAX_PROMPT_TOKENS,
    AnswerJudge,
)

# -- the choices of mode-like settings -----------------------------------------------------------
SearchKind = Literal["bridge", "comparison", "arithmetic"]
"""Question kinds of the synthetic world (``agentflow_env.tasks.synthetic.program.KINDS``)."""
CodeKind = Literal["make24", "fact_math", "compute"]
"""Task kinds of ``AgentFlow-Code-v0`` (``agentflow_env.tasks.code.KINDS``)."""
Split = Literal["train", "test"]
WorldSize = Literal["default", "small"]
ModuleBackend = Literal["rule", "llm"]
RewardName = Literal["exact_match", "f1", "llm_judge"]
PromptStyle = Literal["full", "compact"]
ObservationMode = Literal["structured", "flat"]

DEFAULT_TOOLS: tuple[str, ...] = ("Search", "Calculator")
CODE_TOOLS: tuple[str, ...] = ("Python", "Calculator", "Search")

SECTIONS: tuple[str, ...] = (
    "tasks",
    "dataset",
    "tools",
    "modules",
    "reward",
    "episode",
    "observations",
)
"""The sections fields are grouped in, in the order help texts list them."""


class UnknownSettingError(ValueError):
    """A setting the variant does not have (or would ignore); the message lists its settings."""


def setting(
    default: Any,
    *,
    help: str,
    section: str,
    none_means: str | None = None,
    minimum: float | None = None,
    check: Callable[[Any], None] | None = None,
    json_form: str | None = None,
) -> Any:
    """A config field: its default and ``metadata``.

    ``help`` is the one-line help (the command line shows it); ``section`` one of ``SECTIONS``;
    ``none_means`` what ``None`` stands for (shown as the default, and in messages); ``minimum``
    an inclusive lower bound for numbers; ``check`` a validator run before the type check
    (raising ``ValueError``); ``json_form`` how the value is written in JSON, when its type does
    not say it.
    """
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {list(SECTIONS)}, got {section!r}")
    metadata: dict[str, Any] = {"help": help, "section": section}
    for key, value in (
        ("none_means", none_means),
        ("minimum", minimum),
        ("check", check),
        ("json_form", json_form),
    ):
        if value is not None:
            metadata[key] = value
    return field(default=default, metadata=metadata)


# -- checks of single fields that types cannot express -------------------------------------------
def check_tools(tools: Any) -> None:
    """``tools`` is a list whose entries are tool names, ``Tool`` objects or JSON objects
    ``{"name": ..., options}`` (the options go to the tool's factory)."""
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        raise ValueError(f"tools must be a list of tools, got {tools!r:.80}")
    for entry in tools:
        if isinstance(entry, str | Tool):
            continue
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            continue
        raise ValueError(f"a tool is a name, a Tool or an object with a 'name', got {entry!r:.80}")


def check_modules(modules: Any) -> None:
    """``modules`` is ``"rule"``, ``"llm"``, a ``Modules`` bundle, or a mapping role -> backend
    (``"rule"``, ``"llm"``, an endpoint as ``LLMEndpoint`` or JSON object, or a module)."""
    if isinstance(modules, Modules):
        return
    if isinstance(modules, str):
        if modules not in get_args(ModuleBackend):
            raise ValueError(
                f"modules must be one of {list(get_args(ModuleBackend))}, a per-role mapping or "
                f"a Modules bundle, got {modules!r}"
            )
        return
    if not isinstance(modules, Mapping):
        raise ValueError(
            f"modules must be one of {list(get_args(ModuleBackend))}, a per-role mapping or a "
            f"Modules bundle, got {modules!r:.80}"
        )
    unknown = sorted(str(role) for role in set(modules) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown module role(s) {unknown}; roles are {list(ROLES)}")
    for role, choice in modules.items():
        if isinstance(choice, str) and choice not in get_args(ModuleBackend):
            raise ValueError(f"unknown backend {choice!r} for the {role}; available: 'rule', 'llm'")
        if isinstance(choice, Mapping):
            module_choice(choice, role)


def module_choice(choice: Any, role: str = "module") -> Any:
    """A per-role module choice from its JSON form: an endpoint object becomes an ``LLMEndpoint``."""
    if not isinstance(choice, Mapping):
        return choice
    try:
        return LLMEndpoint(**choice)
    except TypeError as error:
        raise ValueError(
            f"the {role}'s endpoint {dict(choice)!r:.120} is not one: {error}"
        ) from None


def modules_spec(modules: Any) -> Any:
    """``modules`` as ``build_modules`` takes it (JSON endpoint objects made ``LLMEndpoint``)."""
    if isinstance(modules, Mapping):
        return {role: module_choice(choice, role) for role, choice in modules.items()}
    return modules


def build_tool(entry: str | Mapping[str, Any] | Tool, retriever_url: str | None = None) -> Tool:
    """A ``Tool`` from a registry name, a JSON object ``{"name": ..., options}`` or a ``Tool``.

    ``retriever_url`` goes to a Search tool that names no retriever itself.
    """
    if isinstance(entry, Tool):
        return entry
    if isinstance(entry, str):
        name, options = entry, {}
    else:
        check_tools([entry])
        name = entry["name"]
        options = {key: value for key, value in entry.items() if key != "name"}
    if retriever_url is not None and canonical_tool_name(name) == "search":
        options.setdefault("retriever_url", retriever_url)
    return make_tool(name, **options)


def check_dataset_corpus(
    corpus: object, tools: Sequence[object], retriever_url: str | None
) -> None:
    """``dataset=`` without ``corpus=`` leaves a local Search tool nothing to search: refuse it.

    Fine when a retriever server answers searches (``retriever_url=`` or the
    ``AGENTFLOW_RETRIEVER_URL`` variable, read when the env is built) or when no tool searches
    locally.
    """
    if corpus is not None:
        return
    remote = bool((retriever_url or os.environ.get(RETRIEVER_URL_ENV_VAR, "")).strip())
    for tool in tools:
        if isinstance(tool, Mapping):
            local = canonical_tool_name(str(tool.get("name"))) == "search" and not (
                remote or str(tool.get("retriever_url") or "").strip()
            )
        elif isinstance(tool, str):
            local = canonical_tool_name(tool) == "search" and not remote
        else:
            local = isinstance(tool, SearchTool) and tool.remote is None
        if local:
            raise ValueError(
                "dataset= without corpus= leaves the Search tool nothing to search: pass "
                "corpus= (a corpus JSONL), or retriever_url= (a retriever server, see "
                "`agentflow-env serve-retriever`), or tools= without Search"
            )


# -- the shared settings ---------------------------------------------------------------------------
_C = TypeVar("_C", bound="EnvConfig")


def _tools(default: tuple[str, ...]) -> Any:
    return setting(
        default,
        help="the executor's tools, by registry name",
        section="tools",
        check=check_tools,
        json_form='a tool is a registry name or an object {"name": ..., options}',
    )


@dataclass(frozen=True, kw_only=True)
class EnvConfig(abc.ABC):
    """The settings every environment variant has. A variant subclasses it with its task
    settings and ``make_task_source``; ``env_id`` names it in messages."""

    env_id: ClassVar[str] = ""
    tasks_note: ClassVar[str] = ""
    """Why the variant lacks another variant's task settings (in the message rejecting them)."""
    aliases: ClassVar[Mapping[str, str]] = {}
    """Older names of settings: alias -> field."""

    # -- tools: names from the registry, Tool objects, or (JSON) {"name": ..., options} objects
    tools: Sequence[str | Mapping[str, Any] | Tool] = _tools(DEFAULT_TOOLS)
    retriever_url: str | None = setting(
        None,
        help="a Search-R1 /retrieve server the Search tool asks instead of a local index",
        section="tools",
        none_means="$AGENTFLOW_RETRIEVER_URL if set, else a local BM25 index",
    )
    tool_timeout_s: float = setting(
        10.0,
        help="seconds a tool call may run before it fails with a timeout observation",
        section="tools",
        minimum=0,
    )
    max_tool_output_chars: int = setting(
        8000,
        help="longer tool outputs are cut, saying how much was dropped",
        section="tools",
        minimum=0,
    )
    # -- modules: "rule", "llm", a per-role mapping (e.g. {"verifier": "llm"}, a role's value may
    # be an endpoint {"base_url": ..., "model": ...}) or a Modules bundle
    modules: ModuleBackend | Mapping[str, Any] | Modules = setting(
        "rule",
        help="frozen modules",
        section="modules",
        check=check_modules,
        json_form="'rule', 'llm' or a per-role mapping of those and endpoint objects",
    )
    llm_endpoint: Any = setting(
        None,
        help="serves the 'llm' roles: an LLMEndpoint (or chat backend), or a mapping role -> one",
        section="modules",
        none_means="the AGENTFLOW_<ROLE>_* / AGENTFLOW_LLM_* environment variables",
    )
    # -- reward
    reward: RewardName = setting("exact_match", help="episode reward", section="reward")
    lambda_calls: float = setting(
        0.0, help="subtracted from the final reward per tool call", section="reward", minimum=0
    )
    lambda_tokens: float = setting(
        0.0, help="subtracted from the final reward per action token", section="reward", minimum=0
    )
    lambda_errors: float = setting(
        0.0,
        help="subtracted from the final reward per invalid action",
        section="reward",
        minimum=0,
    )
    judge: AnswerJudge | None = setting(
        None,
        help="scores the answer when reward is llm_judge",
        section="reward",
        none_means="an LLMJudge on AGENTFLOW_JUDGE_* / AGENTFLOW_LLM_*",
    )
    # -- episode
    max_turns: int = setting(10, help="planner turns per episode", section="episode", minimum=1)
    # -- observations: the tokenizer is a path or hub name, or (in Python) a ChatTokenizer or a
    # Hugging Face tokenizer object
    tokenizer: str | Any | None = setting(
        None,
        help="env tokenizer: a local path, or a Hugging Face hub name in the local cache",
        section="observations",
        none_means="the bundled byte-level BPE",
        json_form="a tokenizer is a path or a hub name",
    )
    prompt_style: PromptStyle = setting(
        "full",
        help="planner prompt: AgentFlow-like with tool cards, or compact",
        section="observations",
    )
    observation_mode: ObservationMode = setting(
        "structured",
        help="structured: each prompt rendered afresh from memory (AgentFlow); flat: the prompt "
        "grows by the action ids and the feedback ids, exactly",
        section="observations",
    )
    max_action_tokens: int | None = setting(
        DEFAULT_MAX_ACTION_TOKENS,
        help="longer actions are cut to this many tokens and flagged",
        section="observations",
        minimum=1,
        none_means="no cap",
    )
    max_prompt_tokens: int | None = setting(
        DEFAULT_MAX_PROMPT_TOKENS,
        help="a longer prompt ends the episode as truncated (end_reason prompt_budget)",
        section="observations",
        minimum=1,
        none_means="no cap",
    )
    max_total_tokens: int | None = setting(
        None,
        help="a longer flat sequence ends the episode as truncated (end_reason total_budget)",
        section="observations",
        minimum=1,
        none_means="no cap",
    )

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for item in dataclasses.fields(self):
            value = _check_field(item, hints[item.name], getattr(self, item.name))
            object.__setattr__(self, item.name, value)
        self.check()

    def check(self) -> None:
        """Rules between fields (each field alone is checked before); none shared ones."""
        return

    @abc.abstractmethod
    def make_task_source(self) -> TaskSource:
        """The variant's task source (may read files or build worlds)."""

    # -- names -----------------------------------------------------------------------------------
    @classmethod
    def variant(cls) -> str:
        """The env id this config is for (the class name for an unregistered one)."""
        return cls.env_id or cls.__name__

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """The names of the settings, in field order."""
        return tuple(item.name for item in dataclasses.fields(cls))

    @classmethod
    def section_settings(cls, *sections: str) -> tuple[str, ...]:
        """The names of the settings in ``sections``, in field order."""
        return tuple(
            item.name for item in dataclasses.fields(cls) if item.metadata["section"] in sections
        )

    @classmethod
    def task_settings(cls) -> tuple[str, ...]:
        """The variant's own settings (where its tasks come from), in field order."""
        shared = set(EnvConfig.settings())
        return tuple(name for name in cls.settings() if name not in shared)

    # -- building ----------------------------------------------------------------------------------
    @classmethod
    def from_kwargs(cls: type[_C], **settings: Any) -> _C:
        """The config from keyword settings: what ``gym.make(id, **settings)`` does.

        A setting of another variant raises ``UnknownSettingError`` (a ``ValueError``) unless it
        is ``None``; so does a name no variant has. Aliases (``aliases``) are accepted.
        """
        return cls(**cls._resolve(settings))

    def updated(self: _C, **settings: Any) -> _C:
        """A copy with ``settings`` changed, checked as ``from_kwargs`` checks them."""
        if not settings:
            return self
        return dataclasses.replace(self, **type(self)._resolve(settings))

    @classmethod
    def from_dict(cls: type[_C], data: Mapping[str, Any]) -> _C:
        """The config from its JSON form (``to_dict``, or a label's ``env_kwargs``).

        Keys that are not settings are rejected with the list of valid ones; JSON forms (tool
        objects, endpoint objects) are kept as they are and turned into objects by the env.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.variant()} settings must be an object, got {data!r:.80}")
        keys = [key for key in data if not isinstance(key, str)]
        if keys:
            raise UnknownSettingError(f"setting names are strings, got {keys!r:.80}")
        return cls.from_kwargs(**data)

    def to_dict(self, *, defaults: bool = True) -> dict[str, Any]:
        """The JSON form (``json.dumps`` writes it); ``defaults=False`` leaves out the settings
        equal to their defaults. Raises ``TypeError`` naming a setting that holds an object with
        no JSON form."""
        out: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if not defaults and _same(value, item.default):
                continue
            try:
                out[item.name] = _json_value(value)
            except _NoJSONForm as error:
                hint = item.metadata.get("json_form", "set it in Python instead")
                raise TypeError(
                    f"{type(self).__name__}.to_dict cannot serialise {item.name}={value!r:.80}: "
                    f"{error} has no JSON form ({hint})"
                ) from None
        return out

    @classmethod
    def _resolve(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        own = set(cls.settings())
        elsewhere = _all_settings() - own
        given = [name for name in settings if name not in own and name not in cls.aliases]
        unused = [n for n in given if n in elsewhere and settings[n] is not None]
        if unused:
            own_tasks = ", ".join(f"{name}=" for name in cls.task_settings())
            raise UnknownSettingError(
                f"{cls.variant()} does not use {', '.join(f'{n}=' for n in unused)}: "
                f"{cls.tasks_note} (settings: {own_tasks})"
            )
        unknown = [name for name in given if name not in elsewhere]
        if unknown:
            raise UnknownSettingError(
                f"{cls.variant()} has no setting {', '.join(f'{n}=' for n in unknown)}; "
                f"its settings are {', '.join(cls.settings())}"
            )
        out = {name: value for name, value in settings.items() if name in own}
        for alias, target in cls.aliases.items():
            value = settings.get(alias)
            if value is None:
                continue
            current = out.get(target)
            if current is not None and current != value:
                raise ValueError(
                    f"{alias}={value} and {target}={current} name the same "
                    f"{target.replace('_', ' ')}: give one of them"
                )
            out[target] = value
        return out


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
        return not _same(getattr(self, name), _defaults(type(self))[name])

    def make_task_source(self) -> TaskSource:
        if self.tasks is not None:
            return ListTaskSource(self.tasks)
        if self.task_source is not None:
            return self.task_source
        if self.dataset is not None:
            check_dataset_corpus(self.corpus, self.tools, self.retriever_url)
            return dataset_source(
                self.dataset,
                self.corpus,
                split=self.dataset_split,
                limit=self.dataset_limit,
                index_cache_dir=self.index_cache_dir,
                warm_index=not self.retriever_url,
            )
        return synthetic_source(
            world_seed=self.world_seed,
            world_size=self.world_size,
            hops=self.hops,
            kinds=self.kinds,
            split=self.split,
            fresh_world=self.fresh_world,
        )


_WORLD_SETTINGS = ("hops", "kinds", "split", "world_seed", "world_size", "fresh_world")
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

    tools: Sequence[str | Mapping[str, Any] | Tool] = _tools(CODE_TOOLS)
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


# -- checking a value against a field's type ---------------------------------------------------
@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    return {item.name: item.default for item in dataclasses.fields(cls)}


def _variants(root: type[EnvConfig] = EnvConfig) -> list[type[EnvConfig]]:
    found: list[type[EnvConfig]] = []
    for sub in root.__subclasses__():
        found += [sub, *_variants(sub)]
    return found


def _all_settings() -> set[str]:
    """The settings of every variant (a name none has is unknown, not merely unused)."""
    names = set(EnvConfig.settings())
    for cls in _variants():
        names.update(cls.settings())
    return names


def _same(value: Any, default: Any) -> bool:
    if default is None:
        return value is None
    return bool(value is default or value == default)


def _members(hint: Any) -> tuple[Any, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return (hint,)


def _is_sequence(hint: Any) -> bool:
    return get_origin(hint) in (Sequence, list, tuple)


def _is_literal(hint: Any) -> bool:
    return get_origin(hint) is Literal


def _matches(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin = get_origin(hint)
    if origin is Literal:
        return any(type(value) is type(choice) and value == choice for choice in get_args(hint))
    if origin in (Union, types.UnionType):
        return any(_matches(value, member) for member in get_args(hint))
    if _is_sequence(hint):
        (item,) = get_args(hint)[:1] or (Any,)
        return isinstance(value, list | tuple) and all(_matches(v, item) for v in value)
    if origin is Mapping:
        return isinstance(value, Mapping)
    if origin is os.PathLike:
        return isinstance(value, os.PathLike)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if getattr(hint, "_is_protocol", False) and not getattr(hint, "_is_runtime_protocol", False):
        return True  # a protocol isinstance cannot check
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "None"
    if _is_literal(hint):
        return f"one of {list(get_args(hint))}"
    members = _members(hint)
    if len(members) > 1:
        parts = [_describe(member) for member in members]
        return ", ".join(parts[:-1]) + " or " + parts[-1]
    if _is_sequence(hint):
        return f"a list of {_describe(get_args(hint)[0])} items"
    names = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    if get_origin(hint) is Mapping:
        return "a mapping"
    if get_origin(hint) is os.PathLike:
        return "a path"
    return f"a {getattr(hint, '__name__', str(hint))}"


def _check_field(item: dataclasses.Field, hint: Any, value: Any) -> Any:
    """``value`` checked against the field's type, choices and bounds; lists become tuples."""
    name, meta = item.name, item.metadata
    check = meta.get("check")
    if check is not None:
        check(value)
    members = _members(hint)
    optional = type(None) in members
    sequences = [m for m in members if _is_sequence(m)]
    if sequences and isinstance(value, list):
        value = tuple(value)
    one_or_many = [get_args(s)[0] for s in sequences if get_args(s)[0] in members]
    if one_or_many and _is_literal(one_or_many[0]) and value is not None:
        _check_choices(name, value, get_args(one_or_many[0]))
    if not _matches(value, hint):
        literals = [m for m in members if _is_literal(m)]
        if literals and len(literals) == len(members) - optional:
            choices = [c for m in literals for c in get_args(m)]
            none_means = meta.get("none_means")
            alternative = (f" (or None: {none_means})" if none_means else " (or None)") * optional
            raise ValueError(f"{name} must be one of {choices}{alternative}, got {value!r:.80}")
        raise ValueError(f"{name} must be {_describe(hint)}, got {value!r:.80}")
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        minimum = meta.get("minimum")
        if minimum is not None and value < minimum:
            raise ValueError(f"{name} must be >= {minimum}{' or None' * optional}, got {value!r}")
    return value


def _check_choices(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """One choice or a list of them: unknown ones, or none at all, are named."""
    values = [value] if isinstance(value, str) else list(value)
    unknown = [v for v in values if v not in choices]
    if unknown or not values:
        found = f"unknown {name} {unknown}" if unknown else f"no {name}"
        raise ValueError(f"{found}; expected some of {list(choices)}")


class _NoJSONForm(Exception):
    """The value (named in the message) has no JSON form."""


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v) for k, v in value.items()}
    raise _NoJSONForm(f"a {type(value).__name__} object")


# -- command-line options ------------------------------------------------------------------------
@dataclass(frozen=True)
class CliOption:
    """How a setting is given on a command line: a switch, a value or a comma-separated list."""

    kind: Literal["flag", "value", "list"]
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    takes_none: bool = False  # "none" gives None (an optional setting whose default is not)


def _scalar(hint: Any) -> Any:
    """The command-line scalar a type offers: a ``Literal``, ``int``, ``float`` or ``str``."""
    members = [m for m in _members(hint) if m is not type(None)]
    literals = [m for m in members if _is_literal(m)]
    if literals:
        return literals[0]
    for kind in (int, float, str):
        if kind in members:
            return kind
    if any(get_origin(m) is os.PathLike for m in members):
        return str
    return None


def _list_items(hint: Any) -> Any:
    """The item type of the list a type offers (``None`` if it offers none)."""
    sequences = [m for m in _members(hint) if _is_sequence(m)]
    return _scalar(get_args(sequences[0])[0]) if sequences else None


def cli_option(item: dataclasses.Field, hint: Any) -> CliOption | None:
    """How setting ``item`` (of type ``hint``) is given on a command line; ``None`` when only
    Python can give it (objects such as a task source or a judge)."""
    members = _members(hint)
    if bool in members:
        return CliOption("flag")
    if any(_is_sequence(m) for m in members):
        items = _list_items(hint)
        if items is None:
            return None
        parse = _int_parser(None, False) if items is int else str
        return CliOption("list", _list_parser(parse))
    scalar = _scalar(hint)
    if scalar is None:
        return None
    if _is_literal(scalar):
        return CliOption("value", choices=tuple(str(c) for c in get_args(scalar)))
    takes_none = type(None) in members and item.default is not None
    minimum = item.metadata.get("minimum")
    if scalar is int:
        return CliOption("value", _int_parser(minimum, takes_none), takes_none=takes_none)
    if scalar is float:
        return CliOption("value", _float_parser(minimum))
    return CliOption("value", str)


def _int_parser(minimum: float | None, takes_none: bool) -> Callable[[str], int | None]:
    wanted = "a positive integer" if minimum == 1 else "an integer"
    if minimum is not None and minimum != 1:
        wanted = f"an integer >= {minimum}"
    wanted += " or none" * takes_none

    def parse(text: str) -> int | None:
        if takes_none and text.strip().lower() == "none":
            return None
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


def _float_parser(minimum: float | None) -> Callable[[str], float]:
    wanted = "a number" if minimum is None else f"a number >= {minimum}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


def _list_parser(parse: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    def parse_list(text: str) -> tuple[Any, ...]:
        return tuple(parse(part.strip()) for part in text.split(",") if part.strip())

    return parse_list


def _shown(value: Any, meta: Mapping[str, Any]) -> str | None:
    """A default as the help shows it (``None`` when there is nothing to show)."""
    if value is None:
        return meta.get("none_means")
    if value is False:
        return None
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _per_variant(values: Mapping[str, str | None]) -> str | None:
    """One text when every variant agrees, else ``text on variant; ...``."""
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    return "; ".join(f"{text} on {env_id}" for env_id, text in values.items() if text is not None)


def add_config_arguments(
    parser: argparse.ArgumentParser,
    configs: Mapping[str, type[EnvConfig]],
    *,
    only: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    flags: Mapping[str, str] | None = None,
    shown_defaults: Mapping[str, str] | None = None,
    required: Sequence[str] = (),
    title: str = "env settings",
) -> tuple[str, ...]:
    """Add one option per setting of ``configs`` (env id -> config class) to ``parser``, in one
    argument group per section; returns the settings added (each option's ``dest`` is its
    setting's name; read them back with ``settings_from_args``).

    An option is ``--name-with-dashes`` (or ``flags[name]``), typed from the field: a ``Literal``
    gives choices, a list is comma-separated, a ``bool`` is a switch, an optional number whose
    default is not ``None`` also takes ``none``. Options default to absent, so only what the user
    gave reaches the env; the help shows the config's default (``shown_defaults`` overrides what
    it says) and says which variants have a setting when not all do. Settings only Python can
    give (objects) get no option.
    """
    flags = flags or {}
    owners: dict[str, list[str]] = {}
    for env_id, cls in configs.items():
        for name in cls.settings():
            owners.setdefault(name, []).append(env_id)
    names = [n for n in owners if (only is None or n in only) and n not in exclude]
    groups: dict[str, Any] = {}
    added: list[str] = []
    for section in SECTIONS:
        for name in names:
            first = configs[owners[name][0]]
            item = first.__dataclass_fields__[name]
            option = cli_option(item, _type_hints(first)[name])
            if item.metadata["section"] != section or option is None:
                continue
            if section not in groups:
                groups[section] = parser.add_argument_group(f"{title}: {section}")
            kwargs = _argument_kwargs(name, option, owners[name], configs, shown_defaults or {})
            flag = flags.get(name, "--" + name.replace("_", "-"))
            if option.kind != "flag" and option.choices is None:
                kwargs["metavar"] = flag.lstrip("-").replace("-", "_").upper()
            groups[section].add_argument(
                flag,
                dest=name,
                required=name in required,
                default=argparse.SUPPRESS,
                **kwargs,
            )
            added.append(name)
    return tuple(added)


def _argument_kwargs(
    name: str,
    option: CliOption,
    env_ids: Sequence[str],
    configs: Mapping[str, type[EnvConfig]],
    shown_defaults: Mapping[str, str],
) -> dict[str, Any]:
    fields = {env_id: configs[env_id].__dataclass_fields__[name] for env_id in env_ids}
    hints = {env_id: _type_hints(configs[env_id])[name] for env_id in env_ids}
    meta = fields[env_ids[0]].metadata
    text = meta["help"]
    if option.kind == "list":
        text += ", comma-separated"
        items = {e: _list_items(hint) for e, hint in hints.items()}
        if all(_is_literal(i) for i in items.values()):
            text += ": " + str(_per_variant({e: ",".join(get_args(i)) for e, i in items.items()}))
    if option.takes_none:
        text += f"; none: {meta['none_means']}"
    if len(env_ids) < len(configs):
        text += f" ({', '.join(env_ids)} only)"
    default = shown_defaults.get(name) or _per_variant(
        {env_id: _shown(item.default, item.metadata) for env_id, item in fields.items()}
    )
    if default:
        text += f" (default: {default})"
    kwargs: dict[str, Any] = {"help": text.replace("%", "%%")}
    if option.kind == "flag":
        kwargs["action"] = "store_true"
    elif option.choices is not None:
        choices: list[str] = []
        for hint in hints.values():
            choices += [str(c) for c in get_args(_scalar(hint)) if str(c) not in choices]
        kwargs["choices"] = choices
    else:
        kwargs["type"] = option.parse
    return kwargs


def settings_from_args(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The settings among ``names`` that the command line gave."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


__all__ = [
    "CODE_TOOLS",
    "DEFAULT_TOOLS",
    "SECTIONS",
    "CodeEnvConfig",
    "CodeKind",
    "EnvConfig",
    "ModuleBackend",
    "ObservationMode",
    "PromptStyle",
    "RewardName",
    "SearchEnvConfig",
    "SearchKind",
    "Split",
    "UnknownSettingError",
    "WorldSize",
    "add_config_arguments",
    "build_tool",
    "check_dataset_corpus",
    "check_modules",
    "check_tools",
    "CliOption",
    "cli_option",
    "module_choice",
    "modules_spec",
    "setting",
    "settings_from_args",
]
