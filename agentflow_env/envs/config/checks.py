"""Checks of single settings that types cannot express (tools, frozen modules, a dataset's
corpus), and the objects built from their JSON forms (``build_tool``, ``module_choice``,
``modules_spec``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args

from agentflow_env.base.settings import env_var_text, llm_env_var, read_env_var
from agentflow_env.envs.config.choices import ModuleBackend
from agentflow_env.llm.client import LLMEndpoint, as_backend
from agentflow_env.modules import ROLES
from agentflow_env.retrieval.remote import retriever_urls
from agentflow_env.tools.agentflow.model import TOOLS_LLM_ROLE
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import canonical_tool_name, tool_factory
from agentflow_env.tools.search import RETRIEVER_URL_ENV_VAR, SearchTool
from agentflow_env.tools.variants import (
    VariantOptions,
    split_variant_options,
    with_variant,
)
from agentflow_env.workflow.frozen_modules import Modules


def check_tools(tools: Any) -> None:
    """``tools`` is a list whose entries are tool names, ``Tool`` objects or JSON objects
    ``{"name": ..., options}``: the variant options (``rename``, ``description``,
    ``failure_rate``, ``max_output_chars``, ``latency_s``; ``agentflow_env.tools.variants``) are
    checked here, the others go to the tool's factory. Two entries whose names (after renames)
    the planner could not tell apart are refused."""
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        raise ValueError(f"tools must be a list of tools, got {tools!r:.80}")
    seen: dict[str, str] = {}
    for entry in tools:
        label = _tool_label(entry)
        key = canonical_tool_name(_planner_name(entry))
        if key in seen:
            raise ValueError(
                f"tools {seen[key]} and {label} have the same name for the planner: "
                "leave one out or rename one"
            )
        seen[key] = label


def _tool_label(entry: Any) -> str:
    """How an entry is named in messages (its options checked on the way)."""
    if isinstance(entry, str):
        return repr(entry)
    if isinstance(entry, Tool):
        return repr(entry.name)
    if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
        try:
            _, variant = split_variant_options(entry)
        except ValueError as error:
            raise ValueError(f"tool {entry['name']!r}: {error}") from None
        if variant.rename is None:
            return repr(entry["name"])
        return f"{variant.rename!r} (renamed {entry['name']!r})"
    raise ValueError(f"a tool is a name, a Tool or an object with a 'name', got {entry!r:.80}")


def _planner_name(entry: str | Tool | Mapping[str, Any]) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, Tool):
        return entry.name
    return str(entry.get("rename") or entry["name"])


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


def build_tool(
    entry: str | Mapping[str, Any] | Tool,
    retriever_url: str | Sequence[str] | None = None,
    *,
    retriever: str | None = None,
    dense_model: str | None = None,
) -> Tool:
    """A ``Tool`` from a registry name, a JSON object ``{"name": ..., options}`` or a ``Tool``.

    The object's variant options (``agentflow_env.tools.variants.VARIANT_OPTIONS``) wrap the
    built tool in a ``ToolVariant``; the other options go to the factory. ``retriever_url`` goes
    to a Search tool (or another that ``uses_retriever``) that names no retriever itself;
    ``retriever`` and ``dense_model`` (how a local corpus is ranked) to a Search tool. A tool
    class that ``requires_llm`` gets its model from the ``"llm"`` option (an endpoint object
    ``{"base_url": ..., "model": ...}``, an ``LLMEndpoint`` or a chat backend), else from the
    ``AGENTFLOW_TOOLS_*`` / ``AGENTFLOW_LLM_*`` variables when they name an endpoint, else none.
    """
    if isinstance(entry, Tool):
        return entry
    options: dict[str, Any] = {}
    variant: VariantOptions | None = None
    if isinstance(entry, str):
        name = entry
    else:
        check_tools([entry])
        name = entry["name"]
        options, variant = split_variant_options(
            {key: value for key, value in entry.items() if key != "name"}
        )
    factory = tool_factory(name)
    takes_retriever = canonical_tool_name(name) == "search" or getattr(
        factory, "uses_retriever", False
    )
    if retriever_url is not None and takes_retriever:
        options.setdefault("retriever_url", retriever_url)
    if canonical_tool_name(name) == "search":
        for key, value in (("retriever", retriever), ("dense_model", dense_model)):
            if value is not None:
                options.setdefault(key, value)
    if getattr(factory, "requires_llm", False):
        _give_tool_llm(name, options)
    tool = factory(**options)
    return tool if variant is None else with_variant(tool, variant)


def _give_tool_llm(name: str, options: dict[str, Any]) -> None:
    """Put the model a tool needs into its ``options["llm"]`` (left out when none is set)."""
    llm = options.get("llm")
    if llm is None:
        llm = tools_endpoint_from_env()
    elif isinstance(llm, Mapping):
        llm = module_choice(llm, f"tool {name}")
    if isinstance(llm, LLMEndpoint):
        llm = as_backend(llm)
    if llm is not None:
        options["llm"] = llm


def tools_endpoint_from_env(environ: Mapping[str, str] | None = None) -> LLMEndpoint | None:
    """The tools' endpoint from ``AGENTFLOW_TOOLS_*`` over ``AGENTFLOW_LLM_*``, or ``None`` when
    neither names a base URL or a model (a half-set endpoint is an error)."""
    roles = (TOOLS_LLM_ROLE, "llm")
    if not any(
        env_var_text(llm_env_var(role, key), environ)
        for role in roles
        for key in ("BASE_URL", "MODEL")
    ):
        return None
    return LLMEndpoint.from_env(TOOLS_LLM_ROLE, environ)


def _searches_locally(name: str) -> bool:
    """The registered tool ``name`` searches a corpus (Search, or a retriever-backed tool)."""
    if canonical_tool_name(name) == "search":
        return True
    try:
        return bool(getattr(tool_factory(name), "uses_retriever", False))
    except KeyError:
        return False


def check_dataset_corpus(
    corpus: object, tools: Sequence[object], retriever_url: str | Sequence[str] | None
) -> None:
    """``dataset=`` without ``corpus=`` leaves a local Search tool nothing to search: refuse it.

    Fine when a retriever server answers searches (``retriever_url=`` or the
    ``AGENTFLOW_RETRIEVER_URL`` variable, read when the env is built) or when no tool searches
    locally.
    """
    if corpus is not None:
        return
    remote = bool(retriever_urls(retriever_url or read_env_var(RETRIEVER_URL_ENV_VAR) or ""))
    for tool in tools:
        if isinstance(tool, Mapping):
            local = _searches_locally(str(tool.get("name"))) and not (
                remote or retriever_urls(tool.get("retriever_url") or "")
            )
        elif isinstance(tool, str):
            local = _searches_locally(tool) and not remote
        else:
            search = tool if isinstance(tool, SearchTool) else getattr(tool, "search", None)
            local = isinstance(search, SearchTool) and search.remote is None
        if local:
            raise ValueError(
                "dataset= without corpus= leaves the search tools nothing to search: pass "
                "corpus= (a corpus JSONL), or retriever_url= (a retriever server, see "
                "`agentflow-env serve-retriever`), or tools= without a local search tool"
            )
