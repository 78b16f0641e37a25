"""The OpenRLHF adapter under the faults a long training run meets.

Everything runs through OpenRLHF's own ``MultiTurnAgentExecutor.execute`` (our ``AgentExecutor``)
with fake engines shaped like its vLLM actor, and the trajectories of a batch run in one
``asyncio.gather`` WITHOUT ``return_exceptions``, as ``RolloutRayActor.generate_responses`` runs
them: out-of-vocabulary ids, actions cut at the per-turn cap, frozen modules that raise, modules
with bugs, bad labels, an engine that ignores its token cap. No trajectory may raise, broken ones
get reward 0, and the samples must go through OpenRLHF's experience and advantage code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import types
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
agent_module = pytest.importorskip("openrlhf.utils.agent")

import gymnasium as gym  # noqa: E402
from conftest import load_adapter  # noqa: E402
from test_openrlhf import (  # noqa: E402
    AGENT_FUNC,
    CompletionOutput,
    MirrorEngine,
    RequestOutput,
    SamplingParams,
    check_against_mirror,
    openrlhf_group_norm_advantages,
    run_execute,
    spec_for,
)

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.envs.env import AgentFlowEnv  # noqa: E402
from agentflow_env.modules.rule import (  # noqa: E402
    RuleExecutor,
    RuleInitializer,
)
from agentflow_env.rollout.checks.failures import AdapterError  # noqa: E402
from agentflow_env.rollout.labels.spec import TaskSpec  # noqa: E402
from agentflow_env.workflow.frozen_modules import Modules  # noqa: E402
from agentflow_env.workflow.session import Session  # noqa: E402

VOCAB = load_default_tokenizer().vocab_size
ACTION = (
    "Justification: find the first fact\nContext: Who founded the organisation?\n"
    "Sub-Goal: read the founder\nTool Name: Search"
)
OPENRLHF_KEYS = {
    "prompt",
    "label",
    "images",
    "mm_train_inputs",
    "reward",
    "scores",
    "observation_tokens",
    "action_ranges",
    "rollout_log_probs",
    "truncated",
    "extra_logs",
}


# -- envs whose frozen modules fail ----------------------------------------------------------------
class RaisingVerifier:
    async def verify(self, task: Any, memory: Any) -> Any:
        raise RuntimeError("verifier endpoint down")


class RaisingGeneralist:
    async def answer(self, task: Any, memory: Any) -> Any:
        raise RuntimeError("generalist endpoint down")


class BuggySession(Session):
    """A bug deep in the env (not a module failure, which the session records itself)."""

    async def _run_turn(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError("'NoneType' object has no attribute 'stop' (a bug in the env)")


class BuggyEnv(AgentFlowEnv):
    def new_session(self, task: Any, seed: int | None = None) -> Session:
        session = super().new_session(task, seed=seed)
        session.__class__ = BuggySession
        return session


def _env_with(verifier: Any, generalist: Any) -> Any:
    def make(**kwargs: Any) -> AgentFlowEnv:
        modules = Modules(RuleInitializer(), RuleExecutor(), verifier, generalist)
        return AgentFlowEnv(modules=modules, **kwargs)

    return make


FAILING_ENV = "AgentFlowTest-FailingModules-v0"
BUGGY_ENV = "AgentFlowTest-BuggyEnv-v0"
for _id, _entry in (
    (FAILING_ENV, _env_with(RaisingVerifier(), RaisingGeneralist())),
    (BUGGY_ENV, BuggyEnv),
):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry)


def label_on(env_id: str, index: int = 0, **env_kwargs: Any) -> str:
    spec = spec_for(index)
    kwargs = {**spec.env_kwargs, **env_kwargs}
    return TaskSpec(env_id=env_id, env_kwargs=kwargs, task_id=spec.task_id).to_json()


BAD_LABELS = {
    "not json": "not json",
    "no such task": json.dumps({"task_id": "no-such-task"}),
    "unknown env id": json.dumps({"env_id": "NoSuchEnv-v0", "seed": 1}),
    "env kwarg the env rejects": json.dumps({"env_kwargs": {"max_turns": 0}, "seed": 1}),
    "env kwarg the adapter sets": json.dumps(
        {"env_kwargs": {"observation_mode": "structured"}, "seed": 1}
    ),
    "bad per-turn cap": json.dumps({"env_kwargs": {"max_action_tokens": 0}, "seed": 1}),
}


# -- engines -------------------------------------------------------------------------------------
class ScriptedEngine:
    """Answers every turn with one well-formed action (ids + eos), vLLM-shaped."""

    def __init__(self, honour_max_tokens: bool = True, fail: Exception | None = None) -> None:
        tok = load_default_tokenizer()
        self.ids = tok.encode(ACTION) + [tok.eos_token_id]
        self.honour_max_tokens = honour_max_tokens
        self.fail = fail
        self.actions: list[list[int]] = []
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        await asyncio.sleep(0)  # let the other trajectories of the batch interleave
        if self.fail is not None:
            raise self.fail
        self.prompts.append(list(prompt_token_ids))
        ids = self.ids[: sampling_params.max_tokens] if self.honour_max_tokens else self.ids
        self.actions.append(ids)
        logprobs = None
        if sampling_params.logprobs is not None:
            logprobs = [{i: types.SimpleNamespace(logprob=-0.5)} for i in ids]
        finish = "length" if len(ids) < len(self.ids) else "stop"
        return RequestOutput([CompletionOutput(ids, ACTION, finish, logprobs)])


def add_oov(new_id: int):
    """Turn 1's action gets ``new_id`` (>= the vocabulary: a padded embedding row)."""

    def mutate(turn: int, ids: list[int]) -> list[int]:
        return ids[:3] + [new_id] + ids[3:] if turn == 0 else ids

    return mutate


