"""``EnvConfig``: the settings every environment variant shares (tools, frozen modules,
reward, episode limits, observations), and building, updating and writing a config."""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from agentflow_env.base.settings import read_env_var
from agentflow_env.envs.config.checks import check_modules, check_tools
from agentflow_env.envs.config.choices import (
    DEFAULT_TOOLS,
    ModuleBackend,
    ObservationMode,
    PromptStyle,
    RewardName,
    RewardShaping,
    Termination,
)
from agentflow_env.envs.config.fields import (
    NoJSONForm,
    UnknownSettingError,
    check_field,
    equals_default,
    field_defaults,
    json_value,
    setting,
    type_hints,
)
from agentflow_env.envs.config.presets import Preset, with_preset
from agentflow_env.llm.judge import ChoiceFallback
from agentflow_env.retrieval.dense import DEFAULT_DENSE_MODEL
from agentflow_env.retrieval.hybrid import RetrieverKind
from agentflow_env.retrieval.remote import retriever_urls
from agentflow_env.tasks.base import TaskSource
from agentflow_env.tools.base import Tool
from agentflow_env.tools.texts import AgentFlowWikipedia
from agentflow_env.workflow.agentflow_source import SOURCE_ENV_VAR, read_agentflow_source
from agentflow_env.workflow.config import (
    AgentFlowScript,
    AnswerJudge,
    RewardConfig,
    SessionConfig,
)
from agentflow_env.workflow.frozen_modules import Modules
from agentflow_env.workflow.prompt_pack import PromptPack, source_label
from agentflow_env.workflow.prompts import style_rules
from agentflow_env.workflow.rewards import check_reward, reward_names

_C = TypeVar("_C", bound="EnvConfig")


def session_setting(name: str, **metadata: Any) -> Any:
    """A setting the session reads: its name, type and default are the session's own
    (``RewardConfig``'s or ``SessionConfig``'s field ``name``); ``metadata`` as ``setting``'s.
    ``AgentFlowEnv`` hands these to its sessions by name (``SessionConfig.from_settings``)."""
    for owner in (RewardConfig, SessionConfig):
        defaults = field_defaults(owner)
        if name in defaults:
            return setting(defaults[name], **metadata)
    raise ValueError(f"the session has no setting {name!r}")


def check_retriever_url(value: Any) -> None:
    """A URL, comma-separated URLs or a list of URLs, each http:// or https:// (``""``: none)."""
    if isinstance(value, str) or (
        isinstance(value, list | tuple) and all(isinstance(url, str) for url in value)
    ):
        try:
            retriever_urls(value)
        except ValueError as error:
            raise ValueError(f"retriever_url: {error}") from None


