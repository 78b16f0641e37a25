"""The verl adapter, built and driven by verl 0.9.1's own agent-loop code on CPU.

The loop comes out of verl's agent-loop registry (filled from ``adapters/verl/agent_loop.yaml``
as ``AgentLoopWorker`` fills it) through ``hydra.utils.instantiate``, with an OmegaConf config
and a fake server manager whose ``generate`` returns verl's ``TokenOutput``. The fake plays a
scripted planner on a mirror env of the same task, stepping it with the same ids, so every test
compares the adapter's output with the env's own flat-mode record. A batch also goes through
``AgentLoopWorker.generate_sequences``: rows select the loop by ``agent_name`` and come back
padded to ``prompt_length`` / ``response_length`` with the reward on the last response token.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import types
from pathlib import Path
from typing import Any

import hydra
import mirror_planner
import numpy as np
import pytest
import torch
from mirror_planner import spec_for
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.agent_loop import agent_loop as verl_agent_loop
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
)
from verl.workers.rollout.replica import TokenOutput

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.rollout.logprob_check import read_samples
from agentflow_env.rollout.pool import LazySharedEnvs

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "adapters" / "verl" / "agent_loop.yaml"
LOGPROB = -0.25


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture
def adapter(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The adapter module as verl's workers import it (its folder on ``sys.path``), with fresh
    ``AGENTFLOW_*`` settings and the registry entries of the YAML."""
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", "MAX_TURN_TOKENS"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    monkeypatch.syspath_prepend(str(ROOT / "adapters" / "verl"))
    module = importlib.import_module("agentflow_agent_loop")
    monkeypatch.setattr(module, "shared_envs", LazySharedEnvs())
    registry = dict(verl_agent_loop._agent_loop_registry)
    for entry in OmegaConf.load(YAML):  # what AgentLoopWorker does with agent_loop_config_path
        registry[entry.name] = entry
    monkeypatch.setattr(verl_agent_loop, "_agent_loop_registry", registry)
    return module


class Mirror(mirror_planner.Mirror):
    """A scripted planner on its own env of ``spec``'s task, stepped with the ids it returns."""

    async def sample(self, prompt_ids: list[int], max_tokens: int) -> list[int]:
        self.prompts.append(list(prompt_ids))
        ids = await self.next_action(max_tokens)
        await self.session.step(ids)
        return ids


class FakeServerManager:
    """verl's ``LLMServerClient.generate`` contract; each trajectory (request id) is served by
    the unclaimed mirror whose first prompt its first request carries."""

    def __init__(self, mirrors: list[Mirror], logprobs: bool = True):
        self.free, self.logprobs = list(mirrors), logprobs
        self.by_request: dict[str, Mirror] = {}
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any
    ) -> TokenOutput:
        self.calls.append({"request_id": request_id, "sampling_params": dict(sampling_params)})
        mirror = self.by_request.get(request_id)
        if mirror is None:
            for candidate in self.free:
                if await candidate.first_prompt() == list(prompt_ids):
                    mirror = self.by_request[request_id] = candidate
                    self.free.remove(candidate)
                    break
            else:
                raise AssertionError("no mirror starts with this prompt")
        ids = await mirror.sample(prompt_ids, sampling_params["max_tokens"])
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids) if self.logprobs else None)


def verl_config(prompt_length: int = 4096, response_length: int = 4096) -> Any:
    rollout = {
        "prompt_length": prompt_length,
        "response_length": response_length,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "calculate_log_probs": True,
        "full_determinism": False,
        "val_kwargs": {"temperature": 0.0, "top_p": 1.0, "top_k": -1},
        "agent": {"default_agent_loop": "single_turn_agent"},
    }
    return OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "data": {}})


