"""Learned termination: who may end an episode (``termination``), the planner's finish action,
its scored answer, its turn record and the premature-stop diagnostic under each mode."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import pytest

from agentflow_env.evaluation.metrics import clean_diagnostics, summarize_diagnostics
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.tasks.base import PlanStep
from agentflow_env.workflow.actions import (
    ActionParseError,
    format_finish_action,
    format_planner_action,
    is_finish,
    parse_planner_action,
)
from agentflow_env.workflow.agentflow_format import FINISH_RULE
from agentflow_env.workflow.diagnostics import diagnose_episode
from agentflow_env.workflow.memory import MemoryEntry, VerificationStatus
from agentflow_env.workflow.outcome import EndReason
from agentflow_env.workflow.prompts import finish_instructions
from agentflow_env.workflow.session import SessionConfig
from agentflow_env.workflow.turn_log import read_turn_log

ENV_ID = "AgentFlow-Search-v0"
SEED = 11  # a two-hop bridge question the gold plan answers in two Search calls

Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


def make(termination: str, **settings: Any) -> gym.Env:
    return gym.make(ENV_ID, hops=2, termination=termination, **settings)


def plan_actions(env: gym.Env) -> list[str]:
    """The gold plan's steps as action texts (the verifier says STOP after the last one)."""
    return [
        format_planner_action("plan step", step.context, step.sub_goal, step.tool)
        for step in env.unwrapped.task.gold_plan
    ]


def gold(env: gym.Env) -> str:
    return env.unwrapped.task.gold_answers[0]


def play(env: gym.Env, actions: Sequence[str]) -> list[Step]:
    """Step through ``actions``, stopping early if the episode ends."""
    steps: list[Step] = []
    for action in actions:
        steps.append(env.step(action))
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


# -- the setting ---------------------------------------------------------------------------------
def test_termination_defaults_to_the_verifier_and_rejects_unknown_modes() -> None:
    assert SessionConfig().termination == "verifier"
    with pytest.raises(ValueError, match="termination must be one of"):
        SessionConfig(termination="planer")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="termination"):
        make("sometimes")
    env = make("both")
    assert env.unwrapped.config.to_dict()["termination"] == "both"
    assert env.unwrapped.session_config.termination == "both"
    env.close()


def test_a_tool_named_like_the_finish_action_is_refused_where_the_planner_may_finish() -> None:
    tools = [{"name": "Search", "rename": "finish_tool"}, "Calculator"]
    env = make("planner", tools=tools)
    with pytest.raises(ValueError, match="finish action"):
        env.reset(seed=SEED)
    env.close()
    env = make("verifier", tools=tools)  # no finish action: the name is free
    env.reset(seed=SEED)
    env.close()


# -- who ends the episode --------------------------------------------------------------------------
@pytest.mark.parametrize("termination", ["verifier", "both"])
def test_a_verifier_stop_ends_verifier_and_both(termination: str) -> None:
    env = make(termination)
    env.reset(seed=SEED)
    steps = play(env, plan_actions(env))
    _, reward, terminated, truncated, info = steps[-1]
    assert len(steps) == len(env.unwrapped.task.gold_plan)
    assert terminated and not truncated
    assert info["end_reason"] == "verifier_stop" and info["success"] and reward == 1.0
    assert info["diagnostics"]["verifier_stop"] and not info["diagnostics"]["planner_stop"]
    env.close()


def test_a_verifier_stop_does_not_end_planner_mode_but_is_shown() -> None:
    env = make("planner")
    env.reset(seed=SEED)
    steps = play(env, plan_actions(env))
    observation, reward, terminated, truncated, info = steps[-1]
    assert not terminated and not truncated and reward == 0.0
    assert info["verification"] == "STOP" and "end_reason" not in info
    assert "Verification: STOP" in observation["text"]
    observation, reward, terminated, truncated, info = env.step(format_finish_action(gold(env)))
    assert terminated and not truncated
    assert info["end_reason"] == EndReason.PLANNER_STOP == "planner_stop"
    assert info["success"] and reward == 1.0
    env.close()


