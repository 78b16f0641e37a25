"""Dynamic sampling with refill through TRL: ``make_rollout_func(dynamic_sampling=...)`` under
``AgentFlowGRPOTrainer``, one real ``trainer.train()`` step with a 1-layer model on CPU.

The policy is scripted per task so groups of all three kinds occur: on some tasks the expert
acts in every episode (all solved), on some never (the untrained model: all failed), on the rest
in every other episode (mixed). What TRL trains on is captured and checked: the dropped groups
are the equal-reward ones, with their reasons in the diagnostics log; refilled slots hold a
reserve question's own episodes, token for token what the env gives that question; the greedy
screen plays the candidates.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import zlib
from typing import Any

import pytest
import torch
from conftest import ROOT  # noqa: E402
from datasets import Dataset  # noqa: E402
from test_trl import cpu_grpo_config, live_envs_by_prompt, tiny_model  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout import DynamicSampling, group_key  # noqa: E402
from agentflow_env.rollout.agents.planners import ExpertPlanner  # noqa: E402

sys.path.insert(0, str(ROOT / "adapters" / "trl"))
import rollout  # noqa: E402  (the module diagnostics.py imports)
from diagnostics import AgentFlowGRPOTrainer  # noqa: E402

ENV = {"hops": 1, "max_turns": 2}
G = 4


def kind_of(env: Any) -> int:
    """0: the expert always acts, 1: never, 2: every other episode of the task."""
    return zlib.crc32(env.session.task.question.encode()) % 3


def scripted(generate: Any, tokenizer: Any) -> Any:
    counter = itertools.count()

    def act(prompts: list[list[int]], max_new_tokens: int):
        completions, logprobs = generate(prompts, max_new_tokens)
        by_prompt = live_envs_by_prompt(rollout)
        for i, prompt in enumerate(prompts):
            env = by_prompt.get(tuple(prompt))
            if env is None:
                continue
            if not hasattr(env.session, "scripted_turn"):
                env.session.scripted_turn = next(counter) % 2  # this episode's parity
            kind = kind_of(env)
            if kind == 0 or (kind == 2 and env.session.scripted_turn == 0):
                action = ExpertPlanner(env).act()
                ids = tokenizer.encode(action, add_special_tokens=False)
                completions[i] = ids + [tokenizer.eos_token_id]
                logprobs[i] = [0.0] * len(completions[i])
        return completions, logprobs

    return act


@pytest.fixture(scope="module")
def refilled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(2)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    reserve_seeds = itertools.count(5000)
    drawn: list[Any] = []

    def reserve(n: int) -> list[Any]:
        labels = [rollout.task_prompt(next(reserve_seeds)) for _ in range(n)]
        drawn.extend(labels)
        return labels

    sampling = DynamicSampling(reserve=reserve, max_rounds=3, screen_candidates=2)
    inner = rollout.make_rollout_func(ENV, max_action_tokens=12, dynamic_sampling=sampling)
    seen: list[dict[str, Any]] = []

    def recording(prompts: list[Any], trainer: Any) -> dict[str, list]:
        output = inner(prompts, trainer)
        seen.append({"prompts": list(prompts), **output})
        return output

    real = rollout.trainer_generate
    screens: list[int] = []

    def patched(trainer: Any, greedy: bool = False) -> Any:
        if greedy:
            screens.append(1)
        return scripted(real(trainer, greedy=greedy), tokenizer)

    rollout.trainer_generate = patched
    work = tmp_path_factory.mktemp("dynamic")
    dataset = Dataset.from_dict({"prompt": [rollout.task_prompt(s) for s in range(8)]})
    trainer = AgentFlowGRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=rollout.env_reward,
        args=cpu_grpo_config(
            work / "grpo",
            per_device_train_batch_size=4 * G,
            num_generations=G,
            max_steps=1,
            learning_rate=1e-4,
            beta=0.0,
            temperature=0.7,
            loss_type="grpo",
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=recording,
        diagnostics_path=str(work / "diagnostics.jsonl"),
        kl_to_start=False,
    )
    try:
        trainer.train()
    finally:
        rollout.trainer_generate = real
    lines = [json.loads(x) for x in (work / "diagnostics.jsonl").read_text().splitlines()]
    return {"seen": seen, "log": lines, "drawn": drawn, "screens": screens, "tok": tokenizer}


def groups_of(values: list[Any]) -> list[list[Any]]:
    return [values[i : i + G] for i in range(0, len(values), G)]


def test_dropped_groups_are_logged_with_their_reasons(refilled: dict[str, Any]) -> None:
    (output,) = refilled["seen"]
    (step,) = [r for r in refilled["log"] if "dynamic/dropped" in r]
    dropped = step["dynamic/dropped_groups"]
    assert dropped, "the scripted tasks give equal-reward groups: some must be dropped"
    batch = groups_of(output["prompts"])
    for drop in dropped:
        assert drop["label"] == group_key(batch[drop["slot"]][0])
        assert drop["reason"] in ("all_failed", "all_solved")
    assert step["dynamic/dropped"] == len(dropped)
    assert step["dynamic/refilled"] + step["dynamic/kept_equal"] == len(dropped)


def test_the_trained_batch_is_the_refilled_one(refilled: dict[str, Any]) -> None:
    (output,) = refilled["seen"]
    (step,) = [r for r in refilled["log"] if "dynamic/dropped" in r]
    rewards = groups_of(output["env_reward"])
    equal = sum(1 for g in rewards if max(g) == min(g))
    assert equal == step["dynamic/kept_equal"]
    assert step["diag/informative_groups"] == pytest.approx(1 - equal / len(rewards))
    changed = [
        i
        for i, (old, new) in enumerate(
            zip(groups_of(output["prompts"]), groups_of(output["labels"]), strict=True)
        )
        if old[0] != new[0]
    ]
    assert len(changed) == step["dynamic/refilled"] > 0
    eos = refilled["tok"].eos_token_id

    def stop_at_once(prompts: Any, max_new_tokens: int) -> Any:
        return [[eos]] * len(prompts), None

    for slot in changed:
        label = output["labels"][slot * G]
        assert label in refilled["drawn"] and len(set(groups_of(output["labels"])[slot])) == 1
        # Token for token what the env gives that question: its first observation is the prompt.
        (fresh,) = rollout.run_episodes(
            [label],
            stop_at_once,
            refilled["tok"],
            env_kwargs=ENV,
            max_action_tokens=12,
            default_env_kwargs=rollout.DEFAULT_ENV_KWARGS,
        )
        for ids in groups_of(output["prompt_ids"])[slot]:
            assert ids == fresh.prompt_ids


def test_the_greedy_screen_plays_every_candidate(refilled: dict[str, Any]) -> None:
    (step,) = [r for r in refilled["log"] if "dynamic/dropped" in r]
    rounds = step["dynamic/rounds"]
    assert rounds >= 1 and len(refilled["screens"]) == rounds
    assert step["dynamic/screened"] == len(refilled["drawn"])
    assert step["dynamic/episodes"] == (
        4 * G + step["dynamic/screened"] + G * step["dynamic/refill_groups"]
    )
