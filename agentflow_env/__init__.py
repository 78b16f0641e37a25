"""agentflow-env: AgentFlow's tool-using workflow as a Gymnasium environment whose agent is the planner.

The package is layered; each layer imports only from the layers below it
(``scripts/check_layers.py`` checks this):

1. ``base``: tokenizers, untrusted text, spaces, the loop runner, shared errors, JSONL helpers.
2. ``retrieval``, ``tools``, ``tasks``: corpora and search; the executor's tools; task sources.
3. ``llm``: the OpenAI-compatible client, the judge.
4. ``workflow``: one episode (``Session``, memory, actions, observations, prompts, rewards,
   trajectories) and the protocols of the frozen modules it calls.
5. ``modules``: the frozen modules' ``rule`` and ``llm`` backends.
6. ``envs``: the Gymnasium facade ``AgentFlowEnv``, its variants and their registration.
7. ``rollout``: episodes, demonstrations, planners, ``TaskSpec`` labels.
8. ``evaluation``: metrics over episodes, ``eval`` and ablations, the pre-flight check, the viewer.
9. this package's public API (below) and the ``agentflow-env`` command (``cli``).
"""

from __future__ import annotations

from agentflow_env.base.hf_tokens import HFChatTokenizer, resolve_tokenizer
from agentflow_env.base.tokens import BundledTokenizer, ChatTokenizer, load_default_tokenizer
from agentflow_env.envs.config import CodeEnvConfig, EnvConfig, SearchEnvConfig
from agentflow_env.envs.curriculum import Curriculum
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import ENV_ENTRY_POINTS, register_envs  # noqa: F401
from agentflow_env.evaluation.eval_suite import EvalSuite
from agentflow_env.evaluation.metrics import summarize_diagnostics
from agentflow_env.evaluation.preflight import run_preflight
from agentflow_env.evaluation.runner import evaluate
from agentflow_env.evaluation.suites import get_suite, suite_specs
from agentflow_env.rollout.planners import ExpertPlanner, RandomPlanner
from agentflow_env.rollout.spec import TaskSpec
from agentflow_env.tasks.base import PlanStep, Task, TaskSource
from agentflow_env.tools import Tool, ToolCard, ToolContext, ToolResult, register_tool
from agentflow_env.workflow.credit import TrajectoryCredit, turn_advantages
from agentflow_env.workflow.memory import Memory, MemoryEntry, QueryAnalysis, VerificationStatus
from agentflow_env.workflow.outcome import EndReason, EpisodeOutcome
from agentflow_env.workflow.session import Session, SessionConfig
from agentflow_env.workflow.shaping import progress_potential
from agentflow_env.workflow.trajectory import Trajectory, TurnRecord, flow_grpo_advantages
from agentflow_env.workflow.turn_log import TurnLog, read_turn_log

__version__ = "0.1.0"

register_envs()

__all__ = [
    "AgentFlowEnv",
    "BundledTokenizer",
    "ChatTokenizer",
    "CodeEnvConfig",
    "Curriculum",
    "EnvConfig",
    "EndReason",
    "EpisodeOutcome",
    "EvalSuite",
    "ExpertPlanner",
    "HFChatTokenizer",
    "Memory",
    "MemoryEntry",
    "PlanStep",
    "QueryAnalysis",
    "RandomPlanner",
    "SearchEnvConfig",
    "Session",
    "SessionConfig",
    "Task",
    "TrajectoryCredit",
    "TaskSource",
    "TaskSpec",
    "Tool",
    "ToolCard",
    "ToolContext",
    "ToolResult",
    "Trajectory",
    "TurnLog",
    "TurnRecord",
    "VerificationStatus",
    "evaluate",
    "flow_grpo_advantages",
    "get_suite",
    "progress_potential",
    "turn_advantages",
    "load_default_tokenizer",
    "read_turn_log",
    "register_envs",
    "register_tool",
    "resolve_tokenizer",
    "run_preflight",
    "suite_specs",
    "summarize_diagnostics",
]