def test_planner_mode_without_a_finish_runs_to_the_turn_limit() -> None:
    env = make("planner", max_turns=3)
    env.reset(seed=SEED)
    actions = plan_actions(env)
    steps = play(env, [*actions, actions[-1], actions[-1]])
    _, _, terminated, truncated, info = steps[-1]
    assert len(steps) == 3 and truncated and not terminated
    assert info["end_reason"] == "max_turns"
    assert info["success"]  # the generalist answers from the evidence gathered
    assert info["diagnostics"]["premature_stop"] is False
    env.close()


@pytest.mark.parametrize("termination", ["planner", "both"])
@pytest.mark.parametrize("correct", [True, False])
def test_a_finish_ends_planner_and_both_with_the_planner_answer_scored(
    termination: str, correct: bool
) -> None:
    env = make(termination)
    env.reset(seed=SEED)
    first = plan_actions(env)[0]
    answer = gold(env) if correct else "Nobody In Particular"
    steps = play(env, [first, format_finish_action(answer)])
    _, reward, terminated, truncated, info = steps[-1]
    assert len(steps) == 2 and terminated and not truncated
    assert info["end_reason"] == "planner_stop"
    assert info["answer"] == answer and "planner" in info["final_text"]
    assert info["success"] is correct and reward == (1.0 if correct else 0.0)
    assert info["diagnostics"]["planner_stop"] and not info["diagnostics"]["verifier_stop"]
    modules = info["diagnostics"]["modules"]
    assert "generalist" not in modules  # the planner answered
    assert modules["verifier"]["calls"] == 1  # the tool turn only, not the finish
    env.close()


def test_the_planner_answer_is_scored_as_usual_tags_and_f1() -> None:
    env = make("planner", reward="f1")
    env.reset(seed=SEED)
    words = gold(env).split()
    tagged = f"I think <answer>{words[0]}</answer>"
    _, reward, terminated, _, info = env.step(format_finish_action(tagged))
    assert terminated and info["answer"] == tagged
    assert reward == pytest.approx(2 / (1 + len(words)))  # F1 of the tag's one word
    env.close()


class RecordingJudge:
    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def judge(self, question: str, answer: str | None, gold_answers: Sequence[str]) -> float:
        self.seen.append(answer)
        return 0.25


def test_the_planner_answer_goes_to_the_judge() -> None:
    judge = RecordingJudge()
    env = make("planner", reward="llm_judge", judge=judge)
    env.reset(seed=SEED)
    _, reward, _, _, info = env.step(format_finish_action("<answer>Blue Harbor</answer>"))
    assert judge.seen == ["Blue Harbor"] and reward == 0.25 and info["score"] == 0.25
    env.close()


@pytest.mark.parametrize(
    "finish",
    [format_finish_action("   "), "Justification: done\nTool Name: Finish"],
    ids=["blank answer", "no answer field"],
)
def test_a_finish_without_an_answer_lets_the_generalist_answer(finish: str) -> None:
    env = make("planner")
    env.reset(seed=SEED)
    steps = play(env, [*plan_actions(env), finish])
    _, reward, terminated, _, info = steps[-1]
    assert terminated and info["end_reason"] == "planner_stop"
    assert info["answer"] == gold(env) and info["final_text"] == f"The answer is {gold(env)}."
    assert info["success"] and reward == 1.0
    assert info["diagnostics"]["modules"]["generalist"]["calls"] == 1
    env.close()


def test_a_finish_on_the_last_turn_is_a_planner_stop_not_a_limit() -> None:
    env = make("planner", max_turns=1)
    env.reset(seed=SEED)
    _, _, terminated, truncated, info = env.step(format_finish_action(gold(env)))
    assert terminated and not truncated and info["end_reason"] == "planner_stop"
    env.close()


