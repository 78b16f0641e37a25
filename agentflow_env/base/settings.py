"""Every environment variable the project reads, declared once: ``ENV_VARS`` (the ``AGENTFLOW_*``
variables the package and the adapters read), ``SHELL_VARS`` (what the launch scripts,
``adapters/common.sh`` and ``adapters/*/train_flow_grpo.sh``, read) and ``TEST_VARS`` (what the
test suite reads).

Code reads a variable only through ``read_env_var`` (the typed value, or the declared default when
unset or blank; a value of the wrong form raises ``EnvVarError`` naming the variable) or
``env_var_text`` (the raw text, for a caller that words its own error). ``scripts/check_layers.py``
fails on an ``os.environ`` read of an ``AGENTFLOW_*`` name elsewhere and on an ``AGENTFLOW_*``
name not declared here; ``scripts/write_settings_doc.py`` writes ``docs/settings.md`` from these
declarations. The module uses the standard library only: the check loads it by path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ENV_VARS",
    "LLM_ENDPOINT_FIELDS",
    "LLM_ROLES",
    "SHELL_VARS",
    "TEST_VARS",
    "EnvVar",
    "EnvVarError",
    "env_var_text",
    "llm_env_var",
    "read_env_var",
]

Kind = Literal["str", "int", "float", "bool", "json", "choice"]
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class EnvVarError(ValueError):
    """An environment variable holds a value of the wrong form (the message names it)."""


@dataclass(frozen=True)
class EnvVar:
    """One environment variable: its value's ``kind`` (``choice``: one of ``choices``; ``json``: a
    JSON object), the ``default`` an unset or blank one reads as (``default_text`` says it where
    the default is computed elsewhere), ``minimum`` for numbers, the typed setting it ``feeds``
    (empty: none) and ``group`` (the heading it is listed under in ``docs/settings.md``)."""

    name: str
    help: str
    group: str
    kind: Kind = "str"
    default: Any = None
    default_text: str = ""
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    feeds: str = ""

    def parse(self, text: str) -> Any:
        """``text`` (stripped, not blank) as this variable's typed value."""
        if self.kind == "int" or self.kind == "float":
            return self._number(text)
        if self.kind == "bool":
            if text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise EnvVarError(
                f"{self.name} must be one of {list(_TRUE + _FALSE)}, got {text!r:.40}"
            )
        if self.kind == "choice" and text not in self.choices:
            raise EnvVarError(f"{self.name} must be one of {list(self.choices)}, got {text!r:.40}")
        if self.kind == "json":
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise EnvVarError(f"{self.name} is not JSON ({exc.msg}): {text!r:.120}") from None
            if not isinstance(value, dict):
                raise EnvVarError(f"{self.name} must be a JSON object, got {text!r:.120}")
            return value
        return text

    def _number(self, text: str) -> int | float:
        wanted = "an integer" if self.kind == "int" else "a number"
        if self.minimum is not None:
            wanted += f" >= {self.minimum:g}"
        try:
            value = int(text) if self.kind == "int" else float(text)
        except ValueError:
            raise EnvVarError(f"{self.name} must be {wanted}, got {text!r:.40}") from None
        if self.minimum is not None and value < self.minimum:
            raise EnvVarError(f"{self.name} must be {wanted}, got {text!r:.40}")
        return value


def env_var_text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The declared variable ``name``'s text, stripped; ``None`` when unset or blank."""
    if name not in ENV_VARS:
        raise KeyError(
            f"{name} is not a declared environment variable (agentflow_env.base.settings)"
        )
    text = (os.environ if environ is None else environ).get(name, "").strip()
    return text or None


