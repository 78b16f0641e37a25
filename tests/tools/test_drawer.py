"""The drawer tools of the probe tasks: what a drawer shows, its registry names, and a drawer
run through ``run_tool`` and through an env."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

import agentflow_env  # noqa: F401  (registers the envs)
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tools import DRAWER_COLOURS, DrawerTool, drawer_colour, drawer_name, make_tool
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.runner import run_tool

CABINET = Corpus.from_documents(
    [
        Document("a", "Green_Drawer", "The Green drawer holds code 4821."),
        Document("b", "Red_Drawer", "The Red drawer holds no code."),
        Document("c", "Green", "Titled with the colour alone: not the drawer's."),
    ]
)


def open_drawer(tool: DrawerTool, arguments: dict, corpus: Corpus | None = CABINET) -> tuple:
    result = asyncio.run(run_tool(tool, arguments, ToolContext(corpus=corpus)))
    return result.ok, result.output, result.error


def test_a_drawer_shows_the_documents_titled_with_its_name_whatever_it_is_asked() -> None:
    green = DrawerTool("green")
    assert green.name == "Green_Drawer" == drawer_name("green") and green.colour == "Green"
    expected = (True, "The Green drawer holds code 4821.", None)
    assert open_drawer(green, {"request": "anything"}) == expected
    assert open_drawer(green, {"request": ""}) == expected  # the argument is optional
    assert open_drawer(green, {}) == expected
    assert open_drawer(DrawerTool("Blue"), {}) == (True, "The blue drawer is empty.", None)
    assert open_drawer(DrawerTool("Blue"), {}, corpus=None)[:2] == (
        True,
        "The blue drawer is empty.",
    )
    ok, _, error = open_drawer(green, {"query": "x"})
    assert not ok and "unknown argument" in str(error)


def test_drawers_are_registered_by_colour_and_read_back_from_tools_entries() -> None:
    for colour in DRAWER_COLOURS:
        tool = make_tool(drawer_name(colour))
        assert isinstance(tool, DrawerTool) and tool.colour == colour
        assert drawer_colour(drawer_name(colour)) == colour
    assert drawer_colour({"name": "Blue_Drawer", "rename": "Box"}) == "Blue"
    assert drawer_colour(DrawerTool("White")) == "White"
    assert [drawer_colour(x) for x in ("Search", "Purple_Drawer", "Drawer", {"name": 3})] == [
        None
    ] * 4
    with pytest.raises(ValueError, match="colour must be one of"):
        DrawerTool("Purple")


def test_a_drawer_runs_as_the_planner_names_it_in_an_env() -> None:
    env = gym.make("AgentFlow-Search-v0", tools=["Search", "Green_Drawer"], hops=1)
    env.reset(seed=0)
    _, _, _, _, info = env.step("Context: the code\nTool Name: Green_Drawer")
    assert info["tool"] == "Green_Drawer" and info["tool_ok"]
    assert info["memory"][-1]["tool_result"] == "The green drawer is empty."  # no cabinet here
    env.close()
