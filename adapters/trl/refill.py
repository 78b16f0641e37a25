"""Dynamic sampling with refill for ``rollout.py``'s ``rollout_func``: the TRL glue.

The logic is the core's (``agentflow_env.rollout.fill_informative_groups``); here the groups are
TRL's (``num_generations`` consecutive prompts), the greedy screen plays the trainer's own model,
and the report goes to the trainer: ``AgentFlowGRPOTrainer`` logs it (``refill_report``), any
other trainer gets its figures in TRL's metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trl_generation import trainer_lockstep

from agentflow_env.rollout import DynamicSampling, EpisodeResult, fill_informative_groups

logger = logging.getLogger("agentflow_env.adapters.trl")
Play = Callable[..., list[EpisodeResult]]
"""``play(labels, greedy=False)``: one episode per label with the trainer's model."""


def refilled(
    prompts: list[Any], trainer: Any, play: Play, sampling: DynamicSampling | None
) -> tuple[list[Any], list[EpisodeResult]]:
    """The labels and results of the batch that trains: ``prompts`` played, and with
    ``sampling`` its equal-reward groups refilled (the ranks in step over the trainer's
    collective)."""
    if sampling is None:
        return prompts, play(prompts)
    labels, results, report = fill_informative_groups(
        prompts,
        int(trainer.num_generations or 1),
        play,
        sampling,
        screen=(lambda labels: play(labels, greedy=True)) if sampling.screen_candidates else None,
        lockstep=trainer_lockstep(trainer),
    )
    metrics = getattr(trainer, "_metrics", None)
    if hasattr(trainer, "refill_report"):  # AgentFlowGRPOTrainer logs the report itself
        trainer.refill_report = report
    elif metrics is not None:
        for name, value in report.metrics().items():
            metrics["train"][name].append(value)
    reasons = ", ".join(sorted({d["reason"] for d in report.dropped})) or "none"
    logger.info(
        "dynamic sampling: %d of %d groups dropped (%s), %d refilled in %d rounds, %d kept",
        len(report.dropped),
        report.groups,
        reasons,
        report.refilled,
        report.rounds,
        report.kept_equal,
    )
    return labels, results


__all__ = ["refilled"]
