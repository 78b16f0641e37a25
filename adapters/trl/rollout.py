"""A ``rollout_func`` for TRL's ``GRPOTrainer``: AgentFlow episodes with the trainer's model as planner.

Load it by path (``adapters/`` is a folder of thin files, not a package)::

    sys.path.insert(0, "adapters/trl")
    from rollout import env_reward, make_rollout_func, task_prompt

    dataset = Dataset.from_dict({"prompt": [task_prompt(seed) for seed in range(1000)]})
    trainer = GRPOTrainer(model, reward_funcs=env_reward, train_dataset=dataset,
                          rollout_func=make_rollout_func({"hops": 1, "fresh_world": True}), ...)

A prompt is a task label (``agentflow_env.rollout.labels.plans``; ``agentflow-env labels --format
trl`` writes a dataset of them). The episodes run in the batched driver
``agentflow_env.rollout.run_episodes`` (flat observations, token-in-token-out, zero-reward
samples for failed episodes, lockstep across ranks); this file is the TRL glue: the trainer's
generation path (``HFGenerator`` on the unwrapped model, or TRL's vLLM engine), the ranks'
collective and TRL's return value (``env_mask`` 1 on planner tokens, 0 on feedback; unknown
log-probs NaN), or with ``samples="turns"`` turn samples for ``turn_samples.py``. Details:
``adapters/trl/README.md``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from refill import refilled
from trl_generation import trainer_generate, trainer_lockstep
from trl_outputs import LOG_KEYS, env_reward, rollout_output

# HFGenerator and task_prompt are only re-exported, for the scripts that load this file.
from agentflow_env.rollout import (
    DEFAULT_ENV_ID,
    CreditMethod,
    DynamicSampling,
    EpisodeResult,
    FailFast,
    Generate,
    HFGenerator,
    Normalization,
    SampleShape,
    check_credit_options,
    default_pool,
    fail_fast_limit,
    read_env_var,
    task_prompt,
    token_advantages,
)
from agentflow_env.rollout import run_episodes as run_batched_episodes

logger = logging.getLogger("agentflow_env.adapters.trl")
DEFAULT_ENV_KWARGS: dict[str, Any] = {
    "hops": 1,
    "fresh_world": True,
    "world_size": "small",
    "prompt_style": "compact",
    "max_turns": 3,
}
"""Beneath ``make_rollout_func``'s env kwargs for labels that name no env id (``task_prompt``'s)
when it runs ``AgentFlow-Search-v0`` (the default ``env_id``): 1-hop questions in a fresh small
world, 3 turns. A label naming an env id, or any other ``env_id`` (a probe, ``AgentFlow-Code-v0``,
whose settings these are not), does without them."""
TRL_MAX_ACTION_TOKENS = 48
"""``make_rollout_func``'s per-action token cap (every env's ``max_action_tokens``) when it is
given none: short actions, for the small models this adapter trains on a CPU. The other
adapters' default, ``ADAPTER_MAX_ACTION_TOKENS`` (1024), is for full-size policies."""
_POOL = default_pool()  # where episodes run unless a pool is given (tests look inside)


def run_episodes(
    specs: Sequence[Any], generate: Generate, tokenizer: Any, **options: Any
) -> list[EpisodeResult]:
    """``agentflow_env.rollout.run_episodes`` (same arguments), warning on this
    adapter's logger; the evaluator and ``rollout_func`` both run episodes through it."""
    return run_batched_episodes(specs, generate, tokenizer, **{"log": logger, **options})


