"""Potential-based progress shaping (``reward_shaping="progress"``)."""

from __future__ import annotations

import numpy as np
import pytest

from agentflow_env import AgentFlowEnv
from agentflow_env.rollout.agents.planners import expert_action, random_action
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.diagnostics import gold_steps_done
from agentflow_env.workflow.shaping import progress_potential


def play(env: AgentFlowEnv, seed: int, actions: str) -> tuple[list[float], dict, float]:
    """One episode: ``actions`` picks each turn's action (e = expert, r = random, j = junk),
    cycling. Returns the step rewards, the final info and Phi of the start state."""
    _, info = env.reset(seed=seed)
    session = env.session
    assert session is not None
    start = progress_potential(session.task, session.memory)
    rng = np.random.default_rng(seed)
    rewards: list[float] = []
    done = False
    while not done:
        kind = actions[session.turn % len(actions)]
        if kind == "e":
            done_steps = gold_steps_done(session.task.gold_plan, session.memory.entries)
            action = expert_action(session.task, done_steps)
        elif kind == "r":
            action = random_action(rng, env.tools.names, session.task)
        else:
            action = "Tool Name: Calculator\nContext: 1 + 1"
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(float(reward))
        done = terminated or truncated
    return rewards, info, start


@pytest.mark.parametrize("actions", ["e", "je", "rre", "rj", "ejje"])
@pytest.mark.parametrize("weight", [1.0, 0.5])
def test_shaping_terms_sum_to_the_change_in_potential(actions: str, weight: float) -> None:
    shaped = AgentFlowEnv(hops=2, max_turns=6, reward_shaping="progress", shaping_weight=weight)
    plain = AgentFlowEnv(hops=2, max_turns=6)
    for seed in range(4):
        rewards, info, start = play(shaped, seed, actions)
        session = shaped.session
        assert session is not None
        final = progress_potential(session.task, session.memory)
        terms = [t.shaping for t in session.turn_records]
        assert sum(terms) == pytest.approx(weight * (final - start))
        assert info["potential"] == pytest.approx(final)
        # Step rewards are the shaping terms plus the terminal reward on the last turn.
        assert sum(rewards) == pytest.approx(sum(terms) + info["reward"])
        assert [t.reward for t in session.turn_records] == pytest.approx(rewards)
        # The terminal reward is the one the same episode earns without shaping.
        plain_rewards, plain_info, _ = play(plain, seed, actions)
        assert plain_info["reward"] == info["reward"]
        assert plain_info["success"] == info["success"]
        assert plain_rewards[-1] == info["reward"] and sum(plain_rewards[:-1]) == 0.0
        assert "shaping" not in plain_info


def test_the_expert_gathers_the_whole_gold_chain_and_junk_gathers_none() -> None:
    env = AgentFlowEnv(hops=2, max_turns=6, reward_shaping="progress")
    rewards, info, start = play(env, 3, "e")
    assert start == 0.0 and info["potential"] == 1.0 and info["success"]
    assert sum(rewards) == pytest.approx(2.0)  # one for the answer, one for the chain
    rewards, info, _ = play(env, 3, "j")
    assert info["potential"] == 0.0 and rewards == [0.0] * len(rewards)


def test_per_turn_samples_carry_the_turn_rewards() -> None:
    env = AgentFlowEnv(hops=2, max_turns=6, reward_shaping="progress")
    rewards, _, _ = play(env, 5, "je")
    samples = env.trajectory().per_turn_samples()
    assert [s.reward for s in samples] == pytest.approx(rewards)
    assert samples[0].shaping == 0.0 and samples[1].shaping > 0


def test_tasks_without_a_gold_plan_use_resolved_sub_questions() -> None:
    task = Task(
        task_id="q",
        question="Where was Ada born?",
        gold_answers=("Paris",),
        corpus=None,
        sub_questions=("Who is Ada?", "Where was she born?"),
    )
    env = AgentFlowEnv(tasks=[task], tools=["Calculator"], reward_shaping="progress")
    _, info = env.reset(seed=0)
    assert env.session is not None
    assert progress_potential(task, env.session.memory) == 0.0
    _, _, _, _, info = env.step("Tool Name: Calculator\nContext: 2 + 2")
    # Phi = 1 - open / asked, whatever the verifier left open (0, 1 or 2 questions).
    open_now = len(env.session.memory.open_questions())
    assert info["potential"] == pytest.approx(max(0.0, 1 - open_now / 2))
    assert info["shaping"] == pytest.approx(info["potential"])


def test_unknown_shaping_is_refused() -> None:
    with pytest.raises(ValueError, match="reward_shaping"):
        AgentFlowEnv(reward_shaping="curiosity")
