"""AgentFlow's tools' own strings: read from a fake checkout into the pack (``read_tool_texts``),
kept by pack files, and handed to the tools under the presets (``tool_context``), with the
presets' Wikipedia result and AgentFlow's cut of long results."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from test_agentflow_source import (
    PY_MIDDLE_CUT,
    PY_NO_CODE,
    PY_OMITTED,
    PY_TIMEOUT,
    SEARCH_TASK,
    WIKI_CUT_END,
    WIKI_NO_RESULTS,
    make_checkout,
    server,  # noqa: F401  (a fixture, used by name)
)

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.envs.config import SearchEnvConfig
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tasks.base import Task
from agentflow_env.tools.texts import AgentFlowToolTexts
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.agentflow_format import memory_actions
from agentflow_env.workflow.agentflow_source import (
    AgentFlowSourceError,
    read_agentflow_source,
    read_tool_texts,
)
from agentflow_env.workflow.config import SessionConfig
from agentflow_env.workflow.episode_state import tool_context
from agentflow_env.workflow.own_pack import OWN_PACK
from agentflow_env.workflow.prompt_pack import PromptPack, read_pack, write_pack

FAKE_TEXTS = AgentFlowToolTexts(
    wikipedia_abstract_end=WIKI_CUT_END,
    wikipedia_no_results=WIKI_NO_RESULTS,
    python_middle_cut=PY_MIDDLE_CUT,
    python_omitted=PY_OMITTED,
    python_no_code=PY_NO_CODE,
    python_timeout=PY_TIMEOUT,
)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path / "AgentFlow")


def test_the_pack_holds_the_tools_own_strings_and_the_own_pack_none(checkout: Path) -> None:
    assert read_tool_texts(checkout) == FAKE_TEXTS
    assert read_agentflow_source(checkout).tool_texts == FAKE_TEXTS
    assert OWN_PACK.tool_texts == AgentFlowToolTexts()


@pytest.mark.parametrize(
    ("directory", "old", "new", "message"),
    [
        ("wikipedia_search", "def search_wikipedia", "def search_web", "no function search_"),
        ("wikipedia_search", "text[:max_length] +", "text[0:max_length] +", "no text\\[:n\\]"),
        ("python_coder", '"__truncated__"', '"__cut__"', "'__truncated__'"),
        ("python_coder", f'ValueError("{PY_NO_CODE}")', "ValueError", "no exception"),
        ("python_coder", f'"{PY_TIMEOUT}"', "str(code)", "no fixed"),
    ],
)
def test_a_tool_file_without_a_string_is_refused_naming_file_and_piece(
    checkout: Path, directory: str, old: str, new: str, message: str
) -> None:
    path = checkout / "agentflow" / "agentflow" / "tools" / directory / "tool.py"
    source = path.read_text("utf-8")
    assert old in source
    path.write_text(source.replace(old, new, 1), "utf-8")
    with pytest.raises(AgentFlowSourceError, match=f"tools/{directory}/tool.py.*{message}"):
        read_tool_texts(checkout)


def test_pack_files_keep_the_strings_and_older_ones_load_without_them(
    checkout: Path, tmp_path: Path
) -> None:
    pack = read_agentflow_source(checkout)
    assert read_pack(write_pack(pack, tmp_path / "pack.json")).tool_texts == FAKE_TEXTS
    data = pack.to_dict()
    del data["tool_texts"]
    assert PromptPack.from_dict(json.loads(json.dumps(data))).tool_texts == AgentFlowToolTexts()


@pytest.mark.parametrize(
    ("settings", "wikipedia", "texts", "cut"),
    [
        ({"preset": "agentflow_eval"}, "as_run", True, True),
        ({"preset": "agentflow_train"}, "as_run", True, True),
        ({"preset": "agentflow_eval", "agentflow_wikipedia": "as_intended"}, "as_intended", 1, 1),
        ({"prompt_style": "agentflow"}, None, False, False),  # no script: this project's
        ({"prompt_style": "agentflow", "agentflow_wikipedia": "as_run"}, "as_run", False, False),
    ],
)
def test_the_presets_hand_the_tools_agentflows_result_strings_and_cut(
    checkout: Path, settings: dict[str, object], wikipedia: str | None, texts: bool, cut: bool
) -> None:
    config = SearchEnvConfig.from_kwargs(**settings, agentflow_source=str(checkout))
    session = SessionConfig.from_settings(config, agentflow_wording=config.agentflow_wording())
    context = tool_context(SEARCH_TASK, session, seed=0)
    assert context.agentflow_wikipedia == wikipedia
    assert context.agentflow_texts == (FAKE_TEXTS if texts else AgentFlowToolTexts())
    assert context.agentflow_cut is bool(cut)
    assert session.max_tool_output_chars == (100_000 if "preset" in settings else 8000)


def test_the_presets_without_a_checkout_keep_this_projects_strings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTFLOW_SOURCE", raising=False)
    config = SearchEnvConfig.from_kwargs(preset="agentflow_eval")
    session = SessionConfig.from_settings(config, agentflow_wording=config.agentflow_wording())
    context = tool_context(SEARCH_TASK, session, seed=0)
    assert context.agentflow_texts == AgentFlowToolTexts() and context.agentflow_cut
    assert context.agentflow_wikipedia == "as_run"


LONG_PAGE = Task(
    "long",
    "Who makes the Zorblat?",
    ("Quonko Corp",),
    Corpus.from_documents(
        [Document("1", '"Zorblat" robot', "The Zorblat is a kitchen robot. " * 10)],
        corpus_id="source-tools-test",
    ),
)


@pytest.mark.usefixtures("server")  # the scripted models
def test_an_eval_episode_shows_the_wikipedia_result_as_agentflows_code_ran(checkout: Path) -> None:
    env = gym.make(
        "AgentFlow-Search-v0", preset="agentflow_eval", tasks=[LONG_PAGE], agentflow_source=checkout
    )
    env.reset(seed=0)
    action = format_planner_action(
        justification="Look it up.",
        context="ctx",
        sub_goal="Zorblat maker",
        tool_name="Wikipedia_RAG_Search_Tool",
    )
    env.step(action)
    result = memory_actions(env.unwrapped.session.memory)["Action Step 1"]["result"]
    text = "The Zorblat is a kitchen robot. " * 10
    assert result == [
        {
            "query": "Zorblat maker",
            "relevant_pages": [],
            "other_pages (may be irrelevant to the query)": [
                {
                    "title": '"Zorblat" robot',
                    "url": 'https://en.wikipedia.org/wiki/"Zorblat"_robot',
                    "abstract": text.strip()[:100] + WIKI_CUT_END,
                }
            ],
        }
    ]
    env.close()
