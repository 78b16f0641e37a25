"""The verl adapter, built and driven by verl 0.9.1's own agent-loop code on CPU.

The loop comes out of verl's agent-loop registry (filled from ``adapters/verl/agent_loop.yaml``
as ``AgentLoopWorker`` fills it) through ``hydra.utils.instantiate``, with an OmegaConf config
and a fake server manager whose ``generate`` returns verl's ``TokenOutput``. The fake plays a
scripted planner on a mirror env of the same task, stepping it with the same ids, so every test
compares the adapter's output with the env's own flat-mode record. A batch also goes through
``AgentLoopWorker.generate_sequences``: rows select the loop by ``agent_name`` and come back
padded to ``prompt_length`` / ``response_length`` with the reward on the last response token.
A hostile server answers chosen requests as verl's servers answer an aborted one (no tokens, stop
reason ``"aborted"``) or without log-probs; the batch must still stack.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import types
from pathlib import Path
from typing import Any

import gymnasium as gym
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
    AgentLoopManager,
    AgentLoopOutput,
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
)
from verl.workers.rollout.replica import TokenOutput

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.modules.rule import RuleExecutor, RuleInitializer
from agentflow_env.rollout.checks.fail_fast import SystemicFailure
from agentflow_env.rollout.checks.failures import AdapterError
from agentflow_env.rollout.checks.logprob_check import read_samples
from agentflow_env.rollout.labels.spec import TaskSpec
from agentflow_env.rollout.training.pool import LazySharedEnvs
from agentflow_env.workflow.frozen_modules import Modules
from agentflow_env.workflow.session import Session

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "adapters" / "verl" / "agent_loop.yaml"
LOGPROB = -0.25


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture
def adapter(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The adapter module as verl's workers import it (its folder on ``sys.path``), with fresh
    ``AGENTFLOW_*`` settings and the registry entries of the YAML."""
    cap = ("MAX_ACTION_TOKENS", "MAX_TURN_TOKENS")  # the cap's variable and its old name
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", *cap, "FAIL_FAST", "SAMPLES"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    monkeypatch.syspath_prepend(str(ROOT / "adapters" / "verl"))
    module = importlib.import_module("agentflow_agent_loop")
    monkeypatch.setattr(module, "shared_envs", LazySharedEnvs(module.shared_envs.flat_only))
    monkeypatch.setattr(module, "RETRY_DELAY_S", 0.0, raising=False)  # no waits between retries
    monkeypatch.setattr(module, "trajectory_numbers", itertools.count(), raising=False)
    monkeypatch.setattr(module, "_unscored_warned", [False], raising=False)
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
        self.mirrors, self.free, self.logprobs = list(mirrors), list(mirrors), logprobs
        self.by_request: dict[str, Mirror] = {}
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any
    ) -> TokenOutput:
        self.calls.append({"request_id": request_id, "sampling_params": dict(sampling_params)})
        mirror = self.by_request.get(request_id)
        if mirror is None:
            for candidate in list(self.free):  # other requests claim mirrors while this waits
                first = await candidate.first_prompt()
                if first == list(prompt_ids) and candidate in self.free:
                    mirror = self.by_request[request_id] = candidate
                    self.free.remove(candidate)
                    break
            else:
                raise AssertionError("no mirror starts with this prompt")
        return await self.answer(mirror, prompt_ids, sampling_params["max_tokens"])

    async def answer(self, mirror: Mirror, prompt_ids: list[int], max_tokens: int) -> TokenOutput:
        ids = await mirror.sample(prompt_ids, max_tokens)
        logprobs = [LOGPROB] * len(ids) if self.logprobs else None
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")


ABORTED_ANSWERS = {
    # verl's vLLM server on a request aborted by a weight sync (pause_generation with abort)
    "empty": TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted"),
    # a server that reports no stop reason (verl's TensorRT-LLM server on success)
    "silent": TokenOutput(token_ids=[], log_probs=None, stop_reason=None),
    # cancelled after some tokens (verl's TensorRT-LLM server; SGLang says "abort")
    "partial": TokenOutput(token_ids=[11, 12], log_probs=[-1.0, -1.0], stop_reason="abort"),
}


