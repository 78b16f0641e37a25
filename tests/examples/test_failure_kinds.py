"""``examples/trl/failure_kinds.py``'s classification of a failed episode's searches, on
hand-built episodes (no model): every kind, and the order that settles overlaps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import load_adapter

fk = load_adapter("examples/trl/failure_kinds.py", "agentflow_failure_kinds_example")

QUESTION = "What is the employer of the recording artist of the album The Leipever Nights?"
GOLD = ["The Leipever Nights album", "Thydand Monus"]
PAGE = (
    "Step 1 result (Search):\n[1] The Leipever Nights (album)\n"
    "The Leipever Nights is a 1987 album by Thydand Monus. The record label of The Leipever "
    "Nights is Fokaes Music.\n\n[2] The Leipever Nights (novel)\n"
    "The Leipever Nights is a novel by Thydand Labim. The Leipever Nights was published by "
    "Terox Press.\nVerification: CONTINUE"
)


def second_step(said: str, first: str = GOLD[0], page: str = PAGE) -> tuple[int, str] | None:
    """The failure of a two-hop episode whose first search is ``first`` and second ``said``."""
    return fk.failure_step(QUESTION, GOLD, [fk.Action(first, ""), fk.Action(said, page)])


@pytest.mark.parametrize(
    ("said", "kind"),
    [
        ("Thydand Monus", None),  # every step exact
        ("Thydand Monis", "garbled"),
        ("The Leipever Nights album", "repeat"),
        ("The Leipever Nihgts album", "repeat"),  # a garbled repeat
        ("Thydand Labim", "page_name"),
        ("Terox Press", "page_name"),
        ("fokaes music", "page_name"),  # case does not matter
        ("Fokaes Musik", "made_up"),  # a near copy of a name on the page is not enough
        ("recording artist", "question_name"),
        ("Varand Lokei", "made_up"),
        ("", "made_up"),
    ],
)
def test_second_step_kinds(said: str, kind: str | None) -> None:
    assert second_step(said) == (None if kind is None else (1, kind))


def test_first_step_and_missing() -> None:
    assert fk.failure_step(QUESTION, GOLD, []) == (0, "missing")
    assert fk.failure_step(QUESTION, GOLD, [fk.Action(GOLD[0], "")]) == (1, "missing")
    assert fk.failure_step(QUESTION, GOLD, [fk.Action("The Leipever Nights", "")]) == (
        0,
        "garbled",
    )
    # Nothing was retrieved before the first action: only the question can be its source.
    assert fk.failure_step(QUESTION, GOLD, [fk.Action("the recording artist", "")]) == (
        0,
        "question_name",
    )
    assert fk.failure_step(QUESTION, GOLD, [fk.Action("Zhidesk Press", "")]) == (0, "made_up")


def test_precedence() -> None:
    """garbled before repeat before page_name before question_name before made_up."""

    def kind(said: str, earlier: list[str], seen: str = PAGE, question: str = QUESTION) -> str:
        return fk.classify(said, GOLD[1], question=question, seen=seen, earlier=earlier)

    # Near the gold name, and a repeat of an earlier search: garbled.
    assert kind("Thydand Monus!", earlier=["Thydand Monus!"]) == "garbled"
    # Repeated, on the page and in the question: repeat.
    assert "The Leipever Nights" in PAGE and "The Leipever Nights" in QUESTION
    assert kind("The Leipever Nights", earlier=["The Leipever Nights"]) == "repeat"
    # On the page and in the question, not repeated: page_name.
    assert kind("The Leipever Nights", earlier=["Dredykux"]) == "page_name"
    # In the question only: question_name; with the question gone too: made_up.
    assert kind("the album", earlier=[GOLD[0]]) == "question_name"
    assert kind("the album", earlier=[GOLD[0]], question="Who?") == "made_up"
    assert fk.KINDS == (
        "missing",
        "exact",
        "garbled",
        "repeat",
        "page_name",
        "question_name",
        "made_up",
    )


def test_the_gold_name_is_no_other_name() -> None:
    """A piece of the gold name, found where the text holds the gold name, is made_up (when not
    similar enough to be garbled)."""
    question = "Who founded Staeser Pictures?"
    assert fk.classify("Staeser", "Staeser Pictures", question=question) == "made_up"
    assert fk.classify("Staeser Picture", "Staeser Pictures", question=question) == "garbled"
    assert fk.classify("Who", "Staeser Pictures", question=question) == "question_name"
    # On the page, the bridge entity is the gold name of the second step; "Thydand" also
    # starts another name there.
    assert fk.classify("Monus", GOLD[1], seen=PAGE, earlier=[GOLD[0]]) == "made_up"
    assert fk.classify("Thydand", GOLD[1], seen=PAGE, earlier=[GOLD[0]]) == "page_name"
    assert fk.classify("Labim", GOLD[1], seen=PAGE, earlier=[GOLD[0]]) == "page_name"


def test_in_text_matches_runs_of_words() -> None:
    assert fk.in_text("Thydand Monus", PAGE)  # "Monus." with its full stop
    assert fk.in_text("The Leipever Nights album", PAGE)  # "(album)" in brackets
    assert fk.in_text("the leipever nights", PAGE)
    assert not fk.in_text("Monus Thydand", PAGE)
    assert not fk.in_text("Thydand Monu", PAGE)
    assert not fk.in_text("Drugu Publishing", "Miroum Publishing is a publisher.")
    assert not fk.in_text("", PAGE)
    assert not fk.in_text("Thydand Monus", "")
    assert not fk.in_text("Thydand Monus", PAGE, besides="Thydand Monus")
    assert fk.in_text("Thydand Labim", PAGE, besides="Thydand Monus")


def test_episode_actions_reads_a_flat_sample() -> None:
    """Each action's Context, and the feedback before it (not the action's own tokens)."""
    pytest.importorskip("transformers")
    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer

    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    parts = [
        ("Context: The Leipever Nights album\nTool Name: Search", 1),
        (PAGE, 0),
        ("Context: Thydand Labim\nTool Name: Search", 1),
        ("Step 2 result (Search):\n[1] Thydand Labim\nThydand Labim works for Zhidesk.", 0),
        ("Tool Name: Search", 1),
    ]
    ids: list[int] = []
    mask: list[int] = []
    for text, planner in parts:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        ids += encoded
        mask += [planner] * len(encoded)
    actions = fk.episode_actions(SimpleNamespace(completion_ids=ids, env_mask=mask), tokenizer)
    assert [a.context for a in actions] == ["The Leipever Nights album", "Thydand Labim", ""]
    assert actions[0].seen == ""
    assert actions[1].seen == PAGE
    assert actions[2].seen.startswith(PAGE) and actions[2].seen.endswith("works for Zhidesk.")
    assert fk.failure_step(QUESTION, GOLD, actions) == (1, "page_name")


def test_tally_counts_per_hop_and_step() -> None:
    step = SimpleNamespace
    one = SimpleNamespace(
        hops=1,
        question="In what year did Dredykux gain independence?",
        gold_plan=[step(context="Dredykux")],
    )
    two = SimpleNamespace(hops=2, question=QUESTION, gold_plan=[step(context=c) for c in GOLD])
    episodes = [
        (True, [fk.Action("Dredykux", "")]),
        (False, [fk.Action("Dredykux independence", "")]),  # the gold name with a word added
        (False, [fk.Action("Dredykux", "")]),
        (False, [fk.Action(GOLD[0], ""), fk.Action("Thydand Labim", PAGE)]),
        (False, [fk.Action(GOLD[0], ""), fk.Action(GOLD[0], PAGE)]),
    ]
    report = fk.tally([one, one, one, two, two], episodes)
    assert report["by_hops"] == {
        "1": {"all_steps_exact": 1, "episodes": 3, "step1_made_up": 1, "success": 1},
        "2": {"episodes": 2, "step2_page_name": 1, "step2_repeat": 1},
    }
    assert report["examples"]["2"]["step2_repeat"] == [
        {"question": QUESTION, "gold": GOLD, "said": [GOLD[0], GOLD[0]]}
    ]
