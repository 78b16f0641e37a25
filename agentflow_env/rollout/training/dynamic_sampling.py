"""Dynamic sampling with refill: every group an update trains on carries signal.

A group whose trajectories all got the same reward has a zero advantage on every member: the
update still pays its forward and backward passes and learns nothing from it. DAPO's dynamic
sampling drops such groups and samples more questions until the batch is full of groups with
mixed rewards; online difficulty filtering prefers the questions the policy does not solve yet.
``fill_informative_groups`` does both, trainer-neutral, over any way of playing episodes:

1. play the batch's groups (``play``: sampled episodes, ``group_size`` per question);
2. drop every group with equal rewards, recording why (all failed, all solved, all equal);
3. draw new questions from ``DynamicSampling.reserve`` and play groups of them in the dropped
   slots, for at most ``max_rounds`` rounds; with ``screen_candidates``, each round first plays
   the candidates once greedily (``screen``) and refills from the ones greedy fails first: a
   question greedy fails whose group has a success is the signal that can change greedy's answer;
4. a slot that found no informative group keeps its dropped group (zero advantage): the
   trainer's batch keeps its shape.

With several ranks (``lockstep``), every rank plays the same number of rounds, so generate
calls that are collectives stay in step; a rank with nothing to refill plays an empty batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.rollout.training.driver import EpisodeResult, MaxAcrossRanks
from agentflow_env.rollout.training.turn_credit import group_key

__all__ = ["DynamicSampling", "RefillReport", "fill_informative_groups", "group_drop_reason"]

PlayEpisodes = Callable[[list[Any]], list[EpisodeResult]]
"""Plays one episode per label (in order) and returns their results."""


@dataclass(frozen=True)
class DynamicSampling:
    """The settings of dynamic sampling with refill.

    Args:
        reserve: ``reserve(n)`` draws ``n`` new task labels (questions the batch does not hold;
            each call new ones), from which dropped groups are refilled.
        max_rounds: refill rounds per batch at most (each plays the groups still missing).
        screen_candidates: ``0``: refill from the reserve in order. ``k > 0``: draw ``k``
            candidates per missing group, play each once greedily, and refill from the ones
            greedy fails first (then the others, in order).
    """

    reserve: Callable[[int], Sequence[Any]]
    max_rounds: int = 2
    screen_candidates: int = 0

    def __post_init__(self) -> None:
        if self.max_rounds < 0:
            raise ValueError(f"max_rounds must be >= 0, got {self.max_rounds}")
        if self.screen_candidates < 0:
            raise ValueError(f"screen_candidates must be >= 0, got {self.screen_candidates}")


@dataclass
class RefillReport:
    """What dynamic sampling did to one batch: the groups dropped and why, what refilled them."""

    groups: int
    dropped: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    refill_groups: int = 0
    refilled: int = 0
    kept_equal: int = 0
    screened: int = 0
    screen_failed: int = 0
    episodes: int = 0

    def metrics(self) -> dict[str, float]:
        """Per-batch figures for a trainer's log (``dynamic/*``)."""
        reasons: dict[str, int] = {}
        for drop in self.dropped:
            reasons[drop["reason"]] = reasons.get(drop["reason"], 0) + 1
        return {
            "dynamic/groups": float(self.groups),
            "dynamic/dropped": float(len(self.dropped)),
            **{f"dynamic/dropped_{reason}": float(n) for reason, n in sorted(reasons.items())},
            "dynamic/refilled": float(self.refilled),
            "dynamic/kept_equal": float(self.kept_equal),
            "dynamic/informative_groups": float(self.groups - self.kept_equal),
            "dynamic/rounds": float(self.rounds),
            "dynamic/refill_groups": float(self.refill_groups),
            "dynamic/screened": float(self.screened),
            "dynamic/screen_failed": float(self.screen_failed),
            "dynamic/episodes": float(self.episodes),
        }


def group_drop_reason(results: Sequence[EpisodeResult]) -> str | None:
    """Why a group carries no signal (``all_failed``, ``all_solved``, ``all_equal``: equal
    rewards), or ``None`` when its rewards differ. Solved is the episode's ``success``."""
    rewards = [float(r.reward) for r in results]
    if max(rewards) - min(rewards) > 1e-12:
        return None
    if not any(r.success for r in results):
        return "all_failed"
    if all(r.success for r in results):
        return "all_solved"
    return "all_equal"


def fill_informative_groups(
    labels: Sequence[Any],
    group_size: int,
    play: PlayEpisodes,
    sampling: DynamicSampling,
    *,
    screen: PlayEpisodes | None = None,
    lockstep: MaxAcrossRanks | None = None,
) -> tuple[list[Any], list[EpisodeResult], RefillReport]:
    """Plays ``labels`` (consecutive groups of ``group_size`` equal labels) and refills the
    groups with equal rewards (module docstring). Returns the labels and results of the batch
    that trains (same length and group layout as ``labels``) and the report."""
    if group_size < 1 or len(labels) % group_size:
        raise ValueError(f"{len(labels)} labels do not split into groups of {group_size}")
    if sampling.screen_candidates and screen is None:
        raise ValueError("screen_candidates needs a greedy screen (screen=)")
    out_labels, results = list(labels), play(list(labels))
    report = RefillReport(groups=len(labels) // group_size, episodes=len(results))
    missing: list[int] = []  # the dropped slots, by group index
    for slot in range(report.groups):
        members = results[slot * group_size : (slot + 1) * group_size]
        labels_here = {group_key(x) for x in labels[slot * group_size : (slot + 1) * group_size]}
        if len(labels_here) != 1:
            raise ValueError(f"group {slot} mixes {len(labels_here)} tasks")
        reason = group_drop_reason(members)
        if reason is not None:
            missing.append(slot)
            report.dropped.append(
                {
                    "slot": slot,
                    "label": group_key(labels[slot * group_size]),
                    "reward": float(members[0].reward),
                    "reason": reason,
                }
            )
    for _ in range(sampling.max_rounds):
        wanted = len(missing)
        if (wanted if lockstep is None else lockstep(int(wanted > 0))) == 0:
            break
        questions = _draw(sampling, wanted, screen, report)
        if not questions and wanted and lockstep is None:
            break  # the reserve ran dry
        report.rounds += 1
        played = play([q for q in questions for _ in range(group_size)])
        report.refill_groups += len(questions)
        report.episodes += len(played)
        for index, question in enumerate(questions):
            group = played[index * group_size : (index + 1) * group_size]
            if group_drop_reason(group) is not None or not missing:
                continue
            slot = missing.pop(0)
            start = slot * group_size
            out_labels[start : start + group_size] = [question] * group_size
            results[start : start + group_size] = group
            report.refilled += 1
    report.kept_equal = len(missing)
    return out_labels, results, report


def _draw(
    sampling: DynamicSampling,
    wanted: int,
    screen: PlayEpisodes | None,
    report: RefillReport,
) -> list[Any]:
    """``wanted`` questions for one round: the reserve's next ones, or with a screen the
    candidates greedy fails first."""
    if not sampling.screen_candidates:
        return list(sampling.reserve(wanted)) if wanted else []
    assert screen is not None
    candidates = list(sampling.reserve(wanted * sampling.screen_candidates)) if wanted else []
    greedy = screen(candidates)  # a collective under lockstep: every rank calls it
    report.screened += len(candidates)
    report.episodes += len(greedy)
    failed = [c for c, r in zip(candidates, greedy, strict=True) if not r.success]
    solved = [c for c, r in zip(candidates, greedy, strict=True) if r.success]
    report.screen_failed += len(failed)
    return (failed + solved)[:wanted]