# -- verifier mode: the finish action is what it always was ----------------------------------------
def test_in_verifier_mode_a_finish_is_an_invalid_turn_as_before() -> None:
    env = make("verifier")
    env.reset(seed=SEED)
    _, reward, terminated, truncated, info = env.step(format_finish_action(gold(env)))
    assert not terminated and not truncated and reward == 0.0
    assert info["verification"] == "INVALID"
    assert info["errors"] == ["unknown tool 'Finish'; available tools: Search, Calculator"]
    entry = info["memory"][-1]
    assert entry["unmatched_tool"] == "Finish" and entry["selected_tool"] is None
    assert env.unwrapped.session.metrics.invalid_actions == 1
    env.close()


def test_without_finish_a_final_answer_line_stays_in_the_field_above_it() -> None:
    text = "Context: capital of Veloria\nFinal Answer: Blue Harbor\nTool Name: Search"
    plain = parse_planner_action(text)
    assert plain.context == "capital of Veloria\nFinal Answer: Blue Harbor"
    assert plain.final_answer is None
    finishing = parse_planner_action(text, finish=True)
    assert finishing.context == "capital of Veloria" and finishing.final_answer == "Blue Harbor"
    assert not is_finish(finishing)


@pytest.mark.parametrize(
    "text",
    [
        format_finish_action("Blue Harbor"),
        '{"justification": "done", "final_answer": "Blue Harbor", "tool_name": "Finish"}',
        "**Final Answer:** Blue Harbor\n**Tool Name:** `finish`",
        "Justification: done Final Answer: Blue Harbor Tool Name: FINISH",
        "```\nTool Name: Finish_Tool\nFinal answer: Blue Harbor\n```",
    ],
)
def test_the_finish_action_parses_in_every_form_the_parser_reads(text: str) -> None:
    action = parse_planner_action(text, finish=True)
    assert is_finish(action) and action.final_answer == "Blue Harbor"


# -- records: memory, event log, turn records, trajectory log --------------------------------------
def test_the_finish_turn_is_recorded_in_memory_events_and_exact_turn_records(tmp_path) -> None:
    log = tmp_path / "turns.jsonl"
    env = make("planner", observation_mode="flat", log_path=str(log))
    env.reset(seed=SEED)
    first = plan_actions(env)[0]
    finish = format_finish_action(gold(env))
    steps = play(env, [first, finish])
    observation, _, _, _, info = steps[-1]
    entry = info["memory"][-1]
    assert entry["turn"] == 2 and entry["selected_tool"] is None
    assert entry["verification_status"] == "STOP" and entry["errors"] == []
    session = env.unwrapped.session
    finishes = [e for e in session.memory.events if e.kind == "planner_finish"]
    assert [(e.turn, e.payload["answer"]) for e in finishes] == [(2, gold(env))]
    record = env.unwrapped.trajectory().turns[-1]
    assert record.action_text == finish
    assert record.action_ids == tuple(session.tokenizer.encode(finish))
    grown = [*record.prompt_ids, *record.action_ids, *record.feedback_ids]
    assert observation["token_ids"].tolist() == grown
    assert "The episode is over. The planner's answer: " in record.feedback_text
    env.close()
    (episode,) = read_turn_log(log).complete
    assert episode.turns[-1]["verification"] == "STOP" and episode.turns[-1]["tool"] is None
    assert episode.turns[-1]["expected_tool"] is None
    assert episode.end is not None and episode.end["end_reason"] == "planner_stop"


def test_the_expert_finishes_with_the_answer_it_read_where_it_may() -> None:
    for termination, reason, turns in (
        ("planner", "planner_stop", 3),
        ("both", "verifier_stop", 2),
    ):
        env = make(termination)
        observation, info = env.reset(seed=SEED)
        planner = ExpertPlanner(env)
        done = False
        while not done:
            observation, _, terminated, truncated, info = env.step(planner.act(observation, info))
            done = terminated or truncated
        assert terminated and info["end_reason"] == reason and info["turn"] == turns
        assert info["success"] and info["answer"] == gold(env)
        env.close()


