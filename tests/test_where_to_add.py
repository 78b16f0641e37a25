"""Each "Where to add" path of docs/architecture.md, followed as the page says, from outside the
package: a tool, an env variant (through ``gym.make``, ``agentflow-env run``, ``agentflow-env
labels`` and a rollout of its labels), a reward, a module backend, a trainer adapter, a
planner and a prompt pack."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env import register_scorer, rollout
from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.cli import main
from agentflow_env.envs.config import EnvConfig
from agentflow_env.envs.config.fields import UnknownSettingError
from agentflow_env.envs.registration import Variant, register_variant
from agentflow_env.rollout import TaskSpec, run_episodes
from agentflow_env.rollout.agents.episodes import run_episode
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.tasks.base import ListTaskSource, Task, TaskSource
from agentflow_env.tools import Tool
from agentflow_env.tools.base import ToolCard, ToolContext, ToolResult
from agentflow_env.tools.registry import register_tool
from agentflow_env.workflow.actions import format_finish_action, format_planner_action
from agentflow_env.workflow.frozen_modules import Verification
from agentflow_env.workflow.memory import Memory
from agentflow_env.workflow.rewards import SCORERS


# -- a tool ----------------------------------------------------------------------------------
class ShoutTool(Tool):
    card = ToolCard(
        name="Shout_Tool",
        description="Repeats its text in capitals.",
        input_schema={"text": {"type": "string", "description": "what to shout"}},
        output_type="str",
        primary_argument="text",
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if arguments["text"] == "crash":
            raise RuntimeError("the tool broke")
        return ToolResult(ok=True, output=arguments["text"].upper())


def _action(tool: str, context: str) -> str:
    return format_planner_action(
        justification="Try it.", context=context, sub_goal=context, tool_name=tool
    )


def test_a_tool_registered_by_name_runs_in_an_env_and_its_crash_is_recorded() -> None:
    register_tool("Shout_Tool", ShoutTool, overwrite=True)
    env = gym.make("AgentFlow-Search-v0", tools=["Search", "Shout_Tool"], max_turns=3)
    env.reset(seed=0)
    _, _, _, _, info = env.step(_action("Shout_Tool", "hello there"))
    assert info["tool"] == "Shout_Tool" and info["tool_ok"] is True
    assert "HELLO THERE" in str(info["memory"][-1])
    _, _, _, _, info = env.step(_action("Shout_Tool", "crash"))
    assert info["tool_ok"] is False and "the tool broke" in str(info["memory"][-1])
    env.close()


# -- an env variant --------------------------------------------------------------------------
TASKS = (
    Task("capital", "What is the capital of Zorbia?", ("Quon",)),
    Task("river", "Which river crosses Quon?", ("Blae",)),
)
RIDDLES = "Where-Riddles-v0"


@dataclass(frozen=True, kw_only=True)
class RiddleConfig(EnvConfig):
    env_id: ClassVar[str] = RIDDLES
    tasks_note: ClassVar[str] = "its tasks are two fixed riddles"

    def make_task_source(self) -> TaskSource:
        return ListTaskSource(TASKS)


@pytest.fixture
def registry_restored() -> Any:
    """The variant tables, Gymnasium's registry and the scorers as they were before the test."""
    tables = agentflow_env.envs.registration
    rows, configs, scorers = dict(tables.REGISTERED), dict(tables.ENV_CONFIGS), dict(SCORERS)
    yield
    for env_id in set(tables.REGISTERED) - set(rows):
        gym.registry.pop(env_id, None)
    for table, saved in ((tables.REGISTERED, rows), (tables.ENV_CONFIGS, configs)):
        table.clear()
        table.update(saved)  # type: ignore[attr-defined]
    SCORERS.clear()
    SCORERS.update(scorers)


def answer_riddles(answer: str) -> Any:
    """A scripted policy for ``run_episodes``: finishes at once, with ``answer`` filled with the
    gold answer of the riddle its prompt asks (read off the prompt, as a model would)."""
    tokenizer = load_default_tokenizer()

    def generate(prompts: list[list[int]], max_new_tokens: int) -> Any:
        texts = [tokenizer.decode(prompt) for prompt in prompts]
        gold = ["Quon" if "Zorbia" in text else "Blae" for text in texts]
        actions = [format_finish_action(answer.format(g), "I know it.") for g in gold]
        return [tokenizer.encode(action)[:max_new_tokens] for action in actions], None

    return generate