def execute(executor, label: str, engine, hf_tokenizer, prompt: str = "a question", **kw):
    return executor.execute(
        prompt=prompt,
        label=label,
        sampling_params=kw.pop("params", SamplingParams(logprobs=1)),
        max_length=kw.pop("max_length", 8192),
        hf_tokenizer=hf_tokenizer,
        llm_engine=engine,
    )


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture
def load_agent(monkeypatch: pytest.MonkeyPatch):
    """Load agent_func.py by path (as OpenRLHF does) under the given AGENTFLOW_* settings."""
    cap = ("MAX_ACTION_TOKENS", "MAX_TURN_TOKENS")  # the cap's variable and its old name
    for var in ("ENV_ID", "ENV_KWARGS", "TOKENIZER", *cap, "RETRIEVER_URL", "SAMPLES"):
        monkeypatch.delenv(f"AGENTFLOW_{var}", raising=False)
    count = iter(range(1000))

    def load(**env: str) -> types.ModuleType:
        for name, value in env.items():
            monkeypatch.setenv(f"AGENTFLOW_{name}", value)
        return load_adapter(AGENT_FUNC, f"agentflow_openrlhf_robust_{next(count)}")

    return load


def assert_openrlhf_shape(result: dict, module: types.ModuleType) -> None:
    assert set(result) == OPENRLHF_KEYS
    assert list(result["extra_logs"]) == list(module.LOG_KEYS)
    assert all(isinstance(v, float) for v in result["extra_logs"].values())
    tokens, ranges = result["observation_tokens"], result["action_ranges"]
    assert len(tokens) >= 2 and all(isinstance(t, int) for t in tokens)
    assert all(0 <= a < b <= len(tokens) for a, b in ranges)
    if result["rollout_log_probs"] is not None:
        assert len(result["rollout_log_probs"]) == len(tokens)


# -- 7. out-of-vocabulary ids ----------------------------------------------------------------------
@pytest.mark.parametrize("new_id", [VOCAB, VOCAB + 5, 151_935])
def test_out_of_vocabulary_ids_pass_through(load_agent, hf_tokenizer, new_id):
    module = load_agent()
    spec = spec_for(0)
    engine = MirrorEngine(spec, "expert", mutate=add_oov(new_id))
    result = asyncio.run(run_execute(module.AgentExecutor(), spec, engine, hf_tokenizer))
    start, end = result["action_ranges"][0]
    assert new_id in result["observation_tokens"][start:end]  # kept verbatim by OpenRLHF...
    check_against_mirror(result, engine)  # ...and by the env: the sequences are equal
    assert result["extra_logs"]["invalid_actions"] >= 1.0  # the unreadable turn counts as invalid


# -- 8. the per-turn cap is the env's max_action_tokens --------------------------------------------
def test_env_kwarg_cap_defines_the_engine_cap(load_agent, hf_tokenizer):
    module = load_agent(ENV_KWARGS=json.dumps({"max_action_tokens": 12, "max_turns": 2}))
    assert module.shared_envs().config.max_action_tokens == 12
    spec = spec_for(0)
    engine = MirrorEngine(spec, "expert", max_action_tokens=12, max_turns=2)
    result = asyncio.run(run_execute(module.AgentExecutor(), spec, engine, hf_tokenizer))
    assert [p.max_tokens for p in engine.given_params] == [12, 12]
    assert [len(a) for a in engine.actions] == [12, 12]
    check_against_mirror(result, engine)


