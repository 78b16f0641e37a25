"""Task labels of every variant: ``variant_specs`` names each task as its row says
(``Variant.label_tasks``), every label resolves to that task at reset, and a label naming a task
its variant cannot find is refused when read."""

from __future__ import annotations

import pytest

import agentflow_env  # noqa: F401  (registers the envs)
from agentflow_env.envs.registration import REGISTERED
from agentflow_env.rollout.labels.spec import (
    TaskSpec,
    TaskSpecError,
    synthetic_specs,
    variant_specs,
)


@pytest.mark.parametrize("env_id", list(REGISTERED))
def test_every_variants_labels_name_tasks_its_env_resets_to(env_id: str) -> None:
    variant = REGISTERED[env_id]
    pairs = list(variant_specs(3, env_id=env_id, env_kwargs={"max_turns": 2}, seed=5))
    assert len(pairs) == 3
    env = pairs[0][0].make_env()
    naming = variant.label_naming(env.task_source)
    assert naming == ("task_id" if variant.label_tasks == "auto" else variant.label_tasks)
    for spec, task in pairs:
        assert spec.env_id == env_id and getattr(spec, naming) is not None
        assert set(variant.label_settings) <= set(spec.env_kwargs)
        again = TaskSpec.from_json(spec.to_json())
        assert again == spec and again.resolve(env.task_source).question == task.question
        _, info = env.reset(options={"task": again.resolve(env.task_source)})
        assert info["question"] == task.question
    env.close()


def test_code_labels_are_seeds_and_a_task_id_label_is_refused_when_read() -> None:
    pairs = list(variant_specs(2, env_id="AgentFlow-Code-v0", env_kwargs={"kinds": "compute"}))
    assert [spec.seed for spec, _ in pairs] == [0, 1]
    assert pairs[0][0].env_kwargs == {"kinds": "compute", "split": "train"}
    label = '{"env_id": "AgentFlow-Code-v0", "task_id": "synthetic-0-f3a3489be1fc"}'
    with pytest.raises(TaskSpecError, match="AgentFlow-Code-v0 generates its tasks: a label names"):
        TaskSpec.from_json(label)


def test_search_labels_are_what_synthetic_specs_wrote() -> None:
    fixed = list(synthetic_specs(3, hops=[1, 2], seed=4))
    assert [spec for spec, _ in fixed] == [
        spec
        for spec, _ in variant_specs(
            3, env_kwargs={"hops": [1, 2], "split": "train", "world_seed": 0}, seed=4
        )
    ]
    assert fixed[0][0].env_kwargs == {"hops": [1, 2], "split": "train", "world_seed": 0}
    assert all(spec.task_id for spec, _ in fixed)
    fresh = list(synthetic_specs(2, fresh_world=True, seed=7))
    assert [spec.seed for spec, _ in fresh] == [7, 8]


def test_unknown_ids_and_refused_settings_are_label_errors() -> None:
    with pytest.raises(TaskSpecError, match="'Nope-v0' is not a registered variant"):
        variant_specs(1, env_id="Nope-v0")
    with pytest.raises(TaskSpecError, match="env_kwargs for AgentFlow-Code-v0: .*hops="):
        variant_specs(1, env_id="AgentFlow-Code-v0", env_kwargs={"hops": 2})
