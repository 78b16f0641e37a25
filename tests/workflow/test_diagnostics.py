"""The planner diagnostics on hand-built trajectories whose every value is known, and their
aggregate over episodes (confidence intervals, pooled rates, the results table)."""

from __future__ import annotations

import math
import random

import pytest

from agentflow_env.evaluation.metrics import (
    clean_diagnostics,
    format_table,
    summarize_diagnostics,
    wilson_interval,
)
from agentflow_env.tasks.base import PlanStep
from agentflow_env.workflow.diagnostics import (
    chose_tool,
    diagnose_episode,
    expected_tools,
    gold_steps_done,
    is_redundant,
    module_usage,
    recovered_failures,
    tool_usage,
)
from agentflow_env.workflow.memory import Memory, MemoryEntry, VerificationStatus

PLAN = (
    PlanStep("Search", "find the director", "Zhygel Dawn film"),
    PlanStep("Search", "find the birth year", "Kusum Kasal"),
    PlanStep("Calculator", "subtract", "1950 - 1901"),
)


def call(
    turn: int, tool: str, query: str, ok: bool = True, status: str = "CONTINUE", sub_goal: str = ""
) -> MemoryEntry:
    argument = "expression" if tool == "Calculator" else "query"
    return MemoryEntry(
        turn=turn,
        justification="",
        context=query,
        sub_goal=sub_goal or query,
        selected_tool=tool,
        tool_arguments={argument: query},
        tool_result="output" if ok else "",
        tool_ok=ok,
        verification_status=VerificationStatus(status),
        errors=() if ok else ("the tool failed",),
    )


def invalid(turn: int, sub_goal: str = "") -> MemoryEntry:
    return MemoryEntry(
        turn=turn,
        justification="",
        context="",
        sub_goal=sub_goal,
        selected_tool=None,
        tool_arguments={},
        tool_result="",
        tool_ok=False,
        verification_status=VerificationStatus.INVALID,
        errors=("malformed action",),
    )


def diagnose(entries, end_reason="max_turns", success=False, **kwargs):
    return diagnose_episode(
        entries,
        end_reason=end_reason,
        success=success,
        score=float(success),
        reward=float(success),
        **kwargs,
    )


def test_the_gold_plan_followed_exactly_scores_every_choice_right() -> None:
    entries = [
        call(1, "Search", "Zhygel Dawn film"),
        call(2, "Search", "Kusum Kasal"),
        call(3, "Calculator", "1950 - 1901", status="STOP"),
    ]
    d = diagnose(entries, "verifier_stop", True, plan=PLAN, evidence_answers=True)
    assert d["tool_selection_accuracy"] == 1.0 and d["tool_choices_scored"] == 3
    assert d["gold_chain_complete"] is True and d["premature_stop"] is False
    assert d["invalid_call_rate"] == 0.0 and d["redundant_call_rate"] == 0.0
    assert d["failures"] == 0 and d["recovery_rate"] is None


def test_a_detour_is_judged_against_the_step_still_pending() -> None:
    entries = [
        call(1, "Calculator", "1 + 1"),  # wrong: Search was due
        call(2, "Search", "something unrelated"),  # right tool, but it does not do step 1
        call(3, "Search", "Zhygel Dawn film"),  # does step 1
        call(4, "Calculator", "2 + 2"),  # wrong: step 2 (Search) is pending
    ]
    assert expected_tools(PLAN, entries) == ["Search", "Search", "Search", "Search"]
    d = diagnose(entries, plan=PLAN)
    assert (d["tool_choices_right"], d["tool_choices_scored"]) == (2, 4)
    assert d["tool_selection_accuracy"] == 0.5
    assert d["gold_chain_complete"] is False


def test_without_a_gold_plan_tool_selection_is_not_scored() -> None:
    d = diagnose([call(1, "Search", "x")])
    assert d["tool_choices_scored"] == 0 and d["tool_selection_accuracy"] is None
    assert d["gold_chain_complete"] is None


def test_zero_turns_gives_no_rates_and_no_division_by_zero() -> None:
    d = diagnose([], plan=PLAN)
    assert d["turns"] == 0 and d["tool_calls"] == 0
    for rate in (
        "invalid_call_rate",
        "tool_selection_accuracy",
        "recovery_rate",
        "redundant_call_rate",
    ):
        assert d[rate] is None
    assert d["gold_chain_complete"] is False and d["premature_stop"] is False


