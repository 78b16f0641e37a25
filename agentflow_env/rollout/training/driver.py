"""The batched rollout driver: many episodes stepped together, one generate call per turn.

``run_episodes`` trains (TRL's ``rollout_func``) and evaluates (with a greedy ``HFGenerator``)
through the same code. Each live episode's flat-mode prompt ids go to ``generate`` in one batch;
the sampled ids and log-probs go back to its env verbatim (token-in-token-out), and a finished
episode becomes one flat sample: the first prompt, then actions and feedback alternating, with a
mask that is 1 on planner tokens.

With several processes whose generate calls are collectives (vLLM server mode, tensor-parallel
vLLM, ZeRO-3, FSDP), ``lockstep`` keeps the ranks in step: before each call they agree on the
largest live count, and every rank pads its batch to it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.remote import RemoteEnv
from agentflow_env.rollout.checks.failures import filler_token_id, trajectory_failure
from agentflow_env.rollout.labels.plans import EpisodePlan, plan_episode
from agentflow_env.rollout.labels.spec import DEFAULT_ENV_ID, TaskSpecError
from agentflow_env.rollout.training.lockstep import MaxAcrossRanks, distributed_max
from agentflow_env.rollout.training.pool import EnvPool
from agentflow_env.rollout.training.remote_envs import RemoteEnvPool
from agentflow_env.rollout.training.samples import SampleShape, TrainerSample, turn_samples
from agentflow_env.rollout.training.vllm_outputs import (  # the readers' old home: names kept
    action_logprobs,
    capped_params,
    read_request_output,
    sampled_logprob,
)
from agentflow_env.workflow.action_input import DEFAULT_MAX_ACTION_TOKENS
from agentflow_env.workflow.trajectory import Trajectory

logger = logging.getLogger("agentflow_env.rollout")

Generate = Callable[
    [Sequence[Sequence[int]], int],
    tuple[list[list[int]], Sequence[Sequence[float | None] | None] | None],
]
"""``generate(prompt_ids_batch, max_new_tokens) -> (completion ids, log-probs)``; the log-probs
may be ``None`` (none at all), or hold ``None`` per sequence or per token (unknown)."""

_POOL = EnvPool()


def default_pool() -> EnvPool:
    """The process's pool for ``run_episodes`` calls that name none."""
    return _POOL


