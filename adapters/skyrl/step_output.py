"""SkyRL's step-wise ``GeneratorOutput``: one row per planner turn (``step_wise.py``: the shape).

The rows follow SkyRL 0.3.0's step-wise ``GeneratorOutput``: trajectories in input order, each
one's turns adjacent and in order, ``is_last_step`` true on its last turn only, its
``TrajectoryID`` on every turn. Every row carries its trajectory's reward as a scalar, its stop
reason and its logs: SkyRL's advantage reads the last step's reward only, while its
``zero_variance_filter`` groups every row by prompt, so a group of equal trajectory rewards must
also have equal rewards on every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl.train.generators.base import GeneratorOutput
from skyrl.train.generators.utils import apply_overlong_filtering

from agentflow_env.rollout import AdapterError, TokenEpisode, TrainerSample, padded_logprobs


@dataclass
class StepRow:
    """One planner turn's row: the turn's sample and what it carries of its trajectory."""

    sample: TrainerSample
    reward: float
    stop_reason: str
    trajectory_id: Any
    is_last_step: bool
    logs: dict[str, float]
    unscored: int
    """The trajectory's count of sampled ids the engine did not score."""

    def response(self, filler: int) -> tuple[list[int], list[int]]:
        """The sampled ids and their mask (a sample without ids, never expected, becomes one
        masked ``filler`` token: SkyRL puts the reward on a response's last token)."""
        if not self.sample.response_ids:
            return [filler], [0]
        return list(self.sample.response_ids), list(self.sample.response_mask)

    def logprobs(self, size: int, fill: float) -> list[float]:
        """``size`` log-probs: the sample's (``run_token_episode`` fills unscored turns), then
        ``fill``."""
        return padded_logprobs(self.sample.logprobs, size, fill)


@dataclass
class StepRows:
    """A batch's rows in SkyRL's step-wise layout: trajectories in input order, each one's
    turns adjacent and in order."""

    rows: list[StepRow] = field(default_factory=list)

    @property
    def unscored(self) -> list[int]:
        return [row.unscored for row in self.rows]

    def output(
        self, metrics: dict[str, float], filler: int, fill: float | None, overlong: bool
    ) -> GeneratorOutput:
        """SkyRL's step-wise ``GeneratorOutput``: ``rollout_logprobs`` when ``fill`` is set
        (``None``: the batch asked for none); ``overlong``: ``apply_overlong_filtering`` on the
        rows, which carry their trajectory's stop reason, so it masks whole trajectories."""
        responses = [row.response(filler) for row in self.rows]
        stop_reasons = [row.stop_reason for row in self.rows]
        masks = [mask for _, mask in responses]
        if overlong:
            masks = apply_overlong_filtering(masks, stop_reasons)
        logprobs = None
        if fill is not None:
            pairs = zip(self.rows, responses, strict=True)
            logprobs = [row.logprobs(len(ids), fill) for row, (ids, _) in pairs]
        return {
            "prompt_token_ids": [list(row.sample.prompt_ids) for row in self.rows],
            "response_ids": [ids for ids, _ in responses],
            "rewards": [row.reward for row in self.rows],
            "loss_masks": masks,
            "stop_reasons": stop_reasons,
            "rollout_metrics": metrics,
            "rollout_logprobs": logprobs,
            "trajectory_ids": [row.trajectory_id for row in self.rows],
            "trajectory_generation_times": None,
            "rollout_expert_indices": None,
            "is_last_step": [row.is_last_step for row in self.rows],
            "env_metrics": [dict(row.logs) for row in self.rows],
        }


def check_trajectory_ids(trajectory_ids: Sequence[Any] | None) -> Sequence[Any]:
    """The batch's ``trajectory_ids``, which step-wise rows cannot do without (they tie each
    turn's row to its trajectory; SkyRL's trainer sets them), else an ``AdapterError``."""
    if trajectory_ids is None:
        raise AdapterError(
            "generator.step_wise_trajectories=true needs the batch's trajectory_ids (SkyRL's "
            "trainer sets them): they tie each planner turn's row to its trajectory"
        )
    return trajectory_ids


def step_rows(
    episodes: Sequence[TokenEpisode],
    rewards: Sequence[float],
    stop_reasons: Sequence[str],
    logs: Sequence[dict[str, float]],
    trajectory_ids: Sequence[Any] | None,
) -> StepRows:
    """One row per planner turn of each episode (``TokenEpisode.trainer_samples``; a trajectory
    that failed before its first turn is one reward-0 row), each with its trajectory's reward
    (the one SkyRL trains on), stop reason, logs and ``TrajectoryID`` (``trajectory_ids``: the
    batch's, one per episode)."""
    trajectory_ids = check_trajectory_ids(trajectory_ids)
    out = StepRows()
    columns = (episodes, rewards, stop_reasons, logs, trajectory_ids)
    for episode, reward, stop, log, trajectory_id in zip(*columns, strict=True):
        samples = episode.trainer_samples()
        for index, sample in enumerate(samples):
            last = index + 1 == len(samples)
            row = StepRow(sample, float(reward), stop, trajectory_id, last, log, episode.unscored)
            out.rows.append(row)
    return out


__all__ = ["StepRow", "StepRows", "check_trajectory_ids", "step_rows"]
