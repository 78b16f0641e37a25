"""The trainer-facing drivers on served envs: the same token ids as in process.

- The batched driver (TRL's rollout): ``env_url`` gives the same flat samples and turn samples,
  id for id with log-probs, as the in-process pool, and a server that dies fails its episodes
  alone as zero-reward samples.
- One episode token-in-token-out (verl, SkyRL, OpenRLHF's session): ``SharedEnvs`` with
  ``env_url`` gives ``RemoteSession``s whose samples equal the local sessions'.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest
from served import kill_serve_process, serve_process, server_thread  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer  # noqa: E402
from agentflow_env.remote import RemoteSession, ServiceUnavailable  # noqa: E402
from agentflow_env.rollout.labels.plans import AdapterConfig  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec  # noqa: E402
from agentflow_env.rollout.training.driver import run_episodes  # noqa: E402
from agentflow_env.rollout.training.pool import EnvPool, SharedEnvs  # noqa: E402
from agentflow_env.rollout.training.token_episode import TokenBudget, run_token_episode  # noqa: E402
from agentflow_env.workflow.actions import format_planner_action  # noqa: E402

TOK = load_default_tokenizer()
SEARCH = TOK.encode(
    format_planner_action(
        justification="Look it up.",
        context="",
        sub_goal="Find the answer",
        tool_name="Wikipedia_Search",
    )
) + [TOK.eos_token_id]
NONSENSE = TOK.encode("I am not sure.") + [TOK.eos_token_id]


def generate(prompts: Any, max_new_tokens: int):
    """A deterministic policy: a search on even-length prompts, nonsense on odd ones."""
    ids = [list(SEARCH if len(p) % 2 == 0 else NONSENSE)[:max_new_tokens] for p in prompts]
    return ids, [[-0.125 * (1 + i % 3) for i in range(len(row))] for row in ids]


LABELS = [
    TaskSpec(env_kwargs={"hops": 1, "max_turns": 3}, seed=seed).to_json() for seed in range(4)
]


@pytest.mark.parametrize("samples", ["flat", "turns"])
def test_the_batched_driver_gives_the_same_samples_remotely(samples: str) -> None:
    with server_thread("AgentFlow-Search-v0", {}) as (url, host):
        local = run_episodes(LABELS, generate, TOK, pool=EnvPool(), samples=samples)
        remote = run_episodes(LABELS, generate, TOK, env_url=url, samples=samples)
    assert [r.failure for r in remote] == [None] * len(LABELS)
    for mine, theirs in zip(remote, local, strict=True):
        assert mine.trainer_samples() == theirs.trainer_samples()
        assert (mine.prompt_ids, mine.completion_ids, mine.env_mask, mine.logprobs) == (
            theirs.prompt_ids,
            theirs.completion_ids,
            theirs.env_mask,
            theirs.logprobs,
        )
        assert mine.reward == theirs.reward and mine.turns == theirs.turns
    assert sum(len(s.response_ids) for r in remote for s in r.trainer_samples()) > 0
    assert host.describe()["episodes_started"] == len(LABELS)


def test_unscored_ids_stay_unscored_remotely() -> None:
    """A generate with no log-probs: the driver records NaN, which JSON carries as null."""

    def unscored(prompts: Any, max_new_tokens: int):
        return generate(prompts, max_new_tokens)[0], None

    with server_thread("AgentFlow-Search-v0", {}) as (url, _):
        local = run_episodes(LABELS[:2], unscored, TOK, pool=EnvPool())
        remote = run_episodes(LABELS[:2], unscored, TOK, env_url=url)
    for mine, theirs in zip(remote, local, strict=True):
        assert mine.failure is None and mine.completion_ids == theirs.completion_ids
        masked = [lp for lp, m in zip(mine.logprobs, mine.env_mask, strict=True) if m]
        assert masked and all(math.isnan(lp) for lp in masked)


def test_a_server_that_dies_fails_its_episodes_alone(caplog: pytest.LogCaptureFixture) -> None:
    with serve_process("--env-id", "AgentFlow-Search-v0") as doomed, server_thread() as (url, _):
        calls = []

        def killing(prompts: Any, max_new_tokens: int):
            calls.append(len(prompts))
            if len(calls) == 2:  # mid-episode: the first server goes away
                kill_serve_process(doomed)
            return generate(prompts, max_new_tokens)

        with caplog.at_level(logging.WARNING):
            results = run_episodes(LABELS, killing, TOK, env_url=f"{doomed},{url}")
    failed = [r for r in results if r.failure is not None]
    ran = [r for r in results if r.failure is None]
    assert failed and ran and len(results) == len(LABELS)
    assert all(r.reward == 0.0 for r in failed)
    assert "failed and is recorded as a zero-reward sample" in caplog.text


def test_token_episodes_on_remote_sessions_equal_local_ones() -> None:
    async def play(session_of: Any, label: str) -> Any:
        async def agenerate(ids: list[int], cap: int):
            (out,), (lps,) = generate([ids], cap)
            return out, lps, "stop"

        return await run_token_episode(
            lambda: session_of(label),
            agenerate,
            TokenBudget(prompt=None, response=4096),
            filler=TOK.eos_token_id,
            log=logging.getLogger("test"),
            label=label,
        )

    with server_thread("AgentFlow-Search-v0", {}) as (url, host):
        remote = SharedEnvs(AdapterConfig(env_url=url, max_action_tokens=1024))
        local = SharedEnvs(AdapterConfig(max_action_tokens=1024))
        for label in LABELS[:3]:
            mine = asyncio.run(play(remote.new_session, label))
            theirs = asyncio.run(play(local.new_session, label))
            assert isinstance(mine.session, RemoteSession)
            assert mine.trainer_samples() == theirs.trainer_samples()
            assert mine.reward == theirs.reward and mine.response_ids
            assert remote.judge(mine.session) == local.judge(theirs.session)
        assert host.active_sessions == 0 or host.sessions_ended >= 3


def test_adapter_config_reads_the_env_url() -> None:
    config = AdapterConfig.from_environ(
        {"AGENTFLOW_ENV_URL": "http://127.0.0.1:1,http://127.0.0.1:2", "AGENTFLOW_SERVE_TOKEN": "t"}
    )
    assert config.env_url == "http://127.0.0.1:1,http://127.0.0.1:2" and config.env_token == "t"
    with pytest.raises(ServiceUnavailable):  # nothing listens there: a clear error, at once
        SharedEnvs(config).new_session(LABELS[0])
