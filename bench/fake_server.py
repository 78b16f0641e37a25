"""Starting the test suite's fake OpenAI-compatible server in its own process, for benchmarks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import numpy as np

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.llm import LLMEndpoint
from agentflow_env.modules import build_modules
from agentflow_env.tasks.base import Task

SERVER = Path(__file__).resolve().parent.parent / "tests" / "fake_openai_server.py"


def start_fake_server(*options: str) -> tuple[subprocess.Popen[str], int]:
    """Start ``tests/fake_openai_server.py`` with ``options``; return the process and its port."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        raise RuntimeError(f"the fake server did not start: {line!r}")
    return process, int(line.split()[1])


@contextmanager
def llm_module_env(
    delay: float, hops: int, max_concurrency: int, timeout_s: float
) -> Iterator[AgentFlowEnv]:
    """The Search env with all four frozen modules LLM-backed, on the fake server (``delay`` s a
    reply, its verifier stopping after ``hops`` steps) in its own process; both closed after."""
    process, port = start_fake_server("--delay", str(delay), "--stop-after", str(hops))
    try:
        endpoint = LLMEndpoint(
            f"http://127.0.0.1:{port}/v1",
            "fake",
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
        )
        env = gym.make(
            "AgentFlow-Search-v0", hops=hops, modules=build_modules("llm", endpoint=endpoint)
        )
        base = env.unwrapped
        assert isinstance(base, AgentFlowEnv)
        try:
            yield base
        finally:
            env.close()
    finally:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(timeout=10)


def sample_tasks(env: AgentFlowEnv, count: int) -> list[Task]:
    """``count`` tasks from ``env``'s task source, the same ones every run (seed 0)."""
    rng = np.random.default_rng(0)
    return [env.task_source.sample(rng) for _ in range(count)]
