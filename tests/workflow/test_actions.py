"""Planner action and verifier verdict parsing."""

from __future__ import annotations

import contextlib
import random
import time

import pytest

from agentflow_env.workflow.actions import (
    ActionParseError,
    PlannerAction,
    Verdict,
    format_planner_action,
    parse_planner_action,
    parse_verdict,
)

CANONICAL = (
    "Justification: need a fact\nContext: capital of Veloria\nSub-Goal: find it\nTool Name: Search"
)
EXPECTED = PlannerAction("need a fact", "capital of Veloria", "find it", "Search")


def best_time(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def growth(parse, small: str, large: str) -> float:
    """How much longer ``large`` takes than ``small`` (10x longer): ~10 if linear, ~100 if not.

    A ratio measured in one run, not a stopwatch: a loaded machine slows both sides alike.
    """
    parse(small)  # warm caches and compiled patterns
    return best_time(lambda: parse(large)) / max(best_time(lambda: parse(small)), 1e-6)


def parse_quietly(text: str) -> None:
    with contextlib.suppress(ActionParseError):
        parse_planner_action(text)
    parse_verdict(text)


# Linear work gives ~10x for 10x the input; quadratic gives ~100x. The bound leaves room for noise.
MAX_GROWTH = 35.0


def test_canonical_block() -> None:
    assert parse_planner_action(CANONICAL) == EXPECTED


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_empty_output_is_a_readable_error(text: str) -> None:
    with pytest.raises(ActionParseError, match="empty"):
        parse_planner_action(text)


def test_missing_tool_name_names_the_found_fields() -> None:
    with pytest.raises(ActionParseError, match="Tool Name") as info:
        parse_planner_action("Justification: j\nContext: c\nSub-Goal: s")
    assert "found Justification, Context, Sub-Goal" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_empty_tool_name_is_an_error() -> None:
    with pytest.raises(ActionParseError, match="empty"):
        parse_planner_action("Context: c\nTool Name:  ``  \n")


def test_error_message_shows_the_expected_format() -> None:
    with pytest.raises(ActionParseError) as info:
        parse_planner_action("I think we should search.")
    message = str(info.value)
    for key in ("Justification:", "Context:", "Sub-Goal:", "Tool Name:"):
        assert key in message


@pytest.mark.parametrize(
    "text",
    [
        "**Justification:** need a fact\n**Context:** capital of Veloria\n"
        "**Sub-Goal:** find it\n**Tool Name:** Search",
        "**Justification**: need a fact\n**Context**: capital of Veloria\n"
        "**Sub-Goal**: find it\n**Tool Name**: **Search**",
        "*Justification: need a fact*\n_Context:_ capital of Veloria\n"
        "__Sub-Goal__: find it\n***Tool Name:*** `Search`.",
        "### Justification\nneed a fact\n### Context\ncapital of Veloria\n\n"
        "### Sub Goal\nfind it\n### Tool Name\nSearch\n",
        "justification: need a fact\nCONTEXT: capital of Veloria\nSubgoal: find it\n"
        "tool_name: 'Search'",
        "Justification : need a fact\nContext: capital of Veloria\nSub_Goal: find it\n"
        'Tool-Name: "Search"!',
        "1. Justification: need a fact\n2. Context: capital of Veloria\n3. Sub Goal: find it\n"
        "4. Tool name: Search;",
        "- Justification: need a fact\n- Context: capital of Veloria\n- Sub-goal: find it\n"
        "- Tool Name: Search",
        "Justification\uff1a need a fact\nContext\uff1a capital of Veloria\nSub-Goal\uff1a find it\n"
        "Tool Name\uff1a Search",
    ],
)
def test_markdown_and_key_variants(text: str) -> None:
    assert parse_planner_action(text) == EXPECTED


def test_fields_in_any_order() -> None:
    text = "Tool Name: Search\nSub-Goal: find it\nContext: capital of Veloria\nJustification: need a fact"
    assert parse_planner_action(text) == EXPECTED


def test_multi_line_values_and_surrounding_prose() -> None:
    text = (
        "Let me think about the next step.\n\n"
        "Justification: need a fact\nthat we lack\n\n"
        "Context: capital of Veloria\n  (the northern one)\n"
        "Sub-Goal: find it\n"
        "Tool Name: Search\n\nI hope this helps!"
    )
    action = parse_planner_action(text)
    assert action.justification == "need a fact\nthat we lack"
    assert action.context == "capital of Veloria\n  (the northern one)"
    assert action.tool_name == "Search"


def test_code_fence_around_the_block() -> None:
    text = f"Here is my plan:\n```\n{CANONICAL}\n```\nAfter the fence."
    assert parse_planner_action(text) == EXPECTED


def test_code_block_inside_a_value_is_kept() -> None:
    text = "Context: run this\n```python\nprint(6 * 7)\n```\nSub-Goal: compute\nTool Name: Python"
    action = parse_planner_action(text)
    assert action.context == "run this\n```python\nprint(6 * 7)\n```"
    assert action.sub_goal == "compute"


def test_inline_keys_on_one_line() -> None:
    text = (
        "Justification: need a fact Context: capital of Veloria Sub-Goal: find it Tool Name: Search"
    )
    assert parse_planner_action(text) == EXPECTED


@pytest.mark.parametrize(
    "text",
    [
        '{"justification": "need a fact", "context": "capital of Veloria", '
        '"sub_goal": "find it", "tool_name": "Search"}',
        'Sure.\n```json\n{\n  "Justification": "need a fact",\n  "Context": "capital of Veloria",'
        '\n  "Sub-Goal": "find it",\n  "Tool Name": "Search"\n}\n```\nDone.',
        '{"next_step": {"tool_name": "Search", "subgoal": "find it", '
        '"context": "capital of Veloria", "justification": "need a fact"}}',
        # Broken JSON (trailing comma) falls back to the line reader.
        '{\n  "justification": "need a fact",\n  "context": "capital of Veloria",\n'
        '  "sub_goal": "find it",\n  "tool_name": "Search",\n}',
    ],
)
def test_json_form(text: str) -> None:
    assert parse_planner_action(text) == EXPECTED


def test_json_values_may_span_lines() -> None:
    text = '{"context": "line one\nline two", "tool_name": "Search"}'
    assert parse_planner_action(text).context == "line one\nline two"


def test_last_complete_block_wins() -> None:
    first = format_planner_action("j1", "c1", "s1", "Search")
    second = format_planner_action("j2", "c2", "s2", "Calculator")
    assert parse_planner_action(f"{first}\n\n{second}").tool_name == "Calculator"
    # An unfinished block after a complete one does not count.
    assert parse_planner_action(f"{first}\n\nJustification: j2\nContext: c2").context == "c1"


def test_last_block_wins_across_text_and_json() -> None:
    text_block = format_planner_action("j1", "c1", "s1", "Search")
    json_block = '{"context": "c2", "tool_name": "Calculator"}'
    assert parse_planner_action(f"{text_block}\n{json_block}").tool_name == "Calculator"
    assert parse_planner_action(f"{json_block}\n{text_block}").tool_name == "Search"


def test_last_json_action_wins() -> None:
    first = '{"context": "c1", "tool_name": "Search"}'
    second = '{"context": "c2", "tool_name": "Calculator"}'
    action = parse_planner_action(f"{first}\nthen, on reflection:\n{second}")
    assert (action.context, action.tool_name) == ("c2", "Calculator")
    assert parse_planner_action(f"{second}\n{first}").context == "c1"


def test_duplicate_key_before_tool_name_overrides() -> None:
    text = "Justification: j\nContext: draft\nContext: final\nSub-Goal: s\nTool Name: Search"
    action = parse_planner_action(text)
    assert action.context == "final"
    assert action.justification == "j"


def test_other_module_output_inside_a_value_is_plain_text() -> None:
    text = (
        "Justification: j\nContext: the verifier said\nConclusion: STOP\nbut we continue\n"
        "Sub-Goal: s\nTool Name: Search"
    )
    action = parse_planner_action(text)
    assert action.context == "the verifier said\nConclusion: STOP\nbut we continue"
    assert action.tool_name == "Search"


def test_tool_name_takes_the_first_line_only() -> None:
    assert parse_planner_action("Tool Name: `Search`.\nsome trailing prose").tool_name == "Search"
    assert parse_planner_action("Tool Name: Wikipedia_Search_Tool").tool_name == (
        "Wikipedia_Search_Tool"
    )


@pytest.mark.parametrize(
    "value",
    [
        "\u7ef4\u6d1b\u5229\u4e9a\u7684\u9996\u90fd\u662f\u54ea\u91cc\uff1f",  # CJK
        "find \U0001f680 launches \U0001f468\u200d\U0001f469\u200d\U0001f467",  # emoji, ZWJ
        "\u05de\u05d4 \u05d4\u05d1\u05d9\u05e8\u05d4 \u0645\u0627 \u0647\u064a",  # RTL
    ],
)
def test_unicode_values(value: str) -> None:
    text = format_planner_action(value, value, value, "Search")
    assert parse_planner_action(text) == PlannerAction(value, value, value, "Search")


def test_junk_parses_in_linear_time() -> None:
    rng = random.Random(7)
    alphabet = '{}[]"\\:*#_`\n abcContextTool Name'
    junk = "".join(rng.choice(alphabet) for _ in range(200_000))
    assert growth(parse_quietly, junk[:20_000], junk) < MAX_GROWTH


@pytest.mark.parametrize(
    ("unit", "count"),
    [
        ("Context: x\n", 10_000),
        ("Tool Name: x\n", 8_000),
        (CANONICAL, 1_000),
        ("Tool Name:", 10_000),
        ('{"a":', 20_000),
        ('{"tool_name": ', 8_000),
        ('{"context": [', 7_000),
        ("*", 100_000),
        (" ", 100_000),
        ("Conclusion: ", 10_000),
        ("x", 100_000),
    ],
    ids=[
        "context-keys",
        "tool-keys",
        "blocks",
        "inline-keys",
        "open-braces",
        "json-keys",
        "nested-json",
        "stars",
        "spaces",
        "conclusions",
        "letters",
    ],
)
def test_large_adversarial_inputs_are_linear(unit: str, count: int) -> None:
    small, large = unit * (count // 10) + "x", unit * count + "x"
    assert growth(parse_quietly, small, large) < MAX_GROWTH


def _random_value(rng: random.Random, *, multiline: bool) -> str:
    alphabet = (
        "abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789 .,;:!?'\"()[]{}*_#-+=/\\<>|@$%^&~`"
        "\u00e9\u00fc\u00df\u4e16\u754c\u05e9\u05dc\u05d5\u05dd\U0001f600\u200d\t"
    )
    if multiline:
        alphabet += "\n\n\r"
    value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
    return value.strip()


def test_format_parse_round_trip_on_random_strings() -> None:
    """Any stripped values round-trip, unless a value line itself reads as a key or a fence."""
    rng = random.Random(1234)
    checked = 0
    for _ in range(500):
        justification, context, sub_goal = (_random_value(rng, multiline=True) for _ in range(3))
        tool = "".join(rng.choice("ABCdef_xyz0123") for _ in range(rng.randint(1, 20)))
        tool = tool.strip("_") or "Search"
        values = (justification, context, sub_goal)
        lines = [line.lstrip() for value in values for line in value.splitlines()]
        if any(line.startswith(("```", "~~~")) for line in lines):
            continue
        text = format_planner_action(justification, context, sub_goal, tool)
        expected = PlannerAction(justification, context, sub_goal, tool)
        assert parse_planner_action(text) == expected
        checked += 1
    assert checked > 450


@pytest.mark.parametrize(
    ("text", "stop"),
    [
        ("The answer is supported.\nConclusion: STOP", True),
        ("Missing a date.\nConclusion: CONTINUE", False),
        ("**Conclusion:** STOP", True),
        ("**Conclusion**: continue.", False),
        ("Conclusion: 'Stop'", True),
        ('Conclusion: "CONTINUE"!', False),
        ("conclusion:\n**STOP**", True),
        ("## Conclusion: Stop.", True),
        ('{"analysis": "ok", "conclusion": "STOP"}', True),
    ],
)
def test_verdict_variants(text: str, stop: bool) -> None:
    verdict = parse_verdict(text)
    assert verdict is not None
    assert verdict.stop is stop


def test_last_conclusion_wins_and_rationale_is_the_text_before() -> None:
    text = "At first: Conclusion: STOP\nBut the year is unverified.\n**Conclusion: CONTINUE**"
    verdict = parse_verdict(text)
    assert verdict == Verdict(
        stop=False, rationale="At first: Conclusion: STOP\nBut the year is unverified."
    )


@pytest.mark.parametrize(
    "text", ["", "No verdict here.", "Conclusion: maybe", "Conclusion: STOPPED", "Conclusion STOP"]
)
def test_no_verdict(text: str) -> None:
    assert parse_verdict(text) is None