# -- episodes ----------------------------------------------------------------------------------
@dataclass
class EpisodeResult:
    """One finished episode as a flat sample plus its outcome.

    ``error`` is set when the episode raised: the sample is then a placeholder (the first prompt
    if there was one, a single masked end-of-turn token as completion) with reward 0.

    ``reward`` is the terminal reward; ``turn_shaping`` the per-turn shaping rewards
    (``reward_shaping="progress"``), ``action_lengths`` / ``feedback_lengths`` where each turn
    lies in the completion, and ``turn_values`` (``value_forks > 0``) the Monte Carlo value of
    the state each turn acted in (``None`` for the first: the group's mean reward estimates it).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    reward: float
    success: bool
    turns: int
    end_reason: str
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    turn_shaping: list[float] = field(default_factory=list)
    action_lengths: list[int] = field(default_factory=list)
    feedback_lengths: list[int] = field(default_factory=list)
    turn_values: list[float | None] | None = None
    failure: str | None = None
    """Why the episode counts as failed (``failures.trajectory_failure``: it raised, ended on a
    frozen module's error, or every tool call met a broken service), else ``None``."""
    trajectory_id: str = ""
    turn_samples: list[TrainerSample] = field(default_factory=list)
    """``samples="turns"``: one sample per planner turn. The flat fields then hold the first
    prompt and no completion (a structured trajectory is no one sequence), except on a failed
    episode, whose placeholder they are."""

    @property
    def failed(self) -> bool:
        """Whether the episode raised (a zero-reward placeholder sample)."""
        return self.error is not None

    def trainer_samples(self) -> list[TrainerSample]:
        """The episode as the trainer trains on it: its turn samples, or one flat sample (also
        the placeholder of a failed episode)."""
        if self.turn_samples:
            return list(self.turn_samples)
        return [
            TrainerSample(
                prompt_ids=list(self.prompt_ids),
                response_ids=list(self.completion_ids),
                response_mask=list(self.env_mask),
                logprobs=list(self.logprobs),
                reward=self.reward,
                trajectory_id=self.trajectory_id,
                turns=self.turns,
                metrics=dict(self.metrics),
                failure=self.failure,
            )
        ]


@dataclass
class _Episode:
    index: int
    label: Any
    plan: EpisodePlan | None = None
    env: Any = None
    """The episode's ``AgentFlowEnv``, or its ``RemoteEnv`` with ``env_url``."""
    observation: list[int] | None = None
    first_prompt: list[int] | None = None
    turns: int = 0
    result: EpisodeResult | None = None
    fork_rewards: list[list[float]] = field(default_factory=list)
    """Per turn after the first, the rewards of the forks continuing from the state it acted in."""
    value_sink: list[float] | None = None
    """Set on a value rollout (a fork): its parent's ``fork_rewards`` entry, where its terminal
    reward goes."""

    @property
    def is_fork(self) -> bool:
        return self.value_sink is not None


@dataclass
class _Run:
    pool: EnvPool | RemoteEnvPool
    eos: int
    log: logging.Logger
    value_forks: int = 0
    samples: SampleShape = "flat"
    forks: list[_Episode] = field(default_factory=list)


def run_episodes(
    specs: Sequence[Any],
    generate: Generate,
    tokenizer: Any,
    *,
    max_action_tokens: int = DEFAULT_MAX_ACTION_TOKENS,
    pool: EnvPool | None = None,
    env_id: str = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    default_env_kwargs: Mapping[str, Any] | None = None,
    lockstep: MaxAcrossRanks | None = None,
    log: logging.Logger | None = None,
    value_forks: int = 0,
    timing: dict[str, float] | None = None,
    samples: SampleShape = "flat",
    env_url: str | None = None,
    env_token: str | None = None,
) -> list[EpisodeResult]:
    """Run one episode per spec, all turns batched across episodes; one result per spec, in order.

    A spec is a ``(seed, env kwargs)`` pair or a task label (see ``plan_episode``, which also
    says how ``env_id``, ``env_kwargs`` and ``default_env_kwargs`` apply). ``tokenizer`` is the
    policy's (the envs render prompts with it). ``generate(prompt_ids_batch, max_new_tokens)``
    returns sampled ids and their log-probs. Envs come from ``pool`` (default: the process's).

    An episode that raises (its label, its env, a step) becomes a zero-reward result with
    ``error`` set and a warning on ``log``; the others go on. Exceptions from ``generate`` (the
    model, not one episode) propagate.

    ``lockstep`` (several processes; ``distributed_max``, or a trainer's collective): before each
    generate call the ranks agree on the largest number of live episodes on any rank; every rank
    then generates for exactly that many prompts, padding with copies of a finished episode's
    first prompt and discarding their outputs, and all stop together when no rank has a live
    episode. So every rank makes the same number of generate calls with the same batch sizes,
    and each keeps its own episodes' outputs. Without it (one process) nothing is padded.

    ``value_forks=K`` (Monte Carlo turn values, VinePPO-style): after every turn that does not
    end an episode, K forks of it (``AgentFlowEnv.fork``) continue from the new state with the
    same ``generate``, in the same batches; the mean of their terminal rewards is the value of
    that state (``EpisodeResult.turn_values``). A fork that fails while stepping counts as
    reward 0; a state none of whose forks could be made leaves the episode without values
    (``turn_values`` ``None``). Forks cost up to K times the remaining turns of every episode;
    their samples are not returned.

    ``timing``, if given, gets ``generate_s`` (time inside ``generate``) and ``env_s`` (the rest:
    building, resetting and stepping the envs) added to it.

    ``samples`` (``agentflow_env.rollout.training.samples``): ``"flat"`` runs flat observations and makes
    each episode one flat sample; ``"turns"`` runs the label's observation mode (structured by
    default) and gives each episode one sample per planner turn (``EpisodeResult.turn_samples``).
    Trajectory ids are the episodes' indexes in ``specs``.

    ``env_url`` (``AGENTFLOW_ENV_URL``; comma-separated for several servers): the episodes run on
    served envs (``agentflow-env serve``, with ``env_token`` if they ask for one) instead of
    envs of this process; ``tokenizer`` must then be the servers' (checked). A server that dies
    fails its episodes alone. Value forks need envs of this process.
    """
    start = time.perf_counter()
    generating = 0.0
    if value_forks < 0:
        raise ValueError(f"value_forks must be >= 0, got {value_forks}")
    if env_url and value_forks:
        raise ValueError("value_forks fork envs of this process: not with env_url")
    chosen: EnvPool | RemoteEnvPool = pool or _POOL
    if env_url:
        chosen = RemoteEnvPool(env_url, token=env_token, samples=samples)
    run = _Run(chosen, filler_token_id(tokenizer), log or logger, value_forks, samples)
    episodes = [_Episode(index, label) for index, label in enumerate(specs)]
    plan_kwargs = {
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "default_env_kwargs": default_env_kwargs,
        "samples": samples,
    }
    _start(episodes, plan_kwargs, tokenizer, run)
    starts = [e.first_prompt for e in episodes if e.first_prompt]
    padding = min(starts, key=len) if starts else [run.eos]
    while True:
        live = [e for e in episodes + run.forks if e.result is None]
        width = len(live) if lockstep is None else int(lockstep(len(live)))
        if width < len(live):
            raise RuntimeError(f"lockstep returned {width} for {len(live)} live episodes")
        if width == 0:
            break
        prompts = [e.observation or padding for e in live] + [padding] * (width - len(live))
        before = time.perf_counter()
        completions, logprobs = generate(prompts, max_action_tokens)
        generating += time.perf_counter() - before
        per_row = [None] * len(completions) if logprobs is None else list(logprobs)
        if len(completions) != width or len(per_row) != width:
            raise RuntimeError(
                f"generate returned {len(completions)} completions and {len(per_row)} "
                f"log-prob rows for {width} prompts"
            )
        for episode, ids, lps in zip(live, completions, per_row, strict=False):
            _step(episode, list(ids), lps, run)
    if run.value_forks:
        for episode in episodes:
            _set_values(episode)
    if timing is not None:
        timing["generate_s"] = timing.get("generate_s", 0.0) + generating
        elapsed = time.perf_counter() - start - generating
        timing["env_s"] = timing.get("env_s", 0.0) + elapsed
    return [e.result for e in episodes if e.result is not None]


def _start(
    episodes: list[_Episode], plan_kwargs: Mapping[str, Any], tokenizer: Any, run: _Run
) -> None:
    """Plan, build (one env per episode, grouped by env) and reset every episode; an episode
    that raises on the way fails alone (a group whose env cannot be built fails together)."""
    for episode in episodes:
        try:
            episode.plan = plan_episode(episode.label, **plan_kwargs)
        except Exception as exc:
            _fail(episode, "label", exc, run)
    groups: dict[str, list[_Episode]] = {}
    for episode in episodes:
        if episode.plan is not None and episode.result is None:
            groups.setdefault(episode.plan.env_key, []).append(episode)
    for members in groups.values():
        plan = members[0].plan
        assert plan is not None
        try:
            envs = run.pool.envs(plan, tokenizer, len(members))
        except Exception as exc:
            for episode in members:
                _fail(episode, "env", exc, run)
            continue
        for episode, env in zip(members, envs, strict=True):
            episode.env = env
    for episode in episodes:
        if episode.result is not None:
            continue
        assert episode.env is not None and episode.plan is not None
        try:
            episode.observation = _ids(run.pool.reset(episode.env, episode.plan))
            episode.first_prompt = list(episode.observation)
        except Exception as exc:
            _fail(episode, "reset", exc, run)


def _step(episode: _Episode, ids: list[int], logprobs: Any, run: _Run) -> None:
    env = episode.env
    assert env is not None
    try:
        action: Any = {"token_ids": ids, "logprobs": action_logprobs(logprobs, len(ids))}
        observation, reward, terminated, truncated, info = env.step(action)
        episode.turns += 1
        if terminated or truncated:
            reward = float(info.get("reward", reward))
            episode.result = _result(env, reward, info, run.samples, str(episode.index))
            if isinstance(env, RemoteEnv):  # its server frees the session now
                env.close()
            if episode.is_fork:
                _finish_fork(episode, run)
        else:
            episode.observation = _ids(observation)
            if not episode.is_fork and run.value_forks:
                _fork(episode, run)
    except Exception as exc:
        _fail(episode, "step", exc, run)
        if episode.is_fork:
            _finish_fork(episode, run)


def _fork(episode: _Episode, run: _Run) -> None:
    """K value rollouts from the state ``episode`` just reached (its ``turns``-th state)."""
    assert episode.env is not None
    rewards: list[float] = []
    episode.fork_rewards.append(rewards)
    for _ in range(run.value_forks):
        fork = _Episode(-1, episode.label, plan=episode.plan, value_sink=rewards)
        try:
            fork.env = episode.env.fork()
        except Exception as exc:  # the state goes without this fork's estimate
            run.log.warning("episode %d: a value fork failed: %r", episode.index, exc)
            continue
        fork.observation = episode.observation
        fork.first_prompt = episode.first_prompt
        run.forks.append(fork)


def _finish_fork(fork: _Episode, run: _Run) -> None:
    assert fork.result is not None and fork.value_sink is not None
    fork.value_sink.append(0.0 if fork.result.failed else fork.result.reward)
    if fork.env is not None:
        fork.env.close()
        fork.env = None
    run.forks.remove(fork)


def _set_values(episode: _Episode) -> None:
    result = episode.result
    if result is None or result.failed:
        return
    values: list[float | None] = [None]
    for rewards in episode.fork_rewards[: result.turns - 1]:
        values.append(sum(rewards) / len(rewards) if rewards else None)
    if len(values) == result.turns and all(v is not None for v in values[1:]):
        result.turn_values = values


def _ids(observation: Mapping[str, Any]) -> list[int]:
    return [int(i) for i in observation["token_ids"]]


FlatFields = tuple[list[int], list[int], list[int], list[float]]
"""A flat sample's first prompt, completion, mask and log-probs."""


def _result(
    env: AgentFlowEnv | RemoteEnv,
    reward: float,
    info: Mapping[str, Any],
    samples: SampleShape,
    trajectory_id: str,
) -> EpisodeResult:
    trajectory = env.trajectory()
    metrics = dict(info.get("metrics", {}))
    failure = trajectory_failure(env.session)
    turns: list[TrainerSample] = []
    if samples == "turns":  # log-probs the engine did not give: NaN, as on a flat sample
        turns = turn_samples(
            trajectory,
            reward,
            trajectory_id=trajectory_id,
            metrics=metrics,
            failure=failure,
            logprob_fill=math.nan,
        )
        if not turns or not all(t.response_ids for t in turns):
            raise ValueError("a turn of the trajectory has no action tokens")
        flat: FlatFields = (list(turns[0].prompt_ids), [], [], [])
    else:
        flat = _flat_fields(trajectory)
    prompt, completion, mask, logprobs = flat
    return EpisodeResult(
        prompt_ids=prompt,
        completion_ids=completion,
        env_mask=mask,
        logprobs=logprobs,
        reward=reward,
        success=bool(info.get("success", False)),
        turns=int(metrics.get("turns", 0)),
        end_reason=str(info.get("end_reason", "")),
        metrics=metrics,
        turn_shaping=[t.shaping for t in trajectory.turns],
        action_lengths=[len(t.action_ids) for t in trajectory.turns],
        feedback_lengths=[len(t.feedback_ids) for t in trajectory.turns],
        failure=failure,
        trajectory_id=trajectory_id,
        turn_samples=turns,
    )


def _flat_fields(trajectory: Trajectory) -> FlatFields:
    """The flat sample's first prompt, completion, mask and log-probs (NaN where unknown)."""
    sample = trajectory.flat_sample()
    if not sample.completion_ids:  # a trainer needs a token to read; no action ids were kept
        raise ValueError("the trajectory has no completion tokens")
    logprobs: list[float] = []
    for index, turn in enumerate(trajectory.turns):
        logprobs += action_logprobs(turn.logprobs, len(turn.action_ids))
        if index + 1 < len(trajectory.turns):
            logprobs += [0.0] * len(turn.feedback_ids)
    if len(logprobs) != len(sample.completion_ids):
        raise RuntimeError(
            f"{len(logprobs)} log-probs for {len(sample.completion_ids)} completion tokens"
        )
    prompt = sample.input_ids[: sample.prompt_length]
    return prompt, sample.completion_ids, sample.completion_mask, logprobs


def _fail(episode: _Episode, stage: str, exc: BaseException, run: _Run) -> None:
    """End ``episode`` as a zero-reward placeholder sample (first prompt if any, one masked
    end-of-turn token), logging the reason; an env that raised leaves the pool."""
    reason = f"{stage}: {type(exc).__name__}: {exc}"
    run.log.warning(
        "episode %d (%.160r) failed and is recorded as a zero-reward sample: %s",
        episode.index,
        episode.label,
        reason,
        exc_info=None if isinstance(exc, TaskSpecError) else exc,
    )
    if episode.env is not None:
        if not episode.is_fork:
            run.pool.discard(episode.env)
        else:  # a value rollout's fork is not the pool's
            episode.env.close()
        episode.env = None
    episode.result = EpisodeResult(
        prompt_ids=list(episode.first_prompt or [run.eos]),
        completion_ids=[run.eos],
        env_mask=[0],
        logprobs=[0.0],
        reward=0.0,
        success=False,
        turns=episode.turns,
        end_reason="error",
        metrics={},
        error=reason,
        failure=reason,
        trajectory_id=str(episode.index),
    )


__all__ = [
    "EpisodeResult",
    "Generate",
    "MaxAcrossRanks",
    "action_logprobs",
    "capped_params",
    "default_pool",
    "distributed_max",
    "read_request_output",
    "run_episodes",
    "sampled_logprob",
]
