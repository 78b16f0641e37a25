"""TRL's OpenEnv pattern on a served env: ``examples/trl/openenv_tool_choice.py``'s ``rollout_func``.

Against a real server on 127.0.0.1 (uvicorn in a thread, the tool-choice probe with the settings
``agentflow-env serve`` gives it), with TRL's real ``GRPOTrainer`` and the tiny planner:

- what ``rollout_func`` returns to TRL is what the served env recorded (``RemoteEnv.trajectory``:
  each turn's prompt and action ids, the reward), and the same samples, id for id, as the
  in-process adapter's ``make_rollout_func`` with the same model and sampling seed;
- for given actions, the served env pays what the in-process env pays, on the same prompts;
- two GRPO steps train through it, the reward TRL logs being the env's.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("openenv")

from conftest import ROOT, load_adapter  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.envs.registration import run_settings  # noqa: E402
from agentflow_env.rollout.labels.probe_labels import probe_env  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "service"))
from served import server_thread  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def load_example(path: str, name: str) -> Any:
    """The example script as a module, registered under ``name`` (its dataclasses need that)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


example = load_example("examples/trl/openenv_tool_choice.py", "agentflow_openenv_example")
adapter = load_adapter("adapters/trl/rollout.py", "agentflow_trl_rollout_for_openenv")
CAP = 24
GENERATIONS = 4
SERVED = {"observation_mode": "flat", "max_action_tokens": CAP}
"""``serve_command``'s env settings (``run_settings`` adds the CLI's held-out split)."""


@pytest.fixture(scope="module")
def served() -> Any:
    settings = run_settings(example.ENV_ID, SERVED)
    assert settings["split"] == "test"  # the labels name their own split
    with server_thread(example.ENV_ID, settings) as (url, _host):
        yield url


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


def make_trainer(tokenizer: Any, rollout_func: Any, tmp: Path, steps: int = 2) -> GRPOTrainer:
    torch.manual_seed(0)
    model = example.build_model(tokenizer, 32, 1, 2)
    args = example.build_parser().parse_args(
        ["--grpo-steps", str(steps), "--questions-per-step", "2"]
        + ["--num-generations", str(GENERATIONS)]
    )
    labels = [example.probe_label("tool_choice", 1_000_000 + i, split="train") for i in range(8)]
    return GRPOTrainer(
        model=model,
        reward_funcs=example.env_reward,
        args=example.cpu_grpo_config(str(tmp), args, seed=0, max_completion_length=1024),
        train_dataset=Dataset.from_dict({"prompt": labels}),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )


def drawer_action(tokenizer: Any, colour: str) -> list[int]:
    """The ids of an action opening ``colour``'s drawer, end-of-turn token included."""
    text = f"Context: {colour}\nTool Name: {colour}_Drawer"
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def group_prompts(count: int) -> list[str]:
    """``count`` tasks, each repeated ``GENERATIONS`` times, as TRL's sampler hands them over."""
    return [
        example.probe_label("tool_choice", 1_000_000 + i, split="train")
        for i in range(count)
        for _ in range(GENERATIONS)
    ]


def test_rollout_func_returns_what_the_served_env_recorded(
    served: str, tokenizer: Any, tmp_path: Path
) -> None:
    episodes = example.RemoteEpisodes(served, tokenizer, CAP)
    rollout_func = example.make_remote_rollout_func(episodes)
    trainer = make_trainer(tokenizer, rollout_func, tmp_path)
    prompts = group_prompts(2)
    try:
        torch.manual_seed(123)
        output = rollout_func(prompts, trainer)
        trajectories = list(episodes.trajectories)
    finally:
        episodes.close()
    assert {"prompt_ids", "completion_ids", "logprobs"} <= output.keys()
    assert len(output["prompt_ids"]) == len(prompts) == len(trajectories)
    for i, trajectory in enumerate(trajectories):
        (turn,) = trajectory.turns  # one turn: the probe's
        assert trajectory.observation_mode == "flat"
        assert output["prompt_ids"][i] == list(turn.prompt_ids)
        assert output["completion_ids"][i] == list(turn.action_ids)
        assert turn.action_given_as_ids and not turn.action_cut
        assert output["logprobs"][i] == pytest.approx(list(turn.logprobs))
        assert all(lp <= 0 for lp in output["logprobs"][i])
        assert output["env_mask"][i] == [1] * len(turn.action_ids)
        assert output["env_reward"][i] == trajectory.reward == turn.reward
        assert output["success"][i] == float(trajectory.success)
        assert 0 < len(output["completion_ids"][i]) <= CAP
    # The copies of a task share it: the same first prompt within each group.
    for g in range(0, len(prompts), GENERATIONS):
        assert len({tuple(p) for p in output["prompt_ids"][g : g + GENERATIONS]}) == 1
    assert output["prompt_ids"][0] != output["prompt_ids"][GENERATIONS]

    # The in-process adapter, same model and sampling seed: the same samples, id for id.
    local = adapter.make_rollout_func(env_id=example.ENV_ID, max_action_tokens=CAP)
    torch.manual_seed(123)
    expected = local(prompts, trainer)
    for key in ("prompt_ids", "completion_ids", "env_mask", "env_reward", "success"):
        assert output[key] == expected[key], key