class HostileServer(FakeServerManager):
    """``aborts[(mirror, turn)]``: how many times that request is answered as aborted (the
    ``kind`` of ``ABORTED_ANSWERS``) before it is served; ``unscored``: the (mirror, turn)
    requests served without log-probs. Mirrors are numbered as given; the batch's first request
    claims mirror 0."""

    def __init__(
        self,
        mirrors: list[Mirror],
        aborts: dict[tuple[int, int], int] | None = None,
        unscored: set[tuple[int, int]] | frozenset = frozenset(),
        kind: str = "empty",
    ):
        super().__init__(mirrors)
        self.aborts, self.unscored, self.kind = dict(aborts or {}), set(unscored), kind

    async def answer(self, mirror: Mirror, prompt_ids: list[int], max_tokens: int) -> TokenOutput:
        key = (self.mirrors.index(mirror), len(mirror.actions))
        if self.aborts.get(key, 0) > 0:
            self.aborts[key] -= 1
            return ABORTED_ANSWERS[self.kind].model_copy(deep=True)
        output = await super().answer(mirror, prompt_ids, max_tokens)
        if key in self.unscored:
            output.log_probs = None
        return output


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


def run_row(
    adapter, tokenizer, spec, mirror, config=None, label=None, server=None
) -> AgentLoopOutput:
    config = config or verl_config()
    loop = build_loop(config, server or FakeServerManager([mirror]), tokenizer)
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


GROUPS = [spec_for(0), spec_for(0), spec_for(3, hops=1), spec_for(3, hops=1)]  # groups of 2
TASKS = [spec_for(0), spec_for(1), spec_for(2), spec_for(3, hops=1)]  # rows told apart by tokens


def batch_of(labels: list[Any], index: list[int] | None = None, **columns: Any) -> DataProto:
    """verl's rollout input: one row per label, ``agent_name`` selecting this loop."""
    n = len(labels)
    return DataProto.from_single_dict(
        {
            "dummy_tensor": torch.zeros(n, 1, dtype=torch.uint8),
            "raw_prompt": np.array([[{"role": "user", "content": "q"}]] * n, dtype=object),
            "label": np.array(labels, dtype=object),
            "agent_name": np.array(["agentflow"] * n, dtype=object),
            "index": np.array(index if index is not None else list(range(n))),
            **{key: np.array(value) for key, value in columns.items()},
        }
    )


@pytest.mark.parametrize("response_length", [4096, 160])
def test_verls_worker_pads_a_group_and_places_the_reward(adapter, hf_tokenizer, response_length):
    specs = GROUPS
    mirrors = [Mirror(spec, hf_tokenizer) for spec in specs]
    config = verl_config(2048, response_length)
    worker = fake_worker(config, FakeServerManager(mirrors), hf_tokenizer)
    batch = batch_of([spec.to_json() for spec in specs], index=[0, 0, 1, 1])
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


def run_batch(adapter, tokenizer, server, labels, config=None, **columns) -> DataProto:
    worker = fake_worker(config or verl_config(2048, 4096), server, tokenizer)
    return asyncio.run(worker.generate_sequences(batch_of(labels, **columns)))


def row_of(out: DataProto, mirror: Mirror) -> int:
    return next(row for row in range(len(out)) if _row_is(out, row, mirror))


def check_row_logprobs(out: DataProto, row: int, expected: list[float]) -> None:
    """The row's rollout log-probs: ``expected`` on its response, verl's 0.0 padding after."""
    width = out.batch["responses"].shape[1]
    assert out.batch["rollout_log_probs"][row].tolist() == expected + [0.0] * (
        width - len(expected)
    )


