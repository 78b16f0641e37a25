"""The executor's command under AgentFlow's scripts (``agentflow_command``): recorded as
written, every ``execution = tool.execute(...)`` piece run in order (read with ``ast``, never
executed), and a reply without a command recorded in the pack's "no command" words."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fake_openai_server import FakeOpenAIServer, user_text
from hypothesis import given, settings
from hypothesis import strategies as st
from test_agentflow_pipeline import SEARCH_TASK, responder
from test_agentflow_source import make_checkout

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.agentflow_command import (
    CommandRecord,
    Uncaptured,
    command_pieces,
    read_agentflow_command,
    read_command_reply,
    read_piece,
)
from agentflow_env.workflow.agentflow_format import memory_actions, recorded_command
from agentflow_env.workflow.agentflow_source import read_agentflow_source
from agentflow_env.workflow.memory import MemoryEntry
from agentflow_env.workflow.own_pack import OWN_PACK
from agentflow_env.workflow.prompt_pack import PromptPack

WIKI = "Wikipedia_RAG_Search_Tool"


def fenced(code: str, label: str = "Generated Command:\n") -> str:
    return f"Analysis: fine.\n{label}```python\n{code}\n```\nDone."


# --- finding the command ------------------------------------------------------------------------
FINDING = [
    (
        "labelled block",
        fenced('execution = tool.execute(query="a")'),
        'execution = tool.execute(query="a")',
    ),
    (
        "label in any case, first block after it",
        "GENERATED COMMAND:\n```python\nx = 1\n```\n```python\nlonger = 'block here'\n```",
        "x = 1",
    ),
    (
        "no label: the longest python block",
        "```python\nshort\n```\ntext\n```python\n\n  the longer one\n```",
        "the longer one",
    ),
    ("a JSON object", '{"analysis": "a", "explanation": "e", "command": " c() "}', "c()"),
    ("a JSON object missing a key", '{"command": "c()"}', None),
    ("a fence without python", "```\nexecution = tool.execute(query='a')\n```", None),
    ("no code block", "I would search for it.", None),
]


@pytest.mark.parametrize(
    ("reply", "command"), [pytest.param(*row[1:], id=row[0]) for row in FINDING]
)
def test_the_command_is_found_as_agentflow_finds_it(reply: str, command: str | None) -> None:
    assert read_agentflow_command(reply) == command


PIECES = [
    ("one call", 'execution = tool.execute(query="a")', ['execution = tool.execute(query="a")']),
    (
        "two calls",
        'execution = tool.execute(query="a")\nexecution = tool.execute(query="b")',
        ['execution = tool.execute(query="a")', 'execution = tool.execute(query="b")'],
    ),
    (
        "code before a call goes with it; code after the last is not run",
        'q = "a"\nexecution = tool.execute(query=q)\nprint(execution)',
        ['q = "a"\nexecution = tool.execute(query=q)'],
    ),
    (
        "a comment after the call: that line is no piece's end",
        'execution = tool.execute(query="a")  # first\nexecution = tool.execute(query="b")',
        ['execution = tool.execute(query="a")  # first\nexecution = tool.execute(query="b")'],
    ),
    ("a call over two lines is none", 'execution = tool.execute(\n    query="a")', []),
    ("another object's execute is none", 'execution = Web_Tool.execute(query="a")', []),
]


@pytest.mark.parametrize(
    ("command", "pieces"), [pytest.param(*row[1:], id=row[0]) for row in PIECES]
)
def test_the_command_is_split_as_agentflow_splits_it(command: str, pieces: list[str]) -> None:
    assert command_pieces(command) == pieces


def test_a_piece_is_read_never_run() -> None:
    piece = read_piece('q = "a"\nn = 3\nexecution = tool.execute(q, limit=n)')
    assert piece.refused is None and piece.captures
    assert [dict(call.arguments) for call in piece.calls] == [{None: "a", "limit": 3}]
    assert read_piece("execution = tool.execute(query=q)").refused == "name 'q' is not defined"
    refused = read_piece('import os\nexecution = tool.execute(query="a")').refused
    assert refused is not None and "import os" in refused
    assert "not a literal" in (read_piece("execution = tool.execute(query=f(1))").refused or "")
    assert read_piece("execution = tool.execute(query='a'").refused  # a syntax error
    assert not read_piece('my_execution = tool.execute(query="a")').captures


# --- what memory records, in the pack's words ---------------------------------------------------
def test_the_record_is_rendered_in_the_checkouts_words(tmp_path: Path) -> None:
    pack = read_agentflow_source(make_checkout(tmp_path))
    assert recorded_command(CommandRecord(None), pack) == {
        "command": "Nothing to run here.",
        "result": [],
    }
    failed = CommandRecord("x", ({"a": 1},), failure="name 'q' is not defined")
    assert recorded_command(failed, pack)["result"] == (
        "Running failed, sorry: name 'q' is not defined"
    )
    missed = CommandRecord("x", ({"a": 1}, Uncaptured("y = 1")))
    assert recorded_command(missed, pack)["result"] == [{"a": 1}, "Missed one: y = 1"]
    again = PromptPack.from_dict(pack.to_dict())
    assert (again.no_command, again.command_failure, again.no_execution) == (
        pack.no_command,
        pack.command_failure,
        pack.no_execution,
    )
    older = pack.to_dict()
    for key in ("no_command", "command_failure", "no_execution"):
        del older[key]
    assert PromptPack.from_dict(older).no_command is None  # then the own sentences are used
    assert recorded_command(CommandRecord(None), PromptPack.from_dict(older)) == {
        "command": OWN_PACK.no_command,
        "result": [],
    }


# --- a step under the preset, end to end --------------------------------------------------------
QUERY = "no title named"
ONE = f'execution = tool.execute(query="{QUERY}")'
# case, the executor's reply, the command memory records (None: the pack's "no command"), the
# queries the tool was called with, in order, and the recorded result: "list" (one output per
# call) or the failure text's reason.
COMMANDS: list[tuple[str, str, str | None, list[str], str]] = [
    ("one call", fenced(ONE), ONE, [QUERY], "list"),
    (
        "two calls",
        fenced(f'{ONE}\nexecution = tool.execute(query="second one")'),
        f'{ONE}\nexecution = tool.execute(query="second one")',
        [QUERY, "second one"],
        "list",
    ),
    (
        "a variable assigned a literal, then used",
        fenced(f'q = "{QUERY}"\nexecution = tool.execute(query=q)'),
        f'q = "{QUERY}"\nexecution = tool.execute(query=q)',
        [QUERY],
        "list",
    ),
    (
        "a non-literal argument",
        fenced('execution = tool.execute(query=" ".join(["a", "b"]))'),
        'execution = tool.execute(query=" ".join(["a", "b"]))',
        [],
        "not a literal",
    ),
    (
        "a name of an earlier piece (AgentFlow runs each piece on its own)",
        fenced(f'q = "{QUERY}"\n{ONE}\nexecution = tool.execute(query=q)'),
        f'q = "{QUERY}"\n{ONE}\nexecution = tool.execute(query=q)',
        [QUERY],
        "name 'q' is not defined",
    ),
    ("no code block", "I would search the encyclopedia for it.", None, [], "list"),
    (
        "an unknown tool name in the call",
        fenced(f'execution = Web_Search_Tool.execute(query="{QUERY}")'),
        f'execution = Web_Search_Tool.execute(query="{QUERY}")',
        [],
        "list",
    ),
]


def _responder(replies: dict[str, str]) -> Any:
    def reply(role: str, request: dict[str, Any]) -> str:
        text = user_text(request)
        if "Task: Write the exact command" in text:
            return replies[re.search(r"\*\*Sub-Goal:\*\* (.*)", text).group(1)]
        return responder(role, request)

    return reply


@pytest.mark.parametrize(
    ("reply", "command", "queries", "result"),
    [pytest.param(*row[1:], id=row[0]) for row in COMMANDS],
)
def test_a_command_step_under_the_preset(
    monkeypatch: pytest.MonkeyPatch,
    reply: str,
    command: str | None,
    queries: list[str],
    result: str,
) -> None:
    with FakeOpenAIServer(_responder({"look it up": reply})) as server:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        env = gym.make("AgentFlow-Search-v0", preset="agentflow_eval", tasks=[SEARCH_TASK])
        env.reset(seed=0)
        env.step(format_planner_action("j", "c", "look it up", WIKI))
        session = env.unwrapped.session
        env.close()
    step = memory_actions(session.memory)["Action Step 1"]
    (entry,) = session.memory.entries
    assert MemoryEntry(**entry.as_dict()).agentflow_command == entry.agentflow_command
    assert step["tool_name"] == WIKI and step["sub_goal"] == "look it up"
    assert step["command"] == (OWN_PACK.no_command if command is None else command)
    calls = [e.payload["arguments"] for e in session.memory.events if e.kind == "tool_call"]
    assert calls == [{"query": query} for query in queries]  # once per call, in order
    if result == "list":
        assert [output["query"] for output in step["result"]] == queries
    else:
        assert isinstance(step["result"], str) and result in step["result"]
        assert step["result"].startswith("The command could not be run: ")


def test_a_reply_without_a_command_runs_nothing() -> None:
    command, pieces = read_command_reply("No code here.")
    assert command is None and pieces == []


CODE_PIECES = [
    "execution",
    " = ",
    "tool.execute(",
    "query=",
    '"a"',
    "q",
    ")",
    "\n",
    "```python\n",
    "```",
    "Generated Command:",
    "(",
    "**",
    "\\",
    "\x00",
    "import os",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(CODE_PIECES), max_size=24).map("".join) | st.text())
def test_any_reply_is_read_without_raising(reply: str) -> None:
    command, pieces = read_command_reply(reply)
    assert command is None or isinstance(command, str)
    for piece in pieces:
        assert piece.refused is not None or all(call.arguments is not None for call in piece.calls)


def test_a_record_reads_back_from_its_plain_form() -> None:
    record = CommandRecord("x", ({"a": 1}, Uncaptured("y = 1")), failure=None)
    assert CommandRecord.from_dict(record.as_dict()) == record
    assert CommandRecord.from_dict(CommandRecord(None, failure="f").as_dict()) == CommandRecord(
        None, failure="f"
    )
