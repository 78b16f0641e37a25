"""The static trajectory viewer (``agentflow-env view``), checked in headless Chromium.

Logs are written line by line in the documented trajectory-log format; the pages are loaded
with ``chromium --headless --dump-dom`` (the DOM after the index's filter script ran) and the
dump is parsed with the standard library's HTML parser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import gymnasium as gym
import pytest

from agentflow_env.cli import main
from agentflow_env.evaluation.viewer.plots import budget_curves, run_summaries
from agentflow_env.evaluation.viewer.rows import episode_rows
from agentflow_env.evaluation.viewer.site import EmptyLogError, write_report
from agentflow_env.rollout.agents.episodes import run_episode
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner
from agentflow_env.workflow.turn_log import read_turn_log

HOSTILE = "<script>alert(1)</script></pre></html>\"'&<img src=x onerror=alert(2)>"

# --------------------------------------------------------------------------- log lines


def episode_lines(
    episode_id: str,
    *,
    run: str | None = "structured",
    task_id: str = "task-1",
    question: str = "Who founded the city where Ada was born?",
    success: bool = True,
    end_reason: str = "verifier_stop",
    complete: bool = True,
    result_2: str = "Ada was born in Brindle.",
    budget: list[bool] | None = None,
) -> list[dict[str, Any]]:
    """A plausible episode: turn 1 invalid, turn 2 a tool error, turn 3 a search and STOP."""
    base = {"episode_id": episode_id, "time": 1_700_000_000.0}
    start = {
        **base,
        "event": "episode_start",
        "run": run,
        "env_id": "AgentFlow-Search-v0",
        "seed": 7,
        "task": {
            "task_id": task_id,
            "question": question,
            "gold_answers": ["Mara Voss"],
            "kind": "bridge",
            "hops": 2,
            "split": "test",
        },
        "analysis": {
            "objective": "Find the founder of Ada's birthplace.",
            "constraints": ["answer with a name"],
            "sub_questions": ["Where was Ada born?", "Who founded that city?"],
            "tools": ["Search"],
        },
        "initializer_error": None,
        "max_turns": 4,
        "tools": ["Search", "Calculator"],
        "observation_mode": "structured",
    }
    turns = [
        turn_line(
            base,
            1,
            plan=("", "", "", ""),
            tool=None,
            result="",
            verdict="INVALID",
            errors=["the action has no Tool_Name field"],
            expected="Search",
            action="I think we should search",
        ),
        turn_line(
            base,
            2,
            plan=("Find the birthplace first.", "Ada", "Where was Ada born?", "Calculator"),
            tool="Calculator",
            result=result_2,
            verdict="CONTINUE",
            errors=["Calculator: cannot evaluate 'Ada'"],
            expected="Search",
            tool_ok=False,
        ),
        turn_line(
            base,
            3,
            plan=("Now the founder.", "Brindle", "Who founded Brindle?", "Search"),
            tool="Search",
            result="Brindle was founded by Mara Voss.",
            verdict="STOP",
            errors=[],
            expected="Search",
        ),
    ]
    diagnostics: dict[str, Any] = {
        "turns": 3,
        "success": success,
        "score": float(success),
        "reward": float(success),
        "end_reason": end_reason,
        "invalid_calls": 1,
        "invalid_call_rate": 1 / 3,
        "tool_calls": 2,
        "tool_errors": 1,
        "tool_choices_scored": 3,
        "tool_choices_right": 1,
        "tool_selection_accuracy": 1 / 3,
        "failures": 2,
        "recovered": 1,
        "recovery_rate": 0.5,
        "verifier_stop": end_reason == "verifier_stop",
        "premature_stop": None,
        "redundant_calls": 0,
        "redundant_call_rate": 0.0,
        "modules": {"executor": {"calls": 2, "latency_s": 0.2}},
        "tools": {"Search": {"calls": 1, "errors": 0, "latency_s": 0.01}},
    }
    if budget is not None:
        diagnostics["success_by_budget"] = budget
    end = {
        **base,
        "event": "episode_end",
        "turns": 3,
        "answer": "Mara Voss" if success else "Brindle",
        "final_text": "The founder is Mara Voss." if success else "Brindle.",
        "gold_answers": ["Mara Voss"],
        "success": success,
        "score": float(success),
        "reward": float(success),
        "end_reason": end_reason,
        "module_errors": [],
        "metrics": {"tool_calls": 2, "invalid_calls": 1},
        "diagnostics": diagnostics,
    }
    return [start, *turns, *([end] if complete else [])]


def turn_line(
    base: dict[str, Any],
    number: int,
    *,
    plan: tuple[str, str, str, str],
    tool: str | None,
    result: str,
    verdict: str,
    errors: list[str],
    expected: str | None,
    tool_ok: bool = True,
    action: str | None = None,
) -> dict[str, Any]:
    justification, context, sub_goal, tool_name = plan
    text = action or f"Justification: {justification}\nTool_Name: {tool_name}"
    return {
        **base,
        "event": "turn",
        "turn": number,
        "action": {"text": text, "token_ids": [1, 2, 3], "given_as_ids": False, "cut": False},
        "plan": {
            "justification": justification,
            "context": context,
            "sub_goal": sub_goal,
            "tool_name": tool_name,
        },
        "tool": tool,
        "arguments": {"query": context} if tool else {},
        "result": result,
        "tool_ok": tool_ok if tool else False,
        "verification": verdict,
        "open_questions": ["Who founded it?"] if verdict == "CONTINUE" else [],
        "errors": errors,
        "memory_entry": {"turn": number},
        "expected_tool": expected,
        "chose_expected_tool": None if expected is None else tool == expected,
        "redundant": False,
        "latency_s": {"executor": 0.1, "verifier": 0.05} | ({"tool": 0.01} if tool else {}),
        "prompt_tokens": 200 + number,
        "action_tokens": 20,
    }


def write_log(path: Path, *episodes: list[dict[str, Any]], extra: str = "") -> Path:
    with path.open("w", encoding="ascii") as file:
        for lines in episodes:
            for line in lines:
                file.write(json.dumps(line) + "\n")
        file.write(extra)
    return path


# --------------------------------------------------------------------------- chromium and DOM

CHROMIUM = "/usr/bin/chromium"


def chromium() -> str:
    found = shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if found is None:
        pytest.fail(
            "chromium is not installed; the viewer's browser tests need it: "
            "apt-get install -y chromium (scripts/install_test_env.sh does it)"
        )
    return found


def browse(url: str, tmp_path: Path, *extra: str) -> str:
    profile = tmp_path / "chromium-profile"
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *extra,
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dump_dom(page: Path, tmp_path: Path, query: str = "") -> Element:
    dom = browse(page.as_uri() + query, tmp_path, "--dump-dom")
    assert "<body" in dom, dom[:500]
    return parse_html(dom)


def screenshot(page: Path, tmp_path: Path, target: Path) -> None:
    browse(page.as_uri(), tmp_path, f"--screenshot={target}", "--window-size=1280,2000")
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self) -> list[Element]:
        found = [self]
        for child in self.children:
            if isinstance(child, Element):
                found.extend(child.iter())
        return found

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Element]:
        """Elements by tag and attribute values; ``class_`` matches one of the classes."""
        wanted = {key.rstrip("_").replace("_", "-"): value for key, value in attrs.items()}
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag)
            and all(
                value in e.attrs.get(key, "").split()
                if key == "class"
                else e.attrs.get(key) == value
                for key, value in wanted.items()
            )
        ]

    def one(self, tag: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, (tag, attrs, len(found))
        return found[0]


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {key: value or "" for key, value in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(text: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


def visible_rows(index: Element) -> list[Element]:
    return [row for row in index.find_all("tr", class_="episode") if "hidden" not in row.attrs]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def report(tmp_path: Path) -> tuple[Path, Path]:
    """A log of five episodes over two runs (one incomplete) and its report."""
    log = write_log(
        tmp_path / "turns.jsonl",
        episode_lines("a1", task_id="t-a1"),
        episode_lines("a2", task_id="t-a2", success=False, end_reason="max_turns"),
        episode_lines("b1", run="no_search", task_id="t-b1", success=False, end_reason="max_turns"),
        episode_lines("b2", run="no_search", task_id="t-b2"),
        episode_lines("c1", task_id="t-c1", complete=False),
        extra='{"event": "turn", "episode_id": "a1", "tu',  # a torn last line
    )
    index = write_report(log, tmp_path / "report", summary={"success_rate": 0.5, "by": {"x": 1}})
    return log, index


SHOTS = Path(shots) if (shots := os.environ.get("AGENTFLOW_VIEWER_SCREENSHOTS")) else None


# --------------------------------------------------------------------------- tests


def test_episode_page_holds_every_turn(report, tmp_path):
    _, index = report
    page = dump_dom(index.parent / "episodes" / "a1.html", tmp_path)
    turns = page.find_all("section", class_="turn")
    assert [t.attrs["data-turn"] for t in turns] == ["1", "2", "3"]
    tools = [t.one(class_="tool").text for t in turns]
    assert tools == ["(none ran)", "Calculator", "Search"]
    assert [t.one(class_="verdict").text for t in turns] == ["INVALID", "CONTINUE", "STOP"]
    assert [t.attrs["data-verdict"] for t in turns] == ["INVALID", "CONTINUE", "STOP"]
    first, second, third = turns
    assert "no Tool_Name field" in first.one("ul", class_="errors").text
    assert first.one(class_="expected-tool").attrs["data-match"] == "false"
    assert second.one(class_="justification").text == "Find the birthplace first."
    assert second.one(class_="sub-goal").text == "Where was Ada born?"
    assert "failed" in second.one(class_="call").text
    assert json.loads(second.one("pre", class_="arguments").text) == {"query": "Ada"}
    assert second.one("ul", class_="open-questions").text == "Who founded it?"
    assert third.one(class_="expected-tool").attrs["data-match"] == "true"
    assert third.one("pre", class_="result").text == "Brindle was founded by Mara Voss."
    assert "executor 0.1 s" in third.one(class_="latency").text
    assert "Mara Voss" in page.one("ul", class_="gold-answers").text
    assert "Where was Ada born?" in page.one("ul", class_="sub-questions").text
    assert page.one(class_="answer").text == "Mara Voss"
    assert page.one(class_="end-reason").text == "verifier_stop"
    diagnostics = page.one("table", class_="diagnostics")
    assert diagnostics.one("tr", data_key="recovery_rate").text.endswith("0.5")
    assert {a.attrs["href"] for a in page.find_all("a", class_="back")} == {"../index.html"}
    assert not page.find_all("script")


def test_incomplete_episode_page_says_so(report, tmp_path):
    _, index = report
    page = dump_dom(index.parent / "episodes" / "c1.html", tmp_path)
    assert "incomplete" in page.one(id="incomplete").text
    assert len(page.find_all("section", class_="turn")) == 3
    assert not page.find_all(id="outcome")


def test_index_lists_every_episode_and_the_plots(report, tmp_path):
    _, index = report
    dom = dump_dom(index, tmp_path)
    rows = dom.find_all("tr", class_="episode")
    assert [r.attrs["data-episode-id"] for r in rows] == ["a1", "a2", "b1", "b2", "c1"]
    assert visible_rows(dom) == rows
    assert dom.one(id="shown").text == "5" and dom.one(id="total").text == "5"
    incomplete = rows[4]
    assert incomplete.attrs["data-success"] == "incomplete"
    assert incomplete.one("td", class_="end-reason").text == "incomplete"
    assert rows[0].one("td", class_="tool-accuracy").text == "33%"
    assert rows[0].one("td", class_="invalid-calls").text == "1"
    assert {a.attrs["href"] for a in rows[0].find_all("a")} == {"episodes/a1.html"}
    reasons = [
        o.attrs["value"] for o in dom.one("select", id="filter-end_reason").find_all("option")
    ]
    assert reasons == ["", "incomplete", "max_turns", "verifier_stop"]
    assert "hidden" not in dom.one(id="run-filter").attrs  # two runs: the run filter is shown
    assert "could not be read" in dom.one(id="bad-lines").text
    summary = dom.one("table", class_="summary").text
    assert "success_rate" in summary and "0.5" in summary
    images = [img.attrs["src"] for img in dom.find_all("img")]
    assert images == ["plots/success_by_budget.png", "plots/metrics_by_run.png"]
    for src in images:
        assert (index.parent / src).read_bytes()[:4] == b"\x89PNG"


def test_query_string_filters_the_index(report, tmp_path):
    _, index = report
    dom = dump_dom(index, tmp_path, "?success=0&end_reason=max_turns&run=no_search")
    assert [r.attrs["data-episode-id"] for r in visible_rows(dom)] == ["b1"]
    assert dom.one(id="shown").text == "1"
    assert "1 of 5 episodes" in " ".join(dom.one(id="count").text.split())
    dom = dump_dom(index, tmp_path, "?success=failure")
    assert [r.attrs["data-episode-id"] for r in visible_rows(dom)] == ["a2", "b1"]
    dom = dump_dom(index, tmp_path, "?end_reason=incomplete")
    assert [r.attrs["data-episode-id"] for r in visible_rows(dom)] == ["c1"]


def test_hostile_text_is_escaped_and_never_runs(tmp_path):
    huge = "line of a huge tool output\n" * 20_000
    hostile_result = HOSTILE + "\ud800 lone surrogate \x00\x07 controls " + huge + HOSTILE
    lines = episode_lines(
        "e1", run=HOSTILE, task_id=HOSTILE, question=HOSTILE, result_2=hostile_result
    )
    lines[1]["action"]["text"] = HOSTILE
    lines[-1]["final_text"] = HOSTILE
    log = write_log(tmp_path / "turns.jsonl", lines, episode_lines("../../evil", task_id="t2"))
    index = write_report(log, tmp_path / "report")
    pages = sorted((tmp_path / "report" / "episodes").iterdir())
    assert len(pages) == 2 and all(p.parent == tmp_path / "report" / "episodes" for p in pages)
    assert not (tmp_path / "evil.html").exists()

    for written in (index, index.parent / "episodes" / "e1.html"):
        source = written.read_text(encoding="utf-8")
        assert "<script>alert" not in source and "<img src=x" not in source
        assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/pre&gt;" in source
    page = dump_dom(index.parent / "episodes" / "e1.html", tmp_path)
    assert not page.find_all("script") and not page.find_all("img")
    assert page.one("pre", class_="question").text == HOSTILE
    assert page.find_all("pre", class_="action-text")[0].text == HOSTILE
    result = page.find_all("section", class_="turn")[1].one("pre", class_="result").text
    assert result.startswith(HOSTILE) and result.endswith(HOSTILE)
    assert huge in result  # shown whole, in a scrolling box
    assert "\ufffd lone surrogate \u2400\u2407 controls" in result
    assert page.one("pre", class_="final-text").text == HOSTILE

    dom = dump_dom(index, tmp_path, "?run=" + quote(HOSTILE, safe=""))
    assert len(dom.find_all("script")) == 1  # the filter's own
    assert [img.attrs["src"] for img in dom.find_all("img")][:2] == [
        "plots/success_by_budget.png",
        "plots/metrics_by_run.png",
    ]
    assert len(dom.find_all("img")) == 2
    row = dom.one("tr", data_episode_id="e1")
    assert row.one("td", class_="run").text == HOSTILE
    assert row.one("td", class_="task-id").text == HOSTILE
    assert [r.attrs["data-episode-id"] for r in visible_rows(dom)] == ["e1"]


def test_report_of_a_real_run(tmp_path):
    """Episodes of the env itself (``log_path=``): the expert's and a random planner's."""
    log = tmp_path / "turns.jsonl"
    env = gym.make("AgentFlow-Search-v0", log_path=str(log))
    records = [run_episode(env, ExpertPlanner(env), seed=seed) for seed in (0, 1)]
    records += [run_episode(env, RandomPlanner(env, seed=seed), seed=seed) for seed in (2, 3)]
    env.close()
    index = write_report(log, tmp_path / "report")
    dom = dump_dom(index, tmp_path)
    rows = dom.find_all("tr", class_="episode")
    assert len(rows) == 4 and dom.one(id="total").text == "4"
    assert [r.one("td", class_="task-id").text for r in rows] == [r.task_id for r in records]
    assert [r.attrs["data-success"] for r in rows[:2]] == ["1", "1"]
    episodes = read_turn_log(log).episodes
    page = dump_dom(index.parent / "episodes" / f"{episodes[0].episode_id}.html", tmp_path)
    turns = page.find_all("section", class_="turn")
    assert len(turns) == len(records[0].actions) == len(episodes[0].turns)
    assert [t.one(class_="tool").text for t in turns] == [
        entry["selected_tool"] for entry in records[0].memory
    ]
    assert turns[-1].one(class_="verdict").text == "STOP"
    assert page.one(class_="answer").text == records[0].answer


def test_screenshots(report, tmp_path):
    """Screenshots of an episode page and of the index, kept where
    ``$AGENTFLOW_VIEWER_SCREENSHOTS`` says (else in the test's temporary folder)."""
    _, index = report
    folder = SHOTS or tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    screenshot(index, tmp_path, folder / "index.png")
    screenshot(index.parent / "episodes" / "a1.html", tmp_path, folder / "episode.png")


def test_budget_curve_from_diagnostics_or_estimated(tmp_path):
    log = write_log(
        tmp_path / "exact.jsonl",
        episode_lines("x1", budget=[False, True, True, True]),
        episode_lines("x2", success=False, end_reason="max_turns", budget=[False] * 4),
    )
    curves, exact = budget_curves(episode_rows(read_turn_log(log).episodes))
    assert exact and curves == {"structured": [0.0, 0.5, 0.5, 0.5]}
    log = write_log(tmp_path / "estimate.jsonl", episode_lines("y1"), episode_lines("y2"))
    curves, exact = budget_curves(episode_rows(read_turn_log(log).episodes))
    assert not exact and curves == {"structured": [0.0, 0.0, 1.0, 1.0]}


def test_run_metrics_pool_each_runs_complete_episodes(tmp_path):
    log = write_log(
        tmp_path / "turns.jsonl",
        episode_lines("a1"),
        episode_lines("a2", success=False, end_reason="max_turns"),
        episode_lines("a3", complete=False),
    )
    summary = run_summaries(episode_rows(read_turn_log(log).episodes))["structured"]
    assert summary["episodes"] == 2  # the incomplete one has no outcome
    assert summary["success_rate"]["value"] == 0.5
    assert summary["recovery_rate"] == {**summary["recovery_rate"], "value": 0.5, "n": 4}
    assert summary["tool_selection_accuracy"]["value"] == pytest.approx(1 / 3)


def test_without_matplotlib_the_pages_are_written_and_say_how_to_get_plots(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    log = write_log(tmp_path / "turns.jsonl", episode_lines("a1"))
    index = write_report(log, tmp_path / "report")
    page = index.read_text()
    assert 'id="no-plots"' in page and "pip install &#x27;agentflow-env[eval]&#x27;" in page
    assert "<img" not in page and (tmp_path / "report" / "episodes" / "a1.html").is_file()


def test_empty_log_is_an_error(tmp_path):
    log = write_log(tmp_path / "turns.jsonl", extra="not json\n")
    with pytest.raises(EmptyLogError, match="holds no episode"):
        write_report(log, tmp_path / "report")


def test_view_command(tmp_path, capsys):
    log = write_log(tmp_path / "turns.jsonl", episode_lines("a1"), episode_lines("a2"))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"episodes": 2, "success_rate": 1.0}))
    assert main(["view", str(log), "--summary", str(summary)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(tmp_path / "turns_report" / "index.html")
    assert (tmp_path / "turns_report" / "episodes" / "a2.html").is_file()
    assert "success_rate" in Path(printed).read_text(encoding="utf-8")
    assert main(["view", str(log), "-o", str(tmp_path / "elsewhere")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "elsewhere" / "index.html")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing.jsonl", "does not exist"),
        (lambda p: write_log(p / "empty.jsonl"), "holds no episode"),
    ],
)
def test_view_command_errors_are_one_line(tmp_path, capsys, make, message):
    assert main(["view", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("agentflow-env view: error")
