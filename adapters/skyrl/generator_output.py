"""SkyRL's ``GeneratorOutput`` of a batch of trajectories, its metrics, the settings it refuses.

A flat batch is one row per trajectory (``flat_output``); a step-wise one, one row per planner
turn (``step_wise.py``). Both carry the metrics ``rollout_metrics`` gives, under ``METRIC``
beside SkyRL's own ``environment/*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skyrl.train.generators.base import GeneratorOutput
from skyrl.train.generators.utils import apply_overlong_filtering
from step_output import step_rows

from agentflow_env.rollout import (
    AdapterError,
    LogprobSample,
    TrainerEpisode,
    skyrl_group_signal,
    skyrl_samples,
)

METRIC = "environment/agentflow/"
"""The prefix of the generator's metrics in SkyRL's logs (beside its ``environment/*``)."""


def check_settings(cfg: Any) -> None:
    """Refuse SkyRL generator settings this generator cannot honour, rather than ignore them."""
    refused = []
    if getattr(cfg, "batched", False):
        refused.append(
            "generator.batched=true: SkyRL's batched path is single-turn with the engine "
            "rendering the chat; AgentFlow episodes are multi-turn and the env renders every "
            "prompt. Set it to false"
        )
    template = getattr(getattr(cfg, "chat_template", None), "name_or_path", None)
    if template is not None or getattr(cfg, "chat_template_kwargs", None):
        refused.append(
            "generator.chat_template / chat_template_kwargs: the env renders every prompt with "
            "the policy tokenizer's own chat template and no extra arguments, so these would "
            "not reach it. Leave them unset"
        )
    if refused:
        raise AdapterError("AgentFlowGenerator cannot honour " + "; ".join(refused) + ".")


def rollout_metrics(
    logs: Sequence[dict[str, float]], rewards: Sequence[float], trajectory_ids: Any
) -> dict[str, float]:
    """The batch's mean row logs (``TrainerEpisode.logs``; ``error``: trajectories that raised),
    ``env/failed`` (the failure rate the fail-fast guard counts) and, where SkyRL names each
    row's group (``trajectory_ids``, as its trainer does), the group signal of the rewards SkyRL
    trains on: the fractions of groups whose rewards are all equal (no gradient) and all 0, and
    the mean |advantage|."""
    metrics = {f"{METRIC}{key}": sum(log[key] for log in logs) / len(logs) for key in logs[0]}
    metrics["env/failed"] = metrics[f"{METRIC}failed"]
    if trajectory_ids is not None:
        signal = skyrl_group_signal(list(rewards), trajectory_ids)
        for key in ("equal_reward_groups", "all_zero_groups", "mean_abs_advantage"):
            metrics[f"{METRIC}{key}"] = signal[key]
    return metrics


def batch_output(
    runs: Sequence[TrainerEpisode],
    cfg: Any,
    shape: str,
    trajectory_ids: Any,
    filler: int,
    fill: float | None,
) -> tuple[GeneratorOutput, list[int]]:
    """The batch's output in ``shape`` and, per row, its trajectory's count of unscored ids.
    Each row's reward is its trajectory's (0 unless the engine stopped, under SkyRL's
    ``zero_reward_on_non_stop``); ``fill``: as ``flat_output``'s."""
    episodes = [run.episode for run in runs]
    stop_reasons = [run.stop_reason for run in runs]
    rewards = [float(e.reward) for e in episodes]
    if cfg.zero_reward_on_non_stop:
        rewards = [r if s == "stop" else 0.0 for r, s in zip(rewards, stop_reasons, strict=True)]
    logs = [run.logs for run in runs]
    metrics = rollout_metrics(logs, rewards, trajectory_ids)
    overlong = cfg.apply_overlong_filtering
    if shape == "turns":
        rows = step_rows(episodes, rewards, stop_reasons, logs, trajectory_ids)
        return rows.output(metrics, filler, fill, overlong), rows.unscored
    output = flat_output(runs, rewards, metrics, filler, fill, overlong)
    return output, [e.unscored for e in episodes]


def scored_samples(
    output: GeneratorOutput, unscored: Sequence[int], temperature: Any
) -> list[LogprobSample]:
    """The rows ``agentflow-env check-logprobs`` reads: a filled log-prob is no sampling
    log-prob, so the rows of trajectories with unscored ids are left out."""
    scored = {
        key: [row for row, n in zip(output[key], unscored, strict=True) if not n]
        for key in ("prompt_token_ids", "response_ids", "loss_masks", "rollout_logprobs")
    }
    return skyrl_samples(scored, temperature)


def flat_output(
    runs: Sequence[TrainerEpisode],
    rewards: list[float],
    metrics: dict[str, float],
    filler: int,
    fill: float | None,
    overlong: bool,
) -> GeneratorOutput:
    """SkyRL's ``GeneratorOutput``, one row per trajectory: ``rollout_logprobs`` when ``fill``
    is set (``None``: the batch asked for none); ``overlong``: ``apply_overlong_filtering``."""
    episodes = [run.episode for run in runs]
    stop_reasons = [run.stop_reason for run in runs]
    # A response is never empty (SkyRL puts the reward on its last token): a masked filler.
    responses = [list(e.response_ids) or [filler] for e in episodes]
    masks = [list(e.response_mask) if e.response_ids else [0] for e in episodes]
    if overlong:
        masks = apply_overlong_filtering(masks, stop_reasons)
    logprobs = None
    if fill is not None:
        logprobs = [run.logprobs(len(r), fill) for run, r in zip(runs, responses, strict=True)]
    return {
        "prompt_token_ids": [e.prompt_ids for e in episodes],
        "response_ids": responses,
        "rewards": rewards,
        "loss_masks": masks,
        "stop_reasons": stop_reasons,
        "rollout_metrics": metrics,
        "rollout_logprobs": logprobs,
        "trajectory_ids": None,
        "trajectory_generation_times": None,
        "rollout_expert_indices": None,
        "is_last_step": None,
        "env_metrics": [run.logs for run in runs],
    }


__all__ = [
    "METRIC",
    "batch_output",
    "check_settings",
    "flat_output",
    "rollout_metrics",
    "scored_samples",
]