def build_loop(config: Any, server: Any, tokenizer: Any) -> AgentLoopBase:
    """The loop as ``AgentLoopWorker._run_agent_loop`` builds it from the registry."""
    return hydra.utils.instantiate(
        config=verl_agent_loop._agent_loop_registry["agentflow"],
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


def run_row(adapter, tokenizer, spec, mirror, config=None, label=None) -> AgentLoopOutput:
    config = config or verl_config()
    loop = build_loop(config, FakeServerManager([mirror]), tokenizer)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    fields = {"raw_prompt": [{"role": "user", "content": "q"}], "label": label or spec.to_json()}
    output = asyncio.run(loop.run(params, **fields))
    assert "max_tokens" not in params  # verl's dict, shared by the group, is not changed
    return output


def check_against_mirror(output: AgentLoopOutput, mirror: Mirror) -> None:
    flat = mirror.session.trajectory().flat_sample()
    assert output.prompt_ids + output.response_ids == flat.input_ids
    assert output.prompt_ids == flat.input_ids[: flat.prompt_length]
    assert output.response_mask == flat.completion_mask
    sampled = [i for i, m in zip(output.response_ids, output.response_mask, strict=True) if m]
    assert sampled == [i for action in mirror.actions for i in action]
    assert output.response_logprobs == [LOGPROB if m else 0.0 for m in output.response_mask]
    for prompt, start in zip(mirror.prompts, _action_starts(output.response_mask), strict=True):
        assert prompt == (output.prompt_ids + output.response_ids)[: len(output.prompt_ids) + start]


def _action_starts(mask: list[int]) -> list[int]:
    return [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]


# -- registration -----------------------------------------------------------------------------------
def test_the_registry_and_the_yaml_hold_the_loop(adapter, hf_tokenizer):
    assert verl_agent_loop._agent_loop_registry["agentflow"]["_target_"] == (
        "agentflow_agent_loop.AgentFlowAgentLoop"
    )
    entry = OmegaConf.to_container(OmegaConf.load(YAML)[0])
    assert entry == {"name": "agentflow", "_target_": "agentflow_agent_loop.AgentFlowAgentLoop"}
    loop = build_loop(verl_config(), FakeServerManager([]), hf_tokenizer)
    assert isinstance(loop, adapter.AgentFlowAgentLoop) and isinstance(loop, AgentLoopBase)


# -- episodes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("planner", "index"), [("expert", 0), ("expert", 3), ("random", 1)])
def test_output_is_the_envs_flat_sample(adapter, hf_tokenizer, planner, index):
    spec = spec_for(index)
    mirror = Mirror(spec, hf_tokenizer, planner, seed=index)
    output = run_row(adapter, hf_tokenizer, spec, mirror)
    check_against_mirror(output, mirror)
    outcome = mirror.session.outcome
    assert outcome is not None and output.reward_score == outcome.reward
    if planner == "expert":
        assert output.reward_score == 1.0 and outcome.success
    logs = output.extra_fields["reward_extra_info"]
    assert logs["success"] == float(outcome.success) and logs["budget_exhausted"] == 0.0
    assert output.num_turns == 2 * len(mirror.actions)


def test_the_label_may_be_the_prompts_last_message(adapter, hf_tokenizer):
    spec = spec_for(2)
    mirror = Mirror(spec, hf_tokenizer)
    loop = build_loop(verl_config(), FakeServerManager([mirror]), hf_tokenizer)
    fields = {"raw_prompt": [{"role": "user", "content": spec.to_json()}]}
    output = asyncio.run(loop.run({"logprobs": False}, **fields))
    flat = mirror.session.trajectory().flat_sample()
    assert output.prompt_ids + output.response_ids == flat.input_ids
    assert output.response_logprobs is None  # not asked for
    assert output.reward_score == 1.0


# -- budgets and failures ---------------------------------------------------------------------------
def test_running_out_of_response_length_ends_with_reward_0(adapter, hf_tokenizer):
    spec = spec_for(0)
    probe = Mirror(spec, hf_tokenizer)
    run_row(adapter, hf_tokenizer, spec, probe)  # the whole episode: two actions
    first_action = len(probe.actions[0])
    assert len(probe.actions) >= 2
    # Room for the first action and its feedback, not for the second action.
    response_length = first_action + len(probe.session.turn_records[0].feedback_ids)
    mirror = Mirror(spec, hf_tokenizer)
    output = run_row(adapter, hf_tokenizer, spec, mirror, verl_config(4096, response_length))
    assert output.reward_score == 0.0
    assert mirror.actions == probe.actions[:1]  # the episode ended there
    assert output.response_ids == probe.actions[0] and output.response_mask == [1] * first_action
    assert output.extra_fields["reward_extra_info"]["budget_exhausted"] == 1.0


def test_an_action_is_capped_at_the_room_left(adapter, hf_tokenizer):
    spec = spec_for(0)
    mirror = Mirror(spec, hf_tokenizer)
    output = run_row(adapter, hf_tokenizer, spec, mirror, verl_config(4096, 7))
    assert [len(a) for a in mirror.actions] == [7]
    assert output.response_ids == mirror.actions[0] and output.reward_score == 0.0


def test_a_first_prompt_longer_than_prompt_length_is_a_reward_0_sample(
    adapter, hf_tokenizer, caplog
):
    spec = spec_for(0)
    mirror = Mirror(spec, hf_tokenizer)
    with caplog.at_level(logging.WARNING, "agentflow_env.adapters.verl"):
        output = run_row(adapter, hf_tokenizer, spec, mirror, verl_config(64, 4096))
    assert mirror.actions == []  # nothing was sampled
    assert len(output.prompt_ids) == 64 and output.response_mask == [0]
    assert output.reward_score == 0.0
    assert "prompt length 64" in caplog.text


def test_a_bad_label_is_a_reward_0_sample(adapter, hf_tokenizer, caplog):
    mirror = Mirror(spec_for(0), hf_tokenizer)
    with caplog.at_level(logging.WARNING, "agentflow_env.adapters.verl"):
        output = run_row(adapter, hf_tokenizer, spec_for(0), mirror, label='{"seed": "x"}')
    assert output.reward_score == 0.0 and output.response_mask == [0]
    assert output.extra_fields["reward_extra_info"]["error"] == 1.0
    assert "counts as reward 0" in caplog.text


def test_samples_are_dumped_for_the_logprob_check(adapter, hf_tokenizer, tmp_path, monkeypatch):
    path = tmp_path / "samples.jsonl"
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES", str(path))
    spec = spec_for(0)
    output = run_row(adapter, hf_tokenizer, spec, Mirror(spec, hf_tokenizer))
    (sample,) = read_samples(path)
    assert sample.prompt_ids == output.prompt_ids
    assert sample.completion_ids == output.response_ids and sample.mask == output.response_mask
    assert sample.logprobs == output.response_logprobs and sample.temperature == 1.0
    # A greedy validation row (not training's temperature) is left out.
    loop = build_loop(verl_config(), FakeServerManager([Mirror(spec, hf_tokenizer)]), hf_tokenizer)
    params = {"temperature": 0.0, "logprobs": True}
    asyncio.run(loop.run(params, raw_prompt=[], label=spec.to_json()))
    assert len(read_samples(path)) == 1


def test_the_servers_own_failure_propagates(adapter, hf_tokenizer):
    class BrokenServer:
        async def generate(self, request_id: str, **kwargs: Any) -> TokenOutput:
            raise ConnectionError("server gone")

    loop = build_loop(verl_config(), BrokenServer(), hf_tokenizer)
    with pytest.raises(ConnectionError, match="server gone"):  # not one trajectory's failure
        asyncio.run(loop.run({}, raw_prompt=[], label=spec_for(0).to_json()))


# -- verl's worker: agent_name, padding, rewards ----------------------------------------------------
def fake_worker(config: Any, server: FakeServerManager, tokenizer: Any) -> AgentLoopWorker:
    """An ``AgentLoopWorker`` without Ray or a model: the attributes its rollout path reads."""
    worker = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.config, worker.rollout_config = config, config.actor_rollout_ref.rollout
    worker.llm_client, worker.tokenizer, worker.processor = server, tokenizer, None
    worker.hf_model_type, worker.dataset_cls, worker.tools = None, None, []
    worker.reward_loop_worker_handles, worker.teacher_client = None, None
    worker.distillation_enabled, worker.mm_processor_kwargs = False, {}
    return worker


@pytest.mark.parametrize("response_length", [4096, 160])
def test_verls_worker_pads_a_group_and_places_the_reward(adapter, hf_tokenizer, response_length):
    specs = [spec_for(0), spec_for(0), spec_for(3, hops=1), spec_for(3, hops=1)]  # groups of 2
    mirrors = [Mirror(spec, hf_tokenizer) for spec in specs]
    config = verl_config(2048, response_length)
    worker = fake_worker(config, FakeServerManager(mirrors), hf_tokenizer)
    batch = DataProto.from_single_dict(
        {
            "dummy_tensor": torch.zeros(4, 1, dtype=torch.uint8),
            "raw_prompt": np.array([[{"role": "user", "content": "q"}]] * 4, dtype=object),
            "label": np.array([spec.to_json() for spec in specs], dtype=object),
            "agent_name": np.array(["agentflow"] * 4, dtype=object),
            "index": np.array([0, 0, 1, 1]),
        }
    )
    out = asyncio.run(worker.generate_sequences(batch))
    assert out.batch["prompts"].shape == (4, 2048)
    assert out.batch["responses"].shape == (4, response_length)
    for row in range(4):
        mirror = next(m for m in mirrors if m.session.turn_records and _row_is(out, row, m))
        flat = mirror.session.trajectory().flat_sample()
        prompt_mask = out.batch["attention_mask"][row, :2048].bool()
        response_mask = out.batch["attention_mask"][row, 2048:].bool()
        assert (
            out.batch["prompts"][row][prompt_mask].tolist() == flat.input_ids[: flat.prompt_length]
        )
        response = out.batch["responses"][row][response_mask].tolist()
        assert response == flat.completion_ids
        assert out.batch["response_mask"][row][response_mask].tolist() == flat.completion_mask
        logprobs = out.batch["rollout_log_probs"][row][response_mask].tolist()
        assert logprobs == [LOGPROB if m else 0.0 for m in flat.completion_mask]
        scores = out.batch["rm_scores"][row]
        reward = mirror.session.outcome.reward if mirror.session.done else 0.0
        assert scores[len(response) - 1].item() == reward and scores.sum().item() == reward
        if response_length == 4096:
            assert reward == 1.0


def _row_is(out: DataProto, row: int, mirror: Mirror) -> bool:
    mask = out.batch["attention_mask"][row].bool()
    tokens = out.batch["input_ids"][row][mask].tolist()
    return tokens == mirror.session.trajectory().flat_sample().input_ids
