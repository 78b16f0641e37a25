"""AgentFlow's module calls under its scripts (``agentflow_script``): the structured query
analysis and the engines' per-call defaults, read from a fake checkout, over a real socket."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeOpenAIServer, Reply, bounded
from test_agentflow_source import make_checkout

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.llm.client import LLMEndpoint, get_client
from agentflow_env.modules import build_modules
from agentflow_env.modules.agentflow_calls import (
    STRUCTURED,
    STRUCTURED_REFUSED,
    STRUCTURED_UNREAD,
    analysis_format,
    engine_backend,
    read_structured,
)
from agentflow_env.modules.agentflow_llm import AgentFlowInitializer, StructuredQueryAnalysis
from agentflow_env.modules.agentflow_prompts import generalist_messages
from agentflow_env.tasks.base import Task
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.agentflow_format import analysis_text
from agentflow_env.workflow.agentflow_source import AgentFlowSourceError, read_agentflow_source
from agentflow_env.workflow.memory import Memory
from agentflow_env.workflow.prompt_pack import PromptPack
from agentflow_env.workflow.telemetry import agentflow_records

PLANNER = Path("agentflow", "agentflow", "models", "planner.py")
FIELDS = ("concise_summary", "required_skills", "relevant_tools", "additional_considerations")
VALUES = {
    "concise_summary": "Find the tallest tower.",
    "required_skills": "- Looking things up",
    "relevant_tools": "- Web search",
    "additional_considerations": "None.",
}
SHOWN = (
    "\nGNU gist >> Find the tallest tower.\nGNU know-how:\n- Looking things up\n"
    "GNU helpers:\n- Web search\nGNU caveats:\nNone.\n"
)
TASK = Task("t1", "Which tower is the tallest?", ("Spire",))


def structured_checkout(root: Path) -> Path:
    """The fake checkout whose analysis call passes its made-up class as ``response_format``."""
    checkout = make_checkout(root)
    planner = checkout / PLANNER
    text = planner.read_text("utf-8").replace(
        "self.ask(query_prompt)", "self.ask(query_prompt, response_format=Reading)"
    )
    planner.write_text("from agentflow.models.formatters import Reading\n" + text, "utf-8")
    return checkout


@pytest.fixture
def pack(tmp_path: Path) -> PromptPack:
    return read_agentflow_source(structured_checkout(tmp_path / "AgentFlow"))


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer(lambda role, request: json.dumps(VALUES)) as running:
        yield running


def endpoint(server: FakeOpenAIServer, model: str = "gpt-4o-mini") -> LLMEndpoint:
    return LLMEndpoint(server.base_url, model, max_retries=0)


def analyze(module: AgentFlowInitializer) -> Any:
    return bounded(module.analyze(TASK, ToolSet([])))


# -- the reader ------------------------------------------------------------------------------------
def test_the_analysis_class_and_the_engine_defaults_are_read_from_the_checkout(
    pack: PromptPack, tmp_path: Path
) -> None:
    assert pack.analysis_fields == FIELDS
    assert pack.analysis_shown is not None
    assert pack.analysis_shown.render({f"self.{k}": v for k, v in VALUES.items()}) == SHOWN
    # The fake vllm engine has no _generate_text: that backend keeps the endpoint's settings.
    assert pack.engine_defaults == {
        "openai": {"max_tokens": 1234, "top_p": 0.5},
        "dashscope": {"max_tokens": 777, "top_p": 0.25},
    }
    assert PromptPack.from_dict(pack.to_dict()) == pack
    older = {k: v for k, v in pack.to_dict().items() if k not in ("analysis_fields",)}
    del older["analysis_shown"], older["engine_defaults"]
    assert PromptPack.from_dict(older).analysis_fields == ()  # an older pack file loads
    # A checkout whose analysis call asks for free text: no fields.
    plain = read_agentflow_source(make_checkout(tmp_path / "plain"))
    assert (plain.analysis_fields, plain.analysis_shown) == ((), None)


def test_an_analysis_class_the_checkout_lacks_is_named(tmp_path: Path) -> None:
    checkout = structured_checkout(tmp_path / "AgentFlow")
    formatters = checkout / "agentflow" / "agentflow" / "models" / "formatters.py"
    formatters.write_text("class Other:\n    pass\n", "utf-8")
    with pytest.raises(AgentFlowSourceError, match=r"formatters\.py.*no class Reading"):
        read_agentflow_source(checkout)


# -- the calls -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("base_url", "model", "backend"),
    [
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "qwen2.5-7b-instruct", "dashscope"),
        ("https://api.openai.com/v1", "o4-mini", "openai"),
        ("http://127.0.0.1:8000/v1", "gpt-4o-mini", "openai"),
        ("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct", "vllm"),
    ],
)
def test_the_engine_an_endpoint_stands_for(base_url: str, model: str, backend: str) -> None:
    assert engine_backend(LLMEndpoint(base_url, model)) == backend


def test_a_dashscope_endpoint_is_asked_for_free_text_as_agentflow_asks_it(
    pack: PromptPack,
) -> None:
    cloud = get_client(LLMEndpoint("https://dashscope.aliyuncs.com/v1", "qwen2.5-7b-instruct"))
    assert analysis_format(cloud, pack, "eval") is None
    local = get_client(LLMEndpoint("http://127.0.0.1:9/v1", "Qwen/Qwen2.5-7B-Instruct"))
    assert analysis_format(local, pack, "eval") is not None
    assert analysis_format(local, pack, None) is None  # this project's own calls


@pytest.mark.parametrize("script", ["eval", "train"])
def test_the_structured_analysis_is_asked_for_and_shown_as_agentflow_shows_it(
    pack: PromptPack, server: FakeOpenAIServer, script: str
) -> None:
    analysis = analyze(AgentFlowInitializer(endpoint(server), pack, script))
    (request,) = server.requests
    wanted = request["response_format"]
    assert wanted["type"] == "json_schema"
    schema = wanted["json_schema"]["schema"]
    assert list(schema["properties"]) == list(FIELDS) == schema["required"]
    assert (request["max_tokens"], request["top_p"]) == (1234, 0.5)  # the openai engine's
    assert isinstance(analysis, StructuredQueryAnalysis)
    assert analysis.meta["response_format"] == STRUCTURED
    assert analysis.text == SHOWN.strip() and analysis.shown == SHOWN
    assert analysis.objective == VALUES["concise_summary"]
    memory = Memory(TASK.question, ToolSet([]))
    memory.set_analysis(analysis)
    assert analysis_text(memory.analysis) == SHOWN.strip()  # the planner's and the verifier's
    assert SHOWN in generalist_messages(memory, pack)[1]["content"]  # unstripped there


def test_a_refused_format_falls_back_to_free_text_and_is_recorded(
    pack: PromptPack, server: FakeOpenAIServer
) -> None:
    server.push(Reply.refuse_format(), Reply("Concise Summary: towers.\nA free-text analysis."))
    module = AgentFlowInitializer(endpoint(server), pack, "eval")
    analysis = analyze(module)
    first, second = server.requests
    assert "response_format" in first and "response_format" not in second
    assert second["max_tokens"] == 1234  # the engine's defaults still
    assert analysis.meta["response_format"] == STRUCTURED_REFUSED
    assert "response_format" in analysis.meta["refusal"]
    assert analysis.text == "Concise Summary: towers.\nA free-text analysis."  # as written
    memory = Memory(TASK.question, ToolSet([]))
    memory.set_analysis(analysis)
    assert agentflow_records(memory.events) == {"analysis_format": STRUCTURED_REFUSED}
    # The next episode's analysis is asked for free text at once, and recorded the same way.
    server.push(Reply("Concise Summary: again."))
    again = analyze(module)
    assert "response_format" not in server.requests[-1] and len(server.requests) == 3
    assert again.meta["response_format"] == STRUCTURED_REFUSED


def test_a_reply_that_is_no_structured_one_is_shown_as_written(
    pack: PromptPack, server: FakeOpenAIServer
) -> None:
    server.push(Reply("  I would rather write prose.  "))
    analysis = analyze(AgentFlowInitializer(endpoint(server), pack, "eval"))
    assert analysis.meta["response_format"] == STRUCTURED_UNREAD
    assert analysis.text == "I would rather write prose."
    assert read_structured('{"concise_summary": "x"}', FIELDS) is None  # fields missing


def test_own_calls_are_unchanged_without_a_script(
    pack: PromptPack, server: FakeOpenAIServer
) -> None:
    server.push(Reply("Concise Summary: towers."))
    analyze(AgentFlowInitializer(endpoint(server), pack, None))
    (request,) = server.requests
    assert "response_format" not in request and "top_p" not in request
    assert request["max_tokens"] == 1024  # the endpoint's


def test_each_module_sends_its_backends_defaults(
    pack: PromptPack, server: FakeOpenAIServer
) -> None:
    vllm = dataclasses.replace(pack, engine_defaults={"vllm": {"max_tokens": 99, "top_p": 0.9}})
    modules = build_modules(
        "llm",
        endpoint=endpoint(server, "Qwen/Qwen2.5-7B-Instruct"),
        prompt_style="agentflow",
        wording=vllm,
        agentflow_script="train",
    )
    for module in (modules.initializer, modules.executor, modules.verifier, modules.generalist):
        assert getattr(module, "sampling", None) == {"max_tokens": 99, "top_p": 0.9}
    memory = Memory(TASK.question, ToolSet([]))
    server.push(Reply("The tower is tall.\nAnswer: Spire"))
    bounded(modules.generalist.answer(TASK, memory))
    assert (server.requests[-1]["max_tokens"], server.requests[-1]["top_p"]) == (99, 0.9)


def test_the_presets_modules_call_as_agentflows_scripts_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = structured_checkout(tmp_path / "AgentFlow")
    hosted = LLMEndpoint("http://127.0.0.1:9/v1", "gpt-4o-mini")
    monkeypatch.setenv("AGENTFLOW_JUDGE_BASE_URL", hosted.base_url)  # the training preset's
    monkeypatch.setenv("AGENTFLOW_JUDGE_MODEL", hosted.model)
    for preset, script in (("agentflow_eval", "eval"), ("agentflow_train", "train")):
        env = AgentFlowEnv(preset=preset, agentflow_source=str(checkout), llm_endpoint=hosted)
        try:
            for module in (env.modules.initializer, env.modules.verifier):
                assert getattr(module, "script", None) == script
                assert getattr(module, "sampling", None) == {"max_tokens": 1234, "top_p": 0.5}
        finally:
            env.close()
