"""Exact match and token F1, with hand-computed values."""

from __future__ import annotations

import pytest

from agentflow_env.tasks.scoring import exact_match, f1_score, normalize_answer


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple,  a pear ", "apple pear"),
        ("Theatre of the Absurd", "theatre of absurd"),
        ("U.S.A.", "usa"),
        ("", ""),
        ("The", ""),
        ("Mount\tKorvath\n", "mount korvath"),
    ],
)
def test_normalize_answer(raw: str, normalized: str) -> None:
    assert normalize_answer(raw) == normalized


def test_exact_match_any_alias() -> None:
    assert exact_match("the Veloria City.", ["Veloria City"]) == 1.0
    assert exact_match("Velor", ["Veloria City", "Velor"]) == 1.0
    assert exact_match("Veloria", ["Veloria City"]) == 0.0


@pytest.mark.parametrize("prediction", [None, "", "   ", "the", "?!"])
def test_missing_prediction_scores_zero(prediction: str | None) -> None:
    assert exact_match(prediction, ["x"]) == 0.0
    assert f1_score(prediction, ["x"]) == 0.0


def test_no_gold_answers_scores_zero() -> None:
    assert exact_match("x", []) == 0.0
    assert f1_score("x", []) == 0.0


def test_bare_string_gold_is_one_alias() -> None:
    assert exact_match("Paris", "Paris") == 1.0
    assert f1_score("P", "Paris") == 0.0


def test_f1_hand_computed() -> None:
    # prediction: [queen, mara, of, korvath]; gold: [mara, of, korvath]
    # overlap 3, precision 3/4, recall 3/3, F1 = 2 * 0.75 * 1 / 1.75 = 6/7
    assert f1_score("Queen Mara of Korvath", ["Mara of Korvath"]) == pytest.approx(6 / 7)
    # prediction: [1887]; gold: [march, 3, 1887]: precision 1, recall 1/3, F1 = 0.5
    assert f1_score("1887", ["March 3, 1887"]) == pytest.approx(0.5)
    assert f1_score("totally wrong", ["Mara"]) == 0.0
    assert f1_score("The Mara", ["mara"]) == 1.0


def test_f1_takes_the_best_alias() -> None:
    # vs [red, river]: overlap 1, P 1/2, R 1/2 -> 0.5; vs [red]: P 1/2, R 1 -> 2/3
    assert f1_score("red lake", ["red river", "red"]) == pytest.approx(2 / 3)


def test_f1_counts_repeated_tokens_once_per_match() -> None:
    # prediction [a1, a1, b]; gold [a1, b, b]: common = {a1: 1, b: 1}, overlap 2
    # precision 2/3, recall 2/3, F1 = 2/3
    assert f1_score("a1 a1 b", ["a1 b b"]) == pytest.approx(2 / 3)
