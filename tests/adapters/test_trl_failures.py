"""TRL adapter: what goes wrong in one episode stays in that episode.

- Log-probs that TRL's vLLM path reports as ``None`` (a whole batch, one sequence, or one
  token), NaN, or misaligned, never crash a rollout: those policy tokens carry NaN, which TRL
  treats as unscorable, and the trainer's loss stays finite.
- An episode that raises (a label that names no task, an env that cannot be built, a task that
  cannot be loaded, an exception mid-episode) ends as a logged zero-reward sample whose reason
  is recorded; the other episodes and TRL's training step go on.
"""

from __future__ import annotations

import json
import logging
import math
import os
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from test_trl import cpu_grpo_config, rollout, tiny_model  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.envs.env import AgentFlowEnv  # noqa: E402
from agentflow_env.rollout import EnvPool, build_env, plan_episode  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec  # noqa: E402

NAN = float("nan")
LOGGER = "agentflow_env.adapters.trl"
NONSENSE = "Tool Name: Nothing"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


def make_trainer(tokenizer: Any, out: Any, prompts: list[Any], generations: int, **config: Any):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(2)
    seen: list[dict[str, list]] = []
    rollout_func = rollout.make_rollout_func({"max_turns": 3}, max_action_tokens=8)

    def recording_rollout(batch: list[Any], trainer: Any) -> dict[str, list]:
        output = rollout_func(batch, trainer)
        seen.append(output)
        return output

    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=rollout.env_reward,
        args=cpu_grpo_config(
            out,
            per_device_train_batch_size=len(prompts) * generations,
            num_generations=generations,
            max_steps=1,
            learning_rate=1e-4,
            beta=0.0,
            loss_type="grpo",  # what the examples train with
            **config,
        ),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        rollout_func=recording_rollout,
    )
    return trainer, seen


