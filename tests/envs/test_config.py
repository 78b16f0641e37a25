"""The typed env configs: validation, the JSON form, and everything derived from them (the
``gym.make`` sugar, the ``agentflow-env run`` options, ``TaskSpec`` labels, ``prepare_data.py``)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import types
from pathlib import Path
from typing import Any, get_args, get_type_hints

import gymnasium as gym
import numpy as np
import pytest

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env import cli
from agentflow_env.cli.planners import make_env
from agentflow_env.envs.config import (
    PROBE_CONFIGS,
    SECTIONS,
    CodeEnvConfig,
    CodeKind,
    EnvConfig,
    ObservationMode,
    PromptStyle,
    RewardName,
    SearchEnvConfig,
    SearchKind,
    Split,
    UnknownSettingError,
    WorldSize,
    cli_option,
    setting,
)
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import ENTRY_POINT, ENV_CONFIGS, REGISTERED
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.rollout.labels.spec import TaskSpec, TaskSpecError
from agentflow_env.tasks import code as code_tasks
from agentflow_env.tasks.synthetic import SyntheticTaskSource
from agentflow_env.tasks.synthetic.program import KINDS as SEARCH_KINDS
from agentflow_env.tools.calculator import CalculatorTool
from agentflow_env.workflow.config import RewardConfig, SessionConfig
from agentflow_env.workflow.rewards import SCORERS, reward_names

SEARCH = "AgentFlow-Search-v0"
CODE = "AgentFlow-Code-v0"
ROOT = Path(__file__).resolve().parents[2]
SOURCE = SyntheticTaskSource(hops=1)
PYTHON_ONLY = {"task_source", "tasks", "judge", "llm_endpoint"}  # objects: no command-line form


def all_fields() -> list[tuple[type[EnvConfig], dataclasses.Field]]:
    return [(cls, item) for cls in ENV_CONFIGS.values() for item in dataclasses.fields(cls)]


# -- the configs describe themselves -------------------------------------------------------------


def test_every_registered_id_has_a_config_and_the_one_builder() -> None:
    probes = {config.env_id for config in PROBE_CONFIGS}
    assert set(ENV_CONFIGS) == set(REGISTERED) >= {SEARCH, CODE, *probes}
    assert len(probes) == 4
    for env_id, cls in ENV_CONFIGS.items():
        assert cls.env_id == env_id and cls.variant() == env_id
        assert gym.spec(env_id).entry_point == ENTRY_POINT
        assert gym.spec(env_id).kwargs == {"config_class": cls}


def test_every_field_has_help_and_a_section() -> None:
    for _, item in all_fields():
        assert isinstance(item.metadata.get("help"), str) and item.metadata["help"], item.name
        assert item.metadata.get("section") in SECTIONS, item.name
    assert CodeEnvConfig.task_settings() == (
        "kinds",
        "split",
        "fresh_world",
        "world_seed",
        "world_size",
    )


def test_the_literal_choices_match_what_the_layers_below_accept() -> None:
    assert get_args(SearchKind) == tuple(SEARCH_KINDS)
    assert get_args(CodeKind) == tuple(code_tasks.KINDS)
    assert get_args(Split) == ("train", "test") == code_tasks.source.SPLITS
    assert get_args(WorldSize) == code_tasks.source.WORLD_SIZES
    assert RewardName is str  # any scorer's name: register_scorer adds them
    assert reward_names() == (*SCORERS, "llm_judge") == ("exact_match", "f1", "llm_judge")
    for reward in reward_names():
        RewardConfig(reward)
    for style in get_args(PromptStyle):
        SessionConfig(prompt_style=style)
    for mode in get_args(ObservationMode):
        SessionConfig(observation_mode=mode)
    # The Code variant lacks exactly the Search settings that choose or shape other task sources.
    assert set(SearchEnvConfig.settings()) - set(CodeEnvConfig.settings()) == {
        "hops",
        "distractors",
        "task_source",
        "tasks",
        "dataset",
        "corpus",
        "dataset_split",
        "dataset_limit",
        "answer_tag_suffix",
        "index_cache_dir",
    }


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"reward": "bleu"},
            "reward must be one of ['exact_match', 'f1', 'llm_judge'], got 'bleu'",
        ),
        (
            {"prompt_style": "tiny"},
            "prompt_style must be one of ['full', 'compact', 'agentflow'], got 'tiny'",
        ),
        (
            {"observation_mode": "raw"},
            "observation_mode must be one of ['structured', 'flat'], got 'raw'",
        ),
        ({"split": "dev"}, "split must be one of ['train', 'test'], got 'dev'"),
        (
            {"modules": "gpt"},
            "modules must be one of ['rule', 'llm'], a per-role mapping or a Modules bundle, "
            "got 'gpt'",
        ),
        (
            {"modules": {"planner": "llm"}},
            "unknown module role(s) ['planner']; roles are "
            "['initializer', 'executor', 'verifier', 'generalist']",
        ),
        (
            {"kinds": ["bridge", "riddle"]},
            "unknown kinds ['riddle']; expected some of ['bridge', 'comparison', 'arithmetic']",
        ),
        (
            {"tools": ["Search", 3]},
            "a tool is a name, a Tool or an object with a 'name', got 3",
        ),
    ],
)
def test_choices_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as error:
        SearchEnvConfig(**kwargs)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("tool_timeout_s", -1.0, "tool_timeout_s must be >= 0, got -1.0"),
        ("max_tool_output_chars", -5, "max_tool_output_chars must be >= 0, got -5"),
        ("lambda_calls", -0.1, "lambda_calls must be >= 0, got -0.1"),
        ("lambda_tokens", -1e-4, "lambda_tokens must be >= 0, got -0.0001"),
        ("lambda_errors", -2, "lambda_errors must be >= 0, got -2"),
        ("lambda_calls", math.nan, "lambda_calls must be a finite number, got nan"),
        ("max_turns", 0, "max_turns must be >= 1, got 0"),
        ("max_action_tokens", 0, "max_action_tokens must be >= 1 or None, got 0"),
        ("dataset_limit", 0, "dataset_limit must be >= 1 or None, got 0"),
        ("max_turns", "3", "max_turns must be an integer, got '3'"),
        ("max_turns", True, "max_turns must be an integer, got True"),
        ("fresh_world", 1, "fresh_world must be True or False, got 1"),
        ("tool_timeout_s", "fast", "tool_timeout_s must be a number, got 'fast'"),
    ],
)
def test_numbers_and_types_are_checked(name: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError) as error:
        SearchEnvConfig(**{name: value})
    assert str(error.value) == message


def test_valid_values_are_kept_and_lists_become_tuples() -> None:
    config = SearchEnvConfig(
        hops=[1, 2], kinds=["bridge"], tools=["Search"], tool_timeout_s=0, lambda_calls=1
    )
    assert config.hops == (1, 2) and config.kinds == ("bridge",) and config.tools == ("Search",)
    assert SearchEnvConfig(world_seed=np.int64(3)).world_seed == 3
    assert SearchEnvConfig(max_action_tokens=None).max_action_tokens is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_turns = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        dataclasses.replace(config, max_turns=0)  # a changed copy is checked again


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (
            SearchEnvConfig,
            {"dataset": "qa.jsonl", "tasks": ()},
            "give at most one of task_source, tasks and dataset",
        ),
        (
            SearchEnvConfig,
            {"corpus": "wiki.jsonl"},
            "corpus= goes with dataset= (synthetic worlds bring their own)",
        ),
        (
            SearchEnvConfig,
            {"dataset_split": "dev", "dataset_limit": 2},
            "dataset_split=, dataset_limit= only apply with dataset=",
        ),
        (
            SearchEnvConfig,
            {"dataset": "qa.jsonl", "fresh_world": True, "kinds": "bridge"},
            "kinds=, fresh_world= only apply to the synthetic world, but the tasks come from "
            "dataset= (dataset_split= and dataset_limit= filter a dataset)",
        ),
        (
            CodeEnvConfig,
            {"kinds": ["make24", "compute"], "world_size": "small"},
            "world_size= only shape the world of fact_math questions, and kinds=['make24', "
            "'compute'] has none: add 'fact_math' to kinds or drop them",
        ),
    ],
)
def test_rules_between_fields(cls: type[EnvConfig], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as error:
        cls(**kwargs)
    assert str(error.value) == message


def test_settings_equal_to_the_defaults_go_with_any_task_source() -> None:
    task = SyntheticTaskSource(hops=1).sample(np.random.default_rng(0))
    config = SearchEnvConfig(tasks=[task], split="train", world_seed=0, fresh_world=False)
    assert config.make_task_source().sample(np.random.default_rng(1)) == task


# -- keyword settings and the JSON form --------------------------------------------------------


def test_settings_a_variant_lacks_are_named_with_the_valid_ones() -> None:
    with pytest.raises(UnknownSettingError) as error:
        SearchEnvConfig.from_kwargs(hops=2, temperature=0.7)
    message = str(error.value)
    assert message.startswith("AgentFlow-Search-v0 has no setting temperature=; its settings are ")
    assert all(name in message for name in SearchEnvConfig.settings())
    with pytest.raises(UnknownSettingError) as error:
        CodeEnvConfig.from_kwargs(hops=3, dataset="qa.jsonl")
    assert str(error.value) == (
        "AgentFlow-Code-v0 does not use hops=, dataset=: it generates its own tasks (settings: "
        "kinds=, split=, fresh_world=, world_seed=, world_size=)"
    )
    assert isinstance(error.value, ValueError)
    # Another variant's setting given as None is not used, so not refused (as before).
    assert CodeEnvConfig.from_kwargs(hops=None) == CodeEnvConfig()
    # The older name of world_seed.
    assert CodeEnvConfig.from_kwargs(seed=4, kinds="fact_math").world_seed == 4
    with pytest.raises(ValueError, match="^seed=1 and world_seed=2 name the same world seed"):
        CodeEnvConfig.from_kwargs(seed=1, world_seed=2)


def round_trip_configs() -> list[EnvConfig]:
    return [
        SearchEnvConfig(),
        SearchEnvConfig(
            hops=[2, 3],
            kinds="comparison",
            split="test",
            world_seed=7,
            world_size="small",
            fresh_world=True,
            tools=["Calculator", {"name": "Search", "retriever_url": "http://127.0.0.1:9/"}],
            retriever_url="http://127.0.0.1:9/retrieve",
            tool_timeout_s=2.5,
            max_tool_output_chars=100,
            modules={"verifier": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
            reward="f1",
            lambda_calls=0.1,
            lambda_tokens=0.001,
            lambda_errors=0.5,
            max_turns=4,
            tokenizer="some/tokenizer",
            prompt_style="compact",
            observation_mode="flat",
            max_action_tokens=None,
            max_prompt_tokens=4096,
            max_total_tokens=8192,
        ),
        SearchEnvConfig(
            dataset="qa.jsonl",
            corpus="wiki.jsonl",
            dataset_split="dev",
            dataset_limit=5,
            index_cache_dir="indexes",
        ),
        CodeEnvConfig(),
        CodeEnvConfig(kinds=["fact_math", "compute"], world_seed=3, world_size="small"),
    ]


@pytest.mark.parametrize("config", round_trip_configs(), ids=lambda c: type(c).__name__)
def test_to_dict_from_dict_round_trip(config: EnvConfig) -> None:
    data = json.loads(json.dumps(config.to_dict()))
    assert type(config).from_dict(data) == config
    assert list(data) == list(type(config).settings())
    changed = config.to_dict(defaults=False)
    assert type(config).from_dict(changed) == config
    assert all(not _is_default(config, name) for name in changed)


def _is_default(config: EnvConfig, name: str) -> bool:
    return getattr(config, name) == type(config).__dataclass_fields__[name].default


def test_from_dict_rejects_unknown_keys_with_the_valid_ones() -> None:
    with pytest.raises(UnknownSettingError) as error:
        SearchEnvConfig.from_dict({"max_turns": 3, "maxturns": 4})
    assert "has no setting maxturns=; its settings are tools, retriever_url, " in str(error.value)
    with pytest.raises(UnknownSettingError, match="^AgentFlow-Code-v0 does not use hops=:"):
        CodeEnvConfig.from_dict({"hops": 2})
    with pytest.raises(ValueError, match="must be an object"):
        SearchEnvConfig.from_dict(["max_turns", 3])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"tools": [CalculatorTool()]}, "tools="),
        ({"tasks": [SOURCE.sample(np.random.default_rng(0))]}, "tasks="),
        ({"task_source": SOURCE}, "task_source="),
        ({"tokenizer": object()}, "tokenizer="),
        ({"modules": {"verifier": object()}}, "modules="),
    ],
)
def test_to_dict_says_which_object_it_cannot_write(kwargs: dict[str, Any], named: str) -> None:
    config = SearchEnvConfig(**kwargs)  # objects are fine in a config...
    with pytest.raises(TypeError) as error:
        config.to_dict()  # ...but have no JSON form
    message = str(error.value)
    assert message.startswith(f"SearchEnvConfig.to_dict cannot serialise {named}")
    assert "has no JSON form" in message


# -- gym.make is sugar for the config ------------------------------------------------------------


def episode_digest(env: gym.Env, seeds: range = range(3)) -> list[Any]:
    planner = ExpertPlanner(env)
    seen: list[Any] = []
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            seen.append((obs["text"], obs["token_ids"].tolist()))
            obs, reward, terminated, truncated, info = env.step(planner.act(obs, info))
            seen.append((float(reward), terminated, truncated, info.get("answer")))
            done = terminated or truncated
    env.close()
    return seen


@pytest.mark.parametrize(
    ("env_id", "config"),
    [
        (SEARCH, SearchEnvConfig(hops=2, max_turns=4, observation_mode="flat")),
        (SEARCH, SearchEnvConfig(fresh_world=True, kinds="bridge", prompt_style="compact")),
        (CODE, CodeEnvConfig(kinds="compute", split="test")),
        (CODE, CodeEnvConfig(kinds="fact_math", world_seed=2, world_size="small")),
    ],
)
def test_gym_make_sugar_equals_the_config(env_id: str, config: EnvConfig) -> None:
    sugar = gym.make(env_id, **config.to_dict(defaults=False))
    assert sugar.unwrapped.config == config
    assert episode_digest(sugar) == episode_digest(AgentFlowEnv(config))
    # config= through gym.make, with a keyword changing it, is the changed config.
    changed = gym.make(env_id, config=config, max_turns=2)
    assert changed.unwrapped.config == dataclasses.replace(config, max_turns=2)
    changed.close()


@pytest.mark.parametrize("env_id", list(REGISTERED))
def test_each_id_takes_only_its_variants_config(env_id: str) -> None:
    other = CodeEnvConfig() if env_id != CODE else SearchEnvConfig()
    name = ENV_CONFIGS[env_id].__name__
    with pytest.raises(TypeError, match=f"^{env_id} takes a {name}, got {type(other).__name__}"):
        gym.make(env_id, config=other)
    with pytest.raises(TypeError, match=f"takes a {name}"):
        AgentFlowEnv(other, config_class=ENV_CONFIGS[env_id])


def test_the_one_builder_takes_any_variants_config() -> None:
    with pytest.raises(UnknownSettingError, match="^AgentFlow-Code-v0 does not use hops="):
        AgentFlowEnv(CodeEnvConfig(), hops=2)
    env = AgentFlowEnv(CodeEnvConfig(kinds="make24"))
    assert env.tools.names == ("Python", "Calculator", "Search")
    env.close()


def test_json_tool_and_endpoint_forms_build_in_the_env() -> None:
    config = SearchEnvConfig.from_dict(
        {
            "tools": ["Calculator", {"name": "Search", "retriever_url": "http://127.0.0.1:9/"}],
            "modules": {"verifier": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        }
    )
    env = AgentFlowEnv(config)
    assert env.tools.names == ("Calculator", "Search")
    assert env.tools.get("Search").remote is not None
    assert type(env.modules.verifier).__name__ == "LLMVerifier"
    env.close()


# -- the command line is generated from the configs ------------------------------------------------


def run_help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    return " ".join(capsys.readouterr().out.split())


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_every_config_field_has_a_run_option(capsys, monkeypatch) -> None:
    text = run_help(capsys, monkeypatch)
    for cls, item in all_fields():
        option = cli_option(item, get_type_hints(cls)[item.name])
        if item.name in PYTHON_ONLY:
            assert option is None and flag(item.name) not in text
            continue
        assert option is not None, item.name
        assert f"{flag(item.name)} " in text, item.name
        assert item.metadata["help"] in text, item.name


def test_a_new_config_field_gets_an_option_without_touching_the_cli(capsys, monkeypatch) -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class KnobEnvConfig(SearchEnvConfig):
        env_id = "AgentFlowTest-Knob-v0"
        knob_level: int = setting(3, help="how far the new knob turns", section="episode")
        knob_mode: Split = setting("train", help="which way it turns", section="episode")

    monkeypatch.setitem(ENV_CONFIGS, KnobEnvConfig.env_id, KnobEnvConfig)
    text = run_help(capsys, monkeypatch)
    assert (
        "--knob-level KNOB_LEVEL how far the new knob turns (AgentFlowTest-Knob-v0 only) "
        "(default: 3)" in text
    )
    assert "--knob-mode {train,test} which way it turns" in text
    args = cli.build_parser().parse_args(["run", "--knob-level", "5", "--max-turns", "2"])
    assert args.knob_level == 5 and {"knob_level", "knob_mode"} <= set(args.env_settings)


def test_run_options_reach_the_env(monkeypatch) -> None:
    args = cli.build_parser().parse_args(
        [
            "run",
            *("--env", CODE, "--kinds", "compute,make24", "--tools", "Python,Calculator"),
            *("--lambda-calls", "0.25", "--max-action-tokens", "none", "--prompt-style", "compact"),
        ]
    )
    env = make_env(args)
    try:
        assert env.unwrapped.config == CodeEnvConfig(
            kinds=("compute", "make24"),
            split="test",  # the command's own default
            tools=("Python", "Calculator"),
            lambda_calls=0.25,
            max_action_tokens=None,
            prompt_style="compact",
        )
    finally:
        env.close()
    bad = ["run", "--lambda-calls", "-1"]
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(bad)


# -- labels and prepare_data.py ------------------------------------------------------------------
def load_prepare_data() -> types.ModuleType:
    path = ROOT / "adapters" / "openrlhf" / "prepare_data.py"
    spec = importlib.util.spec_from_file_location("agentflow_prepare_config_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_labels_check_their_env_kwargs_with_the_config() -> None:
    with pytest.raises(TaskSpecError) as error:
        TaskSpec(env_kwargs={"max_turns": 0}, seed=1)
    assert str(error.value) == "env_kwargs for AgentFlow-Search-v0: max_turns must be >= 1, got 0"
    with pytest.raises(TaskSpecError, match="AgentFlow-Code-v0 does not use hops="):
        TaskSpec.from_json(json.dumps({"env_id": CODE, "env_kwargs": {"hops": 2}, "seed": 1}))
    with pytest.raises(TaskSpecError, match="has no setting maxturns=; its settings are tools"):
        TaskSpec(env_kwargs={"maxturns": 3}, seed=1)
    # Labels naming no env, or another package's env, are checked when their env is built.
    assert TaskSpec(env_id=None, env_kwargs={"anything": 1}, seed=1).seed == 1
    assert TaskSpec(env_id="Other-v0", env_kwargs={"anything": 1}, seed=1).seed == 1
    spec = TaskSpec(env_id=CODE, env_kwargs=CodeEnvConfig(kinds="make24").to_dict(), seed=3)
    env = spec.make_env()
    assert env.config == CodeEnvConfig(kinds="make24")
    env.close()


def test_prepare_data_options_come_from_the_config(tmp_path: Path) -> None:
    prepare = load_prepare_data()
    parser = prepare.build_parser()
    synthetic = parser.parse_args(["synthetic", "--out", "x"])
    labelled = set(EnvConfig.settings()) - PYTHON_ONLY - set(prepare.ADAPTER_SETTINGS)
    assert set(synthetic.label_settings) == labelled
    # The task settings of every registered variant: --env-id picks whose tasks are drawn.
    tasks = {name for cls in ENV_CONFIGS.values() for name in cls.section_settings("tasks")}
    assert set(SearchEnvConfig.section_settings("tasks")) | {"entities"} <= tasks
    assert set(synthetic.world_settings) == tasks - {"task_source", "tasks"}
    out = tmp_path / "train.jsonl"
    argv = ["synthetic", "--out", str(out), "--count", "2", "--hops", "1"]
    assert prepare.main([*argv, "--max-turns", "3", "--tools", "Search,Calculator"]) == 0
    labels = [json.loads(json.loads(line)["label"]) for line in out.read_text().splitlines()]
    assert labels[0]["env_kwargs"] == {
        "hops": [1],
        "max_turns": 3,
        "split": "train",
        "tools": ["Search", "Calculator"],
        "world_seed": 0,
    }
    with pytest.raises(SystemExit):
        prepare.main([*argv, "--max-turns", "0"])
