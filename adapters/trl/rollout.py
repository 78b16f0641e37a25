"""A ``rollout_func`` for TRL's ``GRPOTrainer``: AgentFlow episodes with the trainer's model as planner.

Load it by path (``adapters/`` is not an installed package)::

    sys.path.insert(0, "adapters/trl")
    from rollout import env_reward, make_rollout_func, task_prompt

    dataset = Dataset.from_dict({"prompt": [task_prompt(seed) for seed in range(1000)]})
    trainer = GRPOTrainer(model, reward_funcs=env_reward, train_dataset=dataset,
                          rollout_func=make_rollout_func({"hops": 1, "fresh_world": True}), ...)

Each dataset prompt names one task with a ``TaskSpec``, the label format the OpenRLHF adapter
reads too (``agentflow_env.tasks.spec``): its JSON string, the parsed object, a ``TaskSpec``, or a
chat conversation whose last message holds one of these. A spec names the task by ``seed``,
``task_id`` or an inline ``record``, and may name an ``env_id`` and ``env_kwargs``:

- no env id (``task_prompt``'s format): the rollout's env (``env_id=``, default
  ``AgentFlow-Search-v0``) with ``DEFAULT_ENV_KWARGS``, then ``make_rollout_func``'s
  ``env_kwargs``, then the spec's own ``env_kwargs``;
- an env id (e.g. the labels ``adapters/openrlhf/prepare_data.py`` writes): that env with
  ``make_rollout_func``'s ``env_kwargs``, then the spec's, so the spec means the same env and the
  same task as in OpenRLHF (``DEFAULT_ENV_KWARGS`` would turn a fixed world into fresh ones).

TRL's sampler repeats each prompt ``num_generations`` times; every copy runs the same task (one
cached ``Task`` per spec), which is what Flow-GRPO's group needs. An episode runs in flat
observation mode, so the whole trajectory is one sequence: the first prompt is ``prompt_ids``;
planner actions and environment feedback alternate in ``completion_ids``; ``env_mask`` is 1 on
planner tokens and 0 on feedback, and TRL's loss uses ``completion_mask * env_mask``. Actions go
to the env as the sampled ids with their log-probs (token-in-token-out). A policy token whose
sampling log-prob is unknown (``None`` or NaN from vLLM, or a generator that returns none) gets
NaN, which TRL reads as "not scorable"; environment tokens get 0.0 (they are masked).

The env's terminal reward comes back as ``env_reward`` for the reward function ``env_reward``;
``success``, ``turns``, ``invalid_actions`` and ``failed`` are logged as metrics. An episode that
raises (a bad label, an env that cannot be built, an env or module exception mid-episode) never
reaches the trainer as an exception: it is logged as a warning and returned as a zero-reward
sample whose single completion token is masked out, with the reason in ``error``.

Generation uses the trainer's own model: ``generate`` on the unwrapped model (as TRL does), or
TRL's vLLM engine when ``use_vllm=True``. With several processes the ranks generate in lockstep
(``run_episodes``): every rank makes the same number of generate calls with the same batch size,
as vLLM server mode, colocated vLLM with tensor parallelism, ZeRO-3 and FSDP require.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.rollout.spec import DEFAULT_ENV_ID, TaskSpec, TaskSpecError, env_kwargs_from_json
from agentflow_env.tasks.base import Task

logger = logging.getLogger("agentflow_env.adapters.trl")

DEFAULT_ENV_KWARGS: dict[str, Any] = {
    "hops": 1,
    "fresh_world": True,
    "world_size": "small",
    "prompt_style": "compact",
    "max_turns": 3,
}
LOG_KEYS = ("success", "turns", "invalid_actions", "failed")


def task_prompt(seed: int, **env_kwargs: Any) -> str:
    """A dataset prompt naming one task: a ``TaskSpec`` (the label format the OpenRLHF adapter
    uses too) with the episode seed and env kwargs (over the rollout's defaults)."""
    return TaskSpec(env_id=None, env_kwargs=env_kwargs, seed=int(seed)).to_json()


def read_task_spec(prompt: Any) -> TaskSpec:
    """The ``TaskSpec`` a dataset prompt names.

    Accepts a ``TaskSpec``, its JSON string (or bytes), the parsed JSON object, or a chat
    conversation (a list of ``{"role", "content"}`` messages) whose last message's content is one
    of those. Raises ``TaskSpecError`` for anything else.
    """
    if isinstance(prompt, TaskSpec):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        prompt = _message_text(prompt[-1].get("content"))
    return TaskSpec.from_json(prompt)


def _message_text(content: Any) -> Any:
    if isinstance(content, list):  # typed content blocks
        return "".join(
            str(block.get("text", "")) for block in content if isinstance(block, Mapping)
        )
    return content


def parse_task_prompt(prompt: Any) -> tuple[int, dict[str, Any]]:
    """``(seed, env kwargs)`` from a ``task_prompt`` string (or an already-decoded dict)."""
    spec = read_task_spec(prompt)
    if spec.seed is None:
        raise TaskSpecError(f"a TRL task prompt names an episode seed, got {prompt!r:.120}")
    return spec.seed, env_kwargs_from_json(spec.env_kwargs)


# -- generation backends ---------------------------------------------------------------------
# ``generate(prompt_ids_batch, max_new_tokens) -> (completion ids, log-probs)``; the log-probs
# may be ``None`` (none at all), or hold ``None`` per sequence or per token (unknown).
Generate = Callable[
    [Sequence[Sequence[int]], int],
    tuple[list[list[int]], Sequence[Sequence[float | None] | None] | None],
]


@dataclass
class HFGenerator:
    """Batched ``model.generate`` returning each completion's ids (cut after the first EOS) and
    their log-probs under ``softmax(logits / temperature)``, the same quantity TRL's loss uses.

    ``greedy=True`` is for evaluation (log-probs then at temperature 1).
    """

    model: Any
    pad_token_id: int
    eos_token_ids: Sequence[int]
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    greedy: bool = False

    @classmethod
    def from_trainer(cls, trainer: Any) -> HFGenerator:
        return cls(
            model=None,  # unwrapped at each call, see __call__
            pad_token_id=trainer.processing_class.pad_token_id,
            eos_token_ids=list(trainer.eos_token_ids),
            temperature=float(trainer.temperature),
            top_p=float(trainer.top_p),
            top_k=trainer.top_k,
        )

    def __call__(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        if not prompts:
            return [], []
        model = self.model
        device = next(model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        sampling: dict[str, Any] = (
            {"do_sample": False}
            if self.greedy
            else {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}
        )
        if not self.greedy and self.top_k:
            sampling["top_k"] = self.top_k
        elif not self.greedy:
            sampling["top_k"] = None
        was_training = model.training
        model.eval()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                pad_token_id=self.pad_token_id,
                eos_token_id=list(self.eos_token_ids),
                return_dict_in_generate=True,
                output_logits=True,
                **sampling,
            )
        if was_training:
            model.train()
        new = out.sequences[:, width:].cpu()
        temperature = 1.0 if self.greedy else self.temperature
        logits = torch.stack(out.logits, dim=1).float().cpu() / temperature
        logps = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        completions: list[list[int]] = []
        logprobs: list[list[float]] = []
        eos = set(int(e) for e in self.eos_token_ids)
        for row in range(new.size(0)):
            tokens = new[row].tolist()
            end = next((i + 1 for i, t in enumerate(tokens) if t in eos), len(tokens))
            completions.append(tokens[:end])
            logprobs.append(logps[row, :end].tolist())
        return completions, logprobs


def trainer_generate(trainer: Any) -> Generate:
    """The trainer's generation path: TRL's vLLM engine if enabled, else ``generate`` on the
    unwrapped training model."""
    if getattr(trainer, "use_vllm", False):
        return _vllm_generate(trainer)
    from trl.models import unwrap_model_for_generation

    generator = HFGenerator.from_trainer(trainer)

    def generate(prompts: Sequence[Sequence[int]], max_new_tokens: int):
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
        ) as unwrapped:
            generator.model = unwrapped
            return generator(prompts, max_new_tokens)

    return generate


def _vllm_generate(trainer: Any) -> Generate:
    """One vLLM sample per prompt (the prompts of a group differ after the first turn).

    ``rollout_func`` keeps vLLM's weights in sync (TRL syncs before calling it); the per-turn
    token cap is set through ``max_completion_length`` for the duration of the call. In server
    mode (and colocated with tensor parallelism) every call is a collective that slices the
    gathered results by ``rank * batch size``: ``run_episodes`` keeps the ranks in lockstep.
    vLLM reports an unscorable token's log-prob as ``None`` and may return no log-probs at all
    (``None``); both become NaN in the samples.
    """
    engine = trainer.vllm_generation

    def generate(prompts: Sequence[Sequence[int]], max_new_tokens: int):
        saved = engine.max_completion_length
        engine.max_completion_length = max_new_tokens
        try:
            _, completion_ids, logprobs, _ = engine.generate(
                prompts=[list(p) for p in prompts], images=None, num_generations=1
            )
        finally:
            engine.max_completion_length = saved
        completions = [list(c) for c in completion_ids]
        if logprobs is None:
            return completions, None
        return completions, [
            None if seq is None else [_sampled_logprob(lp) for lp in seq] for seq in logprobs
        ]

    return generate


def _sampled_logprob(value: Any) -> float:
    """One token's log-prob as a float, NaN if unknown; vLLM gives ``[sampled, top-k...]``."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _action_logprobs(logprobs: Any, length: int) -> list[float]:
    """``length`` log-probs for an action: NaN where unknown, all NaN if missing or misaligned."""
    if logprobs is None:
        return [math.nan] * length
    values = [_sampled_logprob(x) for x in logprobs]
    return values if len(values) == length else [math.nan] * length


# -- lockstep across processes ---------------------------------------------------------------
# ``max_across_ranks(local_value) -> the maximum over all ranks``; a collective every rank calls.
MaxAcrossRanks = Callable[[int], int]


def distributed_max(group: Any = None) -> MaxAcrossRanks:
    """``MaxAcrossRanks`` over a ``torch.distributed`` process group (the default group if
    ``None``), for use without a trainer."""
    import torch.distributed as dist

    def max_across_ranks(value: int) -> int:
        device = torch.device("cpu")
        if dist.get_backend(group) == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        tensor = torch.tensor([int(value)], dtype=torch.long, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
        return int(tensor.item())

    return max_across_ranks


def trainer_lockstep(trainer: Any) -> MaxAcrossRanks | None:
    """``MaxAcrossRanks`` over the trainer's accelerator, or ``None`` on a single process (no
    collective is needed there)."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or accelerator.num_processes <= 1:
        return None

    def max_across_ranks(value: int) -> int:
        local = torch.tensor([int(value)], dtype=torch.long, device=accelerator.device)
        return int(accelerator.gather(local).max().item())

    return max_across_ranks