# -- a hostile server: aborted turns, missing log-probs ---------------------------------------------
@pytest.mark.parametrize(
    "aborts",
    [{(0, 0): 1, (2, 1): 2}, {(2, 1): 1}],
    ids=["the batch's first request and a middle one", "a middle request"],
)
def test_aborted_requests_are_reissued_and_every_row_keeps_its_logprobs(
    adapter, hf_tokenizer, aborts
):
    mirrors = [Mirror(spec, hf_tokenizer) for spec in TASKS]
    server = HostileServer(mirrors, aborts)
    out = run_batch(adapter, hf_tokenizer, server, [s.to_json() for s in TASKS])
    assert out.batch["rollout_log_probs"].shape == (4, 4096)
    for position, mirror in enumerate(mirrors):
        row = row_of(out, mirror)  # the env's own record: no empty action was stepped
        flat = mirror.session.trajectory().flat_sample()
        check_row_logprobs(out, row, [LOGPROB if m else 0.0 for m in flat.completion_mask])
        assert out.batch["rm_scores"][row].sum().item() == 1.0
        aborted = sum(times for (m, _), times in aborts.items() if m == position)
        assert out.non_tensor_batch["turns_aborted"][row] == aborted
        assert out.non_tensor_batch["turns_stop"][row] == len(mirror.actions)
        assert out.non_tensor_batch["failed"][row] == 0.0
    assert not server.aborts or not any(server.aborts.values())


@pytest.mark.parametrize("kind", sorted(ABORTED_ANSWERS))
@pytest.mark.parametrize("turn", [0, 1])
def test_a_turn_aborted_every_time_ends_the_trajectory_with_reward_0(
    adapter, hf_tokenizer, caplog, kind, turn
):
    spec = spec_for(0)
    mirror = Mirror(spec, hf_tokenizer)
    attempts = 3  # the request and its two re-issues (ABORTED_RETRIES)
    server = HostileServer([mirror], {(0, turn): attempts}, kind=kind)
    with caplog.at_level(logging.WARNING, "agentflow_env.adapters.verl"):
        output = run_row(adapter, hf_tokenizer, spec, mirror, server=server)
    assert len(server.calls) == turn + attempts  # re-issued, then given up
    assert len(mirror.actions) == turn  # nothing sampled after the aborted turn
    assert output.reward_score == 0.0
    if turn == 0:
        assert output.response_mask == [0] and output.response_logprobs == [0.0]
    else:  # the turns before it, as the env recorded them: no empty action stepped
        assert output.response_ids == mirror.actions[0]
        assert output.response_logprobs == [LOGPROB] * len(mirror.actions[0])
    extra = output.extra_fields["reward_extra_info"]
    assert extra["turns_aborted"] == attempts and extra["turns_stop"] == turn
    assert extra["failed"] == 1.0 and extra["error"] == 1.0
    assert "aborted turn" in caplog.text and "reward 0" in caplog.text


def test_a_whole_batch_of_aborted_first_turns_still_stacks(adapter, hf_tokenizer):
    mirrors = [Mirror(spec, hf_tokenizer) for spec in TASKS]
    server = HostileServer(mirrors, {(m, 0): 99 for m in range(4)})
    out = run_batch(adapter, hf_tokenizer, server, [s.to_json() for s in TASKS])
    assert out.batch["rollout_log_probs"].shape == (4, 4096)
    assert out.batch["rollout_log_probs"].abs().sum().item() == 0.0
    assert out.batch["response_mask"].sum().item() == 0  # nothing to train on, nothing invented
    assert out.batch["rm_scores"].sum().item() == 0.0
    assert out.non_tensor_batch["failed"].tolist() == [1.0] * 4


def test_a_turn_without_logprobs_gets_the_fill_value_and_is_counted(adapter, hf_tokenizer, caplog):
    mirrors = [Mirror(spec, hf_tokenizer) for spec in TASKS]
    unscored = {(0, 1), (2, 0)}  # the first row's second turn, a middle row's first
    server = HostileServer(mirrors, unscored=unscored)
    with caplog.at_level(logging.WARNING, "agentflow_env.adapters.verl"):
        out = run_batch(adapter, hf_tokenizer, server, [s.to_json() for s in TASKS])
    assert out.batch["rollout_log_probs"].shape == (4, 4096)
    for position, mirror in enumerate(mirrors):
        row = row_of(out, mirror)
        expected: list[float] = []
        for turn, record in enumerate(mirror.session.turn_records):
            fill = (position, turn) in unscored
            expected += [adapter.LOGPROB_FILL if fill else LOGPROB] * len(record.action_ids)
            if turn + 1 < len(mirror.session.turn_records):
                expected += [0.0] * len(record.feedback_ids)
        check_row_logprobs(out, row, expected)
        missing = sum(len(mirror.actions[t]) for (m, t) in unscored if m == position)
        assert out.non_tensor_batch["unscored_tokens"][row] == missing
        assert out.non_tensor_batch["failed"][row] == 0.0
    assert caplog.text.count("without log-probs") == 1  # once per process