@pytest.mark.usefixtures("registry_restored")
def test_an_env_variant_from_a_config_class_and_one_row() -> None:
    variant = Variant(RiddleConfig)
    register_variant(variant)
    register_variant(variant)  # the same row again: nothing changes
    assert RIDDLES in agentflow_env.envs.registration.REGISTERED
    env = gym.make(RIDDLES, max_turns=2)
    assert type(env.unwrapped.config) is RiddleConfig  # the one builder, given the row's config
    check_env(env.unwrapped, skip_render_check=True)
    _, info = env.reset(seed=1)
    assert info["question"] in {task.question for task in TASKS}
    env.close()
    with pytest.raises(UnknownSettingError, match="Where-Riddles-v0 does not use hops="):
        gym.make(RIDDLES, hops=2)
    assert agentflow_env.envs.registration.config_class(RIDDLES) is RiddleConfig

    @dataclass(frozen=True, kw_only=True)
    class Impostor(RiddleConfig):
        pass

    with pytest.raises(ValueError, match="already the id of RiddleConfig"):
        register_variant(Variant(Impostor))


@pytest.mark.usefixtures("registry_restored")
def test_a_variant_runs_labels_and_trains_through_the_commands(tmp_path: Path) -> None:
    register_variant(Variant(RiddleConfig))
    # agentflow-env run: no split forced on a variant without one.
    runs = tmp_path / "runs.jsonl"
    argv = ["run", "--env", RIDDLES, "--planner", "random", "--episodes", "2", "--max-turns", "2"]
    assert main([*argv, "--quiet", "--out", str(runs)]) == 0
    assert len(runs.read_text(encoding="utf-8").splitlines()) == 2
    # agentflow-env labels: its tasks named as its source allows (a fixed list: by task id).
    out = tmp_path / "riddles.jsonl"
    settings = ["--max-turns", "2", "--termination", "planner"]
    argv = ["labels", "--env-id", RIDDLES, "synthetic", "--count", "4", *settings]
    assert main([*argv, "--out", str(out)]) == 0
    labels = [json.loads(line)["label"] for line in out.read_text(encoding="utf-8").splitlines()]
    specs = [TaskSpec.from_json(label) for label in labels]
    assert {spec.env_id for spec in specs} == {RIDDLES}
    assert sorted(spec.task_id for spec in specs) == ["capital", "capital", "river", "river"]
    # A rollout of those labels through the front door: the pool builds the variant's env.
    tokenizer = load_default_tokenizer()
    results = run_episodes(labels, answer_riddles("{}"), tokenizer, pool=rollout.EnvPool())
    assert [(r.failed, r.reward) for r in results] == [(False, 1.0)] * 4


# -- a reward --------------------------------------------------------------------------------
def contains(answer: str | None, gold_answers: list[str]) -> float:
    """1 when a gold answer appears anywhere in the answer (exact_match wants it alone)."""
    return float(any(gold.lower() in (answer or "").lower() for gold in gold_answers))


@pytest.mark.usefixtures("registry_restored")
def test_a_reward_registered_by_name_scores_every_task_without_a_checker(tmp_path: Path) -> None:
    register_scorer("contains", contains)
    with pytest.raises(ValueError, match="already a scorer"):
        register_scorer("contains", contains)
    with pytest.raises(ValueError, match=r"reward must be one of \[.*'contains', 'llm_judge'\]"):
        gym.make("AgentFlow-Search-v0", reward="contained")
    register_variant(Variant(RiddleConfig))
    wordy = answer_riddles("It is {}, surely.")
    labels = [
        TaskSpec(
            env_id=RIDDLES,
            env_kwargs={"termination": "planner", "reward": reward},
            task_id="capital",
        ).to_json()
        for reward in ("contains", "exact_match")
    ]
    results = run_episodes(labels, wordy, load_default_tokenizer(), pool=rollout.EnvPool())
    assert [r.reward for r in results] == [1.0, 0.0]
    # The labels command writes it by name too.
    out = tmp_path / "labels.jsonl"
    argv = ["labels", "synthetic", "--count", "1", "--reward", "contains", "--out", str(out)]
    assert main(argv) == 0
    assert json.loads(json.loads(out.read_text())["label"])["env_kwargs"]["reward"] == "contains"
    # Where a task's checker must decide, the reward is refused, saying why.
    with pytest.raises(ValueError, match="cannot score make24 tasks: their checker decides"):
        gym.make("AgentFlow-Code-v0", reward="contains")
    env = gym.make("AgentFlow-Code-v0", reward="contains", kinds="compute")
    env.reset(seed=0)
    env.close()
    checked = Task("any", "Say a number above 3.", ("4",), checker=lambda answer: True)
    env = gym.make("AgentFlow-Search-v0", tasks=[checked], reward="contains")
    with pytest.raises(ValueError, match="its checker decides whether an answer is right"):
        env.reset(seed=0)
    env.close()


# -- a module backend ------------------------------------------------------------------------
class StopAtOnce:
    """A verifier backend that stops after any turn."""

    def __init__(self) -> None:
        self.calls = 0

    async def verify(self, task: Task, memory: Memory) -> Verification:
        self.calls += 1
        return Verification(stop=True, rationale="One look is enough.")


def test_a_module_backend_for_one_role_beside_the_rule_modules() -> None:
    verifier = StopAtOnce()
    env = gym.make("AgentFlow-Search-v0", modules={"verifier": verifier}, max_turns=5)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(ExpertPlanner(env).act())
    assert terminated and verifier.calls == 1 and info["turn"] == 1
    env.close()


