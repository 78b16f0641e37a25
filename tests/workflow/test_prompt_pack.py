"""Prompt packs: one interface for the ``agentflow`` style's wording, filled by this project's own
pack and by one read from an AgentFlow checkout; a pack file stands in for the checkout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fake_openai_server import FakeOpenAIServer
from test_agentflow_source import COMMIT, SEARCH_TASK, SYSTEM, make_checkout, responder

from agentflow_env.cli import main
from agentflow_env.envs.config import SearchEnvConfig
from agentflow_env.workflow.agentflow_source import read_agentflow_source
from agentflow_env.workflow.own_pack import OWN_PACK, PLANNER_TEMPLATE
from agentflow_env.workflow.prompt_pack import (
    Placeholder,
    PromptPack,
    PromptPackError,
    Template,
    ToolCardSource,
    read_pack,
    write_pack,
)
from agentflow_env.workflow.prompts import PROMPT_STYLES, STYLE_RULES


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path / "AgentFlow")


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The presets' LLM modules, answered by scripted models over a real socket."""
    with FakeOpenAIServer(responder) as running:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", running.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        monkeypatch.delenv("AGENTFLOW_SOURCE", raising=False)
        yield running


def _first_prompt(**kwargs: Any) -> list[dict[str, str]]:
    env = gym.make("AgentFlow-Search-v0", preset="agentflow_eval", tasks=[SEARCH_TASK], **kwargs)
    try:
        env.reset(seed=0)
        return list(env.unwrapped.session.messages())
    finally:
        env.close()


def test_a_pack_file_gives_back_the_checkouts_pack_exactly(checkout: Path, tmp_path: Path) -> None:
    pack = read_agentflow_source(checkout)
    assert pack.name == "agentflow" and pack.commit == COMMIT and pack.tools
    path = write_pack(pack, tmp_path / "pack.json")
    again = read_pack(path)
    assert again == pack
    # Cards are shown as Python's str of their dicts: every card's text is the same.
    for tool in pack.tools:
        assert str(again.card(tool.tool_name)) == str(pack.card(tool.tool_name))
    assert again.module_tools == pack.module_tools
    assert again.label == pack.label


def test_tuples_and_odd_keys_in_a_card_survive_the_file(tmp_path: Path) -> None:
    metadata = {"tool_name": "T", "input_types": {"q": ("str", 1)}, "user_metadata": {1: [None]}}
    pack = _with_card(metadata)
    again = read_pack(write_pack(pack, tmp_path / "p.json"))
    assert again.card("T") == metadata
    assert str(again.card("T")) == str(metadata)


def _with_card(metadata: dict[Any, Any]) -> PromptPack:
    fields = {name: getattr(OWN_PACK, name) for name in OWN_PACK.__dataclass_fields__}
    fields["tools"] = (ToolCardSource("t", "T_Tool", metadata),)
    return PromptPack(**fields)


def test_an_env_given_the_pack_file_prompts_as_with_the_checkout(
    modules: Any, checkout: Path, tmp_path: Path
) -> None:
    path = tmp_path / "pack.json"
    assert main(["agentflow-pack", "--from", str(checkout), "--out", str(path)]) == 0
    with_checkout = _first_prompt(agentflow_source=checkout)
    with_pack = _first_prompt(agentflow_source=path)
    assert with_pack == with_checkout
    assert with_pack[0]["content"] == SYSTEM
    # The checkout can go: the pack alone renders the same prompt, and names where it came from.
    for file in checkout.rglob("*.py"):
        file.unlink()
    assert _first_prompt(agentflow_source=path) == with_checkout
    label = SearchEnvConfig.from_kwargs(preset="agentflow_eval", agentflow_source=path)
    assert label.wording_label() == f"AgentFlow's, from {checkout.resolve()} at {COMMIT}"


def test_an_edited_pack_is_what_the_planner_reads(
    modules: Any, checkout: Path, tmp_path: Path
) -> None:
    path = write_pack(read_agentflow_source(checkout), tmp_path / "pack.json")
    data = json.loads(path.read_text())
    data["system_prompt"] = "OKAPI system prompt."
    path.write_text(json.dumps(data))
    assert _first_prompt(agentflow_source=path)[0]["content"] == "OKAPI system prompt."


