"""Turn samples, the per-planner-turn training shape (``agentflow_env.rollout.training.samples``).

- Both drivers give one ``TrainerSample`` per planner turn: its prompt ids are exactly the ids
  the policy was given (AgentFlow's structured prompt rebuilt from memory, byte for byte from a
  user's checkout), its response ids exactly the sampled ids.
- The token budgets hold per turn sample, not for a growing sequence.
- Flow-GRPO's group advantage is broadcast to every turn, normalised over trajectories or turns.
- The adapter settings: the shape picks the observation mode and refuses one it cannot train.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeOpenAIServer
from test_agentflow_source import SEARCH_TASK, make_checkout, planner_prompt, responder

from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.rollout import (
    AdapterConfig,
    EnvPool,
    TaskSpecError,
    TokenBudget,
    TrainerSample,
    run_episodes,
    run_token_episode,
    task_prompt,
    turn_sample_advantages,
)
from agentflow_env.rollout.labels.plans import plan_episode
from agentflow_env.rollout.training.group_credit import (
    TrajectoryCredit,
    flow_grpo_advantages,
    turn_advantages,
)
from agentflow_env.rollout.training.token_episode import PROMPT_BUDGET
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.agentflow_format import memory_actions

TOK = load_default_tokenizer()
LOG = logging.getLogger("test_turn_samples")
NONSENSE = TOK.encode("I am not sure what to do.") + [TOK.eos_token_id]


def action_ids(tool: str, sub_goal: str) -> list[int]:
    text = format_planner_action(
        justification="Next.", context="ctx", sub_goal=sub_goal, tool_name=tool
    )
    return TOK.encode(text) + [TOK.eos_token_id]


def chat_ids(messages: list[dict[str, str]]) -> list[int]:
    """What any serving stack with a ChatML template feeds the policy for ``messages``."""
    return TOK.encode(TOK.render_chat(messages, add_generation_prompt=True))


# -- AgentFlow's own prompts, token-exact -----------------------------------------------------
SCRIPT = [
    action_ids("Wikipedia_RAG_Search_Tool", "Zorblat maker"),
    action_ids("Nonexistent_Tool", "Look elsewhere"),
]


@pytest.fixture
def agentflow_kwargs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    checkout = make_checkout(tmp_path / "AgentFlow")
    with FakeOpenAIServer(responder) as running:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", running.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        monkeypatch.delenv("AGENTFLOW_SOURCE", raising=False)
        yield {
            "preset": "agentflow_eval",
            "tasks": [SEARCH_TASK],
            "agentflow_source": str(checkout),
            "max_turns": 2,
        }


def test_token_episode_turns_are_agentflows_prompts_byte_for_byte(agentflow_kwargs: Any) -> None:
    pool = EnvPool(TOK)
    plan = plan_episode((0, agentflow_kwargs), samples="turns")
    assert plan.observation_mode == "structured"
    asked: list[list[int]] = []

    async def generate(prompt: list[int], cap: int) -> Any:
        asked.append(list(prompt))
        ids = SCRIPT[len(asked) - 1]
        return ids, [-0.25] * len(ids), "stop"

    episode = asyncio.run(
        run_token_episode(
            lambda: pool.new_session(plan),
            generate,
            TokenBudget(prompt=20_000, response=512),
            filler=TOK.eos_token_id,
            log=LOG,
            samples="turns",
        )
    )
    samples = episode.trainer_samples()
    assert [s.turn for s in samples] == [1, 2] and [s.is_last_turn for s in samples] == [0, 1]
    assert episode.session is not None
    step = memory_actions(episode.session.memory)["Action Step 1"]
    question = SEARCH_TASK.question
    expected = [
        chat_ids(planner_prompt(question, {})),
        chat_ids(
            planner_prompt(
                question,
                {
                    "Action Step 1": {
                        "tool_name": "Wikipedia_RAG_Search_Tool",
                        "sub_goal": "Zorblat maker",
                        "command": 'execution = tool.execute(query="Zorblat maker")',
                        "result": step["result"],
                    }
                },
            )
        ),
    ]
    assert [s.prompt_ids for s in samples] == expected == asked
    assert [s.response_ids for s in samples] == SCRIPT
    assert all(s.response_mask == [1] * len(s.response_ids) for s in samples)
    assert [s.logprobs for s in samples] == [[-0.25] * len(ids) for ids in SCRIPT]
    assert {s.reward for s in samples} == {episode.reward}
    turns = episode.session.trajectory().turns
    assert [list(t.prompt_ids) for t in turns] == expected


def test_the_batched_driver_gives_the_same_turn_samples(agentflow_kwargs: Any) -> None:
    calls: list[list[list[int]]] = []

    def generate(prompts: Any, cap: int) -> Any:
        calls.append([list(p) for p in prompts])
        ids = SCRIPT[len(calls) - 1]
        return [list(ids) for _ in prompts], [[-0.5] * len(ids) for _ in prompts]

    results = run_episodes(
        [(0, agentflow_kwargs), (0, agentflow_kwargs)],
        generate,
        TOK,
        pool=EnvPool(),
        samples="turns",
    )
    assert len(calls) == 2
    for index, result in enumerate(results):
        samples = result.trainer_samples()
        assert [s.prompt_ids for s in samples] == [call[index] for call in calls]
        assert [s.response_ids for s in samples] == SCRIPT
        assert {s.trajectory_id for s in samples} == {str(index)}
        assert [s.turns for s in samples] == [2, 2] and samples[-1].is_last_turn
    assert calls[0][0] == chat_ids(planner_prompt(SEARCH_TASK.question, {}))


# -- the driver's turn samples on the embedded task -------------------------------------------
SPECS = [(10 + i, {"hops": 1, "max_turns": turns}) for i, turns in enumerate((1, 2, 3))]


def nonsense(prompts: Any, cap: int) -> Any:
    return [list(NONSENSE) for _ in prompts], None


def test_turn_samples_cover_every_turn_and_fill_unknown_logprobs_with_nan() -> None:
    results = run_episodes(SPECS, nonsense, TOK, pool=EnvPool(), samples="turns")
    assert [len(r.trainer_samples()) for r in results] == [1, 2, 3]
    for result in results:
        samples = result.trainer_samples()
        assert [s.turn for s in samples] == list(range(1, result.turns + 1))
        assert [s.is_last_turn for s in samples] == [False] * (result.turns - 1) + [True]
        assert all(s.logprobs is not None and all(map(math.isnan, s.logprobs)) for s in samples)
        # Structured prompts are rebuilt, not grown: no turn's prompt extends the one before.
        for before, after in zip(samples, samples[1:], strict=False):
            assert after.prompt_ids[: len(before.prompt_ids)] != before.prompt_ids
        assert result.completion_ids == [] and result.prompt_ids == samples[0].prompt_ids


def test_flat_samples_are_unchanged_and_one_per_trajectory() -> None:
    results = run_episodes(SPECS, nonsense, TOK, pool=EnvPool())
    for result in results:
        (sample,) = result.trainer_samples()
        assert sample.response_ids == result.completion_ids
        assert sample.response_mask == result.env_mask
        assert sample.turn == 0 and sample.is_last_turn and sample.turns == result.turns


def test_a_failed_label_is_one_masked_zero_reward_sample() -> None:
    results = run_episodes(
        [(1, {"hops": 1}), "not a label"], nonsense, TOK, pool=EnvPool(), samples="turns"
    )
    (failed,) = results[1].trainer_samples()
    assert failed.reward == 0.0 and failed.response_mask == [0] and failed.failure
    assert results[0].trainer_samples()[0].failure is None


# -- budgets per turn sample ------------------------------------------------------------------
def run_budgeted(samples: str, budget: TokenBudget, max_turns: int = 3) -> Any:
    pool = EnvPool(TOK)
    plan = AdapterConfig(samples=samples).plan(task_prompt(4, hops=1, max_turns=max_turns))

    async def generate(prompt: list[int], cap: int) -> Any:
        return NONSENSE[:cap], None

    return asyncio.run(
        run_token_episode(
            lambda: pool.new_session(plan),
            generate,
            budget,
            filler=TOK.eos_token_id,
            log=LOG,
            samples=samples,  # type: ignore[arg-type]
        )
    )


def test_the_response_budget_holds_per_turn_not_for_the_growing_total() -> None:
    budget = TokenBudget(response=len(NONSENSE) + 4)
    flat = run_budgeted("flat", budget)
    turns = run_budgeted("turns", budget)
    assert flat.turns == 1 and flat.end == "response_budget"
    assert turns.turns == 3 and turns.end == "done"
    assert all(s.response_ids == NONSENSE for s in turns.trainer_samples())


def test_a_turn_whose_prompt_is_too_long_ends_the_episode_there() -> None:
    first = run_budgeted("turns", TokenBudget()).trainer_samples()
    limit = len(first[0].prompt_ids)
    assert len(first[1].prompt_ids) > limit  # the second prompt is longer than the first
    episode = run_budgeted("turns", TokenBudget(prompt=limit))
    assert episode.end == PROMPT_BUDGET and episode.reward == 0.0
    assert [s.prompt_ids for s in episode.trainer_samples()] == [first[0].prompt_ids]


# -- advantages -------------------------------------------------------------------------------
def samples_of(rewards: list[float], turns: list[int], fail: int | None = None) -> list[Any]:
    out = []
    for index, (reward, count) in enumerate(zip(rewards, turns, strict=True)):
        for turn in range(1, count + 1):
            out.append(
                TrainerSample(
                    prompt_ids=[1],
                    response_ids=[2],
                    response_mask=[1],
                    logprobs=None,
                    reward=reward,
                    trajectory_id=f"t{index}",
                    turn=turn,
                    turns=count,
                    is_last_turn=turn == count,
                    failure="broken" if index == fail else None,
                )
            )
    return out


@pytest.mark.parametrize("normalize", ["trajectory", "turn"])
def test_the_group_advantage_is_broadcast_to_every_turn(normalize: Any) -> None:
    rewards, turns = [1.0, 0.0, 0.0, 1.0], [1, 3, 2, 2]
    samples = samples_of(rewards, turns)
    advantages = turn_sample_advantages(samples, ["q"] * len(samples), normalize=normalize)
    expected = flow_grpo_advantages(rewards, turns, normalize=normalize)
    by_trajectory: dict[str, set[float]] = {}
    for sample, advantage in zip(samples, advantages, strict=True):
        by_trajectory.setdefault(sample.trajectory_id, set()).add(advantage)
    assert [by_trajectory[f"t{i}"] for i in range(4)] == [{a} for a in expected]
    other = "turn" if normalize == "trajectory" else "trajectory"
    assert expected != flow_grpo_advantages(rewards, turns, normalize=other)


def test_groups_failures_and_equal_rewards() -> None:
    samples = samples_of([1.0, 0.0, 5.0, 1.0, 1.0], [2, 1, 1, 1, 2], fail=2)
    groups = ["a"] * 4 + ["b"] * 3
    advantages = turn_sample_advantages(samples, groups)
    expected = flow_grpo_advantages([1.0, 0.0])  # the failed trajectory is left out of a
    assert advantages[:3] == [expected[0], expected[0], expected[1]]
    assert advantages[3:] == [0.0] * 4  # the failed one, and group b's equal rewards


def test_turn_level_credit_applies_to_turn_samples() -> None:
    samples = samples_of([1.0, 0.0], [2, 1])
    values = {"t0": [None, 0.25], "t1": [None]}
    advantages = turn_sample_advantages(samples, ["q"] * 3, "monte_carlo", values=values)
    credits = [
        TrajectoryCredit(1.0, (0.0, 0.0), (None, 0.25)),
        TrajectoryCredit(0.0, (0.0,), (None,)),
    ]
    assert advantages == [a for row in turn_advantages(credits, "monte_carlo") for a in row]
    with pytest.raises(ValueError, match="values"):
        turn_sample_advantages(samples, ["q"] * 3, "monte_carlo")
    with pytest.raises(ValueError, match="own normalisation"):
        turn_sample_advantages(samples, ["q"] * 3, "progress", normalize="turn")


def test_a_trajectorys_turns_must_be_consecutive() -> None:
    samples = samples_of([1.0, 0.0], [2, 1])
    with pytest.raises(ValueError, match="not consecutive"):
        turn_sample_advantages([samples[0], samples[2], samples[1]], ["q"] * 3)


# -- settings ---------------------------------------------------------------------------------
def test_the_shape_picks_the_observation_mode() -> None:
    assert AdapterConfig.from_environ({"AGENTFLOW_SAMPLES": "turns"}).samples == "turns"
    assert plan_episode(task_prompt(1), samples="turns").observation_mode == "structured"
    flat_turns = plan_episode(task_prompt(1, observation_mode="flat"), samples="turns")
    assert flat_turns.observation_mode == "flat"
    assert plan_episode(task_prompt(1)).observation_mode == "flat"
    with pytest.raises(TaskSpecError, match="only samples='turns' trains on them"):
        plan_episode(task_prompt(1, observation_mode="structured"))
    with pytest.raises(ValueError, match="AGENTFLOW_SAMPLES must be one of"):
        AdapterConfig.from_environ({"AGENTFLOW_SAMPLES": "rows"})
    with pytest.raises(ValueError, match="adapter sets itself"):
        AdapterConfig.from_environ({"AGENTFLOW_ENV_KWARGS": '{"observation_mode": "structured"}'})
    turns = AdapterConfig.from_environ(
        {"AGENTFLOW_SAMPLES": "turns", "AGENTFLOW_ENV_KWARGS": '{"observation_mode": "structured"}'}
    )
    assert turns.plan(task_prompt(2)).observation_mode == "structured"


def test_every_test_the_credit_table_names_exists() -> None:
    """docs/credit.md's trainer table backs each tick with a test: each one it names is there."""
    root = Path(__file__).resolve().parents[2]
    table = (root / "docs" / "credit.md").read_text(encoding="utf-8")
    named: dict[str, set[str]] = {}
    module = ""
    for match in re.finditer(r"`(?:(test_\w+\.py))?::(test_\w+)`", table):
        module = match.group(1) or module  # "::name" continues the file named before it
        named.setdefault(module, set()).add(match.group(2))
    assert len(named) >= 6, named
    for module, tests in named.items():
        (path,) = (root / "tests").rglob(module)  # test files are named once, in any folder
        source = path.read_text(encoding="utf-8")
        for test in tests:
            assert re.search(rf"^def {test}\(", source, re.MULTILINE), f"{module}::{test}"