# -- a trainer adapter -----------------------------------------------------------------------
def tiny_adapter(labels: list[str], tokenizer: Any) -> list[dict[str, Any]]:
    """What an adapter does, with the front door only: labels in, per-sample tensors out."""
    action_ids = tokenizer.encode(_action("Search", "capital"))

    def generate(prompts: list[list[int]], max_new_tokens: int) -> Any:
        return [action_ids[:max_new_tokens] for _ in prompts], None

    results = rollout.run_episodes(labels, generate, tokenizer, pool=rollout.EnvPool())
    return [
        {"ids": r.completion_ids, "mask": r.env_mask, "reward": r.reward, "failed": r.failed}
        for r in results
    ]


def test_a_trainer_adapter_through_the_front_door() -> None:
    assert rollout.run_episodes is run_episodes and "run_episodes" in rollout.__all__
    labels = [rollout.task_prompt(seed, hops=1, max_turns=2) for seed in range(2)]
    samples = tiny_adapter([*labels, "not a label"], load_default_tokenizer())
    assert [s["failed"] for s in samples] == [False, False, True]
    for sample in samples:
        assert len(sample["ids"]) == len(sample["mask"])
    assert samples[2]["reward"] == 0.0 and sum(samples[0]["mask"]) > 0


def test_a_trainer_row_format_from_the_adapters_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The adapter's own file registers its rows; ``labels --adapters DIR`` writes them, and a
    rollout reads each row's label back."""
    from agentflow_env.rollout.labels import row_formats

    monkeypatch.setattr(row_formats, "_FORMATS", dict(row_formats._FORMATS))
    folder = tmp_path / "adapters" / "mytrainer"
    folder.mkdir(parents=True)
    (folder / "mytrainer_row_format.py").write_text(
        "from agentflow_env.rollout import register_row_format\n\n\n"
        "def convert(row, index):\n"
        "    return {'id': index, 'question': row['prompt'], 'task': row['label']}\n\n\n"
        "register_row_format('mytrainer', convert, rows='mytrainer rows')\n"
    )
    out = tmp_path / "rows.jsonl"
    argv = ["labels", "synthetic", "--count", "2", "--hops", "1", "--max-turns", "3"]
    argv += ["--adapters", str(tmp_path / "adapters"), "--format", "mytrainer", "--out", str(out)]
    assert main(argv) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in written] == [0, 1]
    specs = [TaskSpec.from_json(row["task"]) for row in written]
    assert [spec.env_id for spec in specs] == ["AgentFlow-Search-v0"] * 2
    samples = tiny_adapter([row["task"] for row in written], load_default_tokenizer())
    assert [sample["failed"] for sample in samples] == [False, False]


# -- a planner -------------------------------------------------------------------------------
class FinishAtOnce:
    """A planner in the protocol: answers from the task's first gold answer, without a tool."""

    def __init__(self) -> None:
        self.turns: list[int] = []

    async def next_action(self, session: Any) -> str:
        self.turns.append(session.turn)
        return format_finish_action(session.task.gold_answers[0], "I know it.")


def test_a_planner_in_the_protocol_runs_with_run_episode() -> None:
    env = gym.make("AgentFlow-Search-v0", termination="planner", max_turns=3)
    planner = FinishAtOnce()
    record = run_episode(env, planner, seed=4)
    assert planner.turns == [0] and record.success and record.end_reason == "planner_stop"
    env.close()


# -- a prompt pack ---------------------------------------------------------------------------
def test_a_prompt_pack_written_as_json_is_what_the_planner_and_modules_read(
    tmp_path: Path,
) -> None:
    from agentflow_env.workflow.own_pack import OWN_PACK
    from agentflow_env.workflow.prompt_pack import read_pack

    data = OWN_PACK.to_dict()
    data["system_prompt"] = "You plan, briefly."
    planner = data["templates"]["planner"]["parts"]
    planner[0] = planner[0].replace("Decide the most useful next step", "Pick the next step")
    data["no_tool_result"] = "Nothing ran: no such tool."
    path = tmp_path / "my_pack.json"
    path.write_text(json.dumps(data))
    assert read_pack(path).system_prompt == "You plan, briefly."

    env = gym.make("AgentFlow-Search-v0", prompt_style="agentflow", agentflow_source=path)
    observation, _ = env.reset(seed=0)
    assert "You plan, briefly." in observation["text"]
    assert "Pick the next step" in observation["text"]
    assert "Decide the most useful next step" not in observation["text"]
    observation, *_ = env.step(_action("No_Such_Tool", "anything"))
    assert "Nothing ran: no such tool." in observation["text"]
    env.close()
    # The same file with another style is refused: only pack-rendering styles read a pack.
    with pytest.raises(ValueError, match="agentflow_source"):
        gym.make("AgentFlow-Search-v0", prompt_style="full", agentflow_source=path)