def test_all_invalid_turns() -> None:
    entries = [invalid(t) for t in (1, 2, 3)]
    d = diagnose(entries, plan=PLAN, invalid_calls=3)
    assert d["invalid_calls"] == 3 and d["invalid_call_rate"] == 1.0
    assert d["tool_selection_accuracy"] == 0.0  # no tool chosen is not the right tool
    assert d["failures"] == 3 and d["recovered"] == 0 and d["recovery_rate"] == 0.0
    assert d["tool_calls"] == 0 and d["redundant_call_rate"] is None


def test_invalid_calls_are_counted_from_turns_when_the_session_count_is_missing() -> None:
    d = diagnose([invalid(1), call(2, "Search", "x")])
    assert d["invalid_calls"] == 1 and d["invalid_call_rate"] == 0.5


def test_recovery_then_failure() -> None:
    entries = [
        call(1, "Search", "Zhygel Dawn film", ok=False),  # failure while step 1 is pending
        call(2, "Search", "Zhygel Dawn film"),  # recovers it
        call(3, "Search", "Kusum Kasal", ok=False),  # failure on step 2: never recovered
        invalid(4),  # failure on step 2 too
    ]
    assert recovered_failures(entries, PLAN) == (3, 1)
    d = diagnose(entries, plan=PLAN, success=False)
    assert (d["failures"], d["recovered"]) == (3, 1)
    assert d["recovery_rate"] == pytest.approx(1 / 3)


def test_recovery_without_a_plan_matches_sub_goals_by_words() -> None:
    entries = [
        call(1, "Search", "a", ok=False, sub_goal="find the birth year of Kusum Kasal"),
        call(2, "Search", "b", sub_goal="the weather in Paris"),  # another sub-goal
        call(3, "Search", "c", sub_goal="Kusum Kasal birth year find"),  # same words
        invalid(4, sub_goal=""),  # unreadable: any later success would recover it
    ]
    assert recovered_failures(entries) == (2, 1)


def test_redundant_calls_ignore_case_punctuation_and_word_order() -> None:
    entries = [
        call(1, "Search", "Kusum Kasal birth"),
        call(2, "Search", "birth, kusum KASAL!"),  # the same call again
        call(3, "Calculator", "Kusum Kasal birth"),  # another tool: not a repeat
        call(4, "Search", "Kusum Kasal death"),  # other words
    ]
    d = diagnose(entries)
    assert d["redundant_calls"] == 1 and d["redundant_call_rate"] == 0.25


def test_a_stop_is_premature_only_when_the_evidence_does_not_answer() -> None:
    stop = [call(1, "Search", "x", status="STOP")]
    assert diagnose(stop, "verifier_stop", evidence_answers=False)["premature_stop"] is True
    assert diagnose(stop, "verifier_stop", evidence_answers=True)["premature_stop"] is False
    assert diagnose(stop, "verifier_stop", evidence_answers=None)["premature_stop"] is None
    assert diagnose(stop, "max_turns", evidence_answers=False)["premature_stop"] is False


def test_the_episode_counts_are_the_per_turn_definitions() -> None:
    """``diagnose_episode`` walks the plan once and keys each call once; its counts must stay
    those of ``expected_tools``, ``chose_tool``, ``is_redundant``, ``recovered_failures`` and
    ``gold_steps_done`` turn by turn, on random trajectories."""
    rng = random.Random(0)
    words = ["Zhygel", "dawn", "Film", "Kusum", "kasal", "1950", "-", "1901"]
    tools = ["Search", "search_tool", "Calculator"]
    for _ in range(300):
        plan = PLAN[: rng.randint(0, 3)]
        entries = [
            invalid(i)
            if rng.random() < 0.2
            else call(i, rng.choice(tools), " ".join(rng.choices(words, k=3)), rng.random() < 0.7)
            for i in range(1, rng.randint(1, 7))
        ]
        end_reason = rng.choice(["planner_stop", "verifier_stop", "max_turns"])
        d = diagnose(entries, end_reason, plan=plan, evidence_answers=True)
        chosen = entries[:-1] if end_reason == "planner_stop" else entries
        expected = expected_tools(plan, chosen)
        scored = [(e, t) for e, t in zip(chosen, expected, strict=True) if t is not None]
        assert d["tool_choices_scored"] == len(scored)
        assert d["tool_choices_right"] == sum(chose_tool(e, t) for e, t in scored)
        assert d["redundant_calls"] == sum(
            is_redundant(e, entries[:i]) for i, e in enumerate(entries)
        )
        assert (d["failures"], d["recovered"]) == recovered_failures(entries, plan)
        complete = gold_steps_done(plan, entries) == len(plan)
        assert d["gold_chain_complete"] == (complete if plan else None)


