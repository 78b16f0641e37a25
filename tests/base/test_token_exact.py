"""Token-exact observations, turn records, samples and budgets, with two different tokenizers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agentflow_env.base as agentflow_env  # registers the envs; .tokens: the bundled BPE
from agentflow_env.base.hf_tokens import HFChatTokenizer, resolve_tokenizer
from agentflow_env.rollout.agents.planners import ExpertPlanner

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def other_tokenizer(llama_style_hf_tokenizer) -> HFChatTokenizer:
    return HFChatTokenizer(llama_style_hf_tokenizer, name="llama-style-test")


@pytest.mark.parametrize("which", ["bundled", "other"])
def test_structured_prompt_ids_decode_to_the_rendered_prompt(which, other_tokenizer):
    tokenizer = None if which == "bundled" else other_tokenizer
    env = gym.make("AgentFlow-Search-v0", hops=2, tokenizer=tokenizer)
    obs, info = env.reset(seed=3)
    tok = env.unwrapped.tokenizer
    assert tok.decode(obs["token_ids"].tolist()) == obs["text"]
    assert obs["text"] == tok.render_chat(
        env.unwrapped.session.messages(), add_generation_prompt=True
    )
    if which == "other":
        assert obs["text"].startswith("<|begin_of_text|><|start_header_id|>system")
        assert obs["text"].endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    expert = ExpertPlanner(env)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(expert.act(obs, info))
        assert tok.decode(obs["token_ids"].tolist()) == obs["text"]
        done = terminated or truncated
    assert info["success"]
    env.close()


@pytest.mark.parametrize("which", ["bundled", "other"])
def test_flat_mode_concatenation_identity_over_200_expert_episodes(which, other_tokenizer):
    tokenizer = None if which == "bundled" else other_tokenizer
    env = gym.make("AgentFlow-Search-v0", observation_mode="flat", tokenizer=tokenizer)
    tok = env.unwrapped.tokenizer
    expert = ExpertPlanner(env)
    successes = 0
    differs_from_a_reencode = 0
    for seed in range(200):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            previous = obs["token_ids"].tolist()
            action = expert.act(obs, info)
            if seed % 2:  # spelled piece by piece, as a sampling policy may: not encode()'s ids
                action = spelled_out(tok, action)
            obs, _, terminated, truncated, info = env.step(action)
            differs_from_a_reencode += obs["token_ids"].tolist() != tok.encode(obs["text"])
            record = env.unwrapped.session.turn_records[-1]
            feedback = info["feedback_token_ids"]
            assert list(record.prompt_ids) == previous
            assert obs["token_ids"].tolist() == previous + list(record.action_ids) + feedback
            assert feedback == tok.encode(info["feedback_text"])  # tokenized alone
            done = terminated or truncated
        successes += info["success"]
        sample = env.unwrapped.trajectory().flat_sample()
        turns = env.unwrapped.trajectory().turns
        masked = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
        assert masked == [t for turn in turns for t in turn.action_ids]
        assert sum(sample.loss_mask) == sum(len(turn.action_ids) for turn in turns)
        # Each action range sits right where the planner produced it.
        position = len(turns[0].prompt_ids)
        for turn in turns:
            span = slice(position, position + len(turn.action_ids))
            assert sample.input_ids[span] == list(turn.action_ids)
            assert set(sample.loss_mask[span]) == {1}
            position += len(turn.action_ids) + len(turn.feedback_ids)
    assert successes == 200
    # The sequence grows by ids; re-encoding its text would give other ids on these turns.
    assert differs_from_a_reencode >= 100
    env.close()


def spelled_out(tok, text: str) -> list[int]:
    """``text`` as one token per character where the vocabulary allows (decodes to ``text``)."""
    ids = [i for ch in text for i in tok.encode(ch)]
    assert tok.decode(ids) == text
    return ids


def test_flat_feedback_carries_the_chat_glue():
    env = gym.make("AgentFlow-Search-v0", observation_mode="flat", hops=2)
    obs, info = env.reset(seed=0)
    tok = env.unwrapped.tokenizer
    text = ExpertPlanner(env).act(obs, info)
    _, _, _, _, info = env.step(text)
    assert info["feedback_text"].startswith("<|im_end|>\n<|im_start|>user\n")
    assert info["feedback_text"].endswith("<|im_start|>assistant\n")
    # An action that already ends with the end-of-turn token does not get a second one.
    env.reset(seed=0)
    _, _, _, _, info = env.step(tok.encode(text) + [tok.eos_token_id])
    assert info["feedback_text"].startswith("\n<|im_start|>user\n")
    env.close()


def test_per_turn_samples_reproduce_the_prompts_seen_at_sampling_time():
    env = gym.make("AgentFlow-Search-v0", hops=3)
    obs, info = env.reset(seed=12)
    seen = []
    expert = ExpertPlanner(env)
    done = False
    while not done:
        seen.append(obs["token_ids"].tolist())
        obs, _, terminated, truncated, info = env.step(expert.act(obs, info))
        done = terminated or truncated
    samples = env.unwrapped.trajectory().per_turn_samples()
    assert [s.prompt_ids for s in samples] == seen
    assert all(s.loss_mask == [1] * len(s.completion_ids) for s in samples)
    with pytest.raises(ValueError, match="flat"):
        env.unwrapped.trajectory().flat_sample()
    env.close()


def test_non_round_tripping_action_ids_are_recorded_verbatim():
    env = gym.make("AgentFlow-Search-v0", observation_mode="flat", hops=1)
    obs, info = env.reset(seed=5)
    tok = env.unwrapped.tokenizer
    text = ExpertPlanner(env).act(obs, info)
    # Spell the action byte by byte: the same text, but not the ids encode() would give.
    byte_ids = [tok.encode(ch)[0] for ch in text if len(tok.encode(ch)) == 1]
    assert tok.decode(byte_ids) == text and byte_ids != tok.encode(text)
    logprobs = [-0.5] * len(byte_ids)
    obs2, reward, terminated, _, info = env.step({"token_ids": byte_ids, "logprobs": logprobs})
    assert terminated and reward == 1.0
    record = env.unwrapped.session.turn_records[-1]
    assert list(record.action_ids) == byte_ids and record.action_given_as_ids
    assert list(record.logprobs) == logprobs
    start = len(obs["token_ids"])
    assert obs2["token_ids"][start : start + len(byte_ids)].tolist() == byte_ids
    env.close()


def test_action_cap_cuts_and_flags():
    env = gym.make("AgentFlow-Search-v0", max_action_tokens=5)
    env.reset(seed=1)
    _, _, _, _, info = env.step("Justification: " + "long " * 100 + "\nTool Name: Search")
    assert info["action_cut"] is True
    record = env.unwrapped.session.turn_records[-1]
    assert len(record.action_ids) == 5 and record.action_cut
    env.close()


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"max_prompt_tokens": 50}, "prompt_budget"),
        ({"observation_mode": "flat", "max_total_tokens": 10}, "total_budget"),
    ],
)
def test_budgets_truncate_with_the_reason(kwargs, reason):
    env = gym.make("AgentFlow-Search-v0", hops=3, **kwargs)
    obs, info = env.reset(seed=2)
    _, _, terminated, truncated, info = env.step(ExpertPlanner(env).act(obs, info))
    assert truncated and not terminated
    assert info["end_reason"] == reason
    env.close()


def test_tokenizer_arguments_resolve(tmp_path, other_tokenizer):
    other_tokenizer.hf.save_pretrained(tmp_path)
    by_path = resolve_tokenizer(str(tmp_path))
    assert by_path.encode("Hello world") == other_tokenizer.encode("Hello world")
    by_object = resolve_tokenizer(other_tokenizer.hf)
    assert isinstance(by_object, HFChatTokenizer)
    with pytest.raises(OSError, match="offline"):
        resolve_tokenizer("no-such-org/no-such-model-xyz")
    assert resolve_tokenizer(None).name == agentflow_env.tokens.load_default_tokenizer().name


def test_observation_ids_are_int64_arrays_in_flat_mode():
    env = gym.make("AgentFlow-Search-v0", observation_mode="flat")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step("Tool Name: Search\nContext: x")
    assert isinstance(obs["token_ids"], np.ndarray) and obs["token_ids"].dtype == np.int64
    assert env.observation_space.contains(obs)
    env.close()


@pytest.mark.parametrize("which", ["bundled", "other"])
def test_prompt_encoder_ids_equal_a_full_encode(which, other_tokenizer):
    tokenizer = None if which == "bundled" else other_tokenizer
    env = gym.make("AgentFlow-Search-v0", tokenizer=tokenizer, max_turns=4)
    tok = env.unwrapped.tokenizer
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            assert obs["token_ids"].tolist() == tok.encode(obs["text"])
            obs, _, terminated, truncated, info = env.step("Context: zz\nTool Name: Search")
            done = terminated or truncated
    env.close()


class _WholeTextTokenizer:
    """Encodes a whole text as one id: splitting it anywhere changes the ids."""

    name, vocab_size, eos_token_id, pad_token_id = "whole", 10**6, 0, 0

    def encode(self, text):
        return [len(text) % self.vocab_size]

    def decode(self, ids):
        return "?"

    def render_chat(self, messages, add_generation_prompt=True):
        body = "".join(f"[{m['role']}]{m['content']}" for m in messages)
        return body + ("[assistant]" if add_generation_prompt else "")


def test_prompt_encoder_falls_back_when_splitting_changes_ids():
    from agentflow_env.workflow.observations import PromptEncoder

    encoder = PromptEncoder(_WholeTextTokenizer())
    messages = [{"role": "system", "content": "tools"}, {"role": "user", "content": "q"}]
    for _ in range(2):
        observation = encoder.render(messages)
        assert observation.token_ids == [len(observation.text)]
