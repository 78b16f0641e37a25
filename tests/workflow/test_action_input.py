"""Whatever the planner sends, ``step`` records it and never raises; caps keep episodes bounded."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import agentflow_env  # noqa: F401
from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.workflow.action_input import MAX_TOKEN_ID, read_action

SEARCH = "Justification: j\nContext: {context}\nSub-Goal: s\nTool Name: Search"

BAD_ACTIONS = [
    pytest.param("Tool Name: Search\nContext: \ud800", id="lone-surrogate"),
    pytest.param([1, float("inf")], id="inf-id"),
    pytest.param([1, float("nan")], id="nan-id"),
    pytest.param([1, 2.5], id="fractional-id"),
    pytest.param([-1], id="negative-id"),
    pytest.param([10**30], id="huge-id"),
    pytest.param([MAX_TOKEN_ID + 1], id="id-above-int32"),
    pytest.param(["7"], id="string-id"),
    pytest.param([[1, 2]], id="nested-ids"),
    pytest.param(np.zeros((2, 2), dtype=np.int64), id="2d-array"),
    pytest.param([], id="no-ids"),
    pytest.param([True, False], id="bool-ids"),
    pytest.param({"token_ids": [5, 6], "logprobs": ["a", "b"]}, id="string-logprobs"),
    pytest.param({"token_ids": [5, 6], "logprobs": 5}, id="scalar-logprobs"),
    pytest.param({"token_ids": [5, 6], "logprobs": [0.0]}, id="short-logprobs"),
    pytest.param({"token_ids": [5, 6], "logprobs": [float("inf"), 0.0]}, id="inf-logprob"),
    pytest.param({"token_ids": [5, 6], "logprobs": "ab"}, id="text-logprobs"),
    pytest.param({"nothing": 1}, id="empty-mapping"),
    pytest.param(object(), id="object"),
    pytest.param(None, id="none"),
    pytest.param(3.5, id="float"),
    pytest.param(b"\xff\xfe Tool Name: Search", id="bad-bytes"),
]


@pytest.mark.parametrize("action", BAD_ACTIONS)
@pytest.mark.parametrize("mode", ["structured", "flat"])
def test_bad_input_is_a_recorded_turn_not_an_exception(action, mode) -> None:
    env = gym.make("AgentFlow-Search-v0", observation_mode=mode)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs)
    assert (reward, terminated, truncated) == (0.0, False, False)
    trajectory = env.unwrapped.trajectory()
    assert [t.turn for t in trajectory.turns] == [1]  # the turn is recorded, not lost
    # The episode goes on normally afterwards.
    obs, _, _, _, info = env.step(ExpertPlanner(env).act(obs, info))
    assert info["turn"] == 2
    env.close()


@pytest.mark.parametrize(
    "action",
    [
        {"token_ids": [5, 6], "logprobs": ["a", "b"]},
        {"token_ids": [5, 6], "logprobs": 5},
        [1, float("inf")],
    ],
)
def test_invalid_input_runs_no_tool_and_writes_one_invalid_entry(action) -> None:
    env = gym.make("AgentFlow-Search-v0")
    env.reset(seed=0)
    _, _, _, _, info = env.step(action)
    session = env.unwrapped.session
    kinds = [event.kind for event in session.memory.events if event.turn == 1]
    assert "tool_call" not in kinds and "invalid_action" in kinds
    assert info["verification"] == "INVALID" and info["errors"]
    assert session.metrics.invalid_actions == 1 and session.metrics.tool_calls == 0
    env.close()


def test_lone_surrogates_are_repaired_and_the_action_still_runs() -> None:
    env = gym.make("AgentFlow-Search-v0")
    env.reset(seed=0)
    _, _, _, _, info = env.step(SEARCH.format(context="Vexel \ud800 Harbor"))
    assert info["tool"] == "Search" and info["tool_ok"]
    assert "\ufffd" in info["memory"][0]["context"]
    env.close()


def test_good_logprobs_are_kept_and_none_becomes_nan() -> None:
    tok = load_default_tokenizer()
    read = read_action({"token_ids": [5, 6, 7], "logprobs": [-0.1, None, -2]}, tok, None)
    assert read.error is None and read.ids == [5, 6, 7]
    assert read.logprobs is not None and read.logprobs[0] == -0.1 and math.isnan(read.logprobs[1])


def test_out_of_vocabulary_ids_stand_verbatim_in_the_flat_sequence() -> None:
    env = gym.make("AgentFlow-Search-v0", observation_mode="flat")
    obs, info = env.reset(seed=0)
    vocab = env.unwrapped.tokenizer.vocab_size
    action = [5, vocab, vocab + 100, 6]  # as a model with a padded embedding may sample
    previous = obs["token_ids"].tolist()
    obs, _, _, _, info = env.step({"token_ids": action, "logprobs": [-1.0] * 4})
    assert info["verification"] == "INVALID" and "vocabulary" in info["errors"][0]
    assert obs["token_ids"].tolist() == previous + action + info["feedback_token_ids"]
    record = env.unwrapped.session.turn_records[-1]
    assert list(record.action_ids) == action and record.logprobs == (-1.0,) * 4
    assert env.observation_space.contains(obs)
    env.close()


def test_huge_actions_are_capped_by_default_and_prompts_stay_bounded() -> None:
    env = gym.make("AgentFlow-Search-v0")
    obs, _ = env.reset(seed=0)
    first_prompt = len(obs["token_ids"])
    huge = SEARCH.format(context="word " * 200_000)  # a million characters
    sizes = []
    for _ in range(10):
        obs, _, terminated, truncated, info = env.step(huge)
        sizes.append(len(obs["token_ids"]))
        assert info["action_cut"]
        assert len(env.unwrapped.session.turn_records[-1].action_ids) == 2048
    record_text = env.unwrapped.session.turn_records[-1].action_text
    assert len(record_text) < 100_000
    # Old turns are shortened in the view, so ten huge turns cost about what two do.
    assert sizes[-1] < first_prompt + 10 * 1500
    assert sizes[-1] - sizes[4] < 5 * 600
    env.close()


def test_caps_can_be_raised_or_removed() -> None:
    env = gym.make("AgentFlow-Search-v0", max_action_tokens=None, max_prompt_tokens=None)
    env.reset(seed=0)
    _, _, _, _, info = env.step(SEARCH.format(context="word " * 3000))
    assert not info["action_cut"]
    assert len(env.unwrapped.session.turn_records[-1].action_ids) > 3000
    env.close()


def test_prompt_cap_truncates_with_the_reason() -> None:
    env = gym.make("AgentFlow-Search-v0", observation_mode="flat", max_prompt_tokens=2500)
    env.reset(seed=0)
    done, info = False, {}
    while not done:
        _, reward, terminated, truncated, info = env.step(SEARCH.format(context="word " * 400))
        done = terminated or truncated
    assert truncated and info["end_reason"] == "prompt_budget" and reward == 0.0
    env.close()
