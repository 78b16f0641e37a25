"""The adapters' front door (``agentflow_env.rollout``) and the per-action cap's one name.

- Every adapter file imports from the package only names of ``agentflow_env.rollout``'s
  ``ADAPTER_API`` or of ``agentflow_env`` (``scripts/check_layers.py`` rejects submodules; this
  checks the names), and every name of ``ADAPTER_API`` is one an adapter imports.
- The old homes of moved names still give them (``rollout.training.driver``).
- ``max_action_tokens`` everywhere: the old ``max_turn_tokens`` / ``AGENTFLOW_MAX_TURN_TOKENS`` /
  ``DEFAULT_MAX_TURN_TOKENS`` are gone (their warnings stood for a release).
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
    # The adapters' names come first, each once.
    assert rollout.__all__[: len(rollout.ADAPTER_API)] == list(rollout.ADAPTER_API)


def ours(module: str) -> bool:
    return module == "agentflow_env" or module.startswith("agentflow_env.")


def test_adapters_import_only_front_door_names() -> None:
    surfaces = {
        "agentflow_env": set(agentflow_env.__all__),
        "agentflow_env.rollout": set(rollout.ADAPTER_API),  # not the rest of __all__
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
    used = set()
    for path in (ROOT / "adapters").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "agentflow_env.rollout":
                used |= {a.name for a in node.names}
    assert used == set(rollout.ADAPTER_API)  # no name listed for the adapters that none uses


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


def test_the_old_cap_names_are_gone() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old variable is not read, so nothing warns
        config = AdapterConfig.from_environ({"AGENTFLOW_MAX_TURN_TOKENS": "24"})
    assert config.max_action_tokens == ADAPTER_MAX_ACTION_TOKENS
    assert not hasattr(config, "max_turn_tokens")
    with pytest.raises(TypeError, match="max_turn_tokens"):
        AdapterConfig(max_turn_tokens=7)  # type: ignore[call-arg]
    for name in ("DEFAULT_MAX_TURN_TOKENS", "DEPRECATED_CAP_VARIABLE"):
        assert not hasattr(labels, name)
    with pytest.raises(KeyError, match="AGENTFLOW_MAX_TURN_TOKENS is not a declared"):
        rollout.read_env_var("AGENTFLOW_MAX_TURN_TOKENS")


def test_trl_default_cap_is_named_and_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(ROOT / "adapters" / "trl"))  # its sibling files
    trl_rollout = load_adapter("adapters/trl/rollout.py", "agentflow_trl_rollout_cap")
    make = inspect.signature(trl_rollout.make_rollout_func).parameters["max_action_tokens"]
    assert make.default == trl_rollout.TRL_MAX_ACTION_TOKENS == 48
