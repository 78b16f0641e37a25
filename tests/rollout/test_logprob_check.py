"""The log-prob check: a sampler's recorded log-probs against a model's forward pass, on CPU.

Samples come from ``hf_generate`` (sampling at temperature 0.7, exact log-probs) with a tiny
Llama: two actions with the env-like feedback between them, so every position kind is scored.
The check agrees with them to float noise, and shows a shift of 0.01 or the wrong temperature.
Each trainer's reader is fed that trainer's own objects: OpenRLHF's ``Experience`` (built by its
``_process_response_into_experience`` and ``make_experience_batch``), verl's ``DataProto`` (built
by ``AgentLoopWorker``'s padding code), SkyRL's ``GeneratorOutput`` (checked by its
``validate_generator_output``).
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import json
import logging
import math
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentflow_env.base.errors import DatasetError
from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.cli import main
from agentflow_env.rollout.agents.hf_generation import hf_generate
from agentflow_env.rollout.checks import logprob_check, trainer_samples
from agentflow_env.rollout.checks.logprob_check import (
    LogprobSample,
    SampleDump,
    at_temperature,
    check_logprobs,
    read_samples,
    sample_dump,
    score_samples,
    write_samples,
)
from agentflow_env.rollout.checks.train_diagnostics import group_signal

TEMPERATURE = 0.7
QUESTIONS = ["Which river flows through the capital?", "Add 17 and 25.", "Who wrote it?"]
FEEDBACK = "<|im_end|>\n<|im_start|>user\nResult: nothing found.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture(scope="module")
def model(hf_tokenizer) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(hf_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=hf_tokenizer.pad_token_id,
        eos_token_id=hf_tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()


def sample_actions(model, tokenizer, prompts: list[list[int]]) -> tuple[list, list]:
    return hf_generate(
        model,
        prompts,
        10,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=[tokenizer.eos_token_id],
        do_sample=True,
        temperature=TEMPERATURE,
        top_k=None,
        top_p=1.0,
    )


@pytest.fixture(scope="module")
def samples(model, hf_tokenizer) -> list[LogprobSample]:
    """Two sampled actions per trajectory with feedback between them, prompts of three lengths
    (so batches are padded)."""
    torch.manual_seed(1)
    prompts = [hf_tokenizer.encode(q, add_special_tokens=False) for q in QUESTIONS]
    feedback = hf_tokenizer.encode(FEEDBACK, add_special_tokens=False)
    first, first_lp = sample_actions(model, hf_tokenizer, prompts)
    second_prompts = [p + a + feedback for p, a in zip(prompts, first, strict=True)]
    second, second_lp = sample_actions(model, hf_tokenizer, second_prompts)
    out = []
    for p, a, alp, b, blp in zip(prompts, first, first_lp, second, second_lp, strict=True):
        out.append(
            LogprobSample(
                prompt_ids=p,
                completion_ids=a + feedback + b,
                mask=[1] * len(a) + [0] * len(feedback) + [1] * len(b),
                logprobs=alp + [0.0] * len(feedback) + blp,
                temperature=TEMPERATURE,
            )
        )
    assert all(sum(s.mask) >= 2 for s in out)
    return out


def shifted(samples: list[LogprobSample], by: float) -> list[LogprobSample]:
    return [replace(s, logprobs=[lp + by for lp in s.logprobs]) for s in samples]


# -- the check ---------------------------------------------------------------------------------------
def test_the_samplers_logprobs_agree_with_the_forward_pass(model, samples):
    gap = check_logprobs(model, samples, TEMPERATURE, batch_size=2)
    assert gap["max"] <= 1e-4
    assert gap["tokens"] == sum(sum(s.mask) for s in samples) and gap["unscored"] == 0
    assert gap["where"]["first_token"]["tokens"] == len(samples)
    assert gap["where"]["after_feedback"]["tokens"] == len(samples)  # the second action's first


def test_a_shift_or_the_wrong_temperature_shows(model, samples):
    assert check_logprobs(model, shifted(samples, 0.01), TEMPERATURE)["max"] >= 0.005
    wrong = check_logprobs(model, samples, 1.0)
    assert wrong["max"] >= 0.005 and wrong["mean"] >= 0.005


def test_batching_and_padding_do_not_change_the_scores(model, samples):
    one = score_samples(model, samples, TEMPERATURE, batch_size=1)
    three = score_samples(model, samples, TEMPERATURE, batch_size=3)
    for a, b in zip(one, three, strict=True):
        assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-5
    assert model.training is False


def test_unrecorded_logprobs_are_unscored(model, samples):
    sample = samples[0]
    first = sample.mask.index(1)
    logprobs = list(sample.logprobs)
    logprobs[first] = math.nan
    gap = check_logprobs(model, [replace(sample, logprobs=logprobs)], TEMPERATURE)
    assert gap["unscored"] == 1 and gap["tokens"] == sum(sample.mask) - 1


def test_samples_round_trip_and_bad_lines_are_named(tmp_path, samples):
    path = tmp_path / "samples.jsonl"
    nan = replace(samples[0], logprobs=[math.nan] + samples[0].logprobs[1:], temperature=None)
    write_samples(path, [*samples, nan])
    back = read_samples(path)
    assert back[: len(samples)] == samples
    assert math.isnan(back[-1].logprobs[0]) and back[-1].temperature is None
    assert json.loads(path.read_text().splitlines()[-1])["logprobs"][0] is None
    bad = tmp_path / "bad.jsonl"
    record = samples[0].as_record()
    bad.write_text(json.dumps(record) + "\n" + json.dumps({**record, "mask": [1]}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl, line 2: .*differ in length"):
        read_samples(bad)
    bad.write_text(json.dumps({**record, "prompt_ids": []}) + "\n")
    with pytest.raises(DatasetError, match="prompt_ids is empty"):
        read_samples(bad)
    bad.write_text(json.dumps({"prompt_ids": [1]}) + "\n")
    with pytest.raises(DatasetError, match="missing field"):
        read_samples(bad)


def test_samples_at_another_temperature_are_left_out(samples):
    unknown = replace(samples[0], temperature=None)
    kept, other = at_temperature([*samples, unknown], TEMPERATURE)
    assert kept == [*samples, unknown] and other == []
    kept, other = at_temperature([*samples, unknown], 1.0)
    assert kept == [unknown] and other == samples


# -- the command -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(model, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    return folder


def run_cli(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check-logprobs", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_the_command_passes_exact_samples_and_fails_wrong_ones(
    tmp_path, model_dir, samples, capsys
):
    good, bad = tmp_path / "good.jsonl", tmp_path / "shifted.jsonl"
    write_samples(good, samples)
    write_samples(bad, shifted(samples, 0.01))
    args = ["--model", str(model_dir), "--temperature", str(TEMPERATURE)]
    code, report = run_cli(capsys, *args, "--samples", str(good))
    assert code == 0 and report["ok"] and report["max"] <= 1e-4
    assert report["samples"] == len(samples) and report["threshold"] == 1e-3
    assert report["tokens"] == sum(sum(s.mask) for s in samples)
    code, report = run_cli(capsys, *args, "--samples", str(bad))
    assert code == 1 and not report["ok"] and report["max"] >= 0.005
    # Scored at the wrong temperature: samples that do not say theirs are all checked.
    unlabelled = tmp_path / "unlabelled.jsonl"
    write_samples(unlabelled, [replace(s, temperature=None) for s in samples])
    code, report = run_cli(capsys, "--model", str(model_dir), "--samples", str(unlabelled))
    assert code == 1 and report["temperature"] == 1.0 and report["max"] >= 0.005


def test_the_command_refuses_samples_of_another_temperature(tmp_path, model_dir, samples, capsys):
    path = tmp_path / "samples.jsonl"
    write_samples(path, samples)
    assert main(["check-logprobs", "--model", str(model_dir), "--samples", str(path)]) == 2
    assert "drawn at [0.7]" in capsys.readouterr().err
    missing = ["check-logprobs", "--model", str(model_dir), "--samples", str(tmp_path / "no")]
    assert main(missing) == 2
    assert "no such file" in capsys.readouterr().err


# -- dumping from inside a trainer -------------------------------------------------------------------
def test_the_dump_appends_the_first_samples_of_each_process(tmp_path, samples, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES", str(tmp_path / "dump-{pid}.jsonl"))
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES_MAX", "2")
    dump = sample_dump()
    assert dump is not None and dump is sample_dump()  # one per process and setting
    assert "{pid}" not in str(dump.path) and dump.path.parent == tmp_path
    for sample in samples:
        dump.add(sample)
    assert dump.full and read_samples(dump.path) == samples[:2]
    monkeypatch.delenv("AGENTFLOW_DUMP_SAMPLES")
    assert sample_dump() is None


def test_dumping_never_raises(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES", str(tmp_path / "d.jsonl"))
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES_MAX", "many")
    log = logging.getLogger("test_dump")
    logprob_check.dump_samples(lambda: [], log)
    assert "AGENTFLOW_DUMP_SAMPLES_MAX must be an integer" in caplog.text
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES_MAX", "3")

    def unreadable() -> list[LogprobSample]:
        raise ValueError("no rollout_log_probs")

    logprob_check.dump_samples(unreadable, log)
    assert "no rollout_log_probs" in caplog.text and not (tmp_path / "d.jsonl").exists()
    assert SampleDump(tmp_path / "x.jsonl", limit=0).full


# -- OpenRLHF -----------------------------------------------------------------------------------------
def openrlhf_response(sample: LogprobSample) -> dict:
    """The dict ``MultiTurnAgentExecutor.execute`` returns for ``sample`` (log-probs 0 off the
    actions, as it records them)."""
    tokens = sample.prompt_ids + sample.completion_ids
    start, ranges = len(sample.prompt_ids), []
    for keep, run in itertools.groupby(enumerate(sample.mask), key=lambda x: x[1]):
        run = list(run)
        if keep:
            ranges.append((start + run[0][0], start + run[-1][0] + 1))
    logprobs = [0.0] * start + [
        lp if m else 0.0 for lp, m in zip(sample.logprobs, sample.mask, strict=True)
    ]
    return {
        "prompt": "q",
        "label": "l",
        "reward": 1.0,
        "scores": 1.0,
        "observation_tokens": tokens,
        "action_ranges": ranges,
        "rollout_log_probs": logprobs,
        "truncated": False,
        "extra_logs": {},
    }


def on_actions(samples: list[LogprobSample]) -> list[LogprobSample]:
    """The samples as a trainer that records 0 off the actions stores them."""
    return [
        replace(
            s,
            logprobs=[lp if m else 0.0 for lp, m in zip(s.logprobs, s.mask, strict=True)],
            temperature=None,
        )
        for s in samples
    ]


def openrlhf_experiences(responses: list[dict]) -> Any:
    """OpenRLHF's own response -> ``Experience`` code (compiled from its installed source, as
    the module needs ray and vLLM to import), then ``Experience.concat_experiences`` (as its
    experience maker batches them)."""
    from openrlhf.trainer.ppo_utils import experience as experience_module

    path = Path(experience_module.__file__).parent / "samples_generator.py"
    namespace: dict[str, Any] = {"torch": torch, "Experience": experience_module.Experience}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == "_process_response_into_experience":
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    to_experience = namespace["_process_response_into_experience"]
    items = [to_experience(None, r, max_len=4096) for r in responses]
    return experience_module.Experience.concat_experiences(items, pad_token_id=0)


def test_openrlhfs_response_and_experience_read_back_the_samples(samples):
    expected = on_actions(samples)
    responses = [openrlhf_response(s) for s in samples]
    read = [trainer_samples.openrlhf_response_sample(r) for r in responses]
    assert read == expected
    assert trainer_samples.openrlhf_response_sample(responses[0], 0.7).temperature == 0.7
    batch = openrlhf_experiences(responses)
    assert batch.sequences.size(0) == len(samples)  # right-padded to the longest
    assert trainer_samples.openrlhf_experience_samples(batch) == expected
    # The replay buffer's path: one sample at a time (1-D tensors), batched again.
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch, split_experience_batch

    items = split_experience_batch(batch)
    assert trainer_samples.openrlhf_experience_samples(items[1]) == expected[1:2]
    assert trainer_samples.openrlhf_experience_samples(make_experience_batch(items)) == expected
    with pytest.raises(ValueError, match="is_correction_level"):
        trainer_samples.openrlhf_response_sample({**responses[0], "rollout_log_probs": None})


# -- verl ---------------------------------------------------------------------------------------------
def verl_batch(samples: list[LogprobSample], tokenizer: Any, rewards: list[float], uids: list[str]):
    """A ``DataProto`` as verl's ``AgentLoopWorker`` pads and stacks agent-loop outputs."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopMetrics,
        AgentLoopOutput,
        AgentLoopWorker,
    )

    rollout = {"prompt_length": 64, "response_length": 128, "temperature": TEMPERATURE}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "data": {}})
    worker = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.config, worker.rollout_config = config, config.actor_rollout_ref.rollout
    worker.tokenizer, worker.processor, worker.reward_loop_worker_handles = tokenizer, None, None
    worker.teacher_client, worker.distillation_enabled = None, False
    worker.hf_model_type, worker.mm_processor_kwargs = None, {}

    async def padded(sample: LogprobSample, reward: float) -> Any:
        output = AgentLoopOutput(
            prompt_ids=sample.prompt_ids,
            response_ids=sample.completion_ids,
            response_mask=sample.mask,
            response_logprobs=sample.logprobs,
            reward_score=reward,
            num_turns=4,
            metrics=AgentLoopMetrics(),
        )
        return await worker._agent_loop_postprocess(output, False, raw_prompt=[])

    rows = [asyncio.run(padded(s, r)) for s, r in zip(samples, rewards, strict=True)]
    data = worker._postprocess(rows, input_non_tensor_batch=None)
    data.non_tensor_batch["uid"] = np.array(uids, dtype=object)
    return data