# -- episodes --------------------------------------------------------------------------------
@dataclass
class EpisodeResult:
    """One finished episode as a flat sample plus its outcome.

    ``error`` is set when the episode raised: the sample is then a placeholder (the first prompt
    if there was one, a single masked EOS as completion) with reward 0.
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

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class EpisodePlan:
    """Which env runs which task: the env id, env kwargs beneath the label's (objects), the
    label's own env kwargs (JSON forms unless ``label_kwargs_are_json`` is false), a key naming
    the env, and the spec naming the task."""

    env_id: str
    base_kwargs: Mapping[str, Any]
    label_kwargs: Mapping[str, Any]
    label_kwargs_are_json: bool
    env_key: str
    spec: TaskSpec

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """The env's kwargs as objects (JSON forms of tools and modules built here)."""
        own = self.label_kwargs
        if self.label_kwargs_are_json:
            own = env_kwargs_from_json(own)
        return {**self.base_kwargs, **own}

    @property
    def task_key(self) -> str:
        """The task-naming part of the spec (seed, task id or record) as JSON."""
        data = {k: getattr(self.spec, k) for k in ("seed", "task_id", "record")}
        return json.dumps(data, sort_keys=True, default=str)


def plan_episode(
    label: Any,
    *,
    env_id: str = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    default_env_kwargs: Mapping[str, Any] | None = None,
) -> EpisodePlan:
    """The env and task one episode runs.

    ``label`` is anything ``read_task_spec`` reads, or a ``(seed, env kwargs)`` pair whose
    kwargs are objects (``AgentFlowEnv``'s own arguments). Env kwargs, lowest first:
    ``default_env_kwargs`` (only for labels that name no env id), ``env_kwargs``, the label's.
    """
    is_pair = _is_seed_pair(label)
    if is_pair:
        spec = TaskSpec(env_id=None, seed=int(label[0]))
        own = dict(label[1])
    else:
        spec = read_task_spec(label)
        own = dict(spec.env_kwargs)
    base = dict(default_env_kwargs or {}) if spec.env_id is None else {}
    base.update(env_kwargs or {})
    for key in ("observation_mode", "tokenizer"):
        if key in own or key in base:
            value = own.get(key, base.get(key))
            if key == "tokenizer" or value != "flat":
                raise TaskSpecError(
                    f"env kwarg {key}={value!r:.60} is set by the adapter "
                    "(flat observations, the trainer's tokenizer)"
                )
    chosen = spec.env_id or env_id
    env_key = json.dumps([chosen, {**base, **own}], sort_keys=True, default=str)
    return EpisodePlan(chosen, base, own, not is_pair, env_key, spec)