def test_turn_samples_are_refused_with_the_way_to_train_them(adapter, hf_tokenizer, monkeypatch):
    """verl's agent loop returns one sample per rollout: AGENTFLOW_SAMPLES=turns stops the run
    at its first trajectory, naming Agent Lightning, instead of training flat samples."""
    monkeypatch.setenv("AGENTFLOW_SAMPLES", "turns")
    with pytest.raises(AdapterError, match="trains flat samples only") as raised:
        run_batch(adapter, hf_tokenizer, FakeServerManager([]), [spec_for(0)])
    assert "Agent Lightning" in str(raised.value)


# -- fail fast --------------------------------------------------------------------------------------
QUESTIONS = [f"What is the capital of country number {i}?" for i in range(20)]
"""A wrong label column: the rows' questions, not tasks."""


def test_a_wrong_label_column_stops_the_job_with_one_systemic_failure(adapter, hf_tokenizer):
    server = FakeServerManager([])
    with pytest.raises(SystemicFailure) as raised:
        run_batch(adapter, hf_tokenizer, server, QUESTIONS)
    assert isinstance(raised.value, AdapterError)
    message = str(raised.value)
    assert "first 16 trajectories" in message and "TaskSpecError" in message
    assert "label column" in message
    assert server.calls == []
    # Raised once: the guard stood down, later failures stay zero-reward samples.
    out = run_batch(adapter, hf_tokenizer, server, QUESTIONS)
    assert out.non_tensor_batch["failed"].tolist() == [1.0] * len(QUESTIONS)