def tools_setting(default: tuple[str, ...]) -> Any:
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
    tools: Sequence[str | Mapping[str, Any] | Tool] = tools_setting(DEFAULT_TOOLS)
    retriever_url: str | Sequence[str] | None = setting(
        None,
        help="a Search-R1 /retrieve server the Search tool asks instead of a local index; "
        "replicas of it: a list of URLs or comma-separated URLs (kept as one such string), "
        "balanced with a retry on another replica",
        section="tools",
        none_means="$AGENTFLOW_RETRIEVER_URL if set, else a local index (retriever=)",
        check=check_retriever_url,
    )
    retriever: RetrieverKind = setting(
        "bm25",
        help="how the Search tool ranks a local corpus: bm25 (keywords), dense "
        "(sentence-transformers + FAISS, extra 'dense') or hybrid (reciprocal-rank fusion of both)",
        section="tools",
    )
    dense_model: str | None = setting(
        None,
        help="the encoder of dense and hybrid retrieval: a local sentence-transformers directory "
        "or a Hugging Face name in the local cache",
        section="tools",
        none_means=f"{DEFAULT_DENSE_MODEL} (Search-R1's)",
    )
    tool_timeout_s: float = session_setting(
        "tool_timeout_s",
        help="seconds a tool call may run before it fails with a timeout observation",
        section="tools",
        minimum=0,
    )
    max_tool_output_chars: int = session_setting(
        "max_tool_output_chars",
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
    reward: RewardName = session_setting(
        "reward",
        help="episode reward",
        section="reward",
        check=check_reward,
        choices=reward_names,
    )
    lambda_calls: float = session_setting(
        "lambda_calls",
        help="subtracted from the final reward per tool call",
        section="reward",
        minimum=0,
    )
    lambda_tokens: float = session_setting(
        "lambda_tokens",
        help="subtracted from the final reward per action token",
        section="reward",
        minimum=0,
    )
    lambda_errors: float = session_setting(
        "lambda_errors",
        help="subtracted from the final reward per invalid action",
        section="reward",
        minimum=0,
    )
    reward_shaping: RewardShaping = session_setting(
        "reward_shaping",
        help="progress: add potential-based per-turn rewards w * (Phi(s') - Phi(s)), Phi = the "
        "fraction of the task's gold steps done (else of its sub-questions resolved); the terminal "
        "reward is unchanged",
        section="reward",
    )
    shaping_weight: float = session_setting(
        "shaping_weight", help="w, the weight of the shaping rewards", section="reward", minimum=0
    )
    judge: AnswerJudge | None = session_setting(
        "judge",
        help="scores the answer when reward is llm_judge",
        section="reward",
        none_means="an LLMJudge on AGENTFLOW_JUDGE_* / AGENTFLOW_LLM_*",
    )
    choice_fallback: ChoiceFallback | None = setting(
        None,
        help="for the LLM judge the env builds: a multiple-choice answer that names no option "
        "counts as the first listed option (agentflow, as AgentFlow's scoring script counts it; "
        "the agentflow_eval preset's default; the score without it is kept in the diagnostics) "
        "or as none (none)",
        section="reward",
        none_means="as none: it scores 0",
    )
    # -- episode
    max_turns: int = session_setting(
        "max_turns", help="planner turns per episode", section="episode", minimum=1
    )
    time_limit_s: float | None = session_setting(
        "time_limit_s",
        help="wall-clock seconds per episode; the turn that ends past it ends the episode "
        "(end_reason time_limit)",
        section="episode",
        minimum=0,
        none_means="no limit",
    )
    verify_invalid_turns: bool = session_setting(
        "verify_invalid_turns",
        help="the verifier also judges turns that named no usable tool (as AgentFlow's does)",
        section="episode",
    )
    termination: Termination = session_setting(
        "termination",
        help="who ends an episode before its limits: verifier (its STOP, AgentFlow's way), "
        "planner (a 'Tool Name: Finish' action with a 'Final Answer:'; the verdict is shown, "
        "not binding) or both",
        section="episode",
    )
    preset: Preset | None = setting(
        None,
        help="settings that reproduce another setup (agentflow_eval, agentflow_train: "
        "AgentFlow's prompts, tools, modules and limits); settings given beside it win",
        section="episode",
        none_means="none",
    )
    log_path: str | None = setting(
        None,
        help="append every episode's turns to this JSON Lines trajectory log as they happen "
        "(read it with read_turn_log, view it with agentflow-env view)",
        section="episode",
        none_means="no log",
    )
    # -- observations: the tokenizer is a path or hub name, or (in Python) a ChatTokenizer or a
    # Hugging Face tokenizer object
    tokenizer: str | Any | None = setting(
        None,
        help="env tokenizer: a local path, or a Hugging Face hub name in the local cache",
        section="observations",
        none_means="the bundled byte-level BPE",
        json_form="a tokenizer is a path or a hub name",
    )
    prompt_style: PromptStyle = session_setting(
        "prompt_style",
        help="planner prompt: this project's (tool cards, memory, step counter), compact, or "
        "agentflow (AgentFlow's own format, for planners trained with its code)",
        section="observations",
    )
    agentflow_source: str | os.PathLike[str] | None = setting(
        None,
        help="the top folder of your own AgentFlow checkout: with prompt_style agentflow, every "
        "sentence of AgentFlow's prompts, its tool cards, its memory text for an unknown tool and "
        "its training answer-tag sentence are read from it (parsed, never run)",
        section="observations",
        none_means=f"${SOURCE_ENV_VAR} if set, else this project's own wording",
    )
    agentflow_script: AgentFlowScript | None = session_setting(
        "agentflow_script",
        help="reproduce AgentFlow's evaluation script (eval) or its training rollout (train) "
        "where the two differ (the presets set it)",
        section="observations",
        none_means="this project's own behaviour",
    )
    agentflow_wikipedia: AgentFlowWikipedia | None = session_setting(
        "agentflow_wikipedia",
        help="with prompt_style agentflow, which result AgentFlow's Wikipedia tool gives: "
        "as_run, what its published code returns (no page picked, every page under the other "
        "pages; the presets' default), or as_intended, the picked pages answered",
        section="tools",
        none_means="this project's own result",
    )
    agentflow_commit: str | None = setting(
        None,
        help="the commit the AgentFlow wording must come from: a checkout or pack at another "
        "commit is refused (labels written from a source record it)",
        section="observations",
        none_means="any commit",
    )
    show_sub_questions: bool = session_setting(
        "show_sub_questions",
        help="show the query analysis's sub-questions and the verifier's open questions to the "
        "planner (rule modules take them from the task: a hint AgentFlow never gives)",
        section="observations",
    )
    observation_mode: ObservationMode = session_setting(
        "observation_mode",
        help="structured: each prompt rendered afresh from memory (AgentFlow); flat: the prompt "
        "grows by the action ids and the feedback ids, exactly",
        section="observations",
    )
    max_action_tokens: int | None = session_setting(
        "max_action_tokens",
        help="longer actions are cut to this many tokens and flagged",
        section="observations",
        minimum=1,
        none_means="no cap",
    )
    max_prompt_tokens: int | None = session_setting(
        "max_prompt_tokens",
        help="a longer prompt ends the episode as truncated (end_reason prompt_budget)",
        section="observations",
        minimum=1,
        none_means="no cap",
    )
    max_total_tokens: int | None = session_setting(
        "max_total_tokens",
        help="a longer flat sequence ends the episode as truncated (end_reason total_budget)",
        section="observations",
        minimum=1,
        none_means="no cap",
    )

    def __post_init__(self) -> None:
        hints = type_hints(type(self))
        for item in dataclasses.fields(self):
            value = check_field(item, hints[item.name], getattr(self, item.name))
            object.__setattr__(self, item.name, value)
        if isinstance(self.retriever_url, tuple):  # replicas: one comma-separated string
            object.__setattr__(self, "retriever_url", ",".join(self.retriever_url))
        if self.agentflow_source is not None and not style_rules(self.prompt_style).renders_pack:
            raise ValueError(
                "agentflow_source= supplies AgentFlow's wording to prompt_style='agentflow' "
                f"(preset agentflow_eval or agentflow_train), not to {self.prompt_style!r}"
            )
        self.check()

    def check(self) -> None:
        """Rules between fields (each field alone is checked before); none shared ones."""
        return

    @abc.abstractmethod
    def make_task_source(self) -> TaskSource:
        """The variant's task source (may read files or build worlds)."""

    # -- AgentFlow's wording -----------------------------------------------------------------------
    def agentflow_source_path(self) -> str | None:
        """The AgentFlow checkout the env takes its wording from: ``agentflow_source``, else
        ``$AGENTFLOW_SOURCE`` (only under ``prompt_style="agentflow"``); ``None``: its own."""
        if not style_rules(self.prompt_style).renders_pack:
            return None
        if self.agentflow_source is not None:
            return os.fspath(self.agentflow_source)
        return read_env_var(SOURCE_ENV_VAR)

    def agentflow_wording(self) -> PromptPack | None:
        """AgentFlow's wording read from the checkout (``agentflow_source_path``), or ``None``
        for this project's own; it renders as ``agentflow_script`` says (``for_script``). A
        checkout that lacks a piece raises ``ValueError`` naming the file and the piece."""
        path = self.agentflow_source_path()
        if path is None:
            return None
        pack = read_agentflow_source(path)
        if self.agentflow_commit is not None and pack.commit != self.agentflow_commit:
            raise ValueError(
                f"agentflow_source={path} is {pack.label}, but these settings were written "
                f"for commit {self.agentflow_commit} (agentflow_commit=): give the checkout or "
                "pack at that commit"
            )
        return pack.for_script(self.agentflow_script)  # whose no-tool memory text it shows

    def wording_label(self) -> str:
        """``own``, or ``AgentFlow's, from PATH at COMMIT`` (for summaries and checks)."""
        wording = self.agentflow_wording()
        return source_label(None) if wording is None else wording.label

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
            if not defaults and equals_default(value, item.default):
                continue
            try:
                out[item.name] = json_value(value)
            except NoJSONForm as error:
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
            raise UnknownSettingError(_unused_message(cls, unused))
        unknown = [name for name in given if name not in elsewhere]
        if unknown:
            raise UnknownSettingError(
                f"{cls.variant()} has no setting {', '.join(f'{n}=' for n in unknown)}; "
                f"its settings are {', '.join(cls.settings())}"
            )
        out = with_preset({name: value for name, value in settings.items() if name in own}, own)
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


def _variants(root: type[EnvConfig] = EnvConfig) -> list[type[EnvConfig]]:
    found: list[type[EnvConfig]] = []
    for sub in root.__subclasses__():
        found += [sub, *_variants(sub)]
    return found


def _unused_message(cls: type[EnvConfig], unused: Sequence[str]) -> str:
    """Why ``cls`` refuses the other variants' settings ``unused``, and what it takes instead.
    A variant with no ``tasks_note`` names the variants the settings belong to."""
    names = ", ".join(f"{name}=" for name in unused)
    owners = dict.fromkeys(
        other.variant()
        for other in _variants()
        if other.env_id and other is not cls and set(unused) & set(other.settings())
    )
    them = "it is a setting" if len(unused) == 1 else "they are settings"
    note = cls.tasks_note or f"{them} of {', '.join(owners) or 'another variant'}"
    own = ", ".join(f"{name}=" for name in cls.task_settings()) or "only the shared ones"
    return f"{cls.variant()} does not use {names}: {note} (settings: {own})"


def _all_settings() -> set[str]:
    """The settings of every variant (a name none has is unknown, not merely unused)."""
    names = set(EnvConfig.settings())
    for cls in _variants():
        names.update(cls.settings())
    return names
