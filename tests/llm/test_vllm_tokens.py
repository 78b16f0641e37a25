"""Token in, token out, and the greedy planner, against a real vLLM server (CPU build).

- The token-id path a trainer drives (``run_token_episode``) with vLLM's ``/v1/completions``
  (the prompt as ids, ``return_token_ids``, log-probs): the env's turn records hold exactly the
  ids and log-probs vLLM returned, on exactly the prompt ids it was sent.
- ``agentflow-env check-logprobs``: vLLM's sampler log-probs (``--logprobs-mode
  processed_logprobs``) against the same weights under ``transformers`` in float32.
- The served planner (chat completions: vLLM applies the model's chat template) against the
  ``transformers`` greedy path (``HFPlanner``, from the env's token ids): the same actions.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from vllm_server import VLLMServer, served_token_episodes  # noqa: E402

from agentflow_env.cli import main  # noqa: E402
from agentflow_env.llm import LLMEndpoint  # noqa: E402
from agentflow_env.rollout.agents.episodes import run_episode  # noqa: E402
from agentflow_env.rollout.agents.llm_planners import HFPlanner, OpenAIPlanner, session_messages  # noqa: E402
from agentflow_env.rollout.checks.logprob_check import LogprobSample, write_samples  # noqa: E402

pytestmark = pytest.mark.vllm
TEMPERATURE = 0.7
THRESHOLD = 1e-3


@pytest.fixture(scope="module")
def token_episodes(vllm_server: VLLMServer) -> list[tuple[Any, list[Any]]]:
    env = gym.make("AgentFlow-Search-v0", split="test", observation_mode="flat").unwrapped
    try:
        return served_token_episodes(vllm_server, env, range(3), TEMPERATURE)
    finally:
        env.close()


def test_the_env_records_exactly_the_ids_vllm_returned(token_episodes) -> None:
    turns = 0
    for episode, calls in token_episodes:
        records = episode.session.turn_records
        assert len(records) == len(calls) >= 1 and episode.error is None
        for record, call in zip(records, calls, strict=True):
            assert list(record.prompt_ids) == call.prompt_ids
            assert call.choice["prompt_token_ids"] == call.prompt_ids  # vLLM read those ids
            assert list(record.action_ids) == call.token_ids and record.action_given_as_ids
            assert record.logprobs is not None and list(record.logprobs) == call.logprobs
            turns += 1
        pairs = zip(episode.response_ids, episode.response_mask, strict=True)
        sampled = [i for i, m in pairs if m]
        assert sampled == [i for call in calls for i in call.token_ids]
        assert episode.prompt_ids == calls[0].prompt_ids
    assert turns >= 4
    assert any(call.token_ids[-1] == 2 for _, calls in token_episodes for call in calls)


def samples_of(token_episodes, temperature: float | None) -> list[LogprobSample]:
    return [
        LogprobSample.build(
            episode.prompt_ids,
            episode.response_ids,
            episode.response_mask,
            episode.response_logprobs,
            temperature,
        )
        for episode, _ in token_episodes
    ]


def check(capsys: pytest.CaptureFixture[str], model: Path, samples: Path, t: float) -> Any:
    code = main(
        ["check-logprobs", "--model", str(model), "--samples", str(samples)]
        + ["--temperature", str(t), "--threshold", str(THRESHOLD)]
    )
    return code, json.loads(capsys.readouterr().out)


def test_vllm_logprobs_match_transformers_in_float32(
    vllm_server: VLLMServer, token_episodes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "samples.jsonl"
    write_samples(path, samples_of(token_episodes, TEMPERATURE))
    code, report = check(capsys, vllm_server.model_dir, path, TEMPERATURE)
    assert code == 0 and report["ok"] and report["unscored"] == 0
    assert report["tokens"] == sum(sum(e.response_mask) for e, _ in token_episodes)
    assert 0.0 <= report["max"] <= THRESHOLD and math.isfinite(report["mean"])
    # The check can fail: scored at the wrong temperature, the same samples are far off.
    unlabelled = tmp_path / "unlabelled.jsonl"
    write_samples(unlabelled, samples_of(token_episodes, None))
    code, wrong = check(capsys, vllm_server.model_dir, unlabelled, 1.0)
    assert code == 1 and wrong["max"] > 100 * THRESHOLD


def test_the_served_planner_acts_as_the_transformers_greedy_path(
    vllm_server: VLLMServer,
) -> None:
    """Greedy actions through vLLM's chat endpoint (its chat template, its stop at
    ``<|im_end|>``, its detokenizer) equal ``HFPlanner``'s from the env's own prompt ids."""
    env = gym.make("AgentFlow-Search-v0", split="test", max_turns=2)
    endpoint = LLMEndpoint(vllm_server.base_url, vllm_server.model, timeout_s=120.0)
    served = OpenAIPlanner(endpoint, env, temperature=0.0, max_tokens=24)
    local = HFPlanner(str(vllm_server.model_dir), max_new_tokens=24, device="cpu")
    stops = cut = 0
    try:
        for seed in range(5):
            observation, _ = env.reset(seed=seed)
            reply = vllm_server.post(
                "/chat/completions",
                {
                    "model": vllm_server.model,
                    "messages": session_messages(env.unwrapped.session),
                    "max_tokens": 1,
                    "return_token_ids": True,
                },
            )
            assert reply["prompt_token_ids"] == observation["token_ids"].tolist()
            run_episode(env, served, seed=seed)
            by_vllm = env.unwrapped.session.turn_records
            run_episode(env, local, seed=seed)
            by_hf = env.unwrapped.session.turn_records
            assert len(by_vllm) == len(by_hf) == 2
            for vllm_turn, hf_turn in zip(by_vllm, by_hf, strict=True):
                assert vllm_turn.prompt_ids == hf_turn.prompt_ids
                assert vllm_turn.action_text == hf_turn.action_text
                stops += hf_turn.action_ids[-1:] == (2,)
                cut += len(hf_turn.action_ids) == 24
    finally:
        served.close()
        env.close()
    assert stops and cut  # replies that stopped at <|im_end|> and replies cut at the cap