def action_spans(mask: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of planner tokens (one per turn)."""
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True)
    )


# -- log-probs ------------------------------------------------------------------------------------
def test_missing_and_nan_logprobs_are_recorded_as_nan(tokenizer: Any) -> None:
    action = tokenizer.encode(NONSENSE, add_special_tokens=False) + [tokenizer.eos_token_id]
    n = len(action)
    known = [-0.25] * n
    # Per turn, what generate reports for episodes 0, 1, 2, and what each should record.
    turns = [
        (None, [[NAN] * n] * 3),  # no log-probs at all (vLLM without logprobs)
        (
            [None, [None, *known[1:]], known[:-1]],  # a sequence, a token, misaligned
            [[NAN] * n, [NAN, *known[1:]], [NAN] * n],
        ),
        ([[NAN, *known[1:]], [[-0.25]] * n, known], [[NAN, *known[1:]], known, known]),
    ]
    calls = iter(turns)

    def generate(prompts: list[list[int]], max_new_tokens: int):
        reported, _ = next(calls)
        return [list(action) for _ in prompts], reported

    specs = [(i, {"hops": 1, "max_turns": 3}) for i in range(3)]
    results = rollout.run_episodes(specs, generate, tokenizer, pool=EnvPool())
    assert [r.error for r in results] == [None] * 3 and [r.turns for r in results] == [3] * 3
    for episode, result in enumerate(results):
        assert len(result.logprobs) == len(result.completion_ids) == len(result.env_mask)
        spans = action_spans(result.env_mask)
        assert len(spans) == 3
        for turn, (start, end) in enumerate(spans):
            assert same(result.logprobs[start:end], turns[turn][1][episode]), (episode, turn)
        feedback = [lp for lp, m in zip(result.logprobs, result.env_mask, strict=True) if not m]
        assert feedback and all(lp == 0.0 for lp in feedback)


def test_vllm_logprobs_none_become_nan() -> None:
    """TRL's ``VLLMGeneration.generate`` returns ``(prompt_ids, completion_ids, logprobs,
    logprob_token_ids)`` with per-token ``[sampled, ...]`` lists, ``None`` for a NaN token, or no
    log-probs at all (``None``). vLLM needs a GPU, so a stand-in engine returns those shapes."""
    answers: list[Any] = [[[[-0.5], [None]]], None]  # one sequence of two tokens, then none

    def engine_generate(prompts: list[list[int]], images: Any, num_generations: int):
        assert engine.max_completion_length == 7  # the per-turn cap, set for the call
        return prompts, [[5, 6]] * len(prompts), answers.pop(0), None

    engine = SimpleNamespace(max_completion_length=512, generate=engine_generate)
    generate = rollout.trainer_generate(SimpleNamespace(use_vllm=True, vllm_generation=engine))
    ids, logprobs = generate([[1, 2]], 7)
    assert ids == [[5, 6]] and logprobs is not None and same(list(logprobs[0]), [-0.5, NAN])
    assert generate([[1, 2]], 7) == ([[5, 6]], None)
    assert engine.max_completion_length == 512


def test_trainer_consumes_nan_logprobs(tokenizer: Any, tmp_path: Any) -> None:
    """Through TRL's own batch building and loss, with the off-policy mask reading them."""
    trainer, seen = make_trainer(
        tokenizer, tmp_path, [rollout.task_prompt(0)], 4, off_policy_mask_threshold=0.5
    )
    assert rollout.trainer_lockstep(trainer) is None  # one process: no collective
    real_generate = rollout.trainer_generate

    def dropping(trainer: Any, greedy: bool = False) -> Any:
        generate = real_generate(trainer, greedy=greedy)

        def call(prompts: list[list[int]], max_new_tokens: int):
            ids, logprobs = generate(prompts, max_new_tokens)
            rows: list[Any] = [list(lp) for lp in logprobs]
            rows[0] = None  # unknown for a whole sequence
            rows[1][0] = None  # one unscorable token
            return ids, rows

        return call

    captured: list[tuple[dict[str, Any], Any]] = []
    compute_loss = trainer.compute_loss

    def capturing(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        loss = compute_loss(model, inputs, *args, **kwargs)
        captured.append((inputs, loss.detach()))
        return loss

    trainer.compute_loss = capturing
    rollout.trainer_generate = dropping
    try:
        trainer.train()
    finally:
        rollout.trainer_generate = real_generate
    (output,) = seen
    # Every turn: episode 0's log-probs are unknown, episode 1's first token is, the rest known.
    for episode, (logprobs, mask) in enumerate(
        zip(output["logprobs"], output["env_mask"], strict=True)
    ):
        for start, end in action_spans(mask):
            nan = [math.isnan(x) for x in logprobs[start:end]]
            expected = [episode == 0] * len(nan)
            expected[0] = episode in (0, 1)
            assert nan == expected, episode
    # TRL's batch (shuffled) carries exactly these values, NaN included.
    (batch, loss), *_ = captured
    rows = []
    sampled = batch["sampling_per_token_logps"]
    for ids, logps in zip(batch["completion_ids"].tolist(), sampled, strict=True):
        row = [
            i
            for i, c in enumerate(output["completion_ids"])
            if ids[: len(c)] == c and same(logps[: len(c)].tolist(), output["logprobs"][i])
        ]
        rows.append(row[0] if row else None)
    assert None not in rows and sorted(rows) == [0, 1, 2, 3]
    assert torch.isfinite(loss)
    entry = next(e for e in trainer.state.log_history if "loss" in e)
    assert math.isfinite(entry["loss"]) and math.isfinite(entry["grad_norm"])


# -- failing episodes -----------------------------------------------------------------------------
def test_failing_episodes_become_logged_zero_reward_samples(
    tokenizer: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    missing = tmp_path / "missing-corpus.jsonl"
    prompts = [
        rollout.task_prompt(0),  # fine
        "this is not a task spec",  # the label
        rollout.task_prompt(1, tools=["Search", "NoSuchTool"]),  # the env cannot be built
        TaskSpec(
            env_id="AgentFlow-Search-v0",
            record={"question": "Who?", "gold_answers": ["x"], "corpus": str(missing)},
        ).to_json(),  # the task cannot be loaded
        rollout.task_prompt(2),  # the env raises on its second step (injected below)
    ]
    broken_question = plan_episode(prompts[4], default_env_kwargs=rollout.DEFAULT_ENV_KWARGS)
    env = build_env(broken_question, tokenizer)
    question = broken_question.spec.resolve(env.task_source).question
    real_step = AgentFlowEnv.step

    def faulty_step(self: AgentFlowEnv, action: Any) -> Any:
        session = self.session
        if session is not None and session.task.question == question and session.turn >= 1:
            raise RuntimeError("injected env fault")
        return real_step(self, action)

    monkeypatch.setattr(AgentFlowEnv, "step", faulty_step)
    trainer, seen = make_trainer(tokenizer, tmp_path / "grpo", prompts, 2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.train()  # must not raise

    (output,) = seen
    eos = tokenizer.eos_token_id
    errors = output["error"]
    assert errors[0:2] == ["", ""]
    failed = {1: "label: TaskSpecError", 2: "NoSuchTool", 3: "missing-corpus", 4: "injected"}
    for prompt_index, needle in failed.items():
        for row in (2 * prompt_index, 2 * prompt_index + 1):
            assert needle in errors[row], (row, errors[row])
            assert output["env_reward"][row] == 0.0 and output["failed"][row] == 1.0
            assert output["completion_ids"][row] == [eos] and output["env_mask"][row] == [0]
    # Stages: the label and the env fail before any step; the injected fault after one turn,
    # so that sample keeps the episode's own first prompt.
    assert errors[4].startswith("env: ") and errors[6].startswith("reset: ")
    assert errors[8].startswith("step: ") and output["turns"][8] == 1
    assert output["prompt_ids"][8] == output["prompt_ids"][9] != [eos]
    assert output["prompt_ids"][2] == [eos]
    # Each failure was logged as a warning naming its reason.
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    for needle in failed.values():
        assert sum(needle in message for message in logged) == 2, needle
    # TRL's step went through: finite loss, the env's rewards, the failure rate logged.
    entry = next(e for e in trainer.state.log_history if "loss" in e)
    assert math.isfinite(entry["loss"]) and math.isfinite(entry["grad_norm"])
    assert entry["reward"] == pytest.approx(sum(output["env_reward"]) / 10)
    assert entry["env/failed"] == pytest.approx(0.8)


def test_a_discarded_env_is_replaced(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An env that raised is dropped from the pool; the next batch builds a fresh one."""
    pool = EnvPool()
    action = tokenizer.encode(NONSENSE, add_special_tokens=False) + [tokenizer.eos_token_id]

    def generate(prompts: list[list[int]], max_new_tokens: int):
        return [list(action) for _ in prompts], None

    specs = [(0, {"hops": 1, "max_turns": 2})]
    real_step = AgentFlowEnv.step
    monkeypatch.setattr(AgentFlowEnv, "step", lambda self, a: (_ for _ in ()).throw(OSError("x")))
    (failed,) = rollout.run_episodes(specs, generate, tokenizer, pool=pool)
    assert failed.error == "step: OSError: x" and failed.reward == 0.0
    assert [len(envs) for envs in pool._envs.values()] == [0]
    monkeypatch.setattr(AgentFlowEnv, "step", real_step)
    (ok,) = rollout.run_episodes(specs, generate, tokenizer, pool=pool)
    assert ok.error is None and ok.turns == 2
    assert ok.prompt_ids == failed.prompt_ids  # the same task, now run to its end
    assert json.loads(json.dumps(rollout.rollout_output([failed, ok])))["failed"] == [1.0, 0.0]


def test_an_episode_with_no_completion_tokens_is_a_failed_sample(tokenizer: Any) -> None:
    """An empty completion is an invalid action with no ids; an episode of only that has no
    completion tokens, which TRL cannot take (it reads the last one), so it becomes a failed
    sample. With a second turn the feedback between them is kept: a valid, fully masked sample."""

    def generate(prompts: list[list[int]], max_new_tokens: int):
        return [[] for _ in prompts], [[] for _ in prompts]

    specs = [(0, {"hops": 1, "max_turns": 1}), (0, {"hops": 1, "max_turns": 2})]
    one, two = rollout.run_episodes(specs, generate, tokenizer, pool=EnvPool())
    assert one.error is not None and "no completion tokens" in one.error
    assert one.completion_ids == [tokenizer.eos_token_id] and one.env_mask == [0]
    assert two.error is None and two.completion_ids and set(two.env_mask) == {0}
    assert len(two.logprobs) == len(two.completion_ids)