def test_label_cap_caps_that_trajectory(load_agent, hf_tokenizer):
    module = load_agent(MAX_ACTION_TOKENS="1000", ENV_KWARGS=json.dumps({"max_turns": 2}))
    base = spec_for(1)
    spec = TaskSpec(env_kwargs={**base.env_kwargs, "max_action_tokens": 9}, task_id=base.task_id)
    engine = MirrorEngine(spec, "expert", max_turns=2)
    result = asyncio.run(run_execute(module.AgentExecutor(), spec, engine, hf_tokenizer))
    assert [p.max_tokens for p in engine.given_params] == [9, 9]
    check_against_mirror(result, engine)


def test_the_default_cap_is_set_on_the_env(load_agent):
    module = load_agent(MAX_ACTION_TOKENS="77")
    shared = module.shared_envs()
    assert shared.config.env_kwargs["max_action_tokens"] == 77
    env = shared.env(spec_for(0))
    assert env.session_config.max_action_tokens == 77


@pytest.mark.parametrize(
    ("env", "match"),
    [
        (
            {"MAX_ACTION_TOKENS": "16", "ENV_KWARGS": '{"max_action_tokens": 8}'},
            "AGENTFLOW_MAX_ACTION_TOKENS=16 but AGENTFLOW_ENV_KWARGS sets max_action_tokens=8",
        ),
        ({"MAX_ACTION_TOKENS": "0"}, "AGENTFLOW_MAX_ACTION_TOKENS must be an integer >= 1"),
        ({"MAX_ACTION_TOKENS": "many"}, "AGENTFLOW_MAX_ACTION_TOKENS must be an integer >= 1"),
        ({"ENV_KWARGS": '{"max_action_tokens": null}'}, "max_action_tokens in AGENTFLOW_ENV"),
        ({"ENV_KWARGS": '{"observation_mode": "structured"}'}, "adapter sets itself"),
        ({"SAMPLES": "rows"}, "AGENTFLOW_SAMPLES must be one of"),
    ],
)
def test_conflicting_caps_are_rejected_at_start_up(load_agent, env, match):
    module = load_agent(**env)
    with pytest.raises(ValueError, match=match):
        module.AgentExecutor()  # what OpenRLHF builds in each vLLM actor at start-up


def test_turn_samples_are_refused_at_start_up_with_the_way_to_train_them(load_agent):
    """OpenRLHF's executor returns one sample per trajectory: asked for per-turn samples, the
    adapter stops at start-up instead of training flat ones."""
    module = load_agent(SAMPLES="turns")
    with pytest.raises(AdapterError, match="AGENTFLOW_SAMPLES=turns: this trainer trains flat"):
        module.AgentExecutor()
    assert (
        "SkyRL" in module.shared_envs.flat_only
        and "Agent Lightning" in module.shared_envs.flat_only
    )


def test_equal_caps_are_accepted(load_agent):
    module = load_agent(MAX_ACTION_TOKENS="16", ENV_KWARGS='{"max_action_tokens": 16}')
    assert module.AgentExecutor().shared.config.max_action_tokens == 16


# -- 9. one bad trajectory never kills the batch ---------------------------------------------------
@pytest.mark.parametrize("name", sorted(BAD_LABELS))
def test_bad_label_is_a_reward_zero_sample(load_agent, hf_tokenizer, caplog, name):
    module = load_agent()
    engine = ScriptedEngine()
    with caplog.at_level(logging.WARNING, logger=module.logger.name):
        result = asyncio.run(
            execute(module.AgentExecutor(), BAD_LABELS[name], engine, hf_tokenizer)
        )
    assert engine.prompts == []  # nothing was sampled
    assert_openrlhf_shape(result, module)
    assert result["reward"] == 0.0 and result["scores"] == 0.0
    assert result["extra_logs"]["error"] == 1.0 and result["extra_logs"]["success"] == 0.0
    assert result["action_ranges"] == []  # no action: the sample carries no gradient
    assert result["observation_tokens"] == hf_tokenizer.encode(
        "a question", add_special_tokens=False
    )
    assert result["rollout_log_probs"] == [0.0] * len(result["observation_tokens"])
    (record,) = [r for r in caplog.records if r.name == module.logger.name]
    assert record.levelno == logging.WARNING and "counts as reward 0" in record.getMessage()


