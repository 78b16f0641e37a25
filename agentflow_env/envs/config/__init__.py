"""The typed settings of each environment variant: one frozen dataclass per registered env id.

``EnvConfig`` holds what every variant shares (tools, frozen modules, reward, episode limits,
observations); ``SearchEnvConfig`` (``AgentFlow-Search-v0``) and ``CodeEnvConfig``
(``AgentFlow-Code-v0``) add where their tasks come from, and the probe configs
(``AgentFlow-Probe-*-v0``, ``probes.py``) their probe tasks. Each field has its help text and its
section in ``metadata``; mode-like settings are ``Literal`` types. ``__post_init__`` checks every
field against its type, choices and bounds, then the rules between fields, so a config that
exists is valid (change one with ``updated`` or ``dataclasses.replace``, which check again).

Everything else derives from these classes:

- ``AgentFlowEnv(config)``; its keyword settings and ``gym.make(id, **settings)`` are sugar for
  ``<variant config>.from_kwargs(**settings)``, which names the variant's valid settings when
  given one it lacks;
- ``to_dict`` / ``from_dict``: the JSON form a ``TaskSpec`` label carries as ``env_kwargs``;
- ``add_config_arguments``: the options of ``agentflow-env run`` and of the OpenRLHF
  ``prepare_data.py`` script, one per field (name, type, default, help, ``Literal`` choices).

A config may hold objects that have no JSON form (``Tool`` instances, a ``Modules`` bundle, a
tokenizer object, a task source, an ``LLMEndpoint``); ``to_dict`` says which one it cannot write.
"""

from __future__ import annotations

from agentflow_env.envs.config.checks import (
    build_tool,
    check_dataset_corpus,
    check_modules,
    check_tools,
    module_choice,
    modules_spec,
)
from agentflow_env.envs.config.choices import (
    CODE_TOOLS,
    DEFAULT_TOOLS,
    SECTIONS,
    CodeKind,
    ModuleBackend,
    ObservationMode,
    PromptStyle,
    RewardName,
    SearchKind,
    Split,
    WorldSize,
)
from agentflow_env.envs.config.cli_options import (
    CliOption,
    add_config_arguments,
    cli_option,
    settings_from_args,
)
from agentflow_env.envs.config.fields import UnknownSettingError, setting
from agentflow_env.envs.config.probes import (
    PROBE_CONFIGS,
    PROBE_ENV_IDS,
    CopyingProbeConfig,
    DelayedCreditProbeConfig,
    ProbeEnvConfig,
    StopProbeConfig,
    ToolChoiceProbeConfig,
)
from agentflow_env.envs.config.shared import EnvConfig
from agentflow_env.envs.config.variants import CodeEnvConfig, SearchEnvConfig

__all__ = [
    "CODE_TOOLS",
    "DEFAULT_TOOLS",
    "PROBE_CONFIGS",
    "PROBE_ENV_IDS",
    "SECTIONS",
    "CodeEnvConfig",
    "CodeKind",
    "CopyingProbeConfig",
    "DelayedCreditProbeConfig",
    "EnvConfig",
    "ModuleBackend",
    "ObservationMode",
    "ProbeEnvConfig",
    "PromptStyle",
    "RewardName",
    "SearchEnvConfig",
    "SearchKind",
    "Split",
    "StopProbeConfig",
    "ToolChoiceProbeConfig",
    "UnknownSettingError",
    "WorldSize",
    "add_config_arguments",
    "build_tool",
    "check_dataset_corpus",
    "check_modules",
    "check_tools",
    "CliOption",
    "cli_option",
    "module_choice",
    "modules_spec",
    "setting",
    "settings_from_args",
]
