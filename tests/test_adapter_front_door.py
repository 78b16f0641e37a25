"""The adapters' front door (``agentflow_env.rollout``) and the per-action cap's one name.

- Every adapter file imports from the package only names of ``agentflow_env.rollout`` or of
  ``agentflow_env`` (``scripts/check_layers.py`` rejects submodules; this checks the names).
- The old homes of moved names still give them (``rollout.training.driver``).
- ``max_action_tokens`` everywhere: the old ``max_turn_tokens`` / ``AGENTFLOW_MAX_TURN_TOKENS`` /
  ``DEFAULT_MAX_TURN_TOKENS`` still work, and warn.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import warnings

import pytest
from conftest import ROOT, load_adapter

import agentflow_env
from agentflow_env import rollout
from agentflow_env.rollout.labels import plans as labels
from agentflow_env.rollout.labels.plans import ADAPTER_MAX_ACTION_TOKENS, AdapterConfig
from agentflow_env.rollout.training import driver, lockstep, vllm_outputs


def test_the_front_door_names_exist() -> None:
    assert len(set(rollout.__all__)) == len(rollout.__all__)
    assert [name for name in rollout.__all__ if not hasattr(rollout, name)] == []


def ours(module: str) -> bool:
    return module == "agentflow_env" or module.startswith("agentflow_env.")


def test_adapters_import_only_front_door_names() -> None:
    surfaces = {
        "agentflow_env": set(agentflow_env.__all__),
        "agentflow_env.rollout": set(rollout.__all__),
    }
    wrong = []
    for path in sorted((ROOT / "adapters").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                wrong += [(path.name, a.name) for a in node.names if ours(a.name)]
            elif isinstance(node, ast.ImportFrom) and ours(node.module or ""):
                names = surfaces.get(node.module or "", set())
                wrong += [
                    (path.name, node.module, a.name) for a in node.names if a.name not in names
                ]
    assert wrong == []


def test_moved_names_keep_their_old_home() -> None:
    for name in ("action_logprobs", "capped_params", "read_request_output", "sampled_logprob"):
        assert getattr(driver, name) is getattr(vllm_outputs, name) is getattr(rollout, name)
    assert driver.distributed_max is lockstep.distributed_max
    assert driver.MaxAcrossRanks is lockstep.MaxAcrossRanks


# -- max_action_tokens, and its old name -----------------------------------------------------------
def test_the_cap_variable_sets_the_envs_max_action_tokens() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing
        config = AdapterConfig.from_environ({"AGENTFLOW_MAX_ACTION_TOKENS": "32"})
        assert config.max_action_tokens == 32 and config.env_kwargs["max_action_tokens"] == 32
        assert AdapterConfig.from_environ({}).max_action_tokens == ADAPTER_MAX_ACTION_TOKENS
        assert dataclasses.replace(config, max_action_tokens=5).max_action_tokens == 5
    with pytest.raises(ValueError, match="AGENTFLOW_MAX_ACTION_TOKENS=16 but AGENTFLOW_ENV_KWARGS"):
        AdapterConfig.from_environ(
            {
                "AGENTFLOW_MAX_ACTION_TOKENS": "16",
                "AGENTFLOW_ENV_KWARGS": '{"max_action_tokens": 8}',
            }
        )
    with pytest.raises(ValueError, match="AGENTFLOW_MAX_ACTION_TOKENS must be an integer >= 1"):
        AdapterConfig.from_environ({"AGENTFLOW_MAX_ACTION_TOKENS": "0"})


def test_the_old_cap_names_still_work_and_warn() -> None:
    with pytest.warns(FutureWarning, match="AGENTFLOW_MAX_TURN_TOKENS is deprecated"):
        config = AdapterConfig.from_environ({"AGENTFLOW_MAX_TURN_TOKENS": "24"})
    assert config.max_action_tokens == 24 and config.env_kwargs["max_action_tokens"] == 24
    with pytest.warns(DeprecationWarning, match="max_turn_tokens is deprecated"):
        assert config.max_turn_tokens == 24
    with pytest.warns(DeprecationWarning, match="max_turn_tokens=...") as caught:
        assert AdapterConfig(max_turn_tokens=7).max_action_tokens == 7
    assert caught[0].filename == __file__  # the warning points at the caller
    with pytest.warns(DeprecationWarning, match="DEFAULT_MAX_TURN_TOKENS is deprecated"):
        assert labels.DEFAULT_MAX_TURN_TOKENS == ADAPTER_MAX_ACTION_TOKENS
    with pytest.warns(FutureWarning):  # both variables, one value: accepted
        both = {"AGENTFLOW_MAX_TURN_TOKENS": "9", "AGENTFLOW_MAX_ACTION_TOKENS": "9"}
        assert AdapterConfig.from_environ(both).max_action_tokens == 9
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="they are one setting"):
        AdapterConfig.from_environ({**both, "AGENTFLOW_MAX_ACTION_TOKENS": "10"})
    with pytest.raises(AttributeError):
        labels.NO_SUCH_NAME  # noqa: B018


def test_trl_default_cap_is_named_and_unchanged() -> None:
    pytest.importorskip("torch")
    trl_rollout = load_adapter("adapters/trl/rollout.py", "agentflow_trl_rollout_cap")
    make = inspect.signature(trl_rollout.make_rollout_func).parameters["max_action_tokens"]
    assert make.default == trl_rollout.TRL_MAX_ACTION_TOKENS == 48
