"""Frozen-module backends and how an environment picks them.

The protocols the backends implement (``Initializer``, ``Executor``, ``Verifier``, ``Generalist``,
the ``Modules`` bundle) belong to the workflow that calls them,
``agentflow_env.workflow.frozen_modules``, and ``ModuleError`` to ``agentflow_env.base.errors``;
both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentflow_env.base.errors import ModuleError
from agentflow_env.llm.client import LLMEndpoint
from agentflow_env.modules.agentflow_llm import (
    AgentFlowExecutor,
    AgentFlowGeneralist,
    AgentFlowInitializer,
    AgentFlowVerifier,
)
from agentflow_env.modules.llm import LLMExecutor, LLMGeneralist, LLMInitializer, LLMVerifier
from agentflow_env.modules.rule import RuleExecutor, RuleGeneralist, RuleInitializer, RuleVerifier
from agentflow_env.workflow.frozen_modules import (
    Executor,
    FinalAnswer,
    Generalist,
    Initializer,
    Modules,
    Verification,
    Verifier,
)
from agentflow_env.workflow.prompt_pack import PromptPack
from agentflow_env.workflow.prompts import style_rules

ROLES = ("initializer", "executor", "verifier", "generalist")
_RULE = {
    "initializer": RuleInitializer,
    "executor": RuleExecutor,
    "verifier": RuleVerifier,
    "generalist": RuleGeneralist,
}
_LLM = {
    "initializer": LLMInitializer,
    "executor": LLMExecutor,
    "verifier": LLMVerifier,
    "generalist": LLMGeneralist,
}
_AGENTFLOW_LLM = {
    "initializer": AgentFlowInitializer,
    "executor": AgentFlowExecutor,
    "verifier": AgentFlowVerifier,
    "generalist": AgentFlowGeneralist,
}


def build_modules(
    spec: str | Mapping[str, object] | Modules = "rule",
    *,
    endpoint: object = None,
    prompt_style: str = "full",
    wording: PromptPack | None = None,
    agentflow_script: str | None = None,
) -> Modules:
    """Build the four modules from ``"rule"``, ``"llm"``, a per-role mapping, or a ``Modules``.

    A mapping gives per role a backend name (``"rule"`` or ``"llm"``), an ``LLMEndpoint`` (an LLM
    module on that endpoint) or a module object; roles it leaves out use the rule backend.
    ``endpoint`` serves the ``"llm"`` roles: an ``LLMEndpoint`` or chat backend (e.g.
    ``VLLMEngine``) for all of them, or a mapping role -> endpoint. Without one, an ``"llm"`` role
    reads ``AGENTFLOW_<ROLE>_*`` / ``AGENTFLOW_LLM_*`` environment variables.
    With ``prompt_style="agentflow"`` the LLM modules speak AgentFlow's formats
    (``agentflow_env.modules.agentflow_llm``), in ``wording`` (AgentFlow's own words, read from
    the user's checkout) where given, calling their models as AgentFlow's ``agentflow_script``
    does where one is given (``agentflow_env.modules.agentflow_calls``).
    """
    if isinstance(spec, Modules):
        return spec
    per_role: Mapping[str, object] = (
        {role: spec for role in ROLES} if isinstance(spec, str) else spec
    )
    unknown = sorted(set(per_role) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown module role(s) {unknown}; roles are {list(ROLES)}")
    built = {}
    for role in ROLES:
        choice = per_role.get(role, "rule")
        if choice == "rule":
            built[role] = _RULE[role]()
        elif choice == "llm" or _is_endpoint(choice):
            target = choice if choice != "llm" else _role_endpoint(endpoint, role)
            built[role] = _llm_module(role, target, prompt_style, wording, agentflow_script)
        elif isinstance(choice, str):
            raise ValueError(f"unknown backend {choice!r} for the {role}; available: 'rule', 'llm'")
        else:
            built[role] = choice
    return Modules(**built)  # type: ignore[arg-type]


def _is_endpoint(value: object) -> bool:
    return isinstance(value, LLMEndpoint)


def _role_endpoint(endpoint: object, role: str) -> object:
    if isinstance(endpoint, Mapping):
        endpoint = endpoint.get(role)
    if endpoint is not None:
        return endpoint
    return LLMEndpoint.from_env(role)


def _llm_module(
    role: str,
    target: object,
    prompt_style: str,
    wording: PromptPack | None = None,
    script: str | None = None,
) -> object:
    if style_rules(prompt_style).renders_pack:
        return _AGENTFLOW_LLM[role](target, wording, script)  # type: ignore[arg-type]
    return _LLM[role](target)  # type: ignore[arg-type]


__all__ = [
    "Executor",
    "FinalAnswer",
    "Generalist",
    "Initializer",
    "ModuleError",
    "Modules",
    "Verification",
    "Verifier",
    "build_modules",
]
