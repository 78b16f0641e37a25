"""OpenRLHF's own executor with ``AGENTFLOW_ENV_URL``: the episodes run on a served env (a real
server on 127.0.0.1), and OpenRLHF's token stream equals the env's own flat record, as in
process (the mirror engine and checks of ``test_openrlhf.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("openrlhf.utils.agent")

from conftest import load_adapter  # noqa: E402
from served import server_thread, wait_until  # noqa: E402
from test_openrlhf import (  # noqa: E402
    AGENT_FUNC,
    MirrorEngine,
    SamplingParams,
    check_against_mirror,
    run_execute,
    spec_for,
)

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.mark.parametrize(("planner", "index"), [("expert", 0), ("random", 2)])
def test_the_executor_plays_on_a_served_env(
    monkeypatch: pytest.MonkeyPatch,
    hf_tokenizer,
    planner: str,
    index: int,
) -> None:
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", "MAX_ACTION_TOKENS", "RETRIEVER_URL"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    with server_thread("AgentFlow-Search-v0", {}) as (url, host):
        monkeypatch.setenv("AGENTFLOW_ENV_URL", url)
        agent_func = load_adapter(AGENT_FUNC, "agentflow_openrlhf_agent_remote")
        spec = spec_for(index)
        engine = MirrorEngine(spec, planner, seed=index)
        result = asyncio.run(
            run_execute(
                agent_func.AgentExecutor(),
                spec,
                engine,
                hf_tokenizer,
                params=SamplingParams(logprobs=1),
            )
        )
        check_against_mirror(result, engine)
        assert host.describe()["episodes_started"] == 1
        assert wait_until(lambda: host.active_sessions == 0)  # the executor closed its session
    if planner == "expert":
        assert result["reward"] == 1.0
