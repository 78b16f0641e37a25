"""The OpenRLHF adapter, driven by OpenRLHF's own ``MultiTurnAgentExecutor.execute``.

A fake engine stands in for OpenRLHF's vLLM ``RolloutRayActor.generate`` (same call signature,
``RequestOutput``-shaped results). It answers with a scripted planner's text tokenized by the
env's tokenizer plus eos, and replays the same ids on a mirror env, so the test compares
OpenRLHF's token stream with the env's own flat-mode ids. OpenRLHF's advantage code needs ray
and vllm to import, so its functions are read from the installed source and run in isolation.
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import json
import logging
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
agent_module = pytest.importorskip("openrlhf.utils.agent")

from conftest import load_adapter  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner  # noqa: E402
from agentflow_env.rollout.checks.logprob_check import read_samples  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec, TaskSpecError, synthetic_specs  # noqa: E402
from agentflow_env.rollout.training.group_credit import flow_grpo_advantages  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AGENT_FUNC = ROOT / "adapters" / "openrlhf" / "agent_func.py"
PREPARE_DATA = ROOT / "adapters" / "openrlhf" / "prepare_data.py"
OPENRLHF_DIR = Path(agent_module.__file__).resolve().parents[1]
MAX_LEN = 8192


@pytest.fixture
def agent_func(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    cap = ("MAX_ACTION_TOKENS", "MAX_TURN_TOKENS")  # the cap's variable and its old name
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", *cap, "RETRIEVER_URL"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    return load_adapter(AGENT_FUNC, "agentflow_openrlhf_agent")


# -- a stand-in for vLLM's outputs and OpenRLHF's rollout engine -----------------------------------
@dataclass
class SamplingParams:
    max_tokens: int | None = None
    logprobs: int | None = None
    temperature: float = 1.0


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list[dict[int, Logprob]] | None


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput]


class MirrorEngine:
    """``generate(prompt_token_ids, sampling_params, multi_modal_data=None)`` like OpenRLHF's
    engine; plays a scripted planner on a mirror env of the same task and tokenizer."""

    def __init__(
        self,
        spec: TaskSpec,
        planner: str,
        seed: int = 0,
        mutate: Callable[[int, list[int]], list[int]] | None = None,
        **env_kwargs: Any,
    ):
        self.env = spec.make_env(observation_mode="flat", **env_kwargs)
        self.mutate = mutate  # (turn index, planner ids) -> the ids "sampled" instead
        self.task = spec.resolve(self.env.task_source)
        self.session = self.env.new_session(self.task, seed=spec.seed)
        self.env.session = self.session  # the scripted planners read env.session
        self.planner = (
            ExpertPlanner(self.env) if planner == "expert" else RandomPlanner(self.env, seed)
        )
        self.tok = self.env.tokenizer
        self.vocab = self.tok.vocab_size
        self.prompts: list[list[int]] = []
        self.actions: list[list[int]] = []
        self.given_params: list[SamplingParams] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        if self.session.observation is None:
            await self.session.start()
        assert not self.session.done, "generate after the episode ended"
        self.prompts.append(list(prompt_token_ids))
        self.given_params.append(sampling_params)
        ids = self.tok.encode(self.planner.act()) + [self.tok.eos_token_id]
        if self.mutate is not None:
            ids = self.mutate(len(self.actions), ids)
        cut = ids[: sampling_params.max_tokens]
        self.actions.append(cut)
        await self.session.step(cut)
        logprobs = None
        if sampling_params.logprobs is not None:
            logprobs = [{i: Logprob(-0.25)} for i in cut]
        # As vLLM: no eos in the text; ids past the vocabulary have no text.
        text = self.tok.decode([i for i in cut if i != self.tok.eos_token_id and i < self.vocab])
        finish = "length" if len(cut) < len(ids) else "stop"
        return RequestOutput([CompletionOutput(cut, text, finish, logprobs)])


def run_execute(executor, spec, engine, hf_tokenizer, max_length=MAX_LEN, params=None):
    params = params or SamplingParams(logprobs=1)
    return executor.execute(
        prompt=engine.task.question,
        label=spec.to_json(),
        sampling_params=params,
        max_length=max_length,
        hf_tokenizer=hf_tokenizer,
        llm_engine=engine,
    )


def spec_for(task_index: int, hops: int = 2) -> TaskSpec:
    specs = list(synthetic_specs(task_index + 1, split="train", hops=hops, seed=7))
    return specs[task_index][0]


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


def check_against_mirror(result: dict, engine: MirrorEngine) -> None:
    """Tokens, action ranges, log-probs and reward agree with the env's own flat-mode record."""
    tokens = result["observation_tokens"]
    ranges = result["action_ranges"]
    assert [tokens[a:b] for a, b in ranges] == engine.actions
    for (start, _), prompt in zip(ranges, engine.prompts, strict=True):
        assert tokens[:start] == prompt  # the prompt each turn was sampled from
    flat = engine.session.trajectory().flat_sample()
    assert tokens == flat.input_ids
    in_ranges = [0] * len(tokens)
    for a, b in ranges:
        in_ranges[a:b] = [1] * (b - a)
    assert in_ranges == flat.loss_mask  # action ranges cover exactly the planner tokens
    assert result["rollout_log_probs"] == [-0.25 if m else 0.0 for m in in_ranges]
    assert result["reward"] == engine.session.outcome.as_info()["reward"]
    assert result["extra_logs"]["success"] == float(engine.session.outcome.as_info()["success"])
    assert result["extra_logs"]["turns"] == len(ranges)
    assert result["extra_logs"]["budget_exhausted"] == 0.0
    assert result["extra_logs"]["error"] == 0.0


