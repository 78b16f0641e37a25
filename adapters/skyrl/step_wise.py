"""SkyRL's step-wise trajectories for the token-exact generator: one row per planner turn.

``generator.step_wise_trajectories`` picks the sample shape (``agentflow_env.rollout``'s
``SampleShape``): off, one flat row per trajectory; on, one row per planner turn
(``run_token_episode(..., samples="turns")``), on exactly the observation ids the turn acted on
(the env's structured prompt, rebuilt from memory each turn, unless the env kwargs name flat
observations) and exactly the ids it sampled. ``AGENTFLOW_SAMPLES`` may only repeat the shape the
flag picks: SkyRL trains what its flag says, so a contradicting variable is refused at start-up.

The rows follow SkyRL 0.3.0's step-wise ``GeneratorOutput``: trajectories in input order, each
one's turns adjacent and in order, ``is_last_step`` true on its last turn only, its
``TrajectoryID`` on every turn. Every row carries its trajectory's reward as a scalar, its stop
reason and its logs: SkyRL's advantage reads the last step's reward only, while its
``zero_variance_filter`` groups every row by prompt, so a group of equal trajectory rewards must
also have equal rewards on every row.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl.train.generators.base import GeneratorOutput
from skyrl.train.generators.utils import apply_overlong_filtering

from agentflow_env.rollout import (
    SAMPLE_SHAPES,
    SAMPLES_VARIABLE,
    AdapterConfig,
    AdapterError,
    SampleShape,
    SharedEnvs,
    TokenBudget,
    TokenEpisode,
    TrainerSample,
)

_TRAINS = {"flat": "one sequence per trajectory", "turns": "one sequence per planner turn"}


def sample_shape(generator_cfg: Any, environ: Mapping[str, str] = os.environ) -> SampleShape:
    """The shape SkyRL's ``generator.step_wise_trajectories`` trains (on: ``turns``); an
    ``AdapterError`` when ``AGENTFLOW_SAMPLES`` names the other shape, or no shape at all."""
    step_wise = bool(getattr(generator_cfg, "step_wise_trajectories", False))
    shape: SampleShape = "turns" if step_wise else "flat"
    named = environ.get(SAMPLES_VARIABLE, "").strip()
    if named and named not in SAMPLE_SHAPES:
        raise AdapterError(
            f"{SAMPLES_VARIABLE}={named!r:.40} names no sample shape ({list(SAMPLE_SHAPES)}); "
            "unset it: generator.step_wise_trajectories picks the shape"
        )
    if named and named != shape:
        other = "false" if step_wise else "true"
        raise AdapterError(
            f"{SAMPLES_VARIABLE}={named} but generator.step_wise_trajectories="
            f"{str(step_wise).lower()}, so SkyRL would train {_TRAINS[shape]}, not the "
            f"{named} samples asked for. SkyRL's flag picks the shape: unset {SAMPLES_VARIABLE}, "
            f"or set generator.step_wise_trajectories={other} to train {_TRAINS[named]}."
        )
    return shape


def check_text_env_shape(environ: Mapping[str, str] = os.environ) -> None:
    """``--text-env`` (SkyRL's generator and ``AgentFlowTextEnv``): the env hands SkyRL a growing
    conversation, flat observations only; an ``AdapterError`` when ``AGENTFLOW_SAMPLES`` names
    another shape (SkyRL's own step-wise flag needs no env setting there)."""
    named = environ.get(SAMPLES_VARIABLE, "").strip()
    if named not in ("", "flat"):
        raise AdapterError(
            f"{SAMPLES_VARIABLE}={named!r:.40} with --text-env: AgentFlowTextEnv hands SkyRL's "
            "generator a conversation that grows by the env's feedback messages (flat "
            "observations), and SkyRL cuts it into steps itself under "
            f"generator.step_wise_trajectories. Unset {SAMPLES_VARIABLE}, or drop --text-env "
            "for the token-exact generator's per-turn rows."
        )


def token_budget(shape: SampleShape, max_input_length: int | None, per_turn: int) -> TokenBudget:
    """SkyRL's limits as the episode's budget. Flat: each action capped at ``per_turn`` and the
    whole sequence at ``max_input_length + per_turn``. Turns (as SkyRL's own step-wise loop):
    each turn's prompt at most ``max_input_length``, its action at most ``per_turn``."""
    if shape == "turns":
        return TokenBudget(prompt=max_input_length, response=per_turn)
    return TokenBudget(
        total=max_input_length + per_turn if max_input_length else None, turn=per_turn
    )


class ShapedSharedEnvs:
    """This process's ``SharedEnvs`` per sample shape, each configured from the ``AGENTFLOW_*``
    variables on its first use with ``AGENTFLOW_SAMPLES`` set to the shape (``sample_shape``
    has checked that the variable, if set, agrees), so the shape picks the observation mode."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shared: dict[str, SharedEnvs] = {}

    def __call__(self, shape: SampleShape = "flat") -> SharedEnvs:
        with self._lock:
            if shape not in self._shared:
                environ = {**os.environ, SAMPLES_VARIABLE: shape}
                self._shared[shape] = SharedEnvs(AdapterConfig.from_environ(environ))
            return self._shared[shape]


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
        known = [float(x) for x in self.sample.logprobs or []][:size]
        return known + [fill] * (size - len(known))


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


__all__ = [
    "SAMPLES_VARIABLE",
    "ShapedSharedEnvs",
    "StepRow",
    "StepRows",
    "check_text_env_shape",
    "check_trajectory_ids",
    "sample_shape",
    "step_rows",
    "token_budget",
]