def test_fail_fast_raises_on_the_limit_th_failure(adapter, hf_tokenizer, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_FAIL_FAST", "4")
    loop = build_loop(verl_config(), FakeServerManager([]), hf_tokenizer)
    for question in QUESTIONS[:3]:
        output = asyncio.run(loop.run({"logprobs": True}, raw_prompt=[], label=question))
        assert output.extra_fields["reward_extra_info"]["failed"] == 1.0
        assert output.response_logprobs == [0.0]
    with pytest.raises(SystemicFailure, match="first 4 trajectories"):
        asyncio.run(loop.run({"logprobs": True}, raw_prompt=[], label=QUESTIONS[3]))


def test_one_trajectory_that_ran_first_stands_the_guard_down(adapter, hf_tokenizer):
    spec = spec_for(0)
    good = run_row(adapter, hf_tokenizer, spec, Mirror(spec, hf_tokenizer))
    assert good.extra_fields["reward_extra_info"]["failed"] == 0.0
    out = run_batch(adapter, hf_tokenizer, FakeServerManager([]), QUESTIONS)  # no raise
    assert out.non_tensor_batch["failed"].tolist() == [1.0] * len(QUESTIONS)


class DownVerifier:
    async def verify(self, task: Any, memory: Any) -> Any:
        raise RuntimeError("verifier endpoint down")


class DownGeneralist:
    async def answer(self, task: Any, memory: Any) -> Any:
        raise RuntimeError("generalist endpoint down")


MODULES_DOWN = "AgentFlowTest-VerlModulesDown-v0"
if MODULES_DOWN not in gym.registry:
    gym.register(
        id=MODULES_DOWN,
        entry_point=lambda **kwargs: AgentFlowEnv(
            modules=Modules(RuleInitializer(), RuleExecutor(), DownVerifier(), DownGeneralist()),
            **kwargs,
        ),
    )


def test_episodes_ended_by_a_modules_error_count_as_failed(adapter, hf_tokenizer, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_FAIL_FAST", "3")
    specs = [
        TaskSpec(env_id=MODULES_DOWN, env_kwargs=spec.env_kwargs, task_id=spec.task_id)
        for spec in TASKS[:3]
    ]
    for spec in specs[:2]:  # the env ends the episode itself: no exception, still a failure
        output = run_row(adapter, hf_tokenizer, spec, Mirror(spec, hf_tokenizer))
        extra = output.extra_fields["reward_extra_info"]
        assert extra["failed"] == 1.0 and extra["error"] == 0.0
    with pytest.raises(SystemicFailure, match="module error.*endpoint down"):
        run_row(adapter, hf_tokenizer, specs[2], Mirror(specs[2], hf_tokenizer))


def test_aborted_trajectories_are_not_a_misconfiguration(adapter, hf_tokenizer, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_FAIL_FAST", "2")
    mirrors = [Mirror(spec, hf_tokenizer) for spec in TASKS]
    server = HostileServer(mirrors, {(m, 0): 99 for m in range(4)})
    out = run_batch(adapter, hf_tokenizer, server, [s.to_json() for s in TASKS])
    assert out.non_tensor_batch["failed"].tolist() == [1.0] * 4  # the server's, not the setup's


# -- request ids, turn ends, env time ---------------------------------------------------------------
def trajectory_ids(server: FakeServerManager) -> list[str]:
    return list(dict.fromkeys(call["request_id"] for call in server.calls))


@pytest.mark.parametrize("priority", [None, [4, 5, 6, 7]])
def test_request_ids_are_derived_from_the_row(adapter, hf_tokenizer, monkeypatch, priority):
    labels = [s.to_json() for s in GROUPS]  # rows 0 and 1 (2 and 3) share index and label
    columns = {"priority": priority} if priority else {}
    runs = []
    for _ in range(2):
        monkeypatch.setattr(adapter, "trajectory_numbers", itertools.count())  # a fresh process
        server = FakeServerManager([Mirror(spec, hf_tokenizer) for spec in GROUPS])
        run_batch(adapter, hf_tokenizer, server, labels, index=[0, 0, 1, 1], **columns)
        ids = trajectory_ids(server)
        assert len(ids) == 4  # one per trajectory, each used for all its turns
        assert len(server.calls) == sum(len(m.actions) for m in server.mirrors)
        runs.append(sorted(ids))
    assert runs[0] == runs[1]  # the same rows give the same ids
    if priority:  # verl numbers the rows: the ids do not depend on this process's history
        server = FakeServerManager([Mirror(spec, hf_tokenizer) for spec in GROUPS])
        run_batch(adapter, hf_tokenizer, server, labels, index=[0, 0, 1, 1], **columns)
        assert sorted(trajectory_ids(server)) == runs[0]


def test_the_servers_turn_ends_are_counted(adapter, hf_tokenizer):
    spec = spec_for(0)
    mirror = Mirror(spec, hf_tokenizer)
    output = run_row(adapter, hf_tokenizer, spec, mirror)
    extra = output.extra_fields["reward_extra_info"]
    assert (extra["turns_stop"], extra["turns_length"], extra["turns_aborted"]) == (2.0, 0.0, 0.0)
    # Aborted once, then cut at the room left (7 tokens): the episode ends there.
    mirror = Mirror(spec, hf_tokenizer)
    server = HostileServer([mirror], {(0, 0): 1})
    output = run_row(adapter, hf_tokenizer, spec, mirror, verl_config(4096, 7), server=server)
    extra = output.extra_fields["reward_extra_info"]
    assert (extra["turns_stop"], extra["turns_length"], extra["turns_aborted"]) == (0.0, 1.0, 1.0)


def test_env_time_is_logged_beside_generation_time(adapter, hf_tokenizer, monkeypatch):
    mirrors = [Mirror(spec, hf_tokenizer) for spec in TASKS]
    step = Session.step

    async def slow_step(self: Session, *args: Any, **kwargs: Any) -> Any:
        if all(self is not m.session for m in mirrors):  # the adapter's env, not the fake server's
            await asyncio.sleep(0.05)
        return await step(self, *args, **kwargs)

    monkeypatch.setattr(Session, "step", slow_step)
    server = FakeServerManager(mirrors)
    out = run_batch(adapter, hf_tokenizer, server, [s.to_json() for s in TASKS])
    metrics = out.meta_info["metrics"]
    for mirror in mirrors:
        row = row_of(out, mirror)
        env_seconds = out.non_tensor_batch["env_seconds"][row]
        assert env_seconds >= 0.05 * len(mirror.actions)
        assert metrics[row]["tool_calls"] == env_seconds
        assert metrics[row]["generate_sequences"] > 0.0
    timing = AgentLoopManager._performance_metrics(None, [metrics], out)  # what verl logs
    assert timing["agent_loop/tool_calls/min"] >= 0.05
