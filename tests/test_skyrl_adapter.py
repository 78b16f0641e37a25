"""The SkyRL adapter, driven by SkyRL 0.3.0's own generator code on CPU.

``AgentFlowTextEnv`` runs inside SkyRL's ``SkyRLGymGenerator.agent_loop`` (built from
``skyrl_gym.make``, as in training) and ``AgentFlowGenerator`` is called as SkyRL's trainer calls
a generator. A fake inference client stands in for SkyRL's (``generate(InferenceEngineInput) ->
InferenceEngineOutput``, ``finish_session``): it plays a scripted planner on a mirror env of the
same task, stepping it as the adapter's env is stepped, so every test compares with the env's own
record.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "adapters" / "skyrl"))  # as the launch script's PYTHONPATH does

import mirror_planner  # noqa: E402
import skyrl_compat  # noqa: E402, F401  (first: skyrl.train imports on Python 3.11)
import skyrl_gym  # noqa: E402
from mirror_planner import spec_for  # noqa: E402
from skyrl.train.config import GeneratorConfig, SamplingParams, SkyRLGymConfig  # noqa: E402
from skyrl.train.generators.base import GeneratorInterface, TrajectoryID  # noqa: E402
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout.logprob_check import read_samples  # noqa: E402
from agentflow_env.rollout.planners import (  # noqa: E402
    expert_action,
)
from agentflow_env.rollout.pool import LazySharedEnvs  # noqa: E402
from agentflow_env.rollout.spec import TaskSpec  # noqa: E402
from agentflow_env.rollout.train_diagnostics import group_signal  # noqa: E402

LOGPROB = -0.5


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture
def adapters(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Both adapter modules with fresh ``AGENTFLOW_*`` settings; the env registered."""
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", "MAX_TURN_TOKENS"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    env = importlib.import_module("agentflow_text_env")
    generator = importlib.import_module("agentflow_generator")
    monkeypatch.setattr(env, "shared_envs", LazySharedEnvs())
    monkeypatch.setattr(generator, "shared_envs", LazySharedEnvs())
    env.register_env()
    return types.SimpleNamespace(env=env, generator=generator)


class Mirror(mirror_planner.Mirror):
    """A scripted planner on its own env of ``spec``'s task; ``sample`` steps it with the
    sampled ids (``as_text``: with their text, as the SkyRL env is stepped)."""

    async def sample(self, max_tokens: int | None, as_text: bool) -> tuple[list[int], str]:
        ids = await self.next_action(max_tokens)
        text = self.tok.decode([i for i in ids if i != self.tok.eos_token_id])  # as vLLM
        await self.session.step(text if as_text else ids)
        return ids, text


class FakeInferenceClient:
    """SkyRL's inference client contract; each session is served by the unclaimed mirror whose
    first prompt its first request carries."""

    def __init__(self, mirrors: list[Mirror], as_text: bool):
        self.free, self.as_text = list(mirrors), as_text
        self.by_session: dict[Any, Mirror] = {}
        self.finished: list[Any] = []
        self.params: list[dict | None] = []

    async def generate(self, input_batch: dict, model: str | None = None) -> dict:
        (prompt,), (session_id,) = input_batch["prompt_token_ids"], input_batch["session_ids"]
        params = input_batch.get("sampling_params")
        self.params.append(params)
        mirror = self.by_session.get(session_id)
        if mirror is None:
            for candidate in self.free:
                if await candidate.first_prompt() == list(prompt):
                    mirror = self.by_session[session_id] = candidate
                    self.free.remove(candidate)
                    break
            else:
                raise AssertionError("no mirror starts with this prompt")
        ids, text = await mirror.sample((params or {}).get("max_tokens"), self.as_text)
        return {
            "responses": [text],
            "response_ids": [list(ids)],
            "stop_reasons": ["stop"],
            "response_logprobs": [[LOGPROB] * len(ids)],
        }

    async def finish_session(self, session_id: Any) -> None:
        self.finished.append(session_id)


def generator_config(max_input_length: int | None = 8192, per_turn: int = 1024) -> Any:
    sampling = SamplingParams(max_generate_length=per_turn, logprobs=1)
    return GeneratorConfig(
        max_turns=10, max_input_length=max_input_length, sampling_params=sampling
    )


def batch(specs: list[TaskSpec], **extras: Any) -> dict:
    return {
        "prompts": [[{"role": "user", "content": "q"}] for _ in specs],
        "env_classes": ["agentflow"] * len(specs),
        "env_extras": [{"label": spec.to_json(), **extras} for spec in specs],
        "sampling_params": None,
        "trajectory_ids": None,
        "batch_metadata": None,
    }


