"""Expert demonstrations exported as SFT data: exact prompts, parseable completions."""

from __future__ import annotations

import pytest

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.rollout.agents.demonstrations import (
    expert_action_text,
    expert_conversations,
    expert_demonstrations,
    expert_episode,
    flat_env,
)
from agentflow_env.workflow.actions import parse_planner_action

ENV = {"fresh_world": True, "world_size": "small", "prompt_style": "compact", "max_turns": 3}


@pytest.mark.parametrize("style", ["full", "compact", "minimal"])
def test_every_style_parses_and_succeeds(style: str) -> None:
    env = flat_env(hops=1, **ENV)
    episode = expert_episode(env, seed=3, style=style)
    assert episode.success
    action = parse_planner_action(episode.turns[0].completion.removesuffix("<|im_end|>"))
    assert action.tool_name == "Search" and action.context
    env.reset(seed=3)
    assert expert_action_text(env, style) in episode.turns[0].completion


def test_records_are_token_exact_for_multi_turn_episodes() -> None:
    records = expert_demonstrations(range(4), {"hops": 2, **ENV})
    assert len(records) > 4  # 2-hop episodes give one record per turn
    tokenizer = load_default_tokenizer()
    hf = to_hf_tokenizer(tokenizer)
    for record in records:
        assert record["completion"].endswith("<|im_end|>")
        assert record["completion_ids"][-1] == tokenizer.eos_token_id
        assert tokenizer.encode(record["prompt"]) == record["prompt_ids"]
        # What TRL's SFTTrainer tokenizes (prompt + completion, no special tokens added) is
        # exactly the env's prompt ids followed by the action ids.
        joined = hf(record["prompt"] + record["completion"], add_special_tokens=False)["input_ids"]
        assert joined == record["prompt_ids"] + record["completion_ids"]
    # In flat mode a later turn's prompt extends the earlier prompt and action.
    first, second = records[0], records[1]
    assert second["prompt"].startswith(first["prompt"] + first["completion"])


def test_conversations_render_to_the_flat_prompts() -> None:
    hf = to_hf_tokenizer(load_default_tokenizer())
    records = expert_demonstrations([5], {"hops": 2, **ENV})
    (conversation,) = expert_conversations([5], {"hops": 2, **ENV})
    text = hf.apply_chat_template(conversation["messages"], tokenize=False)
    for record in records:
        assert (record["prompt"] + record["completion"]) in text
    assert [m["role"] for m in conversation["messages"][:3]] == ["system", "user", "assistant"]


def test_demonstrations_need_flat_mode() -> None:
    from agentflow_env.envs.env import AgentFlowEnv

    with pytest.raises(ValueError, match="flat"):
        expert_episode(AgentFlowEnv(hops=1, **ENV), seed=0)
