"""A ``rollout_func`` for TRL's ``GRPOTrainer``: AgentFlow episodes with the trainer's model as planner.

Load it by path (``adapters/`` is not an installed package)::

    sys.path.insert(0, "adapters/trl")
    from rollout import env_reward, make_rollout_func, task_prompt

    dataset = Dataset.from_dict({"prompt": [task_prompt(seed) for seed in range(1000)]})
    trainer = GRPOTrainer(model, reward_funcs=env_reward, train_dataset=dataset,
                          rollout_func=make_rollout_func({"hops": 1, "fresh_world": True}), ...)

Each dataset prompt is a task spec (``task_prompt``: a ``TaskSpec`` JSON with the episode seed and
env kwargs). TRL's sampler repeats each prompt ``num_generations`` times; every copy runs the same
task (same seed, so the same world and question), which is what Flow-GRPO's group needs. An
episode runs in flat observation mode, so the whole trajectory is one sequence: the first prompt
is ``prompt_ids``; planner actions and environment feedback alternate in ``completion_ids``;
``env_mask`` is 1 on planner tokens and 0 on feedback, and TRL's loss uses
``completion_mask * env_mask``. Actions go to the env as the sampled ids with their log-probs
(token-in-token-out). The env's terminal reward comes back as ``env_reward`` for the reward
function ``env_reward``; ``success``, ``turns`` and ``invalid_actions`` are logged as metrics.

Generation uses the trainer's own model: ``generate`` on the unwrapped model (as TRL does), or
TRL's vLLM engine when ``use_vllm=True``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentflow_env.env import AgentFlowEnv
from agentflow_env.tasks.base import Task
from agentflow_env.tasks.spec import TaskSpec, TaskSpecError, env_kwargs_from_json

DEFAULT_ENV_KWARGS: dict[str, Any] = {
    "hops": 1,
    "fresh_world": True,
    "world_size": "small",
    "prompt_style": "compact",
    "max_turns": 3,
}


def task_prompt(seed: int, **env_kwargs: Any) -> str:
    """A dataset prompt naming one task: a ``TaskSpec`` (the label format the OpenRLHF adapter
    uses too) with the episode seed and env kwargs (over the rollout's defaults)."""
    return TaskSpec(env_id=None, env_kwargs=env_kwargs, seed=int(seed)).to_json()


def parse_task_prompt(prompt: Any) -> tuple[int, dict[str, Any]]:
    """``(seed, env kwargs)`` from a ``task_prompt`` string (or an already-decoded dict)."""
    spec = TaskSpec.from_json(prompt)
    if spec.seed is None:
        raise TaskSpecError(f"a TRL task prompt names an episode seed, got {prompt!r:.120}")
    return spec.seed, env_kwargs_from_json(spec.env_kwargs)


# -- generation backends ---------------------------------------------------------------------
Generate = Callable[[Sequence[Sequence[int]], int], tuple[list[list[int]], list[list[float]]]]


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
    token cap is set through ``max_completion_length`` for the duration of the call. With several
    processes in server mode every rank must call this the same number of times (see
    ``run_episodes``: one call per turn up to ``max_turns``).
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
        return [list(c) for c in completion_ids], [[lp[0] for lp in seq] for seq in logprobs]

    return generate


# -- episodes --------------------------------------------------------------------------------
@dataclass
class EpisodeResult:
    """One finished episode as a flat sample plus its outcome."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    reward: float
    success: bool
    turns: int
    end_reason: str
    metrics: dict[str, float] = field(default_factory=dict)


class EnvPool:
    """Reusable flat-mode envs per (env kwargs, tokenizer), and a cache of tasks per seed.

    The ``num_generations`` copies of a prompt share one generated task (world + question).
    """

    def __init__(self, max_cached_tasks: int = 8192) -> None:
        self._envs: dict[tuple[str, int], list[AgentFlowEnv]] = {}
        self._tasks: OrderedDict[tuple[str, int], Task] = OrderedDict()
        self._max_cached_tasks = max_cached_tasks

    def envs(self, env_kwargs: Mapping[str, Any], tokenizer: Any, count: int) -> list[AgentFlowEnv]:
        key = (json.dumps(env_kwargs, sort_keys=True, default=str), id(tokenizer))
        pool = self._envs.setdefault(key, [])
        while len(pool) < count:
            pool.append(
                AgentFlowEnv(**{**env_kwargs, "observation_mode": "flat", "tokenizer": tokenizer})
            )
        return pool[:count]

    def reset(self, env: AgentFlowEnv, env_kwargs: Mapping[str, Any], seed: int) -> dict[str, Any]:
        key = (json.dumps(env_kwargs, sort_keys=True, default=str), seed)
        task = self._tasks.get(key)
        if task is None:
            observation, _ = env.reset(seed=seed)
            self._tasks[key] = env.task
            if len(self._tasks) > self._max_cached_tasks:
                self._tasks.popitem(last=False)
            return observation
        self._tasks.move_to_end(key)
        observation, _ = env.reset(seed=seed, options={"task": task})
        return observation


_POOL = EnvPool()


def run_episodes(
    specs: Sequence[tuple[int, Mapping[str, Any]]],
    generate: Generate,
    tokenizer: Any,
    *,
    max_action_tokens: int = 48,
    pool: EnvPool | None = None,
) -> list[EpisodeResult]:
    """Run one episode per ``(seed, env kwargs)`` spec, all turns batched across episodes.

    ``generate(prompt_ids_batch, max_new_tokens)`` returns sampled ids and their log-probs. The
    same function evaluates a model (with a greedy ``HFGenerator``) and trains it.
    """
    pool = pool or _POOL
    groups: dict[str, list[int]] = {}
    for index, (_, kwargs) in enumerate(specs):
        groups.setdefault(json.dumps(dict(kwargs), sort_keys=True, default=str), []).append(index)
    envs: list[AgentFlowEnv | None] = [None] * len(specs)
    for indices in groups.values():
        kwargs = dict(specs[indices[0]][1])
        for index, env in zip(indices, pool.envs(kwargs, tokenizer, len(indices)), strict=True):
            envs[index] = env
    observations = [
        pool.reset(env, dict(kwargs), seed)
        for env, (seed, kwargs) in zip(envs, specs, strict=True)  # type: ignore[arg-type]
    ]
    results: list[EpisodeResult | None] = [None] * len(specs)
    active = list(range(len(specs)))
    while active:
        prompts = [observations[i]["token_ids"].tolist() for i in active]
        completions, logprobs = generate(prompts, max_action_tokens)
        still = []
        for i, ids, lps in zip(active, completions, logprobs, strict=True):
            env = envs[i]
            assert env is not None
            observation, reward, terminated, truncated, info = env.step(
                {"token_ids": ids, "logprobs": lps}
            )
            observations[i] = observation
            if terminated or truncated:
                results[i] = _result(env, float(reward), info)
            else:
                still.append(i)
        active = still
    return [r for r in results if r is not None]


def _result(env: AgentFlowEnv, reward: float, info: Mapping[str, Any]) -> EpisodeResult:
    sample = env.trajectory().flat_sample()
    length = sample.prompt_length
    metrics = dict(info.get("metrics", {}))
    return EpisodeResult(
        prompt_ids=sample.input_ids[:length],
        completion_ids=sample.completion_ids,
        env_mask=sample.completion_mask,
        logprobs=(sample.logprobs or [0.0] * len(sample.input_ids))[length:],
        reward=reward,
        success=bool(info.get("success", False)),
        turns=int(metrics.get("turns", 0)),
        end_reason=str(info.get("end_reason", "")),
        metrics=metrics,
    )


# -- the TRL seam ----------------------------------------------------------------------------
def make_rollout_func(
    env_kwargs: Mapping[str, Any] | None = None, *, max_action_tokens: int = 48
) -> Callable[[list[Any], Any], dict[str, list]]:
    """A ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``.

    ``env_kwargs`` (over ``DEFAULT_ENV_KWARGS``) apply to every task; a prompt's own ``env``
    entries override them. Returns one completion per prompt entry: TRL's sampler already
    repeats each prompt ``num_generations`` times.
    """
    defaults = {**DEFAULT_ENV_KWARGS, **dict(env_kwargs or {})}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        specs = []
        for prompt in prompts:
            seed, overrides = parse_task_prompt(prompt)
            specs.append((seed, {**defaults, **overrides}))
        results = run_episodes(
            specs,
            trainer_generate(trainer),
            trainer.processing_class,
            max_action_tokens=max_action_tokens,
        )
        return {
            "prompt_ids": [r.prompt_ids for r in results],
            "completion_ids": [r.completion_ids for r in results],
            "logprobs": [r.logprobs for r in results],
            "env_mask": [r.env_mask for r in results],
            "env_reward": [r.reward for r in results],
            "success": [float(r.success) for r in results],
            "turns": [r.turns for r in results],
            "invalid_actions": [float(r.metrics.get("invalid_actions", 0)) for r in results],
        }

    return rollout_func


def env_reward(
    completions: list[Any], env_reward: list[float], log_metric: Any = None, **kwargs: Any
) -> list[float]:
    """The reward function: the environment's own terminal reward, unchanged."""
    if log_metric is not None:
        for name in ("success", "turns", "invalid_actions"):
            values = kwargs.get(name)
            if values:
                log_metric(f"env/{name}", float(sum(values)) / len(values))
    return [float(r) for r in env_reward]
