"""A program that prints and then hangs: what it printed and why it stopped reach the planner,
also when the env's tool timeout is shorter than the sandbox's own limit."""

from __future__ import annotations

import asyncio

import gymnasium as gym

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.runner import run_tool
from agentflow_env.tools.sandbox import SandboxLimits

HANGS_AFTER_PRINTING = (
    "import sys, time\n"
    "print('partial-output-marker')\n"
    "sys.stdout.flush()\n"
    "while True:\n"
    "    time.sleep(1)\n"
)


def test_partial_output_reaches_the_env_observation() -> None:
    # The sandbox's own limit is 8 s; the env's (1 s) is the one that ends the call.
    env = gym.make("AgentFlow-Code-v0", tool_timeout_s=1.0)
    try:
        env.reset(seed=0)
        action = (
            "Justification: print a value, then keep working.\n"
            f"Context: ```python\n{HANGS_AFTER_PRINTING}```\n"
            "Sub-Goal: see what is printed before the time runs out.\n"
            "Tool Name: Python"
        )
        obs, _, terminated, truncated, info = env.step(action)
    finally:
        env.close()
    entry = info["memory"][-1]
    assert entry["selected_tool"] == "Python" and entry["tool_ok"] is False
    assert "partial-output-marker" in entry["tool_result"]
    assert "timed out after 1 s" in entry["errors"]
    assert not (terminated or truncated)  # the next prompt shows both to the planner
    assert "partial-output-marker" in obs["text"]
    assert "timed out after 1 s" in obs["text"]


def test_the_runner_limit_is_the_sandbox_limit() -> None:
    """A runner limit below the tool's own: the sandbox stops itself first and reports."""
    tool = PythonTool(limits=SandboxLimits(timeout_s=30.0))
    result = asyncio.run(
        run_tool(tool, {"code": HANGS_AFTER_PRINTING}, ToolContext(), timeout_s=0.5)
    )
    assert not result.ok
    assert result.output.startswith("partial-output-marker\n")
    assert result.error == "timed out after 0.5 s"
    assert result.metadata["timed_out"] is True
    assert "kind" not in result.metadata  # the sandbox's report, not the runner's cancellation