# -- the prompt tells of the finish action only where it may be used ------------------------------
@pytest.mark.parametrize("style", ["full", "compact", "agentflow"])
@pytest.mark.parametrize("observation_mode", ["structured", "flat"])
def test_the_prompt_describes_the_finish_action_only_when_allowed(
    style: str, observation_mode: str
) -> None:
    texts = {}
    for termination in ("verifier", "planner", "both"):
        env = make(termination, prompt_style=style, observation_mode=observation_mode)
        observation, _ = env.reset(seed=SEED)
        texts[termination] = observation["text"]
        env.close()
    assert "Final Answer" not in texts["verifier"] and "Finish" not in texts["verifier"]
    for termination in ("planner", "both"):
        added = FINISH_RULE if style == "agentflow" else finish_instructions(termination, style)
        assert "Final Answer" in added and "Finish" in added
        # the verifier's prompt with the finish description added: nothing else changes
        assert texts[termination].count(added) == 1
        assert texts[termination].replace(added, "") == texts["verifier"]
    assert ("is advice" in texts["planner"]) is (style == "full")
    assert "is advice" not in texts["both"]


def test_the_default_prompt_is_the_verifier_prompt() -> None:
    default = gym.make(ENV_ID, hops=2)
    verifier = make("verifier")
    assert default.reset(seed=SEED)[0]["text"] == verifier.reset(seed=SEED)[0]["text"]
    default.close()
    verifier.close()


# -- premature stops -------------------------------------------------------------------------------
@pytest.mark.parametrize("termination", ["planner", "both"])
def test_a_finish_before_the_evidence_is_in_memory_is_premature(termination: str) -> None:
    env = make(termination)
    env.reset(seed=SEED)
    first = plan_actions(env)[0]  # half of the evidence
    steps = play(env, [first, format_finish_action(gold(env))])
    info = steps[-1][4]
    assert info["end_reason"] == "planner_stop" and info["success"]  # a right guess...
    assert info["diagnostics"]["premature_stop"] is True  # ...is still a premature stop
    env.close()


def test_a_finish_after_the_evidence_is_in_memory_is_not_premature() -> None:
    env = make("planner")
    env.reset(seed=SEED)
    steps = play(env, [*plan_actions(env), format_finish_action("a wrong answer")])
    info = steps[-1][4]
    assert info["end_reason"] == "planner_stop" and not info["success"]
    assert info["diagnostics"]["premature_stop"] is False  # wrong, but not premature
    env.close()


def finish_entry(turn: int) -> MemoryEntry:
    return MemoryEntry(
        turn=turn,
        justification="done",
        context="",
        sub_goal="",
        selected_tool=None,
        tool_arguments={},
        tool_result="",
        tool_ok=False,
        verification_status=VerificationStatus.STOP,
    )


def test_the_diagnostics_leave_the_finish_out_of_tool_choice_scoring() -> None:
    plan = (PlanStep("Search", "find it", "Veloria capital"),)
    search = MemoryEntry(
        turn=1,
        justification="",
        context="Veloria capital",
        sub_goal="find it",
        selected_tool="Search",
        tool_arguments={"query": "Veloria capital"},
        tool_result="Blue Harbor",
        tool_ok=True,
        verification_status=VerificationStatus.STOP,
    )
    common = {"success": True, "score": 1.0, "reward": 1.0, "plan": plan}
    d = diagnose_episode(
        [search, finish_entry(2)], end_reason="planner_stop", evidence_answers=True, **common
    )
    assert d["turns"] == 2 and d["tool_choices_scored"] == 1 and d["tool_choices_right"] == 1
    assert d["tool_calls"] == 1 and d["failures"] == 0 and d["invalid_calls"] == 0
    assert d["planner_stop"] and not d["verifier_stop"] and d["premature_stop"] is False
    d = diagnose_episode(
        [finish_entry(1)], end_reason="planner_stop", evidence_answers=False, **common
    )
    assert d["premature_stop"] is True and d["tool_choices_scored"] == 0
    d = diagnose_episode([finish_entry(1)], end_reason="planner_stop", **common)
    assert d["premature_stop"] is None  # the reader cannot tell


