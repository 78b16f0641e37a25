"""The SkyRL adapter, driven by SkyRL 0.3.0's own generator code on CPU.

``AgentFlowTextEnv`` runs inside SkyRL's ``SkyRLGymGenerator.agent_loop`` (built from
``skyrl_gym.make``, as in training) and ``AgentFlowGenerator`` is called as SkyRL's trainer calls
a generator. A fake inference client stands in for SkyRL's (``generate(InferenceEngineInput) ->
InferenceEngineOutput``, ``finish_session``): it plays a scripted planner on a mirror env of the
same task, stepping it as the adapter's env is stepped, so every test compares with the env's own
record.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib
import logging
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "adapters" / "skyrl"))  # as the launch script's PYTHONPATH does

import mirror_planner  # noqa: E402
import skyrl_compat  # noqa: E402, F401  (first: skyrl.train imports on Python 3.11)
import skyrl_gym  # noqa: E402
from mirror_planner import spec_for  # noqa: E402
from skyrl.train.config import GeneratorConfig, SamplingParams, SkyRLGymConfig  # noqa: E402
from skyrl.train.generators.base import GeneratorInterface, TrajectoryID  # noqa: E402
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402

from agentflow_env.base.tokens import (  # noqa: E402
    load_default_tokenizer,
    to_hf_tokenizer,
    train_bpe,
)
from agentflow_env.rollout.agents.planners import (  # noqa: E402
    expert_action,
)
from agentflow_env.rollout.checks.fail_fast import SystemicFailure  # noqa: E402
from agentflow_env.rollout.checks.failures import AdapterError  # noqa: E402
from agentflow_env.rollout.checks.logprob_check import read_samples  # noqa: E402
from agentflow_env.rollout.checks.train_diagnostics import group_signal  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec  # noqa: E402
from agentflow_env.rollout.training.pool import LazySharedEnvs  # noqa: E402

LOGPROB = -0.5


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture
def adapters(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Both adapter modules with fresh ``AGENTFLOW_*`` settings; the env registered."""
    cap = ("MAX_ACTION_TOKENS", "MAX_TURN_TOKENS")  # the cap's variable and its old name
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", *cap, "FAIL_FAST", "SAMPLES"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    env = importlib.import_module("agentflow_text_env")
    generator = importlib.import_module("agentflow_generator")
    monkeypatch.setattr(env, "shared_envs", LazySharedEnvs())
    monkeypatch.setattr(generator, "shared_envs", generator.ShapedSharedEnvs())
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
            for candidate in list(self.free):  # other requests claim mirrors while this waits
                first = await candidate.first_prompt()
                if first == list(prompt) and candidate in self.free:
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


def generator_config(
    max_input_length: int | None = 8192, per_turn: int = 1024, **settings: Any
) -> Any:
    sampling = SamplingParams(max_generate_length=per_turn, logprobs=1)
    settings.setdefault("max_turns", 10)
    return GeneratorConfig(max_input_length=max_input_length, sampling_params=sampling, **settings)


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
    assert out["rollout_metrics"]["environment/failed"] == 1.0  # SkyRL's mean of the env metric
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
    assert metrics["env/failed"] == 0.25
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