def _is_seed_pair(label: Any) -> bool:
    return (
        isinstance(label, tuple)
        and len(label) == 2
        and isinstance(label[1], Mapping)
        and isinstance(label[0], numbers.Integral)
        and not isinstance(label[0], bool)
    )


class EnvPool:
    """Reusable flat-mode envs per (env key, tokenizer), and a cache of tasks per spec.

    The ``num_generations`` copies of a prompt share one resolved task (world + question).
    """

    def __init__(self, max_cached_tasks: int = 8192) -> None:
        self._envs: dict[tuple[str, int], list[AgentFlowEnv]] = {}
        self._tasks: OrderedDict[tuple[str, str], Task] = OrderedDict()
        self._max_cached_tasks = max_cached_tasks

    def envs(self, plan: EpisodePlan, tokenizer: Any, count: int) -> list[AgentFlowEnv]:
        pool = self._envs.setdefault((plan.env_key, id(tokenizer)), [])
        while len(pool) < count:
            pool.append(build_env(plan, tokenizer))
        return pool[:count]

    def discard(self, env: AgentFlowEnv) -> None:
        """Drop an env that raised (its state is unknown); later episodes get a fresh one."""
        for pool in self._envs.values():
            if any(e is env for e in pool):
                pool[:] = [e for e in pool if e is not env]
        try:
            env.close()
        except Exception:  # closing a broken env must not fail the batch
            logger.debug("closing a discarded env failed", exc_info=True)

    def task(self, plan: EpisodePlan, env: AgentFlowEnv) -> Task:
        key = (plan.env_key, plan.task_key)
        task = self._tasks.get(key)
        if task is None:
            task = plan.spec.resolve(env.task_source)
            self._tasks[key] = task
            if len(self._tasks) > self._max_cached_tasks:
                self._tasks.popitem(last=False)
        else:
            self._tasks.move_to_end(key)
        return task

    def reset(self, env: AgentFlowEnv, plan: EpisodePlan) -> dict[str, Any]:
        observation, _ = env.reset(seed=plan.spec.seed, options={"task": self.task(plan, env)})
        return observation


