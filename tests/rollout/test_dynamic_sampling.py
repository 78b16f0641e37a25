"""Dynamic sampling with refill (``fill_informative_groups``), over scripted episode outcomes.

Each label names the rewards its group's episodes get, so what is dropped, refilled and kept is
known exactly; the episodes themselves are the driver's ``EpisodeResult``s.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agentflow_env.rollout import DynamicSampling, EpisodeResult, fill_informative_groups
from agentflow_env.rollout.training.dynamic_sampling import group_drop_reason

G = 4


def result(reward: float, success: bool | None = None) -> EpisodeResult:
    solved = reward >= 1.0 if success is None else success
    return EpisodeResult([1], [2], [1], [0.0], reward, solved, 1, "answered")


class Scripted:
    """Plays labels ``{"id": n, "rewards": [...], "greedy": bool}``: member ``k`` of a group gets
    ``rewards[k]``; the greedy screen succeeds where ``greedy`` is true. Counts every call."""

    def __init__(self) -> None:
        self.played: list[list[Any]] = []
        self.screened: list[list[Any]] = []

    def play(self, labels: list[Any]) -> list[EpisodeResult]:
        self.played.append(list(labels))
        seen: dict[int, int] = {}
        out = []
        for label in labels:
            k = seen.get(label["id"], 0)
            seen[label["id"]] = k + 1
            out.append(result(label["rewards"][k % len(label["rewards"])]))
        return out

    def screen(self, labels: list[Any]) -> list[EpisodeResult]:
        self.screened.append(list(labels))
        return [result(1.0 if label["greedy"] else 0.0) for label in labels]


def batch(*groups: dict[str, Any]) -> list[Any]:
    return [g for g in groups for _ in range(G)]


def reserve_of(labels: list[dict[str, Any]]) -> Any:
    stream = iter(labels)
    return lambda n: list(itertools.islice(stream, n))


MIXED = [0.0, 1.0, 0.0, 0.0]


def task(n: int, rewards: list[float], greedy: bool = False) -> dict[str, Any]:
    return {"id": n, "rewards": rewards, "greedy": greedy}


def test_equal_reward_groups_are_dropped_with_their_reason_and_refilled() -> None:
    script = Scripted()
    labels = batch(task(0, MIXED), task(1, [0.0]), task(2, [1.0]), task(3, [0.5]))
    reserve = [task(10, [0.0]), task(11, MIXED), task(12, [1.0, 0.0])]
    sampling = DynamicSampling(reserve=reserve_of(reserve), max_rounds=3)
    out_labels, results, report = fill_informative_groups(labels, G, script.play, sampling)

    assert [(d["slot"], d["reason"]) for d in report.dropped] == [
        (1, "all_failed"),
        (2, "all_solved"),
        (3, "all_failed"),  # a partial reward, equal in the group
    ]
    # Round 1 plays three new questions for the three slots: 10 is equal too, 11 and 12 refill
    # slots 1 and 2; then the reserve is dry and the last slot keeps its group.
    assert [len(call) for call in script.played] == [16, 12]
    assert report.refilled == 2 and report.kept_equal == 1 and report.rounds == 1
    assert [label["id"] for label in out_labels[::G]] == [0, 11, 12, 3]
    assert [r.reward for r in results[G : 2 * G]] == MIXED  # the refill's own episodes
    assert report.episodes == 16 + 12
    assert report.metrics()["dynamic/informative_groups"] == 3.0
    assert report.metrics()["dynamic/dropped_all_solved"] == 1.0


def test_every_group_informative_plays_nothing_more() -> None:
    script = Scripted()
    labels = batch(task(0, MIXED), task(1, [1.0, 0.0]))
    sampling = DynamicSampling(reserve=reserve_of([]), max_rounds=5)
    out_labels, results, report = fill_informative_groups(labels, G, script.play, sampling)
    assert out_labels == labels and len(script.played) == 1
    assert report.dropped == [] and report.rounds == 0


def test_rounds_are_bounded_and_a_slot_without_refill_keeps_its_group() -> None:
    script = Scripted()
    labels = batch(task(0, [0.0]))
    never = (task(100 + i, [0.0]) for i in itertools.count())
    sampling = DynamicSampling(reserve=lambda n: list(itertools.islice(never, n)), max_rounds=2)
    out_labels, results, report = fill_informative_groups(labels, G, script.play, sampling)
    assert report.rounds == 2 and report.refill_groups == 2 and report.kept_equal == 1
    assert out_labels == labels and [r.reward for r in results] == [0.0] * G


def test_the_screen_prefers_questions_greedy_fails() -> None:
    script = Scripted()
    labels = batch(task(0, [0.0]), task(1, [0.0]))
    reserve = [
        task(10, MIXED, greedy=True),
        task(11, MIXED, greedy=False),
        task(12, MIXED, greedy=True),
        task(13, MIXED, greedy=False),
    ]
    sampling = DynamicSampling(reserve=reserve_of(reserve), max_rounds=1, screen_candidates=2)
    out_labels, _, report = fill_informative_groups(
        labels, G, script.play, sampling, screen=script.screen
    )
    assert [x["id"] for x in script.screened[0]] == [10, 11, 12, 13]
    assert [x["id"] for x in out_labels[::G]] == [11, 13]  # the greedy failures, in order
    assert report.screened == 4 and report.screen_failed == 2 and report.episodes == 8 + 4 + 8


def test_ranks_play_the_same_number_of_rounds() -> None:
    """Under lockstep a rank with nothing to refill still plays (an empty batch) while another
    rank refills: its generate calls are collectives."""
    script = Scripted()
    labels = batch(task(0, MIXED))
    agreed: list[int] = []

    def other_rank_still_needs(value: int) -> int:
        agreed.append(value)
        return 1 if len(agreed) < 3 else value

    sampling = DynamicSampling(reserve=reserve_of([]), max_rounds=4)
    _, _, report = fill_informative_groups(
        labels, G, script.play, sampling, lockstep=other_rank_still_needs
    )
    assert agreed == [0, 0, 0] and report.rounds == 2
    assert [len(call) for call in script.played] == [4, 0, 0]


def test_bad_batches_and_settings_are_refused() -> None:
    script = Scripted()
    sampling = DynamicSampling(reserve=reserve_of([]))
    with pytest.raises(ValueError, match="groups of 4"):
        fill_informative_groups(batch(task(0, MIXED))[:3], G, script.play, sampling)
    mixed = [task(0, MIXED)] * 2 + [task(1, MIXED)] * 2
    with pytest.raises(ValueError, match="mixes 2 tasks"):
        fill_informative_groups(mixed, G, script.play, sampling)
    with pytest.raises(ValueError, match="screen"):
        fill_informative_groups(
            batch(task(0, MIXED)),
            G,
            script.play,
            DynamicSampling(reserve=sampling.reserve, screen_candidates=1),
        )
    with pytest.raises(ValueError, match="max_rounds"):
        DynamicSampling(reserve=sampling.reserve, max_rounds=-1)


def test_drop_reasons() -> None:
    assert group_drop_reason([result(0.0)] * 3) == "all_failed"
    assert group_drop_reason([result(1.0)] * 3) == "all_solved"
    assert group_drop_reason([result(0.0), result(1.0)]) is None
    # Equal rewards, mixed success (the answer's score and a cost cancel): no signal either.
    assert group_drop_reason([result(0.5, True), result(0.5, False)]) == "all_equal"