# -- the executor -----------------------------------------------------------------------------------
def test_executor_is_openrlhfs_multiturn_executor(agent_func):
    executor = agent_func.AgentExecutor()
    assert isinstance(executor, agent_module.MultiTurnAgentExecutor)
    assert issubclass(agent_func.AgentInstance, agent_module.AgentInstanceBase)
    assert agent_func.AgentInstance().session is None  # cheap, no arguments


@pytest.mark.parametrize(("planner", "index"), [("expert", 0), ("expert", 3), ("random", 1)])
def test_trajectory_matches_the_env(agent_func, hf_tokenizer, planner, index):
    spec = spec_for(index)
    engine = MirrorEngine(spec, planner, seed=index)
    params = SamplingParams(logprobs=1)
    result = asyncio.run(
        run_execute(agent_func.AgentExecutor(), spec, engine, hf_tokenizer, params=params)
    )
    check_against_mirror(result, engine)
    assert result["reward"] == float(engine.session.outcome.as_info()["success"])
    if planner == "expert":
        assert result["reward"] == 1.0 and result["scores"] == 1.0
    assert params.max_tokens is None  # the shared sampling params were copied, not changed
    assert all(p.max_tokens <= 1024 for p in engine.given_params)  # each turn is capped


def test_samples_are_dumped_for_the_logprob_check(agent_func, hf_tokenizer, tmp_path, monkeypatch):
    path = tmp_path / "samples.jsonl"
    monkeypatch.setenv("AGENTFLOW_DUMP_SAMPLES", str(path))
    spec = spec_for(0)
    engine = MirrorEngine(spec, "expert")
    params = SamplingParams(logprobs=1, temperature=0.7)
    result = asyncio.run(
        run_execute(agent_func.AgentExecutor(), spec, engine, hf_tokenizer, params=params)
    )
    (sample,) = read_samples(path)
    tokens, ranges = result["observation_tokens"], result["action_ranges"]
    assert sample.prompt_ids == tokens[: ranges[0][0]]
    assert sample.prompt_ids + sample.completion_ids == tokens
    sampled = [t for t, m in zip(sample.completion_ids, sample.mask, strict=True) if m]
    assert sampled == sum(engine.actions, [])
    assert [lp for lp, m in zip(sample.logprobs, sample.mask, strict=True) if m] == [-0.25] * len(
        sampled
    )
    assert sample.temperature == 0.7
    # Without rollout log-probs (OpenRLHF's default) there is nothing to check: nothing written.
    engine = MirrorEngine(spec, "expert")
    no_logprobs = SamplingParams()
    asyncio.run(
        run_execute(agent_func.AgentExecutor(), spec, engine, hf_tokenizer, params=no_logprobs)
    )
    assert len(read_samples(path)) == 1