def build_env(plan: EpisodePlan, tokenizer: Any) -> AgentFlowEnv:
    """A flat-mode env for ``plan`` (its registered id, so ``AgentFlow-Code-v0`` works too)."""
    import gymnasium as gym

    import agentflow_env  # noqa: F401  (registers the env ids)

    kwargs = {**plan.env_kwargs, "observation_mode": "flat", "tokenizer": tokenizer}
    env = gym.make(plan.env_id, **kwargs).unwrapped
    if not isinstance(env, AgentFlowEnv):
        raise TaskSpecError(f"{plan.env_id!r} is not an AgentFlowEnv")
    return env


_POOL = EnvPool()


@dataclass
class _Episode:
    index: int
    label: Any
    plan: EpisodePlan | None = None
    env: AgentFlowEnv | None = None
    observation: list[int] | None = None
    first_prompt: list[int] | None = None
    turns: int = 0
    result: EpisodeResult | None = None


def run_episodes(
    specs: Sequence[Any],
    generate: Generate,
    tokenizer: Any,
    *,
    max_action_tokens: int = 48,
    pool: EnvPool | None = None,
    env_id: str = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    default_env_kwargs: Mapping[str, Any] | None = None,
    lockstep: MaxAcrossRanks | None = None,
) -> list[EpisodeResult]:
    """Run one episode per spec, all turns batched across episodes; one result per spec, in order.

    A spec is a ``(seed, env kwargs)`` pair or a task label (see ``plan_episode``).
    ``generate(prompt_ids_batch, max_new_tokens)`` returns sampled ids and their log-probs. The
    same function evaluates a model (with a greedy ``HFGenerator``) and trains it.

    An episode that raises (its label, its env, a step) becomes a zero-reward result with
    ``error`` set and a logged warning; the others go on. Exceptions from ``generate`` (the
    model, not one episode) propagate.

    ``lockstep`` (several processes; ``trainer_lockstep``, ``distributed_max``): before each
    generate call the ranks agree on the largest number of live episodes on any rank; every rank
    then generates for exactly that many prompts, padding with copies of a finished episode's
    first prompt and discarding their outputs, and all stop together when no rank has a live
    episode. So every rank makes the same number of generate calls with the same batch sizes,
    and each keeps its own episodes' outputs. Without it (one process) nothing is padded.
    """
    pool = pool or _POOL
    eos = _eos_token_id(tokenizer)
    episodes = [_Episode(index, label) for index, label in enumerate(specs)]
    plan_kwargs = {
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "default_env_kwargs": default_env_kwargs,
    }
    _start(episodes, plan_kwargs, tokenizer, pool, eos)
    starts = [e.first_prompt for e in episodes if e.first_prompt]
    padding = min(starts, key=len) if starts else [eos]
    while True:
        live = [e for e in episodes if e.result is None]
        width = len(live) if lockstep is None else int(lockstep(len(live)))
        if width < len(live):
            raise RuntimeError(f"lockstep returned {width} for {len(live)} live episodes")
        if width == 0:
            break
        prompts = [e.observation or padding for e in live] + [padding] * (width - len(live))
        completions, logprobs = generate(prompts, max_action_tokens)
        per_row = [None] * len(completions) if logprobs is None else list(logprobs)
        if len(completions) != width or len(per_row) != width:
            raise RuntimeError(
                f"generate returned {len(completions)} completions and {len(per_row)} "
                f"log-prob rows for {width} prompts"
            )
        for episode, ids, lps in zip(live, completions, per_row, strict=False):
            _step(episode, list(ids), lps, eos, pool)
    return [e.result for e in episodes if e.result is not None]