# -- the BaseTextEnv through SkyRL's own agent loop -------------------------------------------------
def test_the_env_is_registered_and_built_by_skyrl_gym(adapters):
    env = skyrl_gym.make("agentflow", env_config={}, extras={"label": spec_for(0).to_json()})
    assert isinstance(env, adapters.env.AgentFlowTextEnv) and isinstance(env, BaseTextEnv)
    messages, info = env.init([{"role": "user", "content": "q"}])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all("<|im_start|>" not in m["content"] for m in messages)  # plain text, no markup
    assert info["task_id"]
    step = env.step(expert_action(env.session.task, 0))
    assert not step["done"] and step["reward"] == 0.0
    (message,) = step["observations"]
    assert message["role"] == "user" and "<|im_" not in message["content"]
    record = env.session.turn_records[-1]
    assert message["content"] in record.feedback_text  # the env's feedback, without the markup


@pytest.mark.parametrize(("planner", "index"), [("expert", 0), ("expert", 3), ("random", 1)])
def test_skyrls_agent_loop_trains_on_generated_ids_only(adapters, hf_tokenizer, planner, index):
    spec = spec_for(index)
    mirror = Mirror(spec, hf_tokenizer, planner, seed=index)
    client = FakeInferenceClient([mirror], as_text=True)
    generator = SkyRLGymGenerator(
        generator_config(), SkyRLGymConfig(max_env_workers=2), client, hf_tokenizer
    )
    out = asyncio.run(generator.generate(batch([spec]), disable_tqdm=True))
    response, mask = out["response_ids"][0], out["loss_masks"][0]
    assert [i for i, m in zip(response, mask, strict=True) if m] == sum(mirror.actions, [])
    assert sum(mask) == sum(len(a) for a in mirror.actions)
    # SkyRL renders the env's plain messages to the env's own ids. With this ChatML template
    # the sequences differ only in where the end-of-turn id sits: in SkyRL's action (trained), in
    # the env's feedback (the env was given the action's text), and after the last action.
    flat = mirror.session.trajectory().flat_sample()
    assert out["prompt_token_ids"][0] == flat.input_ids[: flat.prompt_length]
    assert out["prompt_token_ids"][0] + response == flat.input_ids + [hf_tokenizer.eos_token_id]
    outcome = mirror.session.outcome
    assert outcome is not None and sum(out["rewards"][0]) == outcome.reward
    last_action = max(i for i, m in enumerate(mask) if m)
    assert out["rewards"][0][last_action] == outcome.reward
    if planner == "expert":
        assert outcome.reward == 1.0 and out["env_metrics"][0]["success"] == 1.0
    assert out["rollout_logprobs"][0] == [LOGPROB if m else 0.0 for m in mask]
    assert client.finished  # SkyRL released the session


def test_a_bad_label_ends_the_text_env_with_reward_0(adapters, hf_tokenizer, caplog):
    class OneTokenClient(FakeInferenceClient):
        async def generate(self, input_batch: dict, model: str | None = None) -> dict:
            return {"responses": ["x"], "response_ids": [[5]], "stop_reasons": ["stop"]}

    client = OneTokenClient([], as_text=True)
    generator = SkyRLGymGenerator(
        generator_config(), SkyRLGymConfig(max_env_workers=2), client, hf_tokenizer
    )
    rows = batch([spec_for(0)])
    rows["env_extras"] = [{"label": '{"seed": "x"}'}]
    with caplog.at_level(logging.WARNING, "agentflow_env.adapters.skyrl"):
        out = asyncio.run(generator.generate(rows, disable_tqdm=True))
    assert out["rewards"][0] == [0.0] and out["loss_masks"][0] == [1]  # one step, then the end
    assert out["env_metrics"][0]["error"] == 1.0
    assert "counts as reward 0" in caplog.text


# -- the token-exact generator ----------------------------------------------------------------------
def run_exact(adapters, tokenizer, specs, mirrors, config=None) -> dict:
    client = FakeInferenceClient(mirrors, as_text=False)
    generator = adapters.generator.AgentFlowGenerator(
        config or generator_config(), SkyRLGymConfig(), client, tokenizer
    )
    assert isinstance(generator, GeneratorInterface)
    out = asyncio.run(generator.generate(batch(specs)))
    assert len(client.finished) == len(specs)  # every session released
    for key in ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons"):
        assert len(out[key]) == len(specs)  # what SkyRL's trainer checks
    for response, mask in zip(out["response_ids"], out["loss_masks"], strict=True):
        assert len(response) == len(mask) > 0
    return out