def test_failing_frozen_modules_end_the_episode_with_reward_zero(load_agent, hf_tokenizer):
    module = load_agent()
    engine = ScriptedEngine()
    result = asyncio.run(
        execute(module.AgentExecutor(), label_on(FAILING_ENV), engine, hf_tokenizer)
    )
    assert_openrlhf_shape(result, module)
    # The env records the module failures and ends the episode; the adapter sees no exception.
    assert result["reward"] == 0.0 and result["extra_logs"]["error"] == 0.0
    assert len(engine.actions) == 1 == len(result["action_ranges"])


def test_a_module_bug_is_a_reward_zero_sample_with_the_tokens_so_far(
    load_agent, hf_tokenizer, caplog
):
    module = load_agent()
    engine = ScriptedEngine()
    with caplog.at_level(logging.WARNING, logger=module.logger.name):
        result = asyncio.run(
            execute(module.AgentExecutor(), label_on(BUGGY_ENV), engine, hf_tokenizer)
        )
    assert_openrlhf_shape(result, module)
    assert result["reward"] == 0.0 and result["extra_logs"]["error"] == 1.0
    # OpenRLHF's sequence up to the failure: the prompt it sent and the action it got back.
    ((start, end),) = result["action_ranges"]
    assert result["observation_tokens"] == engine.prompts[0] + engine.actions[0]
    assert (start, end) == (len(engine.prompts[0]), len(result["observation_tokens"]))
    assert result["rollout_log_probs"] == [0.0] * start + [-0.5] * (end - start)
    (record,) = [r for r in caplog.records if r.name == module.logger.name]
    message = record.getMessage()
    assert "AttributeError" in message and "test_openrlhf_robustness.py" in message


def test_engine_over_its_cap_is_a_mismatch_that_names_the_cut(load_agent, hf_tokenizer, caplog):
    """An engine that returns more ids than max_tokens: the env cuts, OpenRLHF keeps them all."""
    module = load_agent(MAX_ACTION_TOKENS="16")
    engine = ScriptedEngine(honour_max_tokens=False)
    label = spec_for(0).to_json()
    with caplog.at_level(logging.WARNING, logger=module.logger.name):
        result = asyncio.run(execute(module.AgentExecutor(), label, engine, hf_tokenizer))
    assert result["reward"] == 0.0 and result["extra_logs"]["error"] == 1.0
    assert_openrlhf_shape(result, module)
    # The env cut turn 1 to 16 ids, OpenRLHF kept all of them; turn 2's prompt check failed
    # before the engine was called. The sample is the prompt OpenRLHF had built for turn 2.
    assert len(engine.prompts) == 1 and len(engine.ids) > 16
    start = len(engine.prompts[0])
    assert result["action_ranges"] == [(start, start + len(engine.ids))]
    assert result["observation_tokens"][:start] == engine.prompts[0]
    assert result["observation_tokens"][start : start + len(engine.ids)] == engine.ids
    assert len(result["observation_tokens"]) > start + len(engine.ids)  # + OpenRLHF's feedback
    message = next(r.getMessage() for r in caplog.records if r.name == module.logger.name)
    assert "TokenMismatchError" in message and "turn 1's action" in message
    assert "cut turn 1's action at max_action_tokens=16" in message
    assert "AGENTFLOW_TOKENIZER" not in message  # the evidence does not point at the tokenizer


def test_engine_errors_still_propagate(load_agent, hf_tokenizer):
    module = load_agent()
    engine = ScriptedEngine(fail=RuntimeError("CUDA error: the engine died"))
    with pytest.raises(RuntimeError, match="the engine died"):
        asyncio.run(execute(module.AgentExecutor(), spec_for(0).to_json(), engine, hf_tokenizer))


# -- the mismatch message ----------------------------------------------------------------------------
def stepped_rollout(module: types.ModuleType, action_ids: list[int]):
    """A rollout whose env session took one turn with ``action_ids``."""
    shared = module.shared_envs()
    session = shared.new_session(spec_for(0))
    rollout = module.Rollout(session=session)

    async def run() -> None:
        first, _ = await session.start()
        rollout.first_prompt_text = first.text
        await session.step(action_ids)

    asyncio.run(run())
    return rollout, session


