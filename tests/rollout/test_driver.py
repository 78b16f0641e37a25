"""The trainer-neutral rollout core, without a trainer (and, but for the last test, without torch).

- The batched driver: one generate call per turn over the live episodes; with a "max across
  ranks" collective every call is padded to the largest live count (a fake generate records
  the batches), and padded rows never reach an env.
- The env pool: envs shared per (env id, kwargs, tokenizer), one tokenizer wrapper, one task per
  label, the same pool serving batched episodes and concurrent sessions.
- The token check: which segment of the env's flat sequence differs from a trainer's, and why.
- The one log-prob definition of ``hf_generation`` (torch and transformers, when installed).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.rollout.checks.failures import episode_logs, failure_reason, filler_token_id
from agentflow_env.rollout.checks.token_check import (
    MismatchHints,
    TokenMismatchError,
    TrainerSequence,
    describe_mismatch,
)
from agentflow_env.rollout.labels.plans import AdapterConfig, plan_episode, task_prompt
from agentflow_env.rollout.labels.spec import TaskSpec, TaskSpecError, synthetic_specs
from agentflow_env.rollout.training.driver import EpisodeResult, run_episodes
from agentflow_env.rollout.training.pool import EnvPool, SharedEnvs
from agentflow_env.rollout.training.vllm_outputs import (
    action_logprobs,
    capped_params,
    read_request_output,
)

TOK = load_default_tokenizer()
NONSENSE = TOK.encode("I am not sure what to do.") + [TOK.eos_token_id]
HINTS = MismatchHints("Trainer", "tok", "use the same tokenizer", "raise the maximum length")


def nonsense_generate(calls: list[list[list[int]]]):
    """A generate that records each batch and answers every prompt with an invalid action."""

    def generate(prompts: Any, max_new_tokens: int):
        calls.append([list(p) for p in prompts])
        return [list(NONSENSE) for _ in prompts], [[-0.5] * len(NONSENSE) for _ in prompts]

    return generate


# -- the batched driver ------------------------------------------------------------------------
SPECS = [(10 + i, {"hops": 1, "max_turns": turns}) for i, turns in enumerate((1, 2, 3))]


def test_without_lockstep_each_call_holds_the_live_episodes() -> None:
    calls: list[list[list[int]]] = []
    results = run_episodes(SPECS, nonsense_generate(calls), TOK, pool=EnvPool())
    assert [len(batch) for batch in calls] == [3, 2, 1]
    assert [r.turns for r in results] == [1, 2, 3] and all(r.error is None for r in results)
    for result in results:
        assert len(result.completion_ids) == len(result.env_mask) == len(result.logprobs)
        planner = [lp for lp, m in zip(result.logprobs, result.env_mask, strict=True) if m]
        assert planner == [-0.5] * len(NONSENSE) * result.turns


@pytest.mark.parametrize(
    ("other_rank", "widths"),
    [
        ([4, 1, 1, 2, 0], [4, 2, 1, 2]),  # a busier rank: pad up, keep going after the end
        ([0, 0, 0, 0], [3, 2, 1]),  # an idle rank: this rank's own live counts
        ([5, 5, 5, 5, 5, 0], [5, 5, 5, 5, 5]),  # the other rank outlives this one
    ],
)
def test_lockstep_pads_every_call_to_the_max_across_ranks(
    other_rank: list[int], widths: list[int]
) -> None:
    calls: list[list[list[int]]] = []
    live_counts: list[int] = []
    others = iter(other_rank)

    def max_across_ranks(live: int) -> int:
        live_counts.append(live)
        return max(live, next(others))

    pool = EnvPool()
    results = run_episodes(
        SPECS, nonsense_generate(calls), TOK, pool=pool, lockstep=max_across_ranks
    )
    assert [len(batch) for batch in calls] == widths
    assert live_counts == [3, 2, 1] + [0] * (len(widths) - 3 + 1)  # asked until all ranks end
    # Padding rows are copies of the shortest first prompt; the live rows come first.
    padding = min((r.prompt_ids for r in results), key=len)
    for batch, live in zip(calls, live_counts, strict=False):
        assert all(row == padding for row in batch[live:])
    # Padding changed nothing: the same episodes as without lockstep.
    assert [r.turns for r in results] == [1, 2, 3] and all(r.error is None for r in results)
    unsynced = run_episodes(SPECS, nonsense_generate([]), TOK, pool=pool)
    assert [r.completion_ids for r in unsynced] == [r.completion_ids for r in results]


def test_lockstep_below_the_live_count_and_short_generate_outputs_raise() -> None:
    with pytest.raises(RuntimeError, match="lockstep returned 1 for 3 live episodes"):
        run_episodes(SPECS, nonsense_generate([]), TOK, pool=EnvPool(), lockstep=lambda n: 1)

    def short(prompts: Any, max_new_tokens: int):
        return [list(NONSENSE)], None

    with pytest.raises(RuntimeError, match="generate returned 1 completions"):
        run_episodes(SPECS, short, TOK, pool=EnvPool())


def test_a_failing_label_is_a_zero_reward_sample_and_the_rest_go_on() -> None:
    labels = ["not a label", task_prompt(3, hops=1, max_turns=1)]
    calls: list[list[list[int]]] = []
    failed, ok = run_episodes(labels, nonsense_generate(calls), TOK, pool=EnvPool())
    assert isinstance(failed, EpisodeResult) and failed.failed
    assert failed.error is not None and failed.error.startswith("label: TaskSpecError")
    assert failed.completion_ids == [TOK.eos_token_id] and failed.env_mask == [0]
    assert failed.reward == 0.0 and ok.error is None and [len(b) for b in calls] == [1]


def test_log_probs_as_generators_report_them() -> None:
    assert all(math.isnan(x) for x in action_logprobs(None, 2))
    assert action_logprobs([[-0.5, -1.0], None], 2)[0] == -0.5
    assert math.isnan(action_logprobs([[-0.5], None], 2)[1])
    assert all(math.isnan(x) for x in action_logprobs([-0.5], 2))  # misaligned


# -- the env pool ------------------------------------------------------------------------------
def test_the_pool_shares_envs_tokenizers_and_tasks() -> None:
    pool = EnvPool()
    label = task_prompt(7, hops=1, max_turns=2)
    plan = plan_episode(label)
    first, second = pool.envs(plan, TOK, 2)
    assert first is not second and pool.envs(plan, TOK, 1) == [first]
    assert first.tokenizer is second.tokenizer  # one wrapper for the tokenizer
    assert pool.task(plan, first) is pool.task(plan_episode(label), second)  # one task per label
    # Same env id and kwargs: the same envs, whatever the label form; other kwargs: other envs.
    same = plan_episode(TaskSpec.from_json(label))
    assert pool.env(same, TOK) is first
    other = plan_episode(task_prompt(7, hops=1, max_turns=3))
    assert pool.env(other, TOK) is not first
    # A discarded env is replaced by a fresh one.
    pool.discard(first)
    assert pool.env(plan, TOK) is second and first not in pool.envs(plan, TOK, 2)


def test_kwargs_no_env_accepts_leave_no_entry() -> None:
    pool = EnvPool()
    with pytest.raises(ValueError):
        pool.env(plan_episode(task_prompt(1, max_turns=0)), TOK)
    assert pool._envs == {}  # nothing was built, so nothing is keyed
    with pytest.raises(TaskSpecError, match="adapter sets itself"):
        plan_episode(task_prompt(1, observation_mode="structured"))


def test_batched_episodes_and_sessions_share_one_pool() -> None:
    """OpenRLHF-style sessions (config from the environment) and TRL-style batched episodes."""
    pool = EnvPool(tokenizer=TOK)
    spec, task = next(iter(synthetic_specs(1, hops=1, seed=2)))
    config = AdapterConfig.from_environ({"AGENTFLOW_MAX_ACTION_TOKENS": "32"})
    shared = SharedEnvs(config, pool)
    one, two = shared.new_session(spec.to_json()), shared.new_session(spec)
    assert one.task is two.task and one.task.question == task.question
    assert one.tools is two.tools  # both on the one shared env
    env = shared.env(spec)
    assert env.session_config.max_action_tokens == 32 and one.config is env.session_config
    assert shared.tokenizer() is env.tokenizer is pool.tokenizer()
    # The batched driver on the same pool and tokenizer builds its own envs per episode.
    (result,) = run_episodes([spec], nonsense_generate([]), None, pool=pool)
    assert result.error is None


# -- the token check ---------------------------------------------------------------------------
def stepped(action_ids: list[int], max_action_tokens: int = 2048) -> TrainerSequence:
    """A trainer sequence whose session took one turn with ``action_ids``."""
    pool = EnvPool(tokenizer=TOK)
    spec = TaskSpec(env_kwargs={"hops": 1, "max_action_tokens": max_action_tokens}, seed=4)
    session = SharedEnvs(AdapterConfig(), pool).new_session(spec)
    sequence = TrainerSequence(session=session)

    async def run() -> None:
        first, _ = await session.start()
        sequence.begin_turn(first.token_ids)
        sequence.end_turn(list(action_ids), None, "stop")
        await session.step(action_ids)

    asyncio.run(run())
    return sequence


def env_ids(sequence: TrainerSequence) -> list[int]:
    assert sequence.session is not None and sequence.session.observation is not None
    return list(sequence.session.observation.token_ids)


def encode(text: str) -> list[int]:
    return TOK.encode(text)


def test_equal_sequences_pass_and_a_difference_raises() -> None:
    sequence = stepped(NONSENSE)
    sequence.begin_turn(env_ids(sequence))
    sequence.check_prompt(encode, HINTS)
    sequence.begin_turn(env_ids(sequence) + [5])
    with pytest.raises(TokenMismatchError, match="Trainer's sequence has 1 more tokens"):
        sequence.check_prompt(encode, HINTS)


def test_the_first_prompt_cut_by_the_trainer() -> None:
    sequence = stepped(NONSENSE)
    session = sequence.session
    assert session is not None
    first = list(session.turn_records[0].prompt_ids)
    message = describe_mismatch(first[-20:], first, sequence, encode, HINTS)
    assert "in the first prompt" in message and "raise the maximum length" in message
    assert "use the same tokenizer" not in message


def test_the_tokenizers_disagree_or_agree() -> None:
    sequence = stepped(NONSENSE)
    ours = env_ids(sequence)
    theirs = [ours[0] + 1] + ours[1:]
    message = describe_mismatch(theirs, ours, sequence, lambda text: [1, 2, 3], HINTS)
    assert "at token 0" in message and "in the first prompt" in message
    assert "(tok) encode the env's text of the first prompt to different ids" in message
    assert "use the same tokenizer" in message
    agree = describe_mismatch(theirs, ours, sequence, encode, HINTS)
    assert "tokenizers agree there" in agree and "use the same tokenizer" not in agree
    failed = describe_mismatch(theirs, ours, sequence, lambda text: None, HINTS)
    assert "failed to encode the env's text" in failed


def test_a_difference_in_the_feedback() -> None:
    sequence = stepped(NONSENSE)
    session = sequence.session
    assert session is not None
    record = session.turn_records[0]
    ours = env_ids(sequence)
    at = len(record.prompt_ids) + len(record.action_ids) + 1
    theirs = ours[:at] + [ours[at] + 1] + ours[at + 1 :]
    message = describe_mismatch(theirs, ours, sequence, encode, HINTS)
    assert f"at token {at}" in message and "in the feedback after turn 1" in message


def test_an_action_the_env_did_not_keep_or_cut() -> None:
    vocab = TOK.vocab_size
    sequence = stepped(NONSENSE)
    session = sequence.session
    assert session is not None
    record = session.turn_records[0]
    sequence.action_ids = [NONSENSE[:2] + [vocab + 3] + NONSENSE[2:]]  # what the trainer sampled
    theirs = list(record.prompt_ids) + sequence.action_ids[0] + list(record.feedback_ids)
    message = describe_mismatch(theirs, env_ids(sequence), sequence, encode, HINTS)
    assert "in turn 1's action" in message and "vocabulary size" in message
    sequence.action_ids = [NONSENSE[:-1]]  # in the vocabulary, but other ids than recorded
    message = describe_mismatch(theirs, env_ids(sequence), sequence, encode, HINTS)
    assert "did not record the ids the engine sampled for turn 1 verbatim" in message

    cut = stepped(NONSENSE, max_action_tokens=4)
    session = cut.session
    assert session is not None
    record = session.turn_records[0]
    theirs = list(record.prompt_ids) + NONSENSE + list(record.feedback_ids)
    message = describe_mismatch(theirs, env_ids(cut), cut, encode, HINTS)
    assert "cut turn 1's action at max_action_tokens=4" in message
    assert f"Trainer kept all {len(NONSENSE)} sampled ids" in message


def test_the_trainers_finished_sample_is_checked_against_the_sampled_ids() -> None:
    sequence = stepped(NONSENSE)
    tokens, ranges = sequence.tokens, sequence.ranges
    assert sequence.sample_problem(tokens, ranges) is None
    assert "2 actions, but 1 were sampled" in str(sequence.sample_problem(tokens, ranges * 2))
    changed = list(tokens)
    changed[ranges[0][0]] += 1
    assert "turn 1's action" in str(sequence.sample_problem(changed, ranges))
    assert "no usable" in str(sequence.sample_problem(None, ranges))
    assert sequence.take_action() == (NONSENSE, None) and sequence.take_action() is None


# -- failure samples ---------------------------------------------------------------------------
def test_failure_bookkeeping() -> None:
    sequence = TrainerSequence()
    assert sequence.failure_sample([7], 0, min_length=2) == ([7, 0], [], [0.0, 0.0])
    sequence.begin_turn([1, 2])
    sequence.end_turn([3, 4], [-0.5, -0.25], "length")
    assert sequence.failure_sample([7], 0) == ([1, 2, 3, 4], [(2, 4)], [0.0, 0.0, -0.5, -0.25])
    logs = episode_logs(None, error=True)
    assert logs["error"] == 1.0 and logs["success"] == 0.0 and logs["budget_exhausted"] == 0.0
    assert filler_token_id(TOK) == TOK.eos_token_id and filler_token_id(object()) == 0
    try:
        raise ValueError("boom")
    except ValueError as exc:
        reason = failure_reason(exc)
    assert reason.startswith("ValueError: boom (at rollout/test_driver.py:")


def test_vllm_shaped_outputs_and_params() -> None:
    class Logprob:
        def __init__(self, value: float) -> None:
            self.logprob = value

    class Completion:
        token_ids = [5, 6]
        logprobs = [{5: Logprob(-0.5)}, {6: Logprob(-1.5)}]
        finish_reason = "stop"

    class Output:
        outputs = [Completion()]

    assert read_request_output(Output()) == ([5, 6], [-0.5, -1.5], "stop")
    with pytest.raises(ValueError, match=r"outputs\[0\].token_ids"):
        read_request_output(object())

    class Params:
        max_tokens: int | None = None

    shared = Params()
    assert capped_params(shared, 8).max_tokens == 8 and shared.max_tokens is None


# -- the log-prob definition -------------------------------------------------------------------
def test_hf_log_probs_are_those_of_the_sampling_distribution() -> None:
    """After temperature, top-k and top-p (renormalised); greedy: the model at temperature 1."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from agentflow_env.rollout.agents.hf_generation import HFGenerator, hf_generate

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        pad_token_id=0,
        eos_token_id=1,
    )
    model = transformers.LlamaForCausalLM(config)
    prompts = [[5, 6, 7], [9, 10]]

    def expected(prompt: list[int], ids: list[int], temperature: float, top_k: int | None):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        logits = logits / temperature
        if top_k:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]

    for temperature, top_k in ((0.7, 5), (0.7, None), (1.3, 3)):
        ids, logprobs = hf_generate(
            model,
            prompts,
            6,
            pad_token_id=0,
            eos_token_ids=[1],
            do_sample=True,
            temperature=temperature,
            top_p=1.0,
            top_k=top_k,
        )
        for prompt, row, lps in zip(prompts, ids, logprobs, strict=True):
            want = expected(prompt, row, temperature, top_k)
            assert lps == pytest.approx(want.tolist(), abs=1e-4), (temperature, top_k)
            assert all(lp <= 0.0 for lp in lps)
    greedy = HFGenerator(model, pad_token_id=0, eos_token_ids=[1], temperature=0.5, greedy=True)
    model.train()
    ids, logprobs = greedy(prompts, 6)
    assert model.training  # generation ran in eval mode and gave the training mode back
    for prompt, row, lps in zip(prompts, ids, logprobs, strict=True):
        assert lps == pytest.approx(expected(prompt, row, 1.0, None).tolist(), abs=1e-4)