def test_the_own_pack_fills_the_same_interface() -> None:
    assert OWN_PACK.name == "own" and OWN_PACK.label == "own" and OWN_PACK.tools == ()
    # Its placeholders are the expressions AgentFlow's prompts use, so one renderer fills both.
    assert OWN_PACK.planner.fields == (
        "question",
        "query_analysis",
        "self.available_tools",
        "self.toolbox_metadata",
        "memory.get_actions()",
    )
    values = {field: f"<{field}>" for field in OWN_PACK.planner.fields}
    own_names = {
        "query": "<question>",
        "analysis": "<query_analysis>",
        "tools": "<self.available_tools>",
        "metadata": "<self.toolbox_metadata>",
        "steps": "<memory.get_actions()>",
    }
    assert OWN_PACK.planner.render(values) == PLANNER_TEMPLATE.format(**own_names)
    # And the own pack can be written and read back like any other.
    assert PromptPack.from_dict(OWN_PACK.to_dict()) == OWN_PACK


def test_without_a_source_the_agentflow_style_renders_the_own_pack(modules: Any) -> None:
    messages = _first_prompt()
    assert messages[0]["content"] == OWN_PACK.system_prompt
    assert messages[1]["content"].startswith("\nTask: Decide the most useful next step")


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("not json", "cannot read a prompt pack"),
        ("[1, 2]", "not a prompt pack"),
        ('{"format": "something else", "version": 1}', "not a prompt pack"),
        ('{"format": "agentflow-env prompt pack", "version": 1}', "malformed prompt pack"),
    ],
)
def test_a_file_that_is_no_pack_is_refused_naming_it(
    tmp_path: Path, content: str, error: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PromptPackError, match=error) as caught:
        read_pack(path)
    assert str(path) in str(caught.value)
    with pytest.raises(ValueError, match=error):
        gym.make("AgentFlow-Search-v0", preset="agentflow_eval", agentflow_source=path)


def test_the_pack_command_refuses_a_folder_that_is_no_checkout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pack.json"
    assert main(["agentflow-pack", "--from", str(tmp_path), "--out", str(out)]) == 2
    assert "agentflow-pack: error:" in capsys.readouterr().err
    assert not out.exists()


def test_a_format_template_becomes_named_placeholders() -> None:
    template = Template.from_format("a {x} b {y!r:>4}", "t", {"x": "question", "y": "step"})
    assert template.parts == ("a ", Placeholder("question"), " b ", Placeholder("step", 114, ">4"))
    assert template.render({"question": "Q", "step": 1}) == "a Q b    1"


def test_only_pack_rendering_styles_take_a_source(checkout: Path) -> None:
    assert set(STYLE_RULES) == set(PROMPT_STYLES)
    for style, rules in STYLE_RULES.items():
        if rules.renders_pack:
            config = SearchEnvConfig(prompt_style=style, agentflow_source=str(checkout))
            assert config.agentflow_wording() is not None
        else:
            with pytest.raises(ValueError, match="agentflow_source"):
                SearchEnvConfig(prompt_style=style, agentflow_source=str(checkout))


def test_labels_record_the_packs_commit_and_another_commit_is_refused(
    modules: Any, checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentflow_env.rollout import TaskSpec

    out = tmp_path / "labels.jsonl"
    monkeypatch.setenv("AGENTFLOW_SOURCE", str(checkout))
    argv = ["labels", "synthetic", "--count", "2", "--preset", "agentflow_train"]
    assert main([*argv, "--out", str(out)]) == 0
    specs = [TaskSpec.from_json(json.loads(line)["label"]) for line in out.read_text().splitlines()]
    assert {spec.env_kwargs["agentflow_commit"] for spec in specs} == {COMMIT}
    assert "agentflow_source" not in specs[0].env_kwargs  # each worker names its own copy
    env = specs[0].make_env()  # the same checkout: the same words
    env.reset(seed=specs[0].seed)
    env.close()
    # The same commit at another path (a worker's own copy): the label names no path to stop it.
    import shutil

    copy = shutil.copytree(checkout, tmp_path / "worker" / "AgentFlow")
    monkeypatch.setenv("AGENTFLOW_SOURCE", str(copy))
    specs[0].make_env().close()

    # A pack of another commit renders other words: refused, naming both.
    data = read_agentflow_source(checkout).to_dict()
    data["commit"] = "f" * 40
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    monkeypatch.setenv("AGENTFLOW_SOURCE", str(other))
    with pytest.raises(ValueError, match=f"written for commit {COMMIT}"):
        specs[0].make_env()
    # Labels of this project's own style record nothing.
    own = tmp_path / "own.jsonl"
    assert main(["labels", "synthetic", "--count", "1", "--out", str(own)]) == 0
    assert "agentflow_commit" not in json.loads(json.loads(own.read_text())["label"])["env_kwargs"]
