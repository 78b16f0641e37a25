"""``agentflow_env.base.settings``: every environment variable declared once, read typed, and a
malformed value refused with the variable's name."""

from __future__ import annotations

import pytest

from agentflow_env.base.settings import (
    ENV_VARS,
    LLM_ENDPOINT_FIELDS,
    LLM_ROLES,
    EnvVarError,
    env_var_text,
    llm_env_var,
    read_env_var,
)
from agentflow_env.llm.client import LLMEndpoint


def test_values_are_typed_and_blank_means_the_default() -> None:
    assert read_env_var("AGENTFLOW_FAIL_FAST", {}) == 16
    assert read_env_var("AGENTFLOW_FAIL_FAST", {"AGENTFLOW_FAIL_FAST": "  "}) == 16
    assert read_env_var("AGENTFLOW_FAIL_FAST", {"AGENTFLOW_FAIL_FAST": " 4 "}) == 4
    assert read_env_var("AGENTFLOW_WEB_FETCH", {"AGENTFLOW_WEB_FETCH": "Yes"}) is True
    assert read_env_var("AGENTFLOW_WEB_FETCH", {}) is False
    assert read_env_var("AGENTFLOW_ENV_KWARGS", {"AGENTFLOW_ENV_KWARGS": '{"a": 1}'}) == {"a": 1}
    assert read_env_var("AGENTFLOW_LLM_TIMEOUT_S", {"AGENTFLOW_LLM_TIMEOUT_S": "2.5"}) == 2.5
    assert read_env_var("AGENTFLOW_TOKENIZER", {}) is None
    assert env_var_text("AGENTFLOW_SAMPLES", {"AGENTFLOW_SAMPLES": " rows "}) == "rows"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("AGENTFLOW_FAIL_FAST", "-1", "AGENTFLOW_FAIL_FAST must be an integer >= 0, got '-1'"),
        ("AGENTFLOW_DUMP_SAMPLES_MAX", "many", "AGENTFLOW_DUMP_SAMPLES_MAX must be an integer"),
        ("AGENTFLOW_LLM_TEMPERATURE", "hot", "AGENTFLOW_LLM_TEMPERATURE must be a number"),
        ("AGENTFLOW_WEB_FETCH", "maybe", "AGENTFLOW_WEB_FETCH must be one of"),
        ("AGENTFLOW_SAMPLES", "rows", "AGENTFLOW_SAMPLES must be one of ['flat', 'turns']"),
        ("AGENTFLOW_ENV_KWARGS", "{", "AGENTFLOW_ENV_KWARGS is not JSON"),
        ("AGENTFLOW_ENV_KWARGS", "[1]", "AGENTFLOW_ENV_KWARGS must be a JSON object"),
    ],
)
def test_a_malformed_value_names_its_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(EnvVarError, match=message.replace("[", r"\[")):
        read_env_var(name, {name: value})


def test_only_declared_variables_are_read() -> None:
    with pytest.raises(KeyError, match="AGENTFLOW_NOPE is not a declared environment variable"):
        read_env_var("AGENTFLOW_NOPE", {"AGENTFLOW_NOPE": "1"})


def test_every_llm_role_declares_every_endpoint_field() -> None:
    fields = set(LLMEndpoint.__dataclass_fields__)
    assert {suffix.lower() for suffix in LLM_ENDPOINT_FIELDS} <= fields
    names = {llm_env_var(role, suffix) for role in LLM_ROLES for suffix in LLM_ENDPOINT_FIELDS}
    assert names <= set(ENV_VARS)
    assert all(var.name == name for name, var in ENV_VARS.items())
    assert all(name.startswith("AGENTFLOW_") for name in ENV_VARS)


def test_llm_endpoints_read_their_variables() -> None:
    environ = {
        "AGENTFLOW_LLM_BASE_URL": "http://a/v1",
        "AGENTFLOW_LLM_MODEL": "m",
        "AGENTFLOW_VERIFIER_MODEL": "v",
        "AGENTFLOW_LLM_MAX_RETRIES": "5",
    }
    endpoint = LLMEndpoint.from_env("verifier", environ)
    assert (endpoint.base_url, endpoint.model, endpoint.max_retries) == ("http://a/v1", "v", 5)
    with pytest.raises(EnvVarError, match="AGENTFLOW_LLM_MAX_RETRIES must be an integer"):
        LLMEndpoint.from_env(None, {**environ, "AGENTFLOW_LLM_MAX_RETRIES": "x"})
    with pytest.raises(ValueError, match="no AGENTFLOW_SUMMARIZER_\\* variables are declared"):
        LLMEndpoint.from_env("summarizer", environ)