def read_env_var(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The declared variable ``name`` as its typed value, or its default when unset or blank;
    ``EnvVarError`` naming it when the value has the wrong form. ``environ``: ``os.environ``."""
    text = env_var_text(name, environ)
    return ENV_VARS[name].default if text is None else ENV_VARS[name].parse(text)


# -- the declarations -----------------------------------------------------------------------------
ADAPTERS = "Adapters (trainer rollouts)"
ENV = "Envs: tools, retrieval, wording"
LLM = "LLM endpoints"

_DECLARED = (
    # -- how an adapter builds its envs (agentflow_env.rollout.labels.plans.AdapterConfig)
    EnvVar(
        "AGENTFLOW_ENV_ID",
        "the env variant an adapter runs where a label names none",
        ADAPTERS,
        default_text="AgentFlow-Search-v0 (the labels' default env)",
        feeds="AdapterConfig.env_id",
    ),
    EnvVar(
        "AGENTFLOW_ENV_KWARGS",
        "a JSON object of env settings (the variant's EnvConfig fields) beneath each label's own",
        ADAPTERS,
        kind="json",
        default_text="{} (the launch scripts set 10 turns, LLM modules with a frozen model)",
        feeds="AdapterConfig.env_kwargs",
    ),
    EnvVar(
        "AGENTFLOW_TOKENIZER",
        "the policy's tokenizer (a hub id or a local path) the envs render chat glue with",
        ADAPTERS,
        default_text="the trainer's tokenizer where it hands one over, else the bundled one",
        feeds="AdapterConfig.tokenizer (EnvConfig.tokenizer)",
    ),
    EnvVar(
        "AGENTFLOW_MAX_ACTION_TOKENS",
        "the cap on one planner turn's tokens, where the trainer's engine stops it; "
        "max_action_tokens in AGENTFLOW_ENV_KWARGS may repeat it, not differ",
        ADAPTERS,
        kind="int",
        minimum=1,
        default_text="1024 (ADAPTER_MAX_ACTION_TOKENS), or max_action_tokens in "
        "AGENTFLOW_ENV_KWARGS",
        feeds="AdapterConfig.max_action_tokens (EnvConfig.max_action_tokens)",
    ),
    EnvVar(
        "AGENTFLOW_FAIL_FAST",
        "how many trajectories in a row failing the same way at a process's start stop the run "
        "(0: never)",
        ADAPTERS,
        kind="int",
        minimum=0,
        default=16,
        feeds="AdapterConfig.fail_fast",
    ),
    EnvVar(
        "AGENTFLOW_SAMPLES",
        "the sample shape trained: one flat sample per trajectory, or one per planner turn",
        ADAPTERS,
        kind="choice",
        choices=("flat", "turns"),
        default="flat",
        feeds="AdapterConfig.samples",
    ),
    EnvVar(
        "AGENTFLOW_ENV_URL",
        "served envs (`agentflow-env serve`) the adapters play their episodes on instead of "
        "building envs in process: one URL or comma-separated URLs",
        ADAPTERS,
        default_text="unset: the envs run in the trainer's process",
        feeds="AdapterConfig.env_url",
    ),
    EnvVar(
        "AGENTFLOW_SERVE_TOKEN",
        "the bearer token of served envs: `agentflow-env serve` asks for it, the clients send it",
        ADAPTERS,
        default_text="no token (a server then binds only to loopback)",
        feeds="serve --token, RemoteEnv(token=...)",
    ),
    EnvVar(
        "AGENTFLOW_DUMP_SAMPLES",
        "a JSONL file the adapters append their first samples to, for `agentflow-env "
        "check-logprobs` (`{pid}`: the process id)",
        ADAPTERS,
    ),
    EnvVar(
        "AGENTFLOW_DUMP_SAMPLES_MAX",
        "at most this many samples dumped per process (the first ones)",
        ADAPTERS,
        kind="int",
        default=64,
    ),
    EnvVar(
        "AGENTFLOW_LABEL",
        "the rollout's task label (a TaskSpec JSON string; Agent Lightning's env_map sets it)",
        ADAPTERS,
    ),
    EnvVar(
        "AGENTFLOW_MAX_PROMPT_TOKENS",
        "Agent Lightning: a turn whose prompt is longer ends the episode, reward 0 (verl's "
        "data.max_prompt_length)",
        ADAPTERS,
        kind="int",
        default_text="no cap",
        feeds="TokenBudget.prompt",
    ),
    # -- what the envs read when they are built
    EnvVar(
        "AGENTFLOW_RETRIEVER_URL",
        "a Search-R1 /retrieve server (or comma-separated replicas) the Search tool asks",
        ENV,
        default_text="a local index",
        feeds="EnvConfig.retriever_url",
    ),
    EnvVar(
        "AGENTFLOW_ENV_CACHE",
        "the cache root; BM25 indexes live under its indexes/",
        ENV,
        default_text="~/.cache/agentflow_env",
        feeds="SearchEnvConfig.index_cache_dir",
    ),
    EnvVar(
        "AGENTFLOW_SOURCE",
        "an AgentFlow checkout whose wording the envs use under prompt_style='agentflow'",
        ENV,
        default_text="the project's own wording",
        feeds="EnvConfig.agentflow_source",
    ),
    EnvVar(
        "AGENTFLOW_WEB_FETCH",
        "lets Web_RAG_Search_Tool fetch web pages",
        ENV,
        kind="bool",
        default=False,
        feeds="the web_rag tool's allow_http",
    ),
    EnvVar(
        "AGENTFLOW_SEARCH_API_URL",
        "a Serper-compatible search API for Ground_Google_Search_Tool",
        ENV,
        default_text="https://google.serper.dev",
        feeds="the google_search tool's api_url",
    ),
    EnvVar(
        "AGENTFLOW_SEARCH_API_KEY",
        "the search API's key (without one every search fails with a recorded error)",
        ENV,
        feeds="the google_search tool's api_key",
    ),
)

LLM_ROLES: dict[str, str] = {
    "LLM": "every role below that sets no value of its own",
    "PLANNER": "the planner of `--planner openai` (CLI)",
    "INITIALIZER": "the frozen initializer module",
    "EXECUTOR": "the frozen executor module",
    "VERIFIER": "the frozen verifier module",
    "GENERALIST": "the frozen generalist module",
    "TOOLS": "the tools that need a model (e.g. Base_Generator_Tool)",
    "JUDGE": "the answer judge of reward='llm_judge'",
}
"""``AGENTFLOW_<ROLE>_<FIELD>``: each role's endpoint; a role's own value wins over ``LLM``'s."""
LLM_ENDPOINT_FIELDS: dict[str, tuple[Kind, float | None, str]] = {
    "BASE_URL": ("str", None, "the API root, e.g. http://127.0.0.1:8000/v1"),
    "MODEL": ("str", None, "the served model name"),
    "API_KEY": ("str", None, "sent as a bearer token"),
    "TIMEOUT_S": ("float", None, "hard limit on one attempt, in seconds"),
    "MAX_RETRIES": ("int", None, "extra attempts after a retryable failure"),
    "MAX_CONCURRENCY": ("int", None, "requests in flight at once, per event loop"),
    "TEMPERATURE": ("float", None, "the sampling temperature"),
    "MAX_TOKENS": ("int", None, "the reply's token cap"),
}
"""Suffix -> (kind, minimum, help) of the ``LLMEndpoint`` field ``suffix.lower()``."""


def llm_env_var(role: str, field: str) -> str:
    """``AGENTFLOW_<ROLE>_<FIELD>``, e.g. ``llm_env_var("verifier", "base_url")``."""
    return f"AGENTFLOW_{role.upper()}_{field.upper()}"


_LLM_DECLARED = tuple(
    EnvVar(
        llm_env_var(role, suffix),
        f"{text}: {whose}",
        LLM,
        kind=kind,
        minimum=minimum,
        default_text="" if role == "LLM" else f"{llm_env_var('LLM', suffix)}",
        feeds=f"LLMEndpoint.{suffix.lower()}",
    )
    for role, whose in LLM_ROLES.items()
    for suffix, (kind, minimum, text) in LLM_ENDPOINT_FIELDS.items()
)

ENV_VARS: dict[str, EnvVar] = {var.name: var for var in (*_DECLARED, *_LLM_DECLARED)}
"""Every ``AGENTFLOW_*`` variable the package and the adapters read, by name."""

# -- read by the launch scripts (bash) and by the tests, never by the package ---------------------
_COMMON = "adapters/common.sh"
SHELL_VARS: dict[str, tuple[str, str, str]] = {
    "POLICY_MODEL": (_COMMON, "Qwen/Qwen2.5-7B-Instruct", "the planner being trained"),
    "FROZEN_MODEL": (_COMMON, "", "the frozen modules' model (`vllm serve`); empty: rule modules"),
    "FROZEN_GPUS": (_COMMON, "4", "the GPUs of the frozen model's `vllm serve`"),
    "CORPUS": (_COMMON, "", "corpus JSONL for a retriever server; empty: each task's own corpus"),
    "GPUS_PER_NODE": (_COMMON, "4 beside a frozen model, else 8", "the trainer's GPUs per node"),
    "SERVICE_HOST": (_COMMON, "127.0.0.1", "where the trainer's workers reach the services"),
    "FROZEN_PORT": (_COMMON, "8001", "the frozen model's port"),
    "RETRIEVER_PORT": (_COMMON, "8002", "the retriever server's port"),
    "DATA_DIR": (_COMMON, "data/$TRAINER", "the label files' folder"),
    "TRAIN_FILE": (_COMMON, "$DATA_DIR/train.jsonl", "the training labels (written if missing)"),
    "EVAL_FILE": (_COMMON, "$DATA_DIR/test.jsonl", "the evaluation labels (written if missing)"),
    "SAVE_DIR": ("adapters/*/train_flow_grpo.sh", "checkpoints/flow-grpo-planner*", "checkpoints"),
    "NUM_NODES": ("adapters/openrlhf/train_flow_grpo.sh", "1", "nodes"),
    "VLLM_ENGINES": (
        "adapters/openrlhf/train_flow_grpo.sh",
        "NUM_NODES x GPUS_PER_NODE",
        "engines",
    ),
    "START_RAY": ("adapters/openrlhf/train_flow_grpo.sh", "1", "1: start a local Ray head"),
    "MAX_LEN": ("adapters/openrlhf/train_flow_grpo.sh", "8192", "a whole trajectory's tokens"),
    "RAY_DASHBOARD": ("adapters/openrlhf/train_flow_grpo.sh", "http://127.0.0.1:8265", "Ray jobs"),
    "TEXT_ENV": ("adapters/skyrl/train_flow_grpo.sh", "0", "1: SkyRL's generator + text env"),
    "MAX_INPUT_LENGTH": ("adapters/skyrl/train_flow_grpo.sh", "12288", "a trajectory's tokens"),
    "MAX_ACTION_TOKENS": (
        "adapters/skyrl/train_flow_grpo.sh",
        "1024",
        "one action's tokens (exported as AGENTFLOW_MAX_ACTION_TOKENS)",
    ),
    "PROMPT_LENGTH": (
        "adapters/verl/train_flow_grpo.sh, adapters/agent_lightning/train_flow_grpo.sh",
        "4096 (verl), 18432 (Agent Lightning)",
        "verl's data.max_prompt_length",
    ),
    "RESPONSE_LENGTH": (
        "adapters/verl/train_flow_grpo.sh, adapters/agent_lightning/train_flow_grpo.sh",
        "8192 (verl), 2048 (Agent Lightning)",
        "verl's data.max_response_length",
    ),
    "AGL_PORT": ("adapters/agent_lightning/train_flow_grpo.sh", "8080", "the gateway's port"),
    "AGL_KEY": ("adapters/agent_lightning/train_flow_grpo.sh", "random", "the gateway's key"),
    "AGENTS": ("adapters/agent_lightning/train_flow_grpo.sh", "16", "rollouts at once"),
}
"""Launch-script variable -> (the scripts that read it, its default, what it sets)."""
TEST_VARS: dict[str, tuple[str, str, str]] = {
    "AGENTFLOW_HYPOTHESIS_PROFILE": (
        "tests/workflow/test_properties.py",
        "ci",
        "the Hypothesis profile (long: scripts/fuzz_actions.py)",
    ),
    "AGENTFLOW_HYPOTHESIS_EXAMPLES": (
        "tests/workflow/test_properties.py",
        "the profile's",
        "examples per property",
    ),
    "AGENTFLOW_VIEWER_SCREENSHOTS": (
        "tests/evaluation/test_viewer.py",
        "none",
        "a folder for the viewer test's screenshots",
    ),
}
"""Test-suite variable -> (the test that reads it, its default, what it sets)."""