def test_verls_dataproto_reads_back_the_samples(samples, hf_tokenizer):
    data = verl_batch(samples, hf_tokenizer, [1.0, 0.0, 1.0], ["a", "a", "b"])
    assert data.batch["prompts"].shape == (3, 64)  # left-padded; responses right-padded
    assert trainer_samples.verl_samples(data) == on_actions(samples)
    assert trainer_samples.verl_samples(data.batch) == on_actions(samples)
    signal = trainer_samples.verl_group_signal(data)
    assert signal["groups"] == 2 and signal["equal_reward_groups"] == 0.5
    assert signal["all_zero_groups"] == 0.0
    data.batch.pop("rollout_log_probs")
    with pytest.raises(ValueError, match="calculate_log_probs=True"):
        trainer_samples.verl_samples(data)


# -- SkyRL --------------------------------------------------------------------------------------------
def test_skyrls_generator_output_reads_back_the_samples(samples, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "adapters" / "skyrl"))
    import skyrl_compat  # noqa: F401  (first: skyrl.train imports on Python 3.11)
    from skyrl.train.generators import base

    # SkyRL's own check of a generator's output, compiled from its source: the module imports
    # torchdata and ray at the top, which the CPU test setup leaves out.
    path = Path(base.__file__).parents[1] / "utils" / "trainer_utils.py"
    namespace: dict[str, Any] = {
        "GeneratorOutput": base.GeneratorOutput,
        "np": np,
        "logger": logging.getLogger("skyrl"),
    }
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == "validate_generator_output":
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    validate_generator_output = namespace["validate_generator_output"]

    expected = on_actions(samples)
    output: base.GeneratorOutput = {
        "prompt_token_ids": [s.prompt_ids for s in samples],
        "response_ids": [s.completion_ids for s in samples],
        "rewards": [1.0, 0.0, 0.0],
        "loss_masks": [s.mask for s in samples],
        "stop_reasons": ["stop"] * 3,
        "rollout_metrics": None,
        "rollout_logprobs": [s.logprobs for s in expected],
        "trajectory_ids": None,
    }
    validate_generator_output(len(samples), output)
    assert trainer_samples.skyrl_samples(output) == expected
    with pytest.raises(ValueError, match="sampling_params.logprobs"):
        trainer_samples.skyrl_samples({**output, "rollout_logprobs": None})


def test_group_signal_by_key_matches_consecutive_groups():
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0]
    by_key = trainer_samples.keyed_group_signal(rewards, list("abbaccdd"))
    consecutive = group_signal([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0], 2)
    assert by_key == pytest.approx({**consecutive, "groups": 4})
    # Groups in any order: a and b above hold [1, 0] and [0, 0]; unequal sizes are fine.
    uneven = trainer_samples.keyed_group_signal([0.0, 1.0, 0.0], ["x", "x", "y"])
    assert uneven["groups"] == 2 and uneven["equal_reward_groups"] == 0.5
    trajectory = types.SimpleNamespace
    ids = [trajectory(instance_id=k) for k in "aabb"]
    skyrl = trainer_samples.skyrl_group_signal([[0.0, 1.0], [0.0, 0.0], [0.0], [0.0]], ids)
    assert skyrl["equal_reward_groups"] == 0.5 and skyrl["all_zero_groups"] == 0.5