def test_the_exact_generators_ids_are_the_envs_flat_record(adapters, hf_tokenizer):
    specs = [spec_for(0), spec_for(0), spec_for(1), spec_for(3, hops=1)]
    mirrors = [
        Mirror(spec, hf_tokenizer, "random" if i == 2 else "expert", seed=i)
        for i, spec in enumerate(specs)
    ]
    out = run_exact(adapters, hf_tokenizer, specs, mirrors)
    for row in range(len(specs)):
        prompt, response = out["prompt_token_ids"][row], out["response_ids"][row]
        mirror = next(
            m
            for m in mirrors
            if m.session.trajectory().flat_sample().input_ids == prompt + response
        )
        flat = mirror.session.trajectory().flat_sample()
        assert prompt == flat.input_ids[: flat.prompt_length]
        assert out["loss_masks"][row] == flat.completion_mask
        assert out["rollout_logprobs"][row] == [LOGPROB if m else 0.0 for m in flat.completion_mask]
        assert out["rewards"][row] == mirror.session.outcome.reward
        assert out["stop_reasons"][row] == "stop"
    assert [out["rewards"][row] for row in (0, 1, 3)] == [1.0, 1.0, 1.0]  # the expert succeeds
    assert out["rollout_metrics"]["environment/agentflow/success"] == pytest.approx(
        sum(m.session.outcome.success for m in mirrors) / 4
    )


def test_the_exact_generator_caps_turns_and_ends_out_of_room_with_reward_0(adapters, hf_tokenizer):
    spec = spec_for(0)
    mirror = Mirror(spec, hf_tokenizer)
    first_prompt = len(asyncio.run(mirror.first_prompt()))
    # Room for one 8-token action, then none.
    out = run_exact(adapters, hf_tokenizer, [spec], [mirror], generator_config(first_prompt, 8))
    assert [len(a) for a in mirror.actions] == [8]
    assert out["response_ids"][0] == mirror.actions[0] and out["loss_masks"][0] == [1] * 8
    assert out["rewards"][0] == 0.0 and out["stop_reasons"][0] == "length"


def test_no_room_for_one_action_is_a_reward_0_sample(adapters, hf_tokenizer):
    spec = spec_for(0)
    mirror = Mirror(spec, hf_tokenizer)
    out = run_exact(adapters, hf_tokenizer, [spec], [mirror], generator_config(16, 8))
    assert mirror.actions == []  # nothing sampled: the first prompt alone is over the budget
    assert out["prompt_token_ids"][0] == asyncio.run(mirror.first_prompt())
    assert out["loss_masks"] == [[0]] and out["rewards"] == [0.0]
    assert out["stop_reasons"] == ["length"]
    assert out["env_metrics"][0]["budget_exhausted"] == 1.0


def test_a_bad_label_is_a_reward_0_sample_of_the_exact_generator(adapters, hf_tokenizer):
    client = FakeInferenceClient([], as_text=False)
    generator = adapters.generator.AgentFlowGenerator(
        generator_config(), SkyRLGymConfig(), client, hf_tokenizer
    )
    rows = batch([spec_for(0)])
    rows["env_extras"] = [{"label": "not json"}]
    out = asyncio.run(generator.generate(rows))
    assert out["rewards"] == [0.0] and out["loss_masks"] == [[0]]
    assert out["stop_reasons"] == ["error"] and out["env_metrics"][0]["error"] == 1.0


def test_the_exact_generator_logs_group_signal_and_dumps_samples(
    adapters, hf_tokenizer, tmp_path, monkeypatch
):
    path = tmp_path / "samples.jsonl"
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES", str(path))
    specs = [spec_for(0), spec_for(0), spec_for(1), spec_for(1)]
    mirrors = [Mirror(spec, hf_tokenizer, "expert") for spec in specs[:3]]
    client = FakeInferenceClient(mirrors, as_text=False)
    generator = adapters.generator.AgentFlowGenerator(
        generator_config(), SkyRLGymConfig(), client, hf_tokenizer
    )
    rows = batch(specs)
    rows["env_extras"][3] = {"label": "not json"}  # fails: reward 0
    rows["trajectory_ids"] = [TrajectoryID(k, i % 2) for i, k in enumerate("aabb")]
    out = asyncio.run(generator.generate(rows))
    assert out["rewards"] == [1.0, 1.0, 1.0, 0.0]
    metrics, expected = out["rollout_metrics"], group_signal(out["rewards"], 2)
    assert metrics["environment/agentflow/equal_reward_groups"] == 0.5  # group a: 1, 1
    for key in ("equal_reward_groups", "all_zero_groups", "mean_abs_advantage"):
        assert metrics[f"environment/agentflow/{key}"] == pytest.approx(expected[key])
    assert metrics["environment/agentflow/error"] == 0.25  # the failure rate
    dumped = read_samples(path)
    assert [s.prompt_ids for s in dumped] == out["prompt_token_ids"]
    assert [s.completion_ids for s in dumped] == out["response_ids"]
    assert [s.mask for s in dumped] == out["loss_masks"]
    assert [s.logprobs for s in dumped] == out["rollout_logprobs"]
    # Without trajectory_ids (no groups named) there is no group signal.
    no_groups = run_exact(
        adapters, hf_tokenizer, [spec_for(2)], [Mirror(spec_for(2), hf_tokenizer)]
    )
    assert "environment/agentflow/equal_reward_groups" not in no_groups["rollout_metrics"]