def test_module_and_tool_usage_come_from_the_event_log() -> None:
    memory = Memory("q")
    memory.log(
        "module_call", 1, module="executor", latency_s=0.5, prompt_tokens=10, completion_tokens=3
    )
    memory.log(
        "module_call", 1, module="executor", latency_s=0.25, prompt_tokens=5, completion_tokens=0
    )
    memory.log("module_call", 1, module="verifier", latency_s=1.0)
    memory.log("tool_call", 1, tool="Search", ok=True, metadata={"latency_s": 0.1})
    memory.log("tool_call", 2, tool="Search", ok=False, metadata={})
    assert module_usage(memory.events) == {
        "executor": {"calls": 2, "latency_s": 0.75, "prompt_tokens": 15, "completion_tokens": 3},
        "verifier": {"calls": 1, "latency_s": 1.0, "prompt_tokens": 0, "completion_tokens": 0},
    }
    assert tool_usage(memory.events) == {"Search": {"calls": 2, "errors": 1, "latency_s": 0.1}}


# -- the aggregate -------------------------------------------------------------------------------
def test_wilson_interval_matches_the_textbook_values() -> None:
    low, high = wilson_interval(0, 300)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.01264, abs=1e-4)
    low, high = wilson_interval(50, 100)
    assert (low, high) == (pytest.approx(0.4038, abs=1e-4), pytest.approx(0.5962, abs=1e-4))
    assert wilson_interval(0, 0) == (None, None)


def test_rates_are_pooled_over_calls_not_averaged_over_episodes() -> None:
    rows = [
        diagnose([call(1, "Search", "Zhygel Dawn film")], plan=PLAN),  # 1 of 1 right
        diagnose([call(t, "Calculator", f"{t}") for t in range(1, 10)], plan=PLAN),  # 0 of 9
    ]
    summary = summarize_diagnostics(rows)
    accuracy = summary["tool_selection_accuracy"]
    assert accuracy["value"] == pytest.approx(0.1) and accuracy["n"] == 10  # not (1 + 0) / 2
    assert 0.0 <= accuracy["low"] <= accuracy["value"] <= accuracy["high"] <= 1.0


def test_summary_counts_intervals_and_the_budget_curve() -> None:
    win = diagnose(
        [call(1, "Search", "x", status="STOP")], "verifier_stop", True, evidence_answers=True
    )
    lose = diagnose(
        [call(1, "Search", "x", status="STOP")], "verifier_stop", False, evidence_answers=False
    )
    win["success_by_budget"] = [True, True]
    lose["success_by_budget"] = [False, False]
    summary = summarize_diagnostics([win, win, win, lose])
    assert summary["episodes"] == 4 and summary["success_rate"]["value"] == 0.75
    assert summary["premature_stop_rate"] == {
        **summary["premature_stop_rate"],
        "value": 0.25,
        "n": 4,
    }
    assert summary["end_reasons"] == {"verifier_stop": 4}
    assert [point["value"] for point in summary["success_by_budget"]] == [0.75, 0.75]
    assert summary == summarize_diagnostics([win, win, win, lose])  # the bootstrap is seeded
    table = format_table({"a": summary, "b": summarize_diagnostics([])})
    assert "75.0% [" in table and "n/a (n=0)" in table
    markdown = format_table({"a": summary}, markdown=True)
    assert markdown.splitlines()[0] == "| metric | a |" and markdown.count("\n") >= 10


def test_summary_of_nothing_is_empty_not_an_error() -> None:
    summary = summarize_diagnostics([])
    assert summary["episodes"] == 0 and summary["success_rate"]["value"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in summary.values())


def test_diagnostics_read_from_an_untrusted_file_are_cleaned_before_pooling() -> None:
    junk = {
        "success": "yes",
        "turns": "3",
        "tool_choices_right": float("nan"),
        "tool_choices_scored": 4,
        "premature_stop": 1,
        "success_by_budget": [True, "no"],
        "modules": {"executor": {"calls": 2, "latency_s": "slow"}, "x": 5},
    }
    clean = clean_diagnostics(junk)
    assert clean == {"tool_choices_scored": 4, "modules": {"executor": {"calls": 2}}}
    summary = summarize_diagnostics([clean, clean_diagnostics(None), clean_diagnostics([1])])
    assert summary["episodes"] == 3 and summary["success_rate"]["value"] == 0.0
    assert summary["tool_selection_accuracy"]["value"] == 0.0