def make_rollout_func(
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    max_action_tokens: int = TRL_MAX_ACTION_TOKENS,
    env_id: str = DEFAULT_ENV_ID,
    credit: CreditMethod | None = None,
    value_forks: int = 0,
    samples: SampleShape = "flat",
    normalize: Normalization = "trajectory",
    env_url: str | None = None,
    dynamic_sampling: DynamicSampling | None = None,
) -> Callable[[list[Any], Any], dict[str, list]]:
    """A ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``: one completion per prompt entry
    (TRL's sampler already repeats each prompt ``num_generations`` times; the copies share one
    task). ``env_kwargs`` apply beneath each label's own; with several processes the ranks
    generate in lockstep over the trainer's accelerator.

    ``credit`` (``"broadcast"``, ``"progress"``, ``"monte_carlo"``;
    ``agentflow_env.rollout.training.group_credit``) adds ``token_advantages`` to the output, one value per
    completion token, which ``TurnCreditGRPOTrainer`` (``adapters/trl/turn_credit.py``) uses in
    place of TRL's own advantages; ``monte_carlo`` needs ``value_forks=K`` forked continuations
    per turn. Groups are the prompts with equal labels within the call.

    ``samples="turns"`` (structured observations unless a label asks for flat ones) adds each
    trajectory's turn samples (``turn_samples``) for ``TurnSamplesGRPOTrainer``, which trains
    a row per turn, advantages by ``credit`` (default broadcast) and ``normalize``
    (``"trajectory"`` or ``"turn"``, broadcast only). The function's ``samples`` names its shape.

    A failed episode is a zero-reward sample; but when the first ``AGENTFLOW_FAIL_FAST`` (16)
    episodes all fail the same way before any has run, the call raises ``SystemicFailure``
    naming the reason (``agentflow_env.rollout.checks.fail_fast``): the setup is wrong.

    ``env_url`` (default ``AGENTFLOW_ENV_URL``): play the episodes on served envs
    (``agentflow-env serve``, its token ``AGENTFLOW_SERVE_TOKEN``), token for token the same.

    ``dynamic_sampling`` (``DynamicSampling``): equal-reward groups are refilled with new
    questions (``refill.py``); the output's ``labels`` are the questions that trained."""
    user_kwargs = dict(env_kwargs or {})
    env_url = env_url or read_env_var("AGENTFLOW_ENV_URL")
    check_credit_options(credit, value_forks, samples, normalize)  # ValueError
    turns = samples == "turns"
    guard = FailFast(fail_fast_limit(os.environ), "AgentFlow's TRL rollout")

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        if turns and getattr(trainer, "samples", "flat") != "turns":
            raise TypeError(
                "make_rollout_func(samples='turns') returns turn samples, which only "
                "TurnSamplesGRPOTrainer (adapters/trl/turn_samples.py) trains; a wrapped rollout "
                "needs TurnSamplesGRPOTrainer(..., samples='turns')"
            )
        timing: dict[str, float] = {}
        options = {
            "max_action_tokens": max_action_tokens,
            "env_id": env_id,
            "env_kwargs": user_kwargs,
            "default_env_kwargs": DEFAULT_ENV_KWARGS if env_id == DEFAULT_ENV_ID else None,
            "lockstep": trainer_lockstep(trainer),
            "samples": samples,
            "env_url": env_url,
            "env_token": read_env_var("AGENTFLOW_SERVE_TOKEN"),
        }
        tokenizer = trainer.processing_class

        def play(labels: list[Any], greedy: bool = False) -> list[EpisodeResult]:
            forks = value_forks if credit == "monte_carlo" and not greedy else 0
            generate = trainer_generate(trainer, greedy=greedy)
            return run_episodes(
                labels, generate, tokenizer, value_forks=forks, timing=timing, **options
            )

        labels, results = refilled(list(prompts), trainer, play, dynamic_sampling)
        if hasattr(trainer, "rollout_timing"):  # AgentFlowGRPOTrainer logs the split
            trainer.rollout_timing = timing
        for result in results:
            guard.record(result.failure)
        output: dict[str, Any] = rollout_output(results)
        output["labels"] = labels
        if turns:
            output["turn_samples"] = [r.trainer_samples() for r in results]
            output["turn_values"] = [r.turn_values for r in results]
            output["turn_credit"] = credit or "broadcast"
            output["turn_normalize"] = normalize
        elif credit is not None:
            output["token_advantages"] = token_advantages(labels, results, credit)
        return output

    rollout_func.samples = samples  # type: ignore[attr-defined]
    return rollout_func


__all__ = [
    "DEFAULT_ENV_KWARGS",
    "LOG_KEYS",
    "TRL_MAX_ACTION_TOKENS",
    "HFGenerator",
    "env_reward",
    "make_rollout_func",
    "rollout_output",
    "run_episodes",
    "task_prompt",
    "trainer_generate",
    "trainer_lockstep",
]
