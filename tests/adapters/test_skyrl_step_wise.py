"""SkyRL's step-wise training (``generator.step_wise_trajectories``) with the token-exact
generator: one row per planner turn, driven through SkyRL 0.3.0's own code on CPU.

The generator is called as SkyRL's trainer calls it, with the fake inference client of
``test_skyrl_adapter`` playing a scripted planner on a mirror env (structured observations, as
the adapter's envs run in this shape). Its output then goes through SkyRL's own trainer steps,
compiled from the installed sources (they import the GPU stack at module level): the output
check, reward post-processing, batch conversion, the step-wise advantage broadcast and the
mini-batch boundaries.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import logging
import sys
import types
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "adapters" / "skyrl"))  # as the launch script's PYTHONPATH does

import skyrl_compat  # noqa: E402, F401  (first: skyrl.train imports on Python 3.11)
from mirror_planner import spec_for  # noqa: E402
from skyrl.train.config import SkyRLGymConfig, SkyRLTrainConfig  # noqa: E402
from skyrl.train.generators.base import TrajectoryID  # noqa: E402
from skyrl.train.generators.utils import (  # noqa: E402
    get_metrics_from_generator_output,
    merge_stepwise_output,
)
from test_skyrl import (  # noqa: E402
    LOGPROB,
    FakeInferenceClient,
    Mirror,
    ScriptedClient,
    batch,
    capped,
    generator_config,
    last_action_cut,
)

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner  # noqa: E402
from agentflow_env.rollout.checks.failures import AdapterError  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec  # noqa: E402

MODES = ("structured", "flat")


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture
def generator(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The generator module with fresh ``AGENTFLOW_*`` settings and shared envs."""
    names = ("ENV_ID", "ENV_KWARGS", "TOKENIZER", "MAX_ACTION_TOKENS", "MAX_TURN_TOKENS")
    for var in (*names, "FAIL_FAST", "SAMPLES", "DUMP_SAMPLES"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    module = importlib.import_module("agentflow_generator")
    monkeypatch.setattr(module, "shared_envs", module.ShapedSharedEnvs())
    return module


class StepMirror(Mirror):
    """The scripted planner on its own env of ``spec``'s task in observation ``mode``."""

    def __init__(
        self, spec: TaskSpec, tokenizer: Any, planner: str = "expert", seed: int = 0, mode: str = ""
    ) -> None:
        self.env = spec.make_env(observation_mode=mode or MODES[0], tokenizer=tokenizer)
        self.session = self.env.new_session(spec.resolve(self.env.task_source), seed=spec.seed)
        self.env.session = self.session  # the scripted planners read env.session
        self.planner = (
            ExpertPlanner(self.env) if planner == "expert" else RandomPlanner(self.env, seed)
        )
        self.tok = self.env.tokenizer
        self.prompts: list[list[int]] = []
        self.actions: list[list[int]] = []


def step_wise_config(**settings: Any) -> Any:
    return generator_config(step_wise_trajectories=True, **settings)


def run(generator: types.ModuleType, tokenizer: Any, client: Any, rows: dict, cfg: Any) -> dict:
    made = generator.AgentFlowGenerator(cfg, SkyRLGymConfig(), client, tokenizer)
    made.retry_delay_s = 0.0
    return asyncio.run(made.generate(rows))


def grouped(specs: list[TaskSpec], groups: str) -> dict:
    """SkyRL's rows: ``groups[i]`` names row ``i``'s prompt, repetitions counted per group."""
    rows = batch(specs)
    seen: dict[str, int] = defaultdict(int)
    ids = []
    for group in groups:
        ids.append(TrajectoryID(group, seen[group]))
        seen[group] += 1
    rows["trajectory_ids"] = ids
    return rows


def trajectories(out: dict) -> list[list[int]]:
    """The row indices of each trajectory, in order (rows of one trajectory are adjacent)."""
    spans: list[list[int]] = []
    for row, trajectory_id in enumerate(out["trajectory_ids"]):
        if not spans or out["trajectory_ids"][spans[-1][0]] != trajectory_id:
            spans.append([])
        spans[-1].append(row)
    return spans


def mirror_of(out: dict, rows: list[int], free: list[StepMirror]) -> StepMirror:
    """A mirror whose actions are this trajectory's responses, taken from ``free`` (copies of
    one planner on one task act alike)."""
    responses = [out["response_ids"][row] for row in rows]
    mirror = next(m for m in free if m.actions == responses)
    free.remove(mirror)
    return mirror


# -- SkyRL's trainer code, compiled from the installed sources -------------------------------------
def compiled(tree: ast.Module, path: Path, names: set[str], namespace: dict[str, Any]) -> None:
    """Compile the functions ``names`` found at the top of ``tree`` or in its classes (methods
    become plain functions of ``self``) into ``namespace``, annotations and decorators dropped."""
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found += [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(n.name for n in found) == sorted(names), f"SkyRL's {path.name} changed"
    for node in found:
        node.returns, node.decorator_list = None, []
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
            arg.annotation = None
    exec(compile(ast.Module(body=list(found), type_ignores=[]), str(path), "exec"), namespace)


@pytest.fixture(scope="module")
def skyrl() -> types.SimpleNamespace:
    """SkyRL's step-wise trainer path: ``validate_generator_output``, the trainer's
    ``postprocess_generator_output`` and ``compute_advantages_and_returns`` (methods of
    ``RayPPOTrainer``, called with a stand-in ``self`` holding a real ``SkyRLTrainConfig``),
    the batch conversion, the GRPO estimator and the mini-batch boundaries."""
    from skyrl.train.generators import base

    root = Path(base.__file__).parents[1]
    backend = root.parent / "backends" / "skyrl_train" / "utils" / "ppo_utils.py"
    logger = logging.getLogger("skyrl")
    ns: dict[str, Any] = {"np": np, "torch": torch, "logger": logger, "defaultdict": defaultdict}
    sources = {
        root / "utils" / "trainer_utils.py": {
            "validate_generator_output",
            "_validate_step_wise_fields",
            "zero_variance_filter",
        },
        root / "dataset" / "preprocess.py": {
            "convert_prompts_responses_to_batch_tensors",
            "_verify_inputs",
            "compute_prompt_mini_batch_boundaries",
            "compute_prompt_boundaries",
        },
        backend: {"compute_advantages_and_returns", "compute_grpo_outcome_advantage"},
    }
    for path, names in sources.items():
        compiled(ast.parse(path.read_text(encoding="utf-8")), path, names, ns)
    # ppo_utils' estimator registry, reduced to the one estimator these tests use
    grpo = ns["compute_grpo_outcome_advantage"]
    ns["AdvantageEstimatorRegistry"] = types.SimpleNamespace(get={"grpo": grpo}.__getitem__)
    trainer: dict[str, Any] = {
        **ns,
        "ppo_utils": types.SimpleNamespace(
            compute_advantages_and_returns=ns["compute_advantages_and_returns"]
        ),
        "get_metrics_from_generator_output": get_metrics_from_generator_output,
        "merge_stepwise_output": merge_stepwise_output,
    }
    path = root / "trainer.py"
    methods = {"postprocess_generator_output", "compute_advantages_and_returns"}
    compiled(ast.parse(path.read_text(encoding="utf-8")), path, methods, trainer)
    return types.SimpleNamespace(
        validate=ns["validate_generator_output"],
        convert=ns["convert_prompts_responses_to_batch_tensors"],
        mini_batches=ns["compute_prompt_mini_batch_boundaries"],
        prompt_boundaries=ns["compute_prompt_boundaries"],
        postprocess=trainer["postprocess_generator_output"],
        advantages=trainer["compute_advantages_and_returns"],
    )


class Batch(dict):
    """The parts of SkyRL's ``TrainingInputBatch`` the advantage step uses."""

    def __init__(self, tensors: dict[str, Any], metadata: dict[str, Any]) -> None:
        super().__init__(tensors)
        self.metadata = metadata

    def to(self, device: str) -> Batch:
        return self


def trainer_config(**algorithm: Any) -> Any:
    cfg = SkyRLTrainConfig()
    cfg.generator.step_wise_trajectories = True
    cfg.generator.n_samples_per_prompt = 2
    for key, value in algorithm.items():
        setattr(cfg.trainer.algorithm, key, value)
    return cfg


def train_step(skyrl: types.SimpleNamespace, out: dict, tokenizer: Any, cfg: Any) -> Any:
    """What SkyRL's trainer does with a step-wise output, in its order: the uids from
    ``trajectory_ids``, ``postprocess_generator_output``, the batch tensors, then
    ``compute_advantages_and_returns``. Returns the batch (``advantages``, ``loss_mask``)."""
    trainer = types.SimpleNamespace(cfg=cfg, all_metrics={})
    uids = [trajectory_id.instance_id for trajectory_id in out["trajectory_ids"]]
    out, uids = skyrl.postprocess(trainer, dict(out), uids)
    _, _, response_mask, rewards, loss_mask, logprobs, _ = skyrl.convert(
        tokenizer,
        out["prompt_token_ids"],
        out["response_ids"],
        out["rewards"],
        out["loss_masks"],
        out["rollout_logprobs"],
    )
    assert logprobs is not None and logprobs.shape == loss_mask.shape
    tensors = {"response_mask": response_mask, "rewards": rewards, "values": None}
    metadata = {
        "uids": uids,
        "is_last_step": out["is_last_step"],
        "avg_response_length": float(response_mask.sum(-1).float().mean()),
    }
    data = skyrl.advantages(trainer, Batch({**tensors, "loss_mask": loss_mask}, metadata))
    return data


def grpo(rewards: list[float]) -> list[float]:
    """GRPO's advantages of a group of two or more (SkyRL's: unbiased std, epsilon 1e-6)."""
    assert len(rewards) > 1
    values = torch.tensor(rewards)
    return [float(v) for v in (values - values.mean()) / (values.std() + 1e-6)]


# -- the rows ---------------------------------------------------------------------------------------
def test_one_row_per_planner_turn_on_the_prompt_it_acted_on(generator, hf_tokenizer, skyrl):
    specs = [spec_for(1), spec_for(1), spec_for(3), spec_for(3), spec_for(0)]
    planners = ["expert", "random", "expert", "expert", "random"]
    mirrors = [
        StepMirror(spec, hf_tokenizer, planner, seed=1)
        for spec, planner in zip(specs, planners, strict=True)
    ]
    client = ScriptedClient(mirrors)
    rows = grouped(specs, "aabbc")
    out = run(generator, hf_tokenizer, client, rows, step_wise_config())
    skyrl.validate(len(specs), out, step_wise=True)  # SkyRL's own check, step-wise fields too
    spans = trajectories(out)
    assert len(spans) == len(specs) and len(out["response_ids"]) > len(specs)
    # the engine's requests per session, in order: each turn's prompt ids as sent
    sent: dict[Any, list[list[int]]] = defaultdict(list)
    for request, _ in client.requests:
        sent[request["session_ids"][0]].append(list(request["prompt_token_ids"][0]))
    by_mirror = {id(m): sent[s] for s, m in client.by_session.items()}
    assert [out["trajectory_ids"][span[0]] for span in spans] == rows["trajectory_ids"]
    free = list(mirrors)
    for span in spans:
        mirror = mirror_of(out, span, free)
        turns = mirror.session.trajectory().turns
        assert len(span) == len(turns) == len(mirror.actions) >= 1
        prompts = [out["prompt_token_ids"][row] for row in span]
        assert prompts == [list(turn.prompt_ids) for turn in turns]  # the env's observations
        assert prompts == by_mirror[id(mirror)]  # exactly what the engine sampled from
        for row, turn in zip(span, turns, strict=True):
            assert out["response_ids"][row] == list(turn.action_ids)
            assert out["loss_masks"][row] == [1] * len(turn.action_ids)
            assert out["rollout_logprobs"][row] == [LOGPROB] * len(turn.action_ids)
            assert out["rewards"][row] == mirror.session.outcome.reward  # on every step
            assert out["rewards"][row] == 1.0 or isinstance(mirror.planner, RandomPlanner)
            assert out["stop_reasons"][row] == "stop"
        assert [out["is_last_step"][row] for row in span] == [False] * (len(span) - 1) + [True]
    long = next(span for span in spans if len(span) > 1)
    first = out["prompt_token_ids"][long[0]] + out["response_ids"][long[0]]
    assert out["prompt_token_ids"][long[1]][: len(first)] != first  # rebuilt, not appended to
    assert 0.0 in out["rewards"]  # a random trajectory failed
    metrics = out["rollout_metrics"]  # over trajectories, not rows
    success = sum(m.session.outcome.success for m in mirrors) / len(mirrors)
    assert metrics["environment/agentflow/success"] == pytest.approx(success)


@pytest.mark.parametrize("mode", MODES)
def test_the_env_kwargs_may_name_flat_observations(
    generator, hf_tokenizer, skyrl, monkeypatch, mode
):
    monkeypatch.setenv("AGENTFLOW_ENV_KWARGS", f'{{"observation_mode": "{mode}"}}')
    spec = spec_for(3)
    mirror = StepMirror(spec, hf_tokenizer, "expert", mode=mode)
    client = FakeInferenceClient([mirror], as_text=False)
    out = run(generator, hf_tokenizer, client, grouped([spec], "a"), step_wise_config())
    turns = mirror.session.trajectory().turns
    assert out["prompt_token_ids"] == [list(turn.prompt_ids) for turn in turns]
    # SkyRL's prefix-aware merging (generator.merge_stepwise_output) rebuilds the env's flat
    # sample from flat observations' rows and leaves structured ones as they are. (It checks its
    # result with validate_generator_output, whose module needs the GPU stack: the compiled one.)
    checks = types.SimpleNamespace(validate_generator_output=skyrl.validate)
    monkeypatch.setitem(sys.modules, "skyrl.train.utils.trainer_utils", checks)
    merged = merge_stepwise_output(out)
    if mode == "flat":
        flat = mirror.session.trajectory().flat_sample()
        assert merged["prompt_token_ids"][0] + merged["response_ids"][0] == flat.input_ids
        assert merged["loss_masks"] == [flat.completion_mask] and merged["is_last_step"] == [True]
    else:
        assert merged["prompt_token_ids"] == out["prompt_token_ids"] and len(turns) > 1


# -- what SkyRL's trainer does with them ------------------------------------------------------------
def test_every_step_gets_its_trajectorys_group_advantage(generator, hf_tokenizer, skyrl):
    specs = [spec_for(1), spec_for(1), spec_for(1), spec_for(3), spec_for(3)]
    planners = ["expert", "random", "random", "expert", "expert"]
    mirrors = [
        StepMirror(spec, hf_tokenizer, planner, seed=i)
        for i, (spec, planner) in enumerate(zip(specs, planners, strict=True))
    ]
    out = run(
        generator,
        hf_tokenizer,
        ScriptedClient(mirrors),
        grouped(specs, "aaabb"),
        step_wise_config(),
    )
    spans = trajectories(out)
    data = train_step(skyrl, out, hf_tokenizer, trainer_config())
    advantages, mask = data["advantages"], data["response_mask"]
    rewards = {tuple(span): out["rewards"][span[-1]] for span in spans}
    group_a = [rewards[tuple(span)] for span in spans[:3]]
    assert len(set(group_a)) > 1, "the test needs a group with unequal rewards"
    expected = grpo(group_a) + grpo([rewards[tuple(span)] for span in spans[3:]])
    # Normalised over trajectories (their last steps), not over all steps: the two differ here.
    lengths = [len(span) for span in spans[:3]]
    per_step = grpo([r for r, n in zip(group_a, lengths, strict=True) for _ in range(n)])
    assert sorted(set(per_step)) != sorted(set(grpo(group_a)))
    for span, value in zip(spans, expected, strict=True):
        for row in span:
            row_values = advantages[row][mask[row].bool()]
            assert row_values.numel() == len(out["response_ids"][row])
            assert torch.allclose(row_values, torch.full_like(row_values, value), atol=1e-5)
            assert advantages[row][~mask[row].bool()].abs().sum() == 0  # prompt, padding
    assert data.metadata["metrics"]["avg_final_rewards"] == pytest.approx(
        sum(rewards.values()) / len(spans)  # SkyRL averages the last steps' rewards
    )


def test_skyrls_check_refuses_last_step_flags_off_the_boundaries(generator, hf_tokenizer, skyrl):
    """The advantage broadcast maps steps to trajectories by ``is_last_step``; SkyRL's output
    check refuses a flag that does not end a trajectory."""
    specs = [spec_for(3), spec_for(3)]
    mirrors = [
        StepMirror(spec, hf_tokenizer, p, seed=2)
        for spec, p in zip(specs, ["expert", "random"], strict=True)
    ]
    out = run(
        generator, hf_tokenizer, ScriptedClient(mirrors), grouped(specs, "aa"), step_wise_config()
    )
    spans = trajectories(out)
    assert len(spans[0]) > 1
    broken = {**out, "is_last_step": [True] + out["is_last_step"][1:]}
    with pytest.raises(AssertionError, match="is_last_step"):
        skyrl.validate(2, broken, step_wise=True)


def test_mini_batches_keep_each_prompts_steps_together(generator, hf_tokenizer, skyrl):
    specs = [spec_for(1), spec_for(1), spec_for(3), spec_for(3), spec_for(0), spec_for(0)]
    planners = ["expert", "random"] * 3
    mirrors = [
        StepMirror(spec, hf_tokenizer, planner, seed=i)
        for i, (spec, planner) in enumerate(zip(specs, planners, strict=True))
    ]
    out = run(
        generator,
        hf_tokenizer,
        ScriptedClient(mirrors),
        grouped(specs, "aabbcc"),
        step_wise_config(),
    )
    uids = [trajectory_id.instance_id for trajectory_id in out["trajectory_ids"]]
    ends = [i + 1 for i in range(len(uids)) if i + 1 == len(uids) or uids[i + 1] != uids[i]]
    assert skyrl.prompt_boundaries(uids) == list(zip([0, *ends[:-1]], ends, strict=True))
    # One prompt per mini-batch: each spans its prompt's rows, however many steps they hold.
    boundaries = skyrl.mini_batches(uids, 1, 3, True, 2)
    assert boundaries == list(zip([0, *ends[:-1]], ends, strict=True))
    assert len({end - start for start, end in boundaries}) > 1  # rows per mini-batch vary
    assert skyrl.mini_batches(uids, 3, 3, True, 2) == [(0, len(uids))]
    with pytest.raises(AssertionError):  # without step-wise, SkyRL expects 2 rows per prompt
        skyrl.mini_batches(uids, 1, 3, False, 2)


def test_zero_variance_filter_sees_the_trajectory_reward_on_every_step(
    generator, hf_tokenizer, skyrl
):
    specs = [spec_for(3), spec_for(3), spec_for(1), spec_for(1)]
    planners = ["expert", "expert", "expert", "random"]
    mirrors = [
        StepMirror(spec, hf_tokenizer, planner, seed=1)
        for spec, planner in zip(specs, planners, strict=True)
    ]
    out = run(
        generator, hf_tokenizer, ScriptedClient(mirrors), grouped(specs, "aabb"), step_wise_config()
    )
    spans = trajectories(out)
    assert len(spans[0]) > 1 and out["rewards"][spans[0][-1]] == out["rewards"][spans[1][-1]]
    assert out["rewards"][spans[2][-1]] != out["rewards"][spans[3][-1]]
    data = train_step(skyrl, out, hf_tokenizer, trainer_config(zero_variance_filter=True))
    for span in spans[:2]:  # group a: equal rewards, no signal: every step masked
        assert all(data["loss_mask"][row].sum() == 0 for row in span)
    for span in spans[2:]:
        assert all(data["loss_mask"][row].sum() == len(out["response_ids"][row]) for row in span)


# -- failures and budgets ---------------------------------------------------------------------------
def test_failed_trajectories_are_reward_0_rows(generator, hf_tokenizer, skyrl):
    specs = [spec_for(3), spec_for(1), spec_for(0)]  # distinct first prompts: known mirrors
    mirrors = [StepMirror(spec, hf_tokenizer, "expert") for spec in specs[:2]]
    aborted = {"responses": [""], "response_ids": [[]], "stop_reasons": ["abort"]}

    def answer(mirror: StepMirror | None, call: int) -> dict | None:
        return aborted if call >= 1 and mirror is mirrors[1] else None  # after one turn

    rows = grouped(specs, "aab")
    rows["env_extras"][2] = {"label": "not json"}
    out = run(generator, hf_tokenizer, ScriptedClient(mirrors, answer), rows, step_wise_config())
    skyrl.validate(3, out, step_wise=True)
    spans = trajectories(out)
    ends = [out["stop_reasons"][span[-1]] for span in spans]
    assert ends == ["stop", "abort", "error"]
    assert len(spans[1]) == 1 and out["rewards"][spans[1][0]] == 0.0  # the turn it had
    assert out["response_ids"][spans[1][0]] == mirrors[1].actions[0]
    (failed,) = spans[2]
    assert out["rewards"][failed] == 0.0 and out["loss_masks"][failed] == [0]
    assert out["is_last_step"][failed] is True and out["env_metrics"][failed]["error"] == 1.0
    assert out["rewards"][spans[0][-1]] == 1.0
    train_step(skyrl, out, hf_tokenizer, trainer_config())  # SkyRL trains on the batch


def test_each_turns_prompt_and_action_are_checked_against_skyrls_limits(
    generator, hf_tokenizer, skyrl
):
    spec = spec_for(3)
    probe = StepMirror(spec, hf_tokenizer)  # the first two prompts, with an 8-token first action
    first = len(asyncio.run(probe.first_prompt()))
    asyncio.run(probe.sample(8, as_text=False))
    second = len(probe.session.observation.token_ids)
    assert first < second
    mirror = StepMirror(spec, hf_tokenizer)
    client = ScriptedClient([mirror])
    cfg = step_wise_config(max_input_length=second - 1, per_turn=8)
    out = run(generator, hf_tokenizer, client, grouped([spec], "a"), cfg)
    # turn 2's prompt is one token over max_input_length: the episode ends before it (a budget
    # over the whole sequence would have let it sample 7 tokens), reward 0, stop reason "length"
    assert [r[0]["sampling_params"]["max_tokens"] for r in client.requests] == [8]
    assert [len(ids) for ids in out["response_ids"]] == [8] and not mirror.session.done
    assert out["rewards"] == [0.0] and out["stop_reasons"] == ["length"]
    assert out["is_last_step"] == [True]
    roomy = StepMirror(capped(spec, 3), hf_tokenizer)  # as the env capped at max_turns=3
    client = ScriptedClient([roomy])
    cfg = step_wise_config(max_input_length=8192, per_turn=8, max_turns=3)
    out = run(generator, hf_tokenizer, client, grouped([spec], "a"), cfg)
    # every turn may sample its full 8 tokens: the limit is per turn, not per trajectory
    assert [r[0]["sampling_params"]["max_tokens"] for r in client.requests] == [8, 8, 8]
    assert len(out["response_ids"]) == 3 and out["is_last_step"] == [False, False, True]


@pytest.mark.parametrize(("zero", "filtering"), [(False, False), (True, True)])
def test_stop_reason_settings_act_on_the_whole_trajectory(
    generator, hf_tokenizer, skyrl, zero, filtering
):
    """``zero_reward_on_non_stop`` and ``apply_overlong_filtering`` on a trajectory whose last
    action the engine cut: every step carries the trajectory's stop reason."""
    specs = [spec_for(3), spec_for(3)]
    mirrors = [StepMirror(spec, hf_tokenizer) for spec in specs]
    cfg = step_wise_config(zero_reward_on_non_stop=zero, apply_overlong_filtering=filtering)
    client = ScriptedClient(mirrors, last_action_cut)
    out = run(generator, hf_tokenizer, client, grouped(specs, "aa"), cfg)
    assert out["stop_reasons"] == ["length"] * len(out["response_ids"]) > []
    assert out["rewards"] == [0.0 if zero else 1.0] * len(out["response_ids"])
    masks = [[0 if filtering else 1] * len(ids) for ids in out["response_ids"]]
    assert out["loss_masks"] == masks and len(masks) > 2
    skyrl.validate(2, out, step_wise=True)


# -- the shape setting ------------------------------------------------------------------------------
def test_skyrls_step_wise_flag_picks_the_shape(generator, hf_tokenizer):
    client = FakeInferenceClient([], as_text=False)
    made = generator.AgentFlowGenerator(step_wise_config(), SkyRLGymConfig(), client, hf_tokenizer)
    assert made.shape == "turns"
    config = generator.shared_envs("turns").config
    assert config.samples == "turns"
    assert config.plan(spec_for(0).to_json()).observation_mode == "structured"
    flat = generator.AgentFlowGenerator(generator_config(), SkyRLGymConfig(), client, hf_tokenizer)
    assert flat.shape == "flat"
    assert (
        generator.shared_envs("flat").config.plan(spec_for(0).to_json()).observation_mode == "flat"
    )


@pytest.mark.parametrize(
    ("named", "step_wise", "refused"),
    [
        ("turns", False, "AGENTFLOW_SAMPLES=turns but generator.step_wise_trajectories=false"),
        ("flat", True, "AGENTFLOW_SAMPLES=flat but generator.step_wise_trajectories=true"),
        ("steps", True, "names no sample shape"),
        ("turns", True, None),
        ("flat", False, None),
    ],
)
def test_agentflow_samples_must_agree_with_the_flag(
    generator, hf_tokenizer, monkeypatch, named, step_wise, refused
):
    monkeypatch.setenv("AGENTFLOW_SAMPLES", named)
    cfg = generator_config(step_wise_trajectories=step_wise)
    client = FakeInferenceClient([], as_text=False)
    if refused is None:
        made = generator.AgentFlowGenerator(cfg, SkyRLGymConfig(), client, hf_tokenizer)
        assert made.shape == named
        return
    with pytest.raises(AdapterError, match=refused):
        generator.AgentFlowGenerator(cfg, SkyRLGymConfig(), client, hf_tokenizer)


@pytest.mark.parametrize(("named", "refused"), [("turns", True), ("flat", False), ("", False)])
def test_the_text_env_takes_no_turn_samples(generator, named, refused):
    check = importlib.import_module("step_wise").check_text_env_shape
    if refused:
        with pytest.raises(AdapterError, match="--text-env"):
            check({"AGENTFLOW_SAMPLES": named})
    else:
        check({"AGENTFLOW_SAMPLES": named})


def test_step_wise_rows_need_the_batchs_trajectory_ids(generator, hf_tokenizer):
    spec = spec_for(0)
    client = FakeInferenceClient([StepMirror(spec, hf_tokenizer)], as_text=False)
    with pytest.raises(AdapterError, match="trajectory_ids"):
        run(generator, hf_tokenizer, client, batch([spec]), step_wise_config())
    assert client.by_session == {}  # refused before any trajectory ran