def test_turn_cap_comes_from_the_environment(agent_func, hf_tokenizer, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_MAX_ACTION_TOKENS", "16")
    monkeypatch.setenv("AGENTFLOW_ENV_KWARGS", json.dumps({"max_turns": 2}))
    module = load_adapter(AGENT_FUNC, "agentflow_openrlhf_agent_capped")
    spec = spec_for(0)
    engine = MirrorEngine(spec, "expert", max_turns=2)
    result = asyncio.run(run_execute(module.AgentExecutor(), spec, engine, hf_tokenizer))
    assert [len(a) for a in engine.actions] == [16, 16]  # cut: malformed actions, two turns
    assert result["truncated"] is True
    assert result["reward"] == 0.0 and result["extra_logs"]["invalid_actions"] == 2.0
    check_against_mirror(result, engine)


@pytest.mark.parametrize("extra", [0, 10])
def test_budget_exhaustion_is_a_failure(agent_func, hf_tokenizer, extra):
    spec = spec_for(0)
    full = MirrorEngine(spec, "expert")
    ranges = asyncio.run(run_execute(agent_func.AgentExecutor(), spec, full, hf_tokenizer))[
        "action_ranges"
    ]
    assert len(ranges) >= 2
    # The budget ends right before (extra=0) or 10 tokens into (extra=10) the second action.
    engine = MirrorEngine(spec, "expert")
    max_length = ranges[1][0] + extra
    result = asyncio.run(
        run_execute(agent_func.AgentExecutor(), spec, engine, hf_tokenizer, max_length)
    )
    assert len(engine.actions) == (1 if extra == 0 else 2)
    assert not engine.session.done
    assert result["reward"] == 0.0 and result["scores"] == 0.0
    assert result["extra_logs"]["budget_exhausted"] == 1.0
    assert result["extra_logs"]["success"] == 0.0
    assert result["action_ranges"][-1][1] == (max_length if extra else ranges[0][1])


def test_model_tokenizer_from_the_environment(
    agent_func, tmp_path, monkeypatch, caplog, llama_style_hf_tokenizer
):
    """With AGENTFLOW_TOKENIZER naming another tokenizer (Llama-style chat template, BOS in the
    template), OpenRLHF's own tokenization of prompt and feedback matches the env's ids."""
    from transformers import AutoTokenizer

    llama_style_hf_tokenizer.save_pretrained(tmp_path)
    monkeypatch.setenv("AGENTFLOW_TOKENIZER", str(tmp_path))
    module = load_adapter(AGENT_FUNC, "agentflow_openrlhf_agent_llama")
    model_tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    spec = spec_for(2)
    engine = MirrorEngine(spec, "expert", tokenizer=str(tmp_path))
    result = asyncio.run(run_execute(module.AgentExecutor(), spec, engine, model_tokenizer))
    assert result["observation_tokens"][0] == model_tokenizer.bos_token_id
    check_against_mirror(result, engine)
    assert result["reward"] == 1.0

    # The bundled tokenizer in the env but the Llama-style one in OpenRLHF: the trajectory fails
    # before its first action (a reward-0 sample of OpenRLHF's prompt ids, no action) and the
    # warning blames the tokenizer, because re-encoding the env's prompt text shows it.
    monkeypatch.delenv("AGENTFLOW_TOKENIZER")
    mismatched = load_adapter(AGENT_FUNC, "agentflow_openrlhf_agent_mismatch")
    engine = MirrorEngine(spec, "expert")
    with caplog.at_level(logging.WARNING, logger=mismatched.logger.name):
        failed = asyncio.run(run_execute(mismatched.AgentExecutor(), spec, engine, model_tokenizer))
    assert engine.actions == []  # nothing was sampled
    assert failed["reward"] == 0.0 and failed["extra_logs"]["error"] == 1.0
    assert failed["action_ranges"] == []
    first_prompt, _ = asyncio.run(engine.session.start())  # the env's prompt, as OpenRLHF read it
    assert failed["observation_tokens"] == model_tokenizer.encode(
        first_prompt.text, add_special_tokens=False
    )
    (record,) = [r for r in caplog.records if r.name == mismatched.logger.name]
    assert record.levelno == logging.WARNING
    assert "TokenMismatchError" in record.getMessage()
    assert "in the first prompt" in record.getMessage()
    assert "set AGENTFLOW_TOKENIZER" in record.getMessage()


# -- Flow-GRPO advantages through OpenRLHF's code ---------------------------------------------------
def openrlhf_function(relative: str, name: str, namespace: dict[str, Any]) -> Any:
    """A function or method from OpenRLHF's installed source, compiled alone into ``namespace``."""
    path = OPENRLHF_DIR / relative
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
            return namespace[name]
    raise LookupError(f"{name} not found in {path}")


def openrlhf_group_norm_advantages(responses: list[dict], n: int) -> list[torch.Tensor]:
    """Run OpenRLHF's response -> Experience -> compute_advantages_and_returns path (group_norm,
    KL as a loss so no KL in the reward); returns each experience's per-token advantages."""
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

    ns: dict[str, Any] = {
        "torch": torch,
        "itertools": itertools,
        "List": list,
        "Tuple": tuple,
        "Union": typing.Union,
        "Optional": typing.Optional,
        "Experience": Experience,
        "apply_length_penalties": apply_length_penalties,
        "logger": types.SimpleNamespace(info=lambda *a: None, warning=lambda *a: None),
    }
    to_experience = openrlhf_function(
        "trainer/ppo_utils/samples_generator.py", "_process_response_into_experience", ns
    )
    openrlhf_function("models/utils.py", "compute_reward", ns)
    cumulative = openrlhf_function(
        "trainer/ppo_utils/experience_maker.py", "get_cumulative_returns", ns
    )
    advantages = openrlhf_function(
        "trainer/ppo_utils/experience_maker.py", "compute_advantages_and_returns", ns
    )
    args = types.SimpleNamespace(
        rollout=types.SimpleNamespace(n_samples_per_prompt=n, max_new_tokens=None),
        algo=types.SimpleNamespace(
            advantage=types.SimpleNamespace(estimator="group_norm", gamma=1.0, no_std_norm=False)
        ),
        reward=types.SimpleNamespace(
            clip_range=(-10, 10), overlong_buffer_len=None, stop_properly_penalty_coef=None
        ),
        data=types.SimpleNamespace(max_len=MAX_LEN),
    )
    maker = types.SimpleNamespace(
        strategy=types.SimpleNamespace(args=args),
        kl_ctl=types.SimpleNamespace(value=0.0),
        advantage_estimator="group_norm",
    )
    maker.get_cumulative_returns = lambda *a: cumulative(maker, *a)
    experiences = []
    for index, response in enumerate(responses):
        exp = to_experience(maker, response, max_len=MAX_LEN)
        exp.index = [index]
        exp.kl = torch.zeros_like(exp.action_mask, dtype=torch.float32)
        experiences.append(exp)
    return [(e.advantages[0], e.action_mask[0].bool()) for e in advantages(maker, experiences)]


def test_group_of_eight_gets_flow_grpo_advantages(agent_func, hf_tokenizer):
    spec = spec_for(4)
    planners = ["expert", "random"] * 4
    engines = [MirrorEngine(spec, p, seed=i) for i, p in enumerate(planners)]
    executor = agent_func.AgentExecutor()
    shared_params = SamplingParams(logprobs=None)  # one object for the group, as OpenRLHF does

    async def group() -> list[dict]:
        return await asyncio.gather(
            *(run_execute(executor, spec, e, hf_tokenizer, params=shared_params) for e in engines)
        )

    responses = asyncio.run(group())
    rewards = [r["reward"] for r in responses]
    assert rewards[0::2] == [1.0] * 4 and 0.0 in rewards
    ours = flow_grpo_advantages(rewards)

    # The exact expression from experience_maker (group_norm), unbiased std:
    r = torch.tensor(rewards).reshape(-1, 8)
    expression = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)).reshape(-1)
    assert expression.tolist() == pytest.approx(ours, abs=1e-6)

    # The whole OpenRLHF path: every action token of trajectory i carries advantage A_i.
    for (adv, mask), expected in zip(
        openrlhf_group_norm_advantages(responses, 8), ours, strict=True
    ):
        assert adv[mask].tolist() == pytest.approx([expected] * int(mask.sum()), abs=1e-5)


