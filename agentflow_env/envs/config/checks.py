"""Checks of single settings that types cannot express (tools, frozen modules, a dataset's
corpus), and the objects built from their JSON forms (``build_tool``, ``module_choice``,
``modules_spec``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from agentflow_env.envs.config.choices import ModuleBackend
from agentflow_env.llm.client import LLMEndpoint
from agentflow_env.modules import ROLES
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import canonical_tool_name, make_tool
from agentflow_env.tools.search import RETRIEVER_URL_ENV_VAR, SearchTool
from agentflow_env.workflow.frozen_modules import Modules


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
