"""A loopback stand-in for E2B's code-interpreter server, to test the real SDK without the cloud.

What ``e2b-code-interpreter`` 2.x does with ``E2B_DEBUG=true`` (read from its source):

- ``AsyncSandbox.create()`` makes no request: the sandbox id is ``"debug_sandbox_id"`` and no API
  key is needed; ``kill()`` returns ``True`` without a request.
- ``run_code(code, timeout=t)`` POSTs JSON ``{"code", "context_id", "language", "env_vars"}`` over
  HTTP/1.1 to ``http://localhost:49999/execute`` (headers ``E2b-Sandbox-Id``,
  ``E2b-Sandbox-Port: 49999``) and reads the body line by line, each line one JSON event:
  ``{"type": "stdout"|"stderr", "text", "timestamp"}``, ``{"type": "result", "text",
  "is_main_result", ...}``, ``{"type": "error", "name", "value", "traceback"}``,
  ``{"type": "number_of_executions", "execution_count"}``; other types (the server's
  ``end_of_execution``) are ignored. A non-2xx status raises; no event within ``t`` seconds
  raises ``e2b.TimeoutException``. Only after a dropped connection does it call envd's
  ``/health`` (port 49983), which this stand-in does not serve: the SDK then re-raises.

By default the stand-in runs the posted code in the local sandbox (``run_python``) and streams
the outcome as those events, as the real server would; tests may queue scripted replies instead.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentflow_env.tools.sandbox import SandboxLimits, run_python

E2B_DEBUG_PORT = 49999


@dataclass
class Script:
    """One scripted reply: the events, sent after ``delay_s``, with an HTTP ``status``."""

    events: list[dict[str, Any]]
    delay_s: float = 0.0
    status: int = 200


@dataclass
class StandIn:
    """The server; ``start()`` binds 127.0.0.1:``port`` (``OSError`` if taken)."""

    port: int = E2B_DEBUG_PORT
    limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(timeout_s=5.0))
    requests: list[dict[str, Any]] = field(default_factory=list)
    scripted: list[Script] = field(default_factory=list)
    executions: int = 0
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self) -> StandIn:
        standin = self

        class Handler(_Handler):
            owner = standin

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def reply(self, body: dict[str, Any]) -> Script:
        """The next reply: a queued script, or the events of running the code locally."""
        self.executions += 1
        if self.scripted:
            return self.scripted.pop(0)
        result = asyncio.run(run_python(str(body.get("code", "")), self.limits))
        events: list[dict[str, Any]] = [
            {"type": "number_of_executions", "execution_count": self.executions}
        ]
        for line in result.stdout.splitlines(keepends=True):
            events.append({"type": "stdout", "text": line, "timestamp": time.time_ns()})
        if result.exit_code == 0:
            if result.stderr:
                events.append({"type": "stderr", "text": result.stderr, "timestamp": 0})
        else:
            last = (result.stderr.strip().splitlines() or ["Error"])[-1]
            name, _, value = last.partition(": ")
            # IPython colours its tracebacks; the client must strip the escapes.
            traceback = result.stderr.replace(name, f"\x1b[0;31m{name}\x1b[0m", 1)
            events.append({"type": "error", "name": name, "value": value, "traceback": traceback})
        events.append({"type": "end_of_execution"})
        return Script(events)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: StandIn

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def end_headers(self) -> None:
        # One request per connection: a pooled keep-alive connection would otherwise outlive
        # stop() and carry the next test's request to this (stopped) stand-in.
        self.close_connection = True
        super().end_headers()

    def _record(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        self.owner.requests.append(
            {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
        )
        return body

    def do_GET(self) -> None:
        self._record()
        if self.path == "/health":
            self._send_plain(200, '"Request was successful"')
        else:
            self._send_plain(404, "not found")

    def do_POST(self) -> None:
        body = self._record()
        if self.path != "/execute":
            self._send_plain(404, "not found")
            return
        script = self.owner.reply(body)
        time.sleep(script.delay_s)
        try:
            if script.status != 200:
                self._send_plain(script.status, "stand-in error")
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in script.events:
                line = (json.dumps(event) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            self.close_connection = True

    def _send_plain(self, status: int, text: str) -> None:
        payload = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)
