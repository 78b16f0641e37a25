"""The env variants: one row each in ``VARIANTS``, all built by the one builder, each owning its
labels and run defaults; and the message that rejects another variant's settings names the
setting, why, and what the variant takes, with no empty part."""

from __future__ import annotations

import importlib
import re

import gymnasium as gym
import pytest

import agentflow_env  # noqa: F401  (registers the envs)
from agentflow_env.envs.config import (
    PROBE_CONFIGS,
    CodeEnvConfig,
    EnvConfig,
    SearchEnvConfig,
    UnknownSettingError,
)
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import (
    ENTRY_POINT,
    ENV_CONFIGS,
    REGISTERED,
    VARIANTS,
    Variant,
    run_settings,
    variant_of,
)

# "<variant> does not use <a>=, <b>=: <why> (settings: <what it takes>)", every part non-empty.
MESSAGE = re.compile(
    r"(?P<variant>[\w-]+) does not use (?P<names>\w+=(, \w+=)*): "
    r"(?P<why>\S(.*\S)?) \(settings: (?P<takes>\S(.*\S)?)\)"
)


def test_both_tables_are_read_off_the_rows() -> None:
    ids = [variant.env_id for variant in VARIANTS]
    assert len(set(ids)) == len(ids)
    assert ids == ["AgentFlow-Search-v0", "AgentFlow-Code-v0", *(c.env_id for c in PROBE_CONFIGS)]
    assert list(ENV_CONFIGS)[: len(ids)] == list(REGISTERED)[: len(ids)] == ids
    module, _, name = ENTRY_POINT.partition(":")
    assert getattr(importlib.import_module(module), name) is AgentFlowEnv
    for variant in VARIANTS:
        assert ENV_CONFIGS[variant.env_id] is variant.config
        assert REGISTERED[variant.env_id] is variant_of(f"agentflow_env:{variant.env_id}")
        assert variant.config.env_id == variant.env_id
        assert gym.spec(variant.env_id).entry_point == ENTRY_POINT


@pytest.mark.parametrize("env_id", list(REGISTERED))
def test_gym_make_builds_the_rows_config(env_id: str) -> None:
    env = gym.make(env_id, max_turns=2)
    assert type(env.unwrapped.config) is ENV_CONFIGS[env_id]
    env.close()


def test_the_rows_own_their_labels_and_run_defaults() -> None:
    search, code = REGISTERED["AgentFlow-Search-v0"], REGISTERED["AgentFlow-Code-v0"]
    assert (search.label_tasks, code.label_tasks) == ("auto", "seed")
    assert search.label_settings == ("split", "world_seed") and code.label_settings == ("split",)
    for variant in VARIANTS:  # every package variant has a split: runs hold its test tasks out
        assert variant.run_defaults == {"split": "test"}
        assert run_settings(variant.env_id, {}) == {"split": "test"}
        assert run_settings(variant.env_id, {"split": "train"}) == {"split": "train"}
    # A default the given settings rule out yields: a dataset brings its own split.
    assert run_settings("AgentFlow-Search-v0", {"dataset": "qa.jsonl"}) == {"dataset": "qa.jsonl"}
    assert run_settings("Other-v0", {"max_turns": 2}) == {"max_turns": 2}  # not ours


def test_a_row_names_only_its_configs_settings() -> None:
    with pytest.raises(ValueError, match="AgentFlow-Code-v0 has no setting hops"):
        Variant(CodeEnvConfig, label_settings=("hops",))
    with pytest.raises(ValueError, match="AgentFlow-Search-v0 has no setting entities"):
        Variant(SearchEnvConfig, run_defaults={"entities": 2})
    with pytest.raises(ValueError, match="label_tasks must be one of"):
        Variant(SearchEnvConfig, label_tasks="index")  # type: ignore[arg-type]


def rejection(config: type[EnvConfig], name: str) -> str:
    with pytest.raises(UnknownSettingError) as error:
        config.from_kwargs(**{name: 1})
    return str(error.value)


def other_settings(config: type[EnvConfig]) -> list[str]:
    names = {name for other in ENV_CONFIGS.values() for name in other.settings()}
    return sorted(names - set(config.settings()))


@pytest.mark.parametrize("env_id", list(ENV_CONFIGS))
def test_another_variants_setting_is_refused_with_no_empty_part(env_id: str) -> None:
    config = ENV_CONFIGS[env_id]
    assert other_settings(config)
    for name in other_settings(config):
        message = rejection(config, name)
        found = MESSAGE.fullmatch(message)
        assert found, message
        assert found["variant"] == env_id and found["names"] == f"{name}="
        assert found["why"] == config.tasks_note
        assert found["takes"] == ", ".join(f"{own}=" for own in config.task_settings())


def test_gym_make_of_a_probe_with_a_search_setting_names_it() -> None:
    with pytest.raises(ValueError) as error:
        gym.make("AgentFlow-Probe-ToolChoice-v0", hops=2)
    found = MESSAGE.fullmatch(str(error.value))
    assert found and found["names"] == "hops=", str(error.value)


def test_a_variant_with_no_note_and_no_task_settings_still_says_why_and_what(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CodeEnvConfig, "tasks_note", "")
    monkeypatch.setattr(CodeEnvConfig, "task_settings", classmethod(lambda cls: ()))
    message = rejection(CodeEnvConfig, "hops")
    found = MESSAGE.fullmatch(message)
    assert found, message
    assert found["why"].startswith("it is a setting of AgentFlow-Search-v0")
    assert found["takes"] == "only the shared ones"
    with pytest.raises(UnknownSettingError) as error:
        CodeEnvConfig.from_kwargs(hops=2, dataset="qa.jsonl")
    found = MESSAGE.fullmatch(str(error.value))
    assert found and found["why"].startswith("they are settings of AgentFlow-Search-v0")