def test_mismatch_message_when_the_env_drops_sampled_ids(load_agent, hf_tokenizer):
    module = load_agent()
    ids = ScriptedEngine().ids
    rollout, session = stepped_rollout(module, ids)
    record = session.turn_records[0]
    sampled = ids[:3] + [VOCAB + 5] + ids[3:]  # what OpenRLHF kept; the env "dropped" one id
    rollout.action_ids = [sampled]
    theirs = list(record.prompt_ids) + sampled + list(record.feedback_ids)
    message = module.describe_mismatch(
        theirs, session.observation.token_ids, rollout, hf_tokenizer, "tok"
    )
    assert f"at token {len(record.prompt_ids) + 3}" in message
    assert "in turn 1's action" in message
    assert f"OpenRLHF has [{VOCAB + 5}, " in message and f"the env has [{ids[3]}, " in message
    assert "ids >= the env tokenizer's vocabulary size" in message
    assert "AGENTFLOW_TOKENIZER" not in message


def test_mismatch_message_when_openrlhf_cut_the_first_prompt(load_agent, hf_tokenizer):
    module = load_agent()
    rollout, session = stepped_rollout(module, ScriptedEngine().ids)
    first = list(session.turn_records[0].prompt_ids)
    message = module.describe_mismatch(first[-50:], first, rollout, hf_tokenizer, "tok")
    assert "in the first prompt" in message and "--data.max_len" in message
    assert "AGENTFLOW_TOKENIZER" not in message


def test_mismatch_message_when_the_tokenizers_agree(load_agent, hf_tokenizer):
    module = load_agent()
    rollout, session = stepped_rollout(module, ScriptedEngine().ids)
    ours = list(session.observation.token_ids)
    record = session.turn_records[0]
    at = len(record.prompt_ids) + len(record.action_ids) + 1  # inside the feedback
    theirs = ours[:at] + [ours[at] + 1] + ours[at + 1 :]
    message = module.describe_mismatch(theirs, ours, rollout, hf_tokenizer, "tok")
    assert "in the feedback after turn 1" in message and "tokenizers agree there" in message
    assert "AGENTFLOW_TOKENIZER" not in message


def test_mismatch_message_when_the_tokenizers_differ(
    load_agent, hf_tokenizer, llama_style_hf_tokenizer
):
    module = load_agent()
    rollout, session = stepped_rollout(module, ScriptedEngine().ids)
    ours = list(session.observation.token_ids)
    theirs = llama_style_hf_tokenizer.encode(rollout.first_prompt_text, add_special_tokens=False)
    message = module.describe_mismatch(theirs, ours, rollout, llama_style_hf_tokenizer, "tok")
    assert "in the first prompt" in message and "set AGENTFLOW_TOKENIZER" in message


# -- the seam that captures the sampled ids -----------------------------------------------------------
class NoIdsEngine(ScriptedEngine):
    """An engine whose outputs carry text but no token ids."""

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.prompts.append(list(prompt_token_ids))
        output = types.SimpleNamespace(text=ACTION, finish_reason="stop", logprobs=None)
        return RequestOutput([output])


def test_outputs_without_token_ids_fail_loudly_once(load_agent, hf_tokenizer, caplog):
    module = load_agent()
    executor = module.AgentExecutor()
    engine = NoIdsEngine()
    label = spec_for(0).to_json()
    with caplog.at_level(logging.WARNING, logger=module.logger.name):
        with pytest.raises(module.SeamError, match="outputs\\[0\\].token_ids"):
            asyncio.run(execute(executor, label, engine, hf_tokenizer))
        # Every later trajectory of the process fails at once, without sampling.
        with pytest.raises(module.SeamError, match="outputs\\[0\\].token_ids"):
            asyncio.run(execute(executor, label, engine, hf_tokenizer))
    assert len(engine.prompts) == 1
    records = [r for r in caplog.records if r.name == module.logger.name]
    assert [r.levelno for r in records] == [logging.ERROR]  # logged once, no reward-0 warnings


def test_an_executor_that_bypasses_the_engine_wrapper_fails_loudly(
    load_agent, hf_tokenizer, monkeypatch
):
    """A future OpenRLHF whose loop samples through some other engine than the one it was given:
    the batch fails at its first step instead of training on re-encoded text."""
    module = load_agent()
    original = agent_module.MultiTurnAgentExecutor.execute

    async def bypassing(self, prompt, label, params, max_length, tok, llm_engine, images=None):
        inner = getattr(llm_engine, "engine", llm_engine)
        return await original(self, prompt, label, params, max_length, tok, inner, images)

    monkeypatch.setattr(agent_module.MultiTurnAgentExecutor, "execute", bypassing)
    executor = module.AgentExecutor()
    label = spec_for(0).to_json()

    async def batch() -> list[dict]:
        runs = [execute(executor, label, ScriptedEngine(), hf_tokenizer) for _ in range(4)]
        return await asyncio.gather(*runs)

    with pytest.raises(module.SeamError, match="TurnEngine.generate"):
        asyncio.run(batch())


