"""agentflow-env: AgentFlow's tool-using workflow as a Gymnasium environment whose agent is the planner.

The package is layered: each layer imports only from the layers below it, and this module, the
public API (below), sits on top of them all. The layers are the import-linter contract in
``pyproject.toml`` (``lint-imports`` checks it); ``docs/architecture.md`` says what each holds.
"""

from __future__ import annotations

from agentflow_env.base.hf_tokens import HFChatTokenizer, resolve_tokenizer
from agentflow_env.base.tokens import BundledTokenizer, ChatTokenizer, load_default_tokenizer
from agentflow_env.envs.config import CodeEnvConfig, EnvConfig, SearchEnvConfig
from agentflow_env.envs.curriculum import Curriculum
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import Variant, register_envs, register_variant
from agentflow_env.evaluation.eval_suite import EvalSuite
from agentflow_env.evaluation.metrics import summarize_diagnostics
from agentflow_env.evaluation.preflight import run_preflight
from agentflow_env.evaluation.runner import evaluate
from agentflow_env.evaluation.suites import get_suite, suite_specs
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner
from agentflow_env.rollout.labels.spec import TaskSpec
from agentflow_env.rollout.training.group_credit import (
    TrajectoryCredit,
    flow_grpo_advantages,
    turn_advantages,
)
from agentflow_env.tasks.base import PlanStep, Task, TaskSource
from agentflow_env.tools import Tool, ToolCard, ToolContext, ToolResult, register_tool
from agentflow_env.workflow.memory import Memory, MemoryEntry, QueryAnalysis, VerificationStatus
from agentflow_env.workflow.outcome import EndReason, EpisodeOutcome
from agentflow_env.workflow.rewards import register_scorer
from agentflow_env.workflow.session import Session, SessionConfig
from agentflow_env.workflow.shaping import progress_potential
from agentflow_env.workflow.trajectory import Trajectory, TurnRecord
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
    "Variant",
    "VerificationStatus",
    "evaluate",
    "flow_grpo_advantages",
    "get_suite",
    "progress_potential",
    "turn_advantages",
    "load_default_tokenizer",
    "read_turn_log",
    "register_envs",
    "register_scorer",
    "register_variant",
    "register_tool",
    "resolve_tokenizer",
    "run_preflight",
    "suite_specs",
    "summarize_diagnostics",
]