def _start(
    episodes: list[_Episode],
    plan_kwargs: Mapping[str, Any],
    tokenizer: Any,
    pool: EnvPool,
    eos: int,
) -> None:
    """Plan, build (one env per episode, grouped by env) and reset every episode; an episode
    that raises on the way fails alone (a group whose env cannot be built fails together)."""
    for episode in episodes:
        try:
            episode.plan = plan_episode(episode.label, **plan_kwargs)
        except Exception as exc:
            _fail(episode, "label", exc, eos, pool)
    groups: dict[str, list[_Episode]] = {}
    for episode in episodes:
        if episode.plan is not None and episode.result is None:
            groups.setdefault(episode.plan.env_key, []).append(episode)
    for members in groups.values():
        plan = members[0].plan
        assert plan is not None
        try:
            envs = pool.envs(plan, tokenizer, len(members))
        except Exception as exc:
            for episode in members:
                _fail(episode, "env", exc, eos, pool)
            continue
        for episode, env in zip(members, envs, strict=True):
            episode.env = env
    for episode in episodes:
        if episode.result is not None:
            continue
        assert episode.env is not None and episode.plan is not None
        try:
            episode.observation = _ids(pool.reset(episode.env, episode.plan))
            episode.first_prompt = list(episode.observation)
        except Exception as exc:
            _fail(episode, "reset", exc, eos, pool)


def _step(episode: _Episode, ids: list[int], logprobs: Any, eos: int, pool: EnvPool) -> None:
    env = episode.env
    assert env is not None
    try:
        action: Any = {"token_ids": ids, "logprobs": _action_logprobs(logprobs, len(ids))}
        observation, reward, terminated, truncated, info = env.step(action)
        episode.turns += 1
        if terminated or truncated:
            episode.result = _result(env, float(reward), info)
        else:
            episode.observation = _ids(observation)
    except Exception as exc:
        _fail(episode, "step", exc, eos, pool)


def _ids(observation: Mapping[str, Any]) -> list[int]:
    return [int(i) for i in observation["token_ids"]]