def test_an_executor_that_appends_other_ids_fails_loudly(load_agent, hf_tokenizer, monkeypatch):
    module = load_agent()
    original = agent_module.MultiTurnAgentExecutor.execute

    async def altering(self, *args, **kwargs):
        result = await original(self, *args, **kwargs)
        start, _ = result["action_ranges"][0]
        result["observation_tokens"][start] += 1
        return result

    monkeypatch.setattr(agent_module.MultiTurnAgentExecutor, "execute", altering)
    engine = ScriptedEngine()
    with pytest.raises(module.SeamError, match="turn 1's action"):
        asyncio.run(execute(module.AgentExecutor(), spec_for(0).to_json(), engine, hf_tokenizer))


# -- the acceptance batch ------------------------------------------------------------------------------
def test_a_batch_of_faults_in_one_gather(load_agent, hf_tokenizer, caplog):
    """24 trajectories, three groups of 8, in one gather without return_exceptions: OOV ids, turns
    cut at the cap, failing and buggy modules, bad labels, an engine over its cap, and healthy
    ones. None raises; the broken get reward 0; OOV and cut trajectories match the env exactly;
    OpenRLHF's experience and group_norm code accepts every sample."""
    module = load_agent(MAX_ACTION_TOKENS="256")
    executor = module.AgentExecutor()
    capped = spec_for(2)
    capped = TaskSpec(
        env_kwargs={**capped.env_kwargs, "max_action_tokens": 16}, task_id=capped.task_id
    )
    mirrored: list[tuple[TaskSpec, MirrorEngine]] = []
    runs: list[tuple[str, str, Any]] = []  # (kind, label, engine)
    for index in range(8):
        spec = spec_for(index % 4)
        mirrored.append((spec, MirrorEngine(spec, "expert", mutate=add_oov(VOCAB + index))))
        mirrored.append((capped, MirrorEngine(capped, "expert", seed=index)))
    for spec, engine in mirrored:
        runs.append(("oov" if spec is not capped else "capped", spec.to_json(), engine))
    bad = sorted(BAD_LABELS.values())
    for index in range(8):
        kind, label, engine = [
            ("failing modules", label_on(FAILING_ENV, index % 3), ScriptedEngine()),
            ("module bug", label_on(BUGGY_ENV, index % 3), ScriptedEngine()),
            ("bad label", bad[index % len(bad)], ScriptedEngine()),
            ("over its cap", capped.to_json(), ScriptedEngine(honour_max_tokens=False)),
        ][index % 4]
        runs.append((kind, label, engine))
    shared_params = SamplingParams(logprobs=1)

    async def batch() -> list[dict]:
        return await asyncio.gather(
            *(
                execute(executor, label, engine, hf_tokenizer, params=shared_params)
                for _, label, engine in runs
            )
        )

    with caplog.at_level(logging.WARNING, logger=module.logger.name):
        results = asyncio.run(batch())

    assert len(results) == 24
    assert shared_params.max_tokens is None  # the group's shared params were never changed
    for (kind, _, engine), result in zip(runs, results, strict=True):
        assert_openrlhf_shape(result, module)
        if kind in ("oov", "capped"):
            check_against_mirror(result, engine)  # the env's flat ids == OpenRLHF's tokens
            if kind == "capped":
                assert all(p.max_tokens <= 16 for p in engine.given_params)
                assert result["reward"] == 0.0  # 16-token actions cannot be parsed
        else:
            assert result["reward"] == 0.0 and result["scores"] == 0.0, kind
            expected_error = 0.0 if kind == "failing modules" else 1.0
            assert result["extra_logs"]["error"] == expected_error, kind
    warnings = [r for r in caplog.records if r.name == module.logger.name]
    assert len(warnings) == sum(r["extra_logs"]["error"] for r in results) == 6

    # OpenRLHF's own response -> Experience -> group_norm advantages, on every sample.
    for adv, mask in openrlhf_group_norm_advantages(results, 8):
        assert all(math.isfinite(x) for x in adv.tolist())
        assert adv.shape == mask.shape