def test_equal_rewards_give_zero_advantages(agent_func):
    responses = [
        {
            "observation_tokens": [1, 2, 3, 4],
            "action_ranges": [(2, 4)],
            "reward": 1.0,
            "scores": 1.0,
            "rollout_log_probs": None,
            "prompt": "",
            "label": "",
        }
    ] * 8
    for adv, mask in openrlhf_group_norm_advantages(responses, 8):
        assert adv[mask].tolist() == [0.0, 0.0]
    assert flow_grpo_advantages([1.0] * 8) == [0.0] * 8


# -- labels and data ------------------------------------------------------------------------------
def test_task_spec_round_trip_and_errors():
    spec = spec_for(0)
    again = TaskSpec.from_json(spec.to_json())
    assert again == spec
    env = spec.make_env()
    assert again.resolve(env.task_source).task_id == spec.task_id
    by_seed = TaskSpec(env_kwargs={"fresh_world": True, "hops": 1}, seed=5)
    fresh = by_seed.make_env()
    assert by_seed.resolve(fresh.task_source) == by_seed.resolve(fresh.task_source)
    inline = TaskSpec.for_task(again.resolve(env.task_source))
    task = TaskSpec.from_json(inline.to_json()).resolve(env.task_source)
    assert task.question == again.resolve(env.task_source).question
    for bad in ("not json", "[1]", '{"seed": 1, "task_id": "x"}', '{"env_id": "x"}'):
        with pytest.raises(TaskSpecError):
            TaskSpec.from_json(bad)
    with pytest.raises(TaskSpecError, match="no task"):
        TaskSpec(task_id="nope").resolve(env.task_source)
    with pytest.raises(TaskSpecError, match="seed"):
        TaskSpec(env_kwargs={"fresh_world": True}, task_id="x").resolve(fresh.task_source)


