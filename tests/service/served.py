"""Env servers for the tests, on 127.0.0.1: in this process (uvicorn in a thread) or as the real
``agentflow-env serve`` command in a subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import uvicorn

from agentflow_env.service.app import make_app
from agentflow_env.service.host import EnvHost


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server_thread(
    env_id: str = "AgentFlow-Search-v0",
    settings: Mapping[str, Any] | None = None,
    *,
    ping_s: float = 10.0,
    **app_options: Any,
) -> Iterator[tuple[str, EnvHost]]:
    """``(url, host)`` of a server in this process, stopped on exit."""
    host = EnvHost(env_id, dict(settings or {}))
    port = free_port()
    config = uvicorn.Config(
        make_app(host, **app_options),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws_ping_interval=ping_s,
        ws_ping_timeout=ping_s,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", host
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def serve_process(*args: str, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """The URL of ``agentflow-env serve --port P ARGS`` run as a subprocess (killed on exit)."""
    port = free_port()
    command = [sys.executable, "-m", "agentflow_env.cli", "serve", "--port", str(port), *args]
    process = subprocess.Popen(
        command,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        process.kill()
        process.wait(timeout=10)


def wait_healthy(
    url: str, process: subprocess.Popen[str] | None = None, timeout_s: float = 60
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise RuntimeError(f"the server exited ({process.returncode}): {output[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy")


def wait_until(condition: Any, timeout_s: float = 15.0) -> bool:
    """Whether ``condition()`` became true within ``timeout_s`` (a server frees a closed
    session's env a moment after the client closed it)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kill_serve_process(url: str) -> None:
    """SIGKILL the ``agentflow-env serve`` subprocess listening at ``url`` (a server dying)."""
    port = url.rsplit(":", 1)[1]
    found = subprocess.run(["pgrep", "-f", f"serve --port {port}"], capture_output=True, text=True)
    for pid in found.stdout.split():
        os.kill(int(pid), signal.SIGKILL)
