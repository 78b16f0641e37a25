"""SkyRL's step-wise trajectories for the token-exact generator: one row per planner turn.

``generator.step_wise_trajectories`` picks the sample shape (``agentflow_env.rollout``'s
``SampleShape``): off, one flat row per trajectory; on, one row per planner turn
(``run_token_episode(..., samples="turns")``), on exactly the observation ids the turn acted on
(the env's structured prompt, rebuilt from memory each turn, unless the env kwargs name flat
observations) and exactly the ids it sampled. ``AGENTFLOW_SAMPLES`` may only repeat the shape the
flag picks: SkyRL trains what its flag says, so a contradicting variable is refused at start-up.
The rows themselves: ``step_output.py``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from agentflow_env.rollout import (
    SAMPLE_SHAPES,
    SAMPLES_VARIABLE,
    AdapterConfig,
    AdapterError,
    SampleShape,
    SharedEnvs,
    TokenBudget,
    env_var_text,
)

_TRAINS = {"flat": "one sequence per trajectory", "turns": "one sequence per planner turn"}


def sample_shape(generator_cfg: Any, environ: Mapping[str, str] = os.environ) -> SampleShape:
    """The shape SkyRL's ``generator.step_wise_trajectories`` trains (on: ``turns``); an
    ``AdapterError`` when ``AGENTFLOW_SAMPLES`` names the other shape, or no shape at all."""
    step_wise = bool(getattr(generator_cfg, "step_wise_trajectories", False))
    shape: SampleShape = "turns" if step_wise else "flat"
    named = env_var_text(SAMPLES_VARIABLE, environ) or ""
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
    named = env_var_text(SAMPLES_VARIABLE, environ) or ""
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


__all__ = [
    "SAMPLES_VARIABLE",
    "ShapedSharedEnvs",
    "check_text_env_shape",
    "sample_shape",
    "token_budget",
]