def test_env_kwargs_json_forms():
    from agentflow_env.rollout.labels.spec import env_kwargs_from_json

    kwargs = env_kwargs_from_json(
        {
            "tools": ["Calculator", {"name": "Search", "retriever_url": "http://127.0.0.1:9/"}],
            "modules": {"verifier": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
            "max_turns": 3,
        }
    )
    assert kwargs["tools"][0] == "Calculator"
    assert kwargs["tools"][1].remote is not None
    assert kwargs["modules"]["verifier"].model == "m"
    assert kwargs["max_turns"] == 3


def test_prepare_data_writes_openrlhf_rows(tmp_path):
    prepare = load_adapter(PREPARE_DATA, "agentflow_openrlhf_prepare")
    out = tmp_path / "train.jsonl"
    argv = ["synthetic", "--out", str(out), "--count", "3", "--hops", "1,2", "--fresh-world"]
    assert prepare.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [sorted(r) for r in rows] == [["datasource", "label", "prompt"]] * 3
    specs = [TaskSpec.from_json(r["label"]) for r in rows]
    assert [s.seed for s in specs] == [0, 1, 2]
    env = specs[0].make_env()
    assert specs[1].resolve(env.task_source).question == rows[1]["prompt"]

    qa = tmp_path / "nq_train.jsonl"
    qa.write_text(
        json.dumps({"id": "q1", "question": "Who wrote Foo?", "golden_answers": ["Bar", "B."]})
        + "\n"
    )
    out = tmp_path / "nq.jsonl"
    assert prepare.main(["dataset", "--file", str(qa), "--out", str(out)]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    task = TaskSpec.from_json(row["label"]).resolve(env.task_source)
    assert (task.task_id, task.gold_answers, row["datasource"]) == ("q1", ("Bar", "B."), "nq_train")


# -- the launch script ------------------------------------------------------------------------------
def openrlhf_ppo_parser() -> Any:
    """The argument parser of ``openrlhf.cli.train_ppo_ray`` (built in its ``__main__`` block)."""
    import argparse
    from datetime import datetime

    path = OPENRLHF_DIR / "cli" / "train_ppo_ray.py"
    main = next(
        node
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
    )
    body = []
    for statement in main.body:
        if "parse_args" in ast.unparse(statement):
            break
        body.append(statement)
    ns: dict[str, Any] = {"argparse": argparse, "datetime": datetime}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)
    return ns["parser"]


def test_launch_script_flags_parse_with_openrlhfs_cli(tmp_path):
    import subprocess

    script = (ROOT / "adapters" / "openrlhf" / "train_flow_grpo.sh").read_text(encoding="utf-8")
    start = script.index("ARGS=(")
    array = script[start : script.index("\n)\n", start) + 3]
    values = "POLICY_MODEL=m NUM_NODES=1 GPUS_PER_NODE=8 VLLM_ENGINES=8 REPO=r TRAIN_FILE=t.jsonl"
    values += " EVAL_FILE=e.jsonl MAX_LEN=8192 SAVE_DIR=s"
    printed = subprocess.run(
        ["bash", "-c", f'{values}\n{array}\nprintf "%s\\n" "${{ARGS[@]}}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    args = openrlhf_ppo_parser().parse_args(printed)
    flags = vars(args)
    assert flags["algo.advantage.estimator"] == "group_norm"
    assert flags["rollout.n_samples_per_prompt"] == 8
    assert flags["algo.kl.use_loss"] and flags["algo.kl.estimator"] == "k3"
    assert flags["train.agent_func_path"] == "r/adapters/openrlhf/agent_func.py"
    assert (flags["data.input_key"], flags["data.label_key"]) == ("prompt", "label")
    assert flags["rollout.max_new_tokens"] is None and not flags["data.apply_chat_template"]
    # The optional flags named in comments exist too.
    optional = ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", "0", "1"]
    assert openrlhf_ppo_parser().parse_args([*optional, "--train.async_enable"])
