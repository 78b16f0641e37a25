"""The two shapes a trajectory is cut into for a trainer, and the observation modes each trains
on: ``flat`` (one sample per trajectory) and ``turns`` (one per planner turn); the samples
themselves are ``training.samples.TrainerSample``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

SampleShape = Literal["flat", "turns"]
SAMPLE_SHAPES: tuple[str, ...] = get_args(SampleShape)
SHAPE_OBSERVATION_MODES: Mapping[str, tuple[str, ...]] = {
    "flat": ("flat",),
    "turns": ("structured", "flat"),
}
"""The observation modes each shape trains on, the default first: a flat sample needs prompts
that only grow; turn samples take any prompt, AgentFlow's structured one by default."""


def check_sample_shape(samples: str) -> SampleShape:
    """``samples`` if it names a shape, else ``ValueError`` listing them."""
    if samples not in SAMPLE_SHAPES:
        raise ValueError(f"samples must be one of {list(SAMPLE_SHAPES)}, got {samples!r:.40}")
    return samples  # type: ignore[return-value]


def shape_observation_mode(samples: str, kwargs: Mapping[str, Any]) -> str:
    """The observation mode envs run in for ``samples``: the one ``kwargs`` name (if the shape
    takes it), else the shape's default; ``ValueError`` naming both otherwise."""
    allowed = SHAPE_OBSERVATION_MODES[check_sample_shape(samples)]
    mode = kwargs.get("observation_mode", allowed[0])
    if mode not in allowed:
        raise ValueError(
            f"observation_mode={mode!r:.40} cannot be trained as samples={samples!r}: "
            f"{samples} samples take {' or '.join(allowed)} (structured prompts are rebuilt "
            "each turn, so only samples='turns' trains on them)"
        )
    return str(mode)


__all__ = [
    "SAMPLE_SHAPES",
    "SHAPE_OBSERVATION_MODES",
    "SampleShape",
    "check_sample_shape",
    "shape_observation_mode",
]