def test_the_served_env_pays_what_the_in_process_env_pays(served: str, tokenizer: Any) -> None:
    """Each drawer's action on each of 8 tasks (32 episodes, a quarter paid) through
    ``RemoteEpisodes.play``, against the same actions on a local env of the probe."""
    drawers = ("Red", "Green", "Blue", "Yellow")
    actions = {colour: drawer_action(tokenizer, colour) for colour in drawers}
    labels = [
        example.probe_label("tool_choice", 1_000_000 + i, split="train")
        for i in range(8)
        for _ in drawers
    ]
    chosen = [actions[drawers[i % 4]] for i in range(len(labels))]

    def scripted(prompts: Any, max_new_tokens: int) -> tuple[list[list[int]], None]:
        assert max_new_tokens == CAP and len(prompts) == len(labels)
        return [list(a) for a in chosen], None

    episodes = example.RemoteEpisodes(served, tokenizer, CAP)
    try:
        played = episodes.play(labels, scripted)
    finally:
        episodes.close()
    env = probe_env("tool_choice")
    for label, action, episode in zip(labels, chosen, played, strict=True):
        spec = TaskSpec.from_json(label)
        observation, _ = env.reset(seed=spec.seed, options={"task": spec.resolve(env.task_source)})
        _, reward, terminated, truncated, info = env.step(action)
        assert (terminated or truncated) and episode.done
        assert episode.prompt_ids == [int(i) for i in observation["token_ids"]]
        assert episode.completion_ids == action
        assert episode.reward == float(info.get("reward", reward))
        assert episode.success == info["success"]
    rewards = [e.reward for e in played]
    assert sum(rewards) == 8 and {0.0, 1.0} == set(rewards)  # one drawer of four pays


def test_two_grpo_steps_train_through_the_served_env(
    served: str, tokenizer: Any, tmp_path: Path
) -> None:
    episodes = example.RemoteEpisodes(served, tokenizer, CAP)
    seen: list[dict[str, Any]] = []
    rollout_func = example.make_remote_rollout_func(episodes)

    def recording(prompts: list[Any], trainer: Any) -> dict[str, list]:
        output = rollout_func(prompts, trainer)
        seen.append(output)
        return output

    trainer = make_trainer(tokenizer, recording, tmp_path, steps=2)
    try:
        trainer.train()
    finally:
        episodes.close()
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logged) == len(seen) == 2
    for entry, output in zip(logged, seen, strict=True):
        rewards = output["env_reward"]
        assert len(rewards) == 2 * GENERATIONS
        assert entry["reward"] == pytest.approx(sum(rewards) / len(rewards))
        assert entry["env/turns"] == 1.0


def test_the_null_control_permutes_the_batch_rewards(
    served: str, tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same episodes with and without ``null_seed``: their rewards in another order (the
    multiset kept), ``success`` the truth. A scripted policy (each drawer in turn) stands in for
    the model so that the batch has rewards of both kinds; the server is the real one."""
    actions = [drawer_action(tokenizer, c) for c in ("Red", "Green", "Blue", "Yellow")]

    def scripted(trainer: Any) -> Any:
        def generate(prompts: Any, max_new_tokens: int) -> tuple[list[list[int]], None]:
            return [list(actions[i % 4]) for i in range(len(prompts))], None

        return generate

    monkeypatch.setattr(example, "trainer_generate", scripted)
    outputs = []
    for null_seed in (None, 0):
        episodes = example.RemoteEpisodes(served, tokenizer, CAP)
        rollout_func = example.make_remote_rollout_func(episodes, null_seed=null_seed)
        trainer = make_trainer(tokenizer, rollout_func, tmp_path)
        try:
            outputs.append(rollout_func(group_prompts(8), trainer))
        finally:
            episodes.close()
    real, null = outputs
    assert real["completion_ids"] == null["completion_ids"]
    assert real["success"] == null["success"] == real["env_reward"]
    assert sorted(real["env_reward"]) == sorted(null["env_reward"])
    assert 0 < sum(real["env_reward"]) < len(real["env_reward"])
    assert real["env_reward"] != null["env_reward"]