# -- what SkyRL's trainer does with the output ------------------------------------------------------
def skyrl_functions(path: Path, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Functions of an installed SkyRL module compiled alone, their annotations dropped: the
    modules import the GPU training stack (torchdata, jaxtyping, ray workers) at the top, which
    the CPU test setup leaves out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in nodes} == names, f"SkyRL's {path.name} changed"
    for node in nodes:
        node.returns = None
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
            arg.annotation = None
    exec(compile(ast.Module(body=list(nodes), type_ignores=[]), str(path), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def skyrl_trainer() -> types.SimpleNamespace:
    """SkyRL's own output check and batch conversion (its trainer's ``convert_to_training_input``
    calls the latter)."""
    from skyrl.train.generators import base

    root = Path(base.__file__).parents[1]
    logger = logging.getLogger("skyrl")
    checks = skyrl_functions(
        root / "utils" / "trainer_utils.py",
        {"validate_generator_output", "_validate_step_wise_fields"},
        {"np": np, "logger": logger},
    )
    convert = skyrl_functions(
        root / "dataset" / "preprocess.py",
        {"convert_prompts_responses_to_batch_tensors", "_verify_inputs"},
        {"torch": torch, "logger": logger},
    )
    return types.SimpleNamespace(
        validate=checks["validate_generator_output"],
        convert=convert["convert_prompts_responses_to_batch_tensors"],
    )


def trains(skyrl_trainer: types.SimpleNamespace, out: dict, tokenizer: Any) -> None:
    """``out`` through SkyRL's output check and batch conversion, with off-policy correction on
    (the trainer then asserts rollout log-probs shaped like the loss masks)."""
    skyrl_trainer.validate(len(out["prompt_token_ids"]), out)
    per_token = [
        [0.0] * (len(r) - 1) + [float(w)]
        for r, w in zip(out["response_ids"], out["rewards"], strict=True)
    ]
    tensors = skyrl_trainer.convert(
        tokenizer,
        out["prompt_token_ids"],
        out["response_ids"],
        per_token,
        out["loss_masks"],
        out["rollout_logprobs"],
    )
    loss_masks, logprobs = tensors[4], tensors[5]
    assert logprobs is not None, "no rollout log-probs: SkyRL's off-policy correction asserts"
    assert logprobs.shape == loss_masks.shape


class ScriptedClient(FakeInferenceClient):
    """The fake client with hooks: ``answer(mirror, call)`` may replace a call's output (``None``:
    the mirror's next action); the requests are kept; ``weight_version`` as SkyRL's client."""

    def __init__(self, mirrors: list[Mirror], answer: Any = None, weight_version: Any = None):
        super().__init__(mirrors, as_text=False)
        self.answer, self.requests = answer, []
        self.calls: dict[Any, int] = {}
        if weight_version is not None:
            self.weight_version = weight_version

    async def generate(self, input_batch: dict, model: str | None = None) -> dict:
        self.requests.append((dict(input_batch), model))
        (session_id,) = input_batch["session_ids"]
        call = self.calls[session_id] = self.calls.get(session_id, -1) + 1
        if self.answer is not None and call == 0 and session_id not in self.by_session:
            for candidate in list(self.free):  # claim the mirror as the parent does
                first = await candidate.first_prompt()
                if first == list(input_batch["prompt_token_ids"][0]) and candidate in self.free:
                    self.by_session[session_id] = candidate
                    self.free.remove(candidate)
                    break
        mirror = self.by_session.get(session_id)
        replaced = self.answer(mirror, call) if self.answer is not None else None
        if replaced is not None:
            return replaced
        output = await super().generate(input_batch, model)
        if self.answer is not None:
            changed = self.answer(mirror, -1)  # after the step: e.g. the last action's stop reason
            if changed is not None:
                output = {**output, **changed}
        return output


def exact_generator(adapters, tokenizer, client, config=None, model=None) -> Any:
    generator = adapters.generator.AgentFlowGenerator(
        config or generator_config(), SkyRLGymConfig(), client, tokenizer, model
    )
    generator.retry_delay_s = 0.0  # an aborted turn is re-issued at once
    return generator


def rows_by_sequence(out: dict) -> dict[tuple[int, ...], int]:
    """Each row's index by its whole sequence (rows come back in input order, mirrors in any)."""
    sequences = zip(out["prompt_token_ids"], out["response_ids"], strict=True)
    return {tuple(p + r): i for i, (p, r) in enumerate(sequences)}


# -- log-probs: every row, or none ------------------------------------------------------------------
def test_one_engine_answer_without_logprobs_keeps_every_rows_logprobs(
    adapters, hf_tokenizer, skyrl_trainer
):
    specs = [spec_for(0), spec_for(1)]
    mirrors = [Mirror(spec, hf_tokenizer, "expert") for spec in specs]

    def answer(mirror: Mirror | None, call: int) -> dict | None:
        if call == -1 and mirror is mirrors[1]:
            return {"response_logprobs": None}  # this engine answer carries none
        return None

    client = ScriptedClient(mirrors, answer)
    out = asyncio.run(exact_generator(adapters, hf_tokenizer, client).generate(batch(specs)))
    trains(skyrl_trainer, out, hf_tokenizer)
    rows = rows_by_sequence(out)
    for mirror, value in ((mirrors[0], LOGPROB), (mirrors[1], 0.0)):
        flat = mirror.session.trajectory().flat_sample()
        row = rows[tuple(flat.input_ids)]
        assert out["rollout_logprobs"][row] == [value if m else 0.0 for m in flat.completion_mask]
        unscored = 0 if value else sum(flat.completion_mask)
        assert out["env_metrics"][row]["unscored_tokens"] == unscored
    metric = out["rollout_metrics"]["environment/agentflow/unscored_tokens"]
    assert metric == sum(mirrors[1].session.trajectory().flat_sample().completion_mask) / 2


@pytest.mark.parametrize("max_turns", [1, 10])
def test_an_aborted_empty_engine_answer_still_gives_a_valid_row(
    adapters, hf_tokenizer, skyrl_trainer, max_turns
):
    specs = [spec_for(0), spec_for(1)]
    mirrors = [Mirror(capped(spec, max_turns), hf_tokenizer, "expert") for spec in specs]

    def answer(mirror: Mirror | None, call: int) -> dict | None:
        if call == 0 and mirror is mirrors[0]:  # as SkyRL's client reports an aborted request
            return {
                "responses": [""],
                "response_ids": [[]],
                "stop_reasons": ["abort"],
                "response_logprobs": [None],
            }
        return None

    client = ScriptedClient(mirrors, answer)
    config = generator_config(max_turns=max_turns)
    generator = exact_generator(adapters, hf_tokenizer, client, config)
    out = asyncio.run(generator.generate(batch(specs)))
    trains(skyrl_trainer, out, hf_tokenizer)
    rows = rows_by_sequence(out)  # the turn was asked again, not stepped as an empty action
    for mirror in mirrors:
        flat = mirror.session.trajectory().flat_sample()
        row = rows[tuple(flat.input_ids)]
        assert out["loss_masks"][row] == flat.completion_mask
        assert out["rollout_logprobs"][row] == [LOGPROB if m else 0.0 for m in flat.completion_mask]
        assert out["env_metrics"][row]["turns_aborted"] == (1.0 if mirror is mirrors[0] else 0.0)
    assert len(client.finished) == 2


def test_a_turn_aborted_every_time_is_a_valid_reward_0_row(adapters, hf_tokenizer, skyrl_trainer):
    specs = [spec_for(0), spec_for(1)]
    mirrors = [Mirror(spec, hf_tokenizer, "expert") for spec in specs]
    aborted = {"responses": [""], "response_ids": [[]], "stop_reasons": ["abort"]}

    def answer(mirror: Mirror | None, call: int) -> dict | None:
        return aborted if call >= 0 and mirror is mirrors[0] else None

    client = ScriptedClient(mirrors, answer)
    out = asyncio.run(exact_generator(adapters, hf_tokenizer, client).generate(batch(specs)))
    trains(skyrl_trainer, out, hf_tokenizer)
    row = out["stop_reasons"].index("abort")
    assert out["rewards"][row] == 0.0 and out["loss_masks"][row] == [0]
    assert out["env_metrics"][row]["turns_aborted"] == 3.0  # asked, then re-issued twice
    assert out["rewards"][1 - row] == 1.0


# -- the tokenizer SkyRL hands the generator --------------------------------------------------------
@pytest.fixture(scope="module")
def other_tokenizer() -> Any:
    """A tokenizer of another vocabulary than the bundled one (same special tokens and template)."""
    texts = ["Which drawer holds the key? Search the notes, then answer.", "tool: Search"] * 20
    return to_hf_tokenizer(train_bpe(texts, vocab_size=300))


def test_the_generator_renders_with_the_tokenizer_skyrl_hands_it(adapters, other_tokenizer):
    spec = spec_for(0)
    mirror = Mirror(spec, other_tokenizer, "expert")
    out = run_exact(adapters, other_tokenizer, [spec], [mirror])  # AGENTFLOW_TOKENIZER unset
    flat = mirror.session.trajectory().flat_sample()
    assert out["prompt_token_ids"][0] + out["response_ids"][0] == flat.input_ids
    assert out["rewards"] == [1.0]


def test_an_agentflow_tokenizer_of_another_vocabulary_is_refused(
    adapters, hf_tokenizer, other_tokenizer, tmp_path, monkeypatch
):
    other_tokenizer.save_pretrained(tmp_path / "other")
    monkeypatch.setenv("AGENTFLOW_TOKENIZER", str(tmp_path / "other"))
    client = FakeInferenceClient([], as_text=False)
    with pytest.raises(AdapterError, match="vocabularies differ") as refused:
        exact_generator(adapters, hf_tokenizer, client)
    assert str(tmp_path / "other") in str(refused.value)
    assert type(hf_tokenizer).__name__ in str(refused.value)  # SkyRL's (it has no path)


def test_an_agentflow_tokenizer_that_cannot_be_loaded_is_refused(
    adapters, hf_tokenizer, tmp_path, monkeypatch
):
    monkeypatch.setenv("AGENTFLOW_TOKENIZER", str(tmp_path / "missing"))
    with pytest.raises(AdapterError, match="could not be loaded"):
        exact_generator(adapters, hf_tokenizer, FakeInferenceClient([], as_text=False))


def test_the_same_tokenizer_under_another_name_is_accepted(
    adapters, hf_tokenizer, tmp_path, monkeypatch
):
    hf_tokenizer.save_pretrained(tmp_path / "policy")
    monkeypatch.setenv("AGENTFLOW_TOKENIZER", str(tmp_path / "policy"))
    spec = spec_for(1)
    out = run_exact(adapters, hf_tokenizer, [spec], [Mirror(spec, hf_tokenizer)])
    assert out["rewards"] == [1.0]


# -- fail fast --------------------------------------------------------------------------------------
def bad_rows(count: int) -> dict:
    rows = batch([spec_for(0)] * count)
    rows["env_extras"] = [{"label": "not json"} for _ in range(count)]
    return rows


def test_the_generator_stops_when_its_first_trajectories_all_fail(adapters, hf_tokenizer):
    generator = exact_generator(adapters, hf_tokenizer, FakeInferenceClient([], as_text=False))
    with pytest.raises(SystemicFailure, match="first 16 trajectories") as stopped:
        asyncio.run(generator.generate(bad_rows(16)))
    assert "TaskSpecError" in str(stopped.value) and "label column" in str(stopped.value)


def test_the_generator_goes_on_after_one_trajectory_ran(adapters, hf_tokenizer):
    spec = spec_for(0)
    client = FakeInferenceClient([Mirror(spec, hf_tokenizer)], as_text=False)
    generator = exact_generator(adapters, hf_tokenizer, client)
    assert asyncio.run(generator.generate(batch([spec])))["rewards"] == [1.0]
    out = asyncio.run(generator.generate(bad_rows(20)))  # no SystemicFailure: reward-0 rows
    assert out["rewards"] == [0.0] * 20 and out["rollout_metrics"]["env/failed"] == 1.0


class OneTokenClient(FakeInferenceClient):
    """An engine that answers every request with one token (for episodes that failed at once)."""

    async def generate(self, input_batch: dict, model: str | None = None) -> dict:
        return {"responses": ["x"], "response_ids": [[5]], "stop_reasons": ["stop"]}


def text_generator(hf_tokenizer: Any, mirrors: list[Mirror], config: Any = None) -> Any:
    client = FakeInferenceClient(mirrors, as_text=True) if mirrors else OneTokenClient([], True)
    return SkyRLGymGenerator(
        config or generator_config(), SkyRLGymConfig(max_env_workers=2), client, hf_tokenizer
    )


def test_the_text_env_stops_when_its_first_trajectories_all_fail(adapters, hf_tokenizer):
    with pytest.raises(SystemicFailure, match="first 16 trajectories"):
        asyncio.run(text_generator(hf_tokenizer, []).generate(bad_rows(16), disable_tqdm=True))


def test_the_text_env_goes_on_after_one_trajectory_ran(adapters, hf_tokenizer):
    spec = spec_for(0)
    first = text_generator(hf_tokenizer, [Mirror(spec, hf_tokenizer)])
    assert sum(asyncio.run(first.generate(batch([spec]), disable_tqdm=True))["rewards"][0]) == 1.0
    generator = text_generator(hf_tokenizer, [])
    out = asyncio.run(generator.generate(bad_rows(20), disable_tqdm=True))
    assert out["rollout_metrics"]["environment/failed"] == 1.0


# -- SkyRL's generator settings ---------------------------------------------------------------------
def capped(spec: TaskSpec, max_turns: int) -> TaskSpec:
    return dataclasses.replace(spec, env_kwargs={**spec.env_kwargs, "max_turns": max_turns})


def test_max_turns_caps_the_envs_turns(adapters, hf_tokenizer):
    spec = spec_for(3)  # the expert needs 3 turns; the env allows 10
    mirror = Mirror(capped(spec, 2), hf_tokenizer, "expert")  # what the env does at 2
    out = run_exact(adapters, hf_tokenizer, [spec], [mirror], generator_config(max_turns=2))
    flat = mirror.session.trajectory().flat_sample()
    assert len(mirror.actions) == 2 and mirror.session.outcome.end_reason == "max_turns"
    assert out["prompt_token_ids"][0] + out["response_ids"][0] == flat.input_ids
    assert out["rewards"] == [mirror.session.outcome.reward]
    assert out["env_metrics"][0]["turns"] == 2


def test_max_turns_caps_the_text_envs_turns(adapters, hf_tokenizer):
    spec = spec_for(1)
    mirror = Mirror(capped(spec, 3), hf_tokenizer, "random", seed=1)
    generator = text_generator(hf_tokenizer, [mirror], generator_config(max_turns=3))
    out = asyncio.run(generator.generate(batch([spec]), disable_tqdm=True))
    assert len(mirror.actions) == 3 and out["env_metrics"][0]["turns"] == 3


def last_action_cut(mirror: Mirror | None, call: int) -> dict | None:
    """The engine reports its last action cut at the token cap (SkyRL's ``"length"``)."""
    if call == -1 and mirror is not None and mirror.session.done:
        return {"stop_reasons": ["length"]}
    return None


@pytest.mark.parametrize("zero", [False, True])
def test_zero_reward_on_non_stop_zeroes_an_episode_whose_last_action_was_cut(
    adapters, hf_tokenizer, zero
):
    specs = [spec_for(0), spec_for(1)]
    mirrors = [Mirror(spec, hf_tokenizer, "expert") for spec in specs]
    client = ScriptedClient(mirrors, last_action_cut)
    config = generator_config(zero_reward_on_non_stop=zero)
    rows = batch(specs)
    rows["trajectory_ids"] = [TrajectoryID("a", 0), TrajectoryID("a", 1)]
    out = asyncio.run(exact_generator(adapters, hf_tokenizer, client, config).generate(rows))
    assert out["stop_reasons"] == ["length", "length"]  # every last action was cut
    assert out["rewards"] == ([0.0, 0.0] if zero else [1.0, 1.0])
    equal = out["rollout_metrics"]["environment/agentflow/all_zero_groups"]
    assert equal == (1.0 if zero else 0.0)  # the group signal of the rewards SkyRL trains on


@pytest.mark.parametrize("filtering", [False, True])
def test_apply_overlong_filtering_masks_an_episode_that_ran_out_of_room(
    adapters, hf_tokenizer, filtering
):
    specs = [spec_for(0), spec_for(1)]
    short = Mirror(specs[0], hf_tokenizer)
    first_prompt = len(asyncio.run(short.first_prompt()))
    room = generator_config(first_prompt, 8, apply_overlong_filtering=filtering)
    out = run_exact(adapters, hf_tokenizer, [specs[0]], [short], room)
    assert out["stop_reasons"] == ["length"]
    assert out["loss_masks"] == [[0] * 8 if filtering else [1] * 8]
    finished = Mirror(specs[1], hf_tokenizer)
    whole = generator_config(apply_overlong_filtering=filtering)
    out = run_exact(adapters, hf_tokenizer, [specs[1]], [finished], whole)
    assert out["stop_reasons"] == ["stop"]
    assert out["loss_masks"][0] == finished.session.trajectory().flat_sample().completion_mask


@pytest.mark.parametrize("salted", [True, False])
def test_use_cache_salt_salts_every_request_with_the_weight_version(adapters, hf_tokenizer, salted):
    spec = spec_for(0)
    client = ScriptedClient([Mirror(spec, hf_tokenizer)], weight_version=3)
    config = generator_config(use_cache_salt=salted)
    generator = exact_generator(adapters, hf_tokenizer, client, config, model="policy")
    asyncio.run(generator.generate(batch([spec])))
    assert len(client.requests) == 2 and all(model == "policy" for _, model in client.requests)
    salts = [request.get("cache_salt") for request, _ in client.requests]
    assert salts == (["policy@3"] * 2 if salted else [None] * 2)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"batched": True}, "batched"),
        ({"chat_template_kwargs": {"enable_thinking": False}}, "chat_template_kwargs"),
    ],
)
def test_settings_the_generator_cannot_honour_are_refused(adapters, hf_tokenizer, settings, named):
    with pytest.raises(AdapterError, match=named):
        exact_generator(
            adapters,
            hf_tokenizer,
            FakeInferenceClient([], as_text=False),
            generator_config(**settings),
        )