def _result(env: AgentFlowEnv, reward: float, info: Mapping[str, Any]) -> EpisodeResult:
    trajectory = env.trajectory()
    sample = trajectory.flat_sample()
    if not sample.completion_ids:  # TRL needs a token to read; no action ids were kept
        raise ValueError("the trajectory has no completion tokens")
    logprobs: list[float] = []
    for index, turn in enumerate(trajectory.turns):
        logprobs += _action_logprobs(turn.logprobs, len(turn.action_ids))
        if index + 1 < len(trajectory.turns):
            logprobs += [0.0] * len(turn.feedback_ids)
    if len(logprobs) != len(sample.completion_ids):
        raise RuntimeError(
            f"{len(logprobs)} log-probs for {len(sample.completion_ids)} completion tokens"
        )
    metrics = dict(info.get("metrics", {}))
    return EpisodeResult(
        prompt_ids=sample.input_ids[: sample.prompt_length],
        completion_ids=sample.completion_ids,
        env_mask=sample.completion_mask,
        logprobs=logprobs,
        reward=reward,
        success=bool(info.get("success", False)),
        turns=int(metrics.get("turns", 0)),
        end_reason=str(info.get("end_reason", "")),
        metrics=metrics,
    )


def _fail(episode: _Episode, stage: str, exc: BaseException, eos: int, pool: EnvPool) -> None:
    reason = f"{stage}: {type(exc).__name__}: {exc}"
    logger.warning(
        "episode %d (%.160r) failed and is recorded as a zero-reward sample: %s",
        episode.index,
        episode.label,
        reason,
        exc_info=None if isinstance(exc, TaskSpecError) else exc,
    )
    if episode.env is not None:
        pool.discard(episode.env)
        episode.env = None
    episode.result = EpisodeResult(
        prompt_ids=list(episode.first_prompt or [eos]),
        completion_ids=[eos],
        env_mask=[0],
        logprobs=[0.0],
        reward=0.0,
        success=False,
        turns=episode.turns,
        end_reason="error",
        metrics={},
        error=reason,
    )


def _eos_token_id(tokenizer: Any) -> int:
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


# -- the TRL seam ----------------------------------------------------------------------------
def make_rollout_func(
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    max_action_tokens: int = 48,
    env_id: str = DEFAULT_ENV_ID,
) -> Callable[[list[Any], Any], dict[str, list]]:
    """A ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``.

    ``env_kwargs`` apply to every task, beneath a prompt's own ``env_kwargs``; prompts that name
    no env id run ``env_id`` with ``DEFAULT_ENV_KWARGS`` beneath ``env_kwargs``. Returns one
    completion per prompt entry (TRL's sampler already repeats each prompt ``num_generations``
    times); with several processes the ranks generate in lockstep over the trainer's accelerator.
    """
    user_kwargs = dict(env_kwargs or {})

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        results = run_episodes(
            prompts,
            trainer_generate(trainer),
            trainer.processing_class,
            max_action_tokens=max_action_tokens,
            env_id=env_id,
            env_kwargs=user_kwargs,
            default_env_kwargs=DEFAULT_ENV_KWARGS,
            lockstep=trainer_lockstep(trainer),
        )
        return rollout_output(results)

    return rollout_func


def rollout_output(results: Sequence[EpisodeResult]) -> dict[str, list]:
    """The dict ``rollout_func`` returns: TRL's required keys, ``env_mask``, and per-sample
    fields for the reward function (``env_reward``, the logged metrics, ``error``)."""
    return {
        "prompt_ids": [r.prompt_ids for r in results],
        "completion_ids": [r.completion_ids for r in results],
        "logprobs": [r.logprobs for r in results],
        "env_mask": [r.env_mask for r in results],
        "env_reward": [r.reward for r in results],
        "success": [float(r.success) for r in results],
        "turns": [r.turns for r in results],
        "invalid_actions": [float(r.metrics.get("invalid_actions", 0)) for r in results],
        "failed": [float(r.failed) for r in results],
        "error": [r.error or "" for r in results],
    }


def env_reward(
    completions: list[Any], env_reward: list[float], log_metric: Any = None, **kwargs: Any
) -> list[float]:
    """The reward function: the environment's own terminal reward, unchanged."""
    if log_metric is not None:
        for name in LOG_KEYS:
            values = kwargs.get(name)
            if values:
                log_metric(f"env/{name}", float(sum(values)) / len(values))
    return [float(r) for r in env_reward]
