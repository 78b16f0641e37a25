"""TRL adapter: dataset prompts in every label form the OpenRLHF adapter reads.

A ``TaskSpec`` as a JSON string, a parsed object, a ``TaskSpec`` or a chat message, naming its
task by seed, task id or inline record, with or without an env id, all through the real
``rollout_func`` and TRL's ``GRPOTrainer``. Each episode must start from exactly the first prompt
the OpenRLHF adapter's path (``TaskSpec.make_env`` + ``TaskSpec.resolve``) gives for that label.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from test_trl import cpu_grpo_config, rollout, tiny_model  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout import build_env, plan_episode  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec, TaskSpecError, synthetic_specs  # noqa: E402

SEARCH = "AgentFlow-Search-v0"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture(scope="module")
def trainer(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(2)
    return GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=rollout.env_reward,
        args=cpu_grpo_config(
            tmp_path_factory.mktemp("grpo-labels"),
            per_device_train_batch_size=2,
            num_generations=2,
            max_steps=1,
        ),
        train_dataset=Dataset.from_dict({"prompt": [rollout.task_prompt(0)] * 2}),
        processing_class=tokenizer,
        rollout_func=rollout.make_rollout_func(max_action_tokens=8),
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qa") / "corpus.jsonl"
    docs = [
        {"id": "d1", "contents": "Quillon Abbey\nQuillon Abbey was founded by Maren Toll."},
        {"id": "d2", "contents": "Maren Toll\nMaren Toll was a stonemason."},
    ]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def first_prompt(spec: TaskSpec, tokenizer: Any) -> tuple[list[int], Any]:
    """The OpenRLHF adapter's reading of ``spec``: its env and its task, flat observations."""
    env = spec.make_env(tokenizer=tokenizer, observation_mode="flat")
    task = spec.resolve(env.task_source)
    observation, _ = env.reset(seed=spec.seed, options={"task": task})
    return [int(i) for i in observation["token_ids"]], task


def test_every_label_form_runs_the_task_it_names(
    trainer: Any, tokenizer: Any, corpus: Path
) -> None:
    small = {"max_turns": 2}
    by_seed = TaskSpec(
        env_id=SEARCH,
        env_kwargs={"hops": 1, "fresh_world": True, "world_size": "small", **small},
        seed=11,
    )
    by_id, _ = next(iter(synthetic_specs(1, hops=1, world_size="small", seed=3)))
    by_id = dataclasses.replace(by_id, env_kwargs={**by_id.env_kwargs, **small})
    inline = TaskSpec(
        env_id=SEARCH,
        env_kwargs=small,
        record={
            "task_id": "q-abbey",
            "question": "Who founded Quillon Abbey?",
            "gold_answers": ["Maren Toll"],
            "corpus": str(corpus),
        },
    )
    code = TaskSpec(env_id="AgentFlow-Code-v0", env_kwargs=small, seed=4)
    # What each label form means: (prompt as the dataset holds it, the spec it names).
    unnamed = rollout.task_prompt(5, max_turns=2)
    defaults = TaskSpec(
        env_id=SEARCH, env_kwargs={**rollout.DEFAULT_ENV_KWARGS, "max_turns": 2}, seed=5
    )
    forms: list[tuple[Any, TaskSpec]] = [
        (unnamed, defaults),  # today's task prompt: no env id, the rollout's defaults
        (by_seed.to_json(), by_seed),
        (by_id.to_json(), by_id),
        (inline.to_json(), inline),
        (code.to_json(), code),
        (json.loads(by_seed.to_json()), by_seed),  # the parsed object
        (inline, inline),  # a TaskSpec itself
        ([{"role": "user", "content": by_id.to_json()}], by_id),  # a chat conversation
    ]
    output = rollout.make_rollout_func(max_action_tokens=8)([p for p, _ in forms], trainer)

    assert output["error"] == [""] * len(forms)
    for index, (_, spec) in enumerate(forms):
        expected, task = first_prompt(spec, tokenizer)
        assert output["prompt_ids"][index] == expected, f"form {index}"
        assert task.question in tokenizer.decode(expected)
        assert 1 <= output["turns"][index] <= 2
    # The forms name different tasks and envs, so matching prompts is not a coincidence.
    assert len({tuple(ids) for ids in output["prompt_ids"]}) == 5
    assert "Python" in tokenizer.decode(output["prompt_ids"][4])  # the Code env's tools
    assert "Quillon Abbey" in tokenizer.decode(output["prompt_ids"][3])


def test_task_id_labels_are_not_turned_into_fresh_worlds(tokenizer: Any) -> None:
    """A label with an env id means what it means in OpenRLHF; the TRL defaults (fresh small
    worlds, which have no task list) apply only to labels that name no env."""
    by_id, task = next(iter(synthetic_specs(1, hops=1, seed=5)))
    plan = plan_episode(by_id, default_env_kwargs=rollout.DEFAULT_ENV_KWARGS)
    assert "fresh_world" not in plan.env_kwargs
    env = build_env(plan, tokenizer)
    assert plan.spec.resolve(env.task_source).question == task.question
    unnamed = plan_episode(
        rollout.task_prompt(1, hops=2), env_kwargs={"max_turns": 5}, default_env_kwargs={"a": 1}
    )
    assert unnamed.env_id == SEARCH
    assert dict(unnamed.env_kwargs) == {"a": 1, "max_turns": 5, "hops": 2}


@pytest.mark.parametrize(
    "label",
    [
        "not json",
        '{"seed": 1, "task_id": "x"}',
        [{"role": "user", "content": "hello"}],
        TaskSpec(env_kwargs={"observation_mode": "structured"}, seed=1).to_json(),
        TaskSpec(env_kwargs={"tokenizer": "gpt2"}, seed=1).to_json(),
    ],
)
def test_labels_that_name_no_usable_task_are_rejected(label: Any) -> None:
    with pytest.raises(TaskSpecError):
        plan_episode(label)
