"""The containment battery again, run by an unprivileged user.

Run as root (as here and in CI), the test forks and the child drops to uid and gid 65534 with no
supplementary groups before it calls the sandbox, which then sees a normal user: no per-call
uids, and namespaces only through a user namespace. (A fork, not a new interpreter: the
interpreter running the tests may live where that user cannot read it.) Run as a normal user,
the child keeps that user. Every case of the modules below runs there, with its host-side checks.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import select
import shutil
import signal
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import pytest
import test_python_sandbox as basic_cases
import test_sandbox_containment as host_cases
import test_sandbox_degraded as degraded_cases
import test_sandbox_partial_output as output_cases

from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.sandbox import SandboxLimits, run_python, sandbox_support
from agentflow_env.tools.sandbox.seccomp import compiled_filter

UNPRIVILEGED = 65534
MODULES = (basic_cases, host_cases, degraded_cases, output_cases)
# What a normal user does not get (docs/sandbox.md, "Weaker modes"): these cases skip there.
SKIPPED_FOR_A_NORMAL_USER = {
    "test_writing_outside_the_temp_dir_fails",  # it may write wherever that user may
    "test_killing_the_parent_fails",  # same uid: it may signal it, unless in a PID ns
    "test_daemonized_children_are_killed",  # no uid to sweep by, unless in a PID ns
    "test_fork_bomb_that_ignores_errors_stays_under_the_limit",  # per-call uids only
}
_BATTERY_TIMEOUT_S = 600


def cases() -> list[tuple[ModuleType, str, Callable[..., Any]]]:
    found = []
    for module in MODULES:
        for name, function in vars(module).items():
            if name.startswith("test_") and inspect.isfunction(function):
                found.append((module, name, function))
    return found


def _warm_up() -> None:
    """Import and probe everything as the current user first: after the drop, modules under a
    private home (the interpreter's own standard library, maybe) can no longer be read."""
    for limits in (basic_cases.LIMITS, host_cases.LIMITS, degraded_cases.LIMITS, SandboxLimits()):
        sandbox_support(limits)
    compiled_filter(allow_ip=True)
    compiled_filter(allow_ip=False)
    asyncio.run(run_python("print(1)", basic_cases.LIMITS))
    env = gym.make("AgentFlow-Code-v0")
    env.reset(seed=0)
    env.close()


def _run_case(module: ModuleType, function: Callable[..., Any], host_dir: Path) -> list[str]:
    arguments: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for parameter in inspect.signature(function).parameters:
            arguments[parameter] = {
                "tool": lambda: PythonTool(limits=module.LIMITS),
                "monkeypatch": lambda: monkeypatch,
                "host_dir": lambda: host_dir,
            }[parameter]()
        try:
            function(**arguments)
        except pytest.skip.Exception as skipped:
            return ["skipped", str(skipped.msg)]
        except BaseException:  # an assertion, pytest.fail or a crash
            return ["failed", traceback.format_exc()[-3000:]]
    return ["passed", ""]


def _battery_in_child(drop_to: int | None, host_dir: Path) -> dict[str, Any]:
    """Fork; the child (as ``drop_to`` if given) runs every case and sends back the outcomes."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            report = _child_report(drop_to, host_dir)
        except BaseException:
            report = {"crash": traceback.format_exc()}
        try:
            with os.fdopen(write_end, "w") as pipe:
                json.dump(report, pipe)
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    try:
        with os.fdopen(read_end, "rb") as pipe:
            while True:
                ready, _, _ = select.select([pipe], [], [], _BATTERY_TIMEOUT_S)
                if not ready:
                    pytest.fail("the unprivileged battery did not finish")
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        if not chunks:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the battery's child died"
    report: dict[str, Any] = json.loads(b"".join(chunks))
    if "crash" in report:
        pytest.fail(f"the battery's child failed:\n{report['crash']}")
    return report


def _child_report(drop_to: int | None, host_dir: Path) -> dict[str, Any]:
    _warm_up()
    if drop_to is not None:
        os.setgroups([])
        os.setgid(drop_to)
        os.setuid(drop_to)
    return {
        "uid": os.getuid(),
        "not_isolated": list(sandbox_support(host_cases.LIMITS).not_isolated),
        "outcomes": {
            f"{module.__name__}::{name}": _run_case(module, function, host_dir)
            for module, name, function in cases()
        },
    }


def test_the_containment_battery_holds_for_an_unprivileged_user() -> None:
    drop_to = UNPRIVILEGED if os.geteuid() == 0 else None
    host_dir = host_cases.make_visible_dir()  # made before the drop, usable after it
    try:
        report = _battery_in_child(drop_to, host_dir)
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)
    assert report["uid"] == (drop_to if drop_to is not None else os.getuid())
    outcomes = report["outcomes"]
    assert len(outcomes) == len(cases()) >= 25
    failed = {name: detail for name, (status, detail) in outcomes.items() if status == "failed"}
    assert not failed, "\n\n".join(f"{name}:\n{detail}" for name, detail in failed.items())
    for name, (status, reason) in outcomes.items():
        if status != "skipped" or name.split("::")[1] in SKIPPED_FOR_A_NORMAL_USER:
            continue
        # Any other skip must be a layer the kernel refused here, which the sandbox reports.
        assert any(f"({layer})" in reason for layer in report["not_isolated"]), (name, reason)
    new_cases = [name for name in outcomes if not name.startswith(basic_cases.__name__)]
    passed = [name for name in new_cases if outcomes[name][0] == "passed"]
    if not report["not_isolated"] or report["not_isolated"] == ["uid"]:
        assert passed == new_cases  # with every layer granted, every new case ran and held