def test_premature_stops_are_pooled_over_both_kinds_of_stop_and_each_alone() -> None:
    def row(stop: str | None, premature: bool | None) -> dict[str, Any]:
        return {
            "verifier_stop": stop == "verifier",
            "planner_stop": stop == "planner",
            "premature_stop": premature,
        }

    rows = [
        row("verifier", True),
        row("verifier", False),
        row("planner", True),
        row("planner", True),
        row("planner", False),
        row("planner", None),  # not judged
        row(None, False),  # ended on a limit
    ]
    summary = summarize_diagnostics([clean_diagnostics(r) for r in rows])
    assert summary["premature_stop_rate"]["value"] == pytest.approx(3 / 5)
    assert summary["premature_stop_rate"]["n"] == 5
    assert summary["premature_verifier_stop_rate"]["value"] == pytest.approx(1 / 2)
    assert summary["premature_planner_stop_rate"]["value"] == pytest.approx(2 / 3)
    assert summary["premature_planner_stop_rate"]["n"] == 3
    old_rows = [{"verifier_stop": True, "premature_stop": True}]  # written before planner stops
    assert summarize_diagnostics(old_rows)["premature_planner_stop_rate"]["n"] == 0


# -- hostile finish-like actions never raise -------------------------------------------------------
FRAGMENTS = (
    "Tool Name: Finish",
    "Tool Name: finish",
    "tool_name: FINISH_tool",
    "**Tool Name:** `Finish`",
    "Final Answer:",
    "Final Answer: ",
    "final answer：",
    "FINAL_ANSWER:",
    "### Final Answer",
    '{"tool_name": "Finish", "final_answer": ',
    '{"final_answer": {"nested": [1, 2]}, "tool_name": "Finish"}',
    '"final_answer": null',
    "}",
    "```",
    "<answer>",
    "</answer>",
    "<|im_end|>",
    "<|im_start|>assistant\n",
    "\ud800",
    "\x00",
    "\u2028",
    "Context: ",
    "Sub-Goal: ",
    "Justification: ",
    "Tool Name: ",
    "Tool Name: Search",
    "Blue Harbor",
    "\n",
    "\n\n",
    "   ",
    "Final Answer: " + "x" * 3000,
    "Tool Name: Finish Final Answer: inline",
)


def hostile_actions(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(FRAGMENTS, k=rng.randint(1, 8))) for _ in range(count)]


def test_hostile_finish_like_strings_never_raise_from_the_parser() -> None:
    for text in hostile_actions(400):
        for finish in (False, True):
            try:
                action = parse_planner_action(text, finish=finish)
            except ActionParseError:
                continue
            assert action.tool_name
            assert finish or action.final_answer is None


@pytest.mark.parametrize("termination", ["verifier", "planner", "both"])
def test_hostile_finish_like_actions_never_raise_from_the_env(termination: str) -> None:
    env = make(termination, max_turns=4)
    env.reset(seed=SEED)
    ends: set[str] = set()
    for text in hostile_actions(120, seed=len(termination)):
        _, reward, terminated, truncated, info = env.step(text)
        assert isinstance(reward, float) and not (terminated and truncated)
        if terminated or truncated:
            ends.add(info["end_reason"])
            assert terminated == (info["end_reason"] in ("verifier_stop", "planner_stop"))
            env.reset(seed=SEED)
    if termination == "verifier":
        assert "planner_stop" not in ends
    else:
        assert "planner_stop" in ends
    env.close()
