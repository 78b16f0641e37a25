"""Exact turn records and trainer-agnostic samples.

Every planner turn keeps the exact prompt ids its action was sampled from, the action ids as the
policy produced them (or as the env encoded a text action, once), optional sampling log-probs and,
in flat mode, the feedback ids that followed. Trainers consume one of two sample shapes:

- ``per_turn``: one sample per planner turn (prompt ids, completion ids, a loss mask of ones).
- ``flat``: one sample per trajectory: prompt, action 1, feedback 1, action 2, ... as a single
  sequence whose loss mask is 1 exactly on planner tokens (flat observation mode only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from agentflow_env.workflow.observations import OBSERVATION_MODES


@dataclass(frozen=True)
class TurnRecord:
    """One planner turn, token-exact."""

    turn: int
    prompt_ids: tuple[int, ...]
    action_ids: tuple[int, ...]
    action_text: str
    action_given_as_ids: bool
    logprobs: tuple[float, ...] | None = None
    feedback_ids: tuple[int, ...] = ()
    feedback_text: str = ""
    action_cut: bool = False
    reward: float = 0.0
    """The reward ``step`` returned for this turn: its shaping reward, plus the terminal reward
    on the last turn."""
    shaping: float = 0.0
    """This turn's shaping reward (``reward_shaping="progress"``; 0 without shaping)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "prompt_ids": list(self.prompt_ids),
            "action_ids": list(self.action_ids),
            "action_text": self.action_text,
            "action_given_as_ids": self.action_given_as_ids,
            "logprobs": None if self.logprobs is None else list(self.logprobs),
            "feedback_ids": list(self.feedback_ids),
            "feedback_text": self.feedback_text,
            "action_cut": self.action_cut,
            "reward": self.reward,
            "shaping": self.shaping,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnRecord:
        """The record ``as_dict`` wrote (ids and log-probs back as tuples)."""
        logprobs = data.get("logprobs")
        return cls(
            turn=int(data["turn"]),
            prompt_ids=tuple(int(i) for i in data["prompt_ids"]),
            action_ids=tuple(int(i) for i in data["action_ids"]),
            action_text=str(data["action_text"]),
            action_given_as_ids=bool(data["action_given_as_ids"]),
            # JSON has no NaN: an unscored id's log-prob (NaN) comes back as null.
            logprobs=None
            if logprobs is None
            else tuple(math.nan if x is None else float(x) for x in logprobs),
            feedback_ids=tuple(int(i) for i in data.get("feedback_ids", ())),
            feedback_text=str(data.get("feedback_text", "")),
            action_cut=bool(data.get("action_cut", False)),
            reward=float(data.get("reward", 0.0)),
            shaping=float(data.get("shaping", 0.0)),
        )


@dataclass(frozen=True)
class TurnSample:
    """A ``per_turn`` sample: the prompt exactly as seen at sampling time and the completion."""

    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]
    turn: int
    logprobs: list[float] | None = None
    reward: float = 0.0
    """The turn's step reward (its shaping reward, plus the terminal reward on the last turn)."""
    shaping: float = 0.0
    advantage: float | None = None
    """The turn's advantage, once a group's are computed (``with_advantages``)."""


@dataclass(frozen=True)
class FlatSample:
    """A ``flat`` sample: one sequence; ``loss_mask[i] == 1`` iff token i was produced by the planner.

    ``prompt_length`` tokens of ``input_ids`` form the first prompt; the rest is the completion
    (planner actions interleaved with environment feedback).
    """

    input_ids: list[int]
    loss_mask: list[int]
    prompt_length: int
    logprobs: list[float] | None = None

    @property
    def completion_ids(self) -> list[int]:
        return self.input_ids[self.prompt_length :]

    @property
    def completion_mask(self) -> list[int]:
        return self.loss_mask[self.prompt_length :]


@dataclass
class Trajectory:
    """A finished (or running) episode's turns and outcome."""

    task_id: str
    observation_mode: str
    turns: list[TurnRecord] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    metrics: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (what a served env sends its client at an episode's end)."""
        return {
            "task_id": self.task_id,
            "observation_mode": self.observation_mode,
            "turns": [t.as_dict() for t in self.turns],
            "reward": self.reward,
            "success": self.success,
            "metrics": dict(self.metrics),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """The trajectory ``as_dict`` wrote."""
        return cls(
            task_id=str(data["task_id"]),
            observation_mode=str(data["observation_mode"]),
            turns=[TurnRecord.from_dict(t) for t in data.get("turns", [])],
            reward=float(data.get("reward", 0.0)),
            success=bool(data.get("success", False)),
            metrics={str(k): float(v) for k, v in dict(data.get("metrics", {})).items()},
        )

    def per_turn_samples(self) -> list[TurnSample]:
        return [
            TurnSample(
                prompt_ids=list(t.prompt_ids),
                completion_ids=list(t.action_ids),
                loss_mask=[1] * len(t.action_ids),
                turn=t.turn,
                logprobs=None if t.logprobs is None else list(t.logprobs),
                reward=t.reward,
                shaping=t.shaping,
            )
            for t in self.turns
        ]

    def flat_sample(self) -> FlatSample:
        """The whole trajectory as one sequence (the final turn's feedback is left out)."""
        mode = OBSERVATION_MODES.get(self.observation_mode)
        if mode is None or not mode.grows:
            raise ValueError("flat samples need observation_mode='flat' (prompts that only grow)")
        if not self.turns:
            raise ValueError("a trajectory with no turns has no sample")
        ids = list(self.turns[0].prompt_ids)
        mask = [0] * len(ids)
        have_logprobs = all(t.logprobs is not None for t in self.turns)
        logprobs: list[float] = [0.0] * len(ids)
        for index, turn in enumerate(self.turns):
            if list(turn.prompt_ids) != ids:
                raise ValueError(f"turn {turn.turn}: prompt ids are not the running sequence")
            ids += turn.action_ids
            mask += [1] * len(turn.action_ids)
            logprobs += list(turn.logprobs or [0.0] * len(turn.action_ids))
            if index + 1 < len(self.turns):
                ids += turn.feedback_ids
                mask += [0] * len(turn.feedback_ids)
                logprobs += [0.0] * len(turn.feedback_ids)
        return FlatSample(
            ids, mask, len(self.turns[0].prompt_ids), logprobs if have_logprobs else None
        )

    def samples(
        self, shape: Literal["per_turn", "flat"] = "per_turn"
    ) -> list[TurnSample] | FlatSample:
        if shape == "per_turn":
            return self.per_turn_samples()
        if shape == "flat":
            return self.flat_sample()
        raise ValueError(f"shape must be 'per_turn' or 'flat', got {shape!r}")
