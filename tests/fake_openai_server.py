"""A real HTTP server on 127.0.0.1 speaking ``POST /v1/chat/completions`` with scripted replies.

It is an aiohttp server on its own event loop in a background thread, so a slow reply is an
``asyncio.sleep`` rather than a blocked thread and hundreds of concurrent requests stay cheap.

Replies come from a queue of ``Reply`` objects (optionally for one role only) and otherwise from
a ``responder(role, request) -> str | Reply``. ``Reply`` covers the fault modes the client must
survive: slow beyond the timeout, an HTTP error status, malformed JSON, empty content,
cut-off text (finish_reason "length") and a refused ``response_format``. The role is read from
the system prompt of ``agentflow_env.modules.prompts``. Run as a script (``python tests/fake_openai_server.py --delay
0.1``) it serves the generic responder and prints ``PORT <n>`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

ROLE_MARKERS = {
    "query analyzer": "initializer",
    "command generator": "executor",
    "context verifier": "verifier",
    "final answer writer": "generalist",
    "answer judge": "judge",
}


T = TypeVar("T")


def bounded(coro: Coroutine[Any, Any, T], timeout_s: float = 20.0) -> T:
    """Run ``coro`` on a fresh loop, failing instead of hanging; close LLM clients after."""
    from agentflow_env.llm import close_clients

    async def run() -> T:
        try:
            return await asyncio.wait_for(coro, timeout_s)
        finally:
            await close_clients()

    return asyncio.run(run())


@dataclass(frozen=True)
class Reply:
    """One scripted answer; the class methods build the fault modes."""

    text: str = ""
    finish_reason: str = "stop"
    status: int = 200
    delay_s: float = 0.0
    body: str | None = None  # sent verbatim instead of a chat completion

    @classmethod
    def slow(cls, delay_s: float, text: str = "too late") -> Reply:
        return cls(text=text, delay_s=delay_s)

    @classmethod
    def error(cls, status: int = 500) -> Reply:
        return cls(status=status, body=json.dumps({"error": {"message": f"scripted {status}"}}))

    @classmethod
    def refuse_format(cls) -> Reply:
        """A 400 refusing the request's ``response_format``, as a server without structured
        output answers it."""
        message = "response_format json_schema is not supported by this server"
        return cls(status=400, body=json.dumps({"error": {"message": message}}))

    @classmethod
    def malformed(cls) -> Reply:
        return cls(body='{"choices": [{"message": {"content": "unterminated')

    @classmethod
    def empty(cls) -> Reply:
        return cls(text="")

    @classmethod
    def cut(cls, text: str) -> Reply:
        return cls(text=text, finish_reason="length")


Responder = Callable[[str, dict[str, Any]], "str | Reply"]


def role_of(request: dict[str, Any]) -> str:
    """The module role a request comes from, read from its system prompt."""
    messages = request.get("messages") or []
    system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "")
    lowered = system.lower()
    return next((role for marker, role in ROLE_MARKERS.items() if marker in lowered), "planner")


def user_text(request: dict[str, Any]) -> str:
    messages = request.get("messages") or []
    return next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")


class FakeOpenAIServer:
    """Start with ``start()`` (or ``with``); ``base_url`` is the ``/v1`` root to give an endpoint."""

    def __init__(self, responder: Responder | None = None, *, delay_s: float = 0.0) -> None:
        self.responder: Responder = responder or generic_responder()
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests it was answering at once
        self._queue: deque[tuple[str | None, Reply]] = deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -- scripting -------------------------------------------------------------------------------
    def push(self, *replies: Reply, role: str | None = None) -> None:
        """Queue replies for the next requests (of ``role`` only, if given), in order."""
        with self._lock:
            self._queue.extend((role, reply) for reply in replies)

    def roles(self) -> list[str]:
        """The role of every request received so far, in order."""
        with self._lock:
            return [role_of(r) for r in self.requests]

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        role = role_of(request)
        with self._lock:
            self.requests.append(request)
            for index, (wanted, reply) in enumerate(self._queue):
                if wanted is None or wanted == role:
                    del self._queue[index]
                    return reply
        answer = self.responder(role, request)
        return answer if isinstance(answer, Reply) else Reply(text=answer)

    # -- serving ---------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server is not running")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=10)
        return self

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=512)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def _handle(self, http_request: web.Request) -> web.Response:
        try:
            request = json.loads(await http_request.read())
        except ValueError:
            return _json_response(400, json.dumps({"error": {"message": "bad JSON"}}))
        reply = self._next_reply(request)
        self.in_flight += 1  # handlers run on the server's one loop: no lock needed
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s + reply.delay_s)
        finally:
            self.in_flight -= 1
        body = reply.body if reply.body is not None else _completion(request, reply)
        return _json_response(reply.status, body)

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        loop.close()
        self._port = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _json_response(status: int, body: str) -> web.Response:
    return web.Response(status=status, text=body, content_type="application/json")


def _completion(request: dict[str, Any], reply: Reply) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": len(reply.text.split())},
        }
    )


# -- scripted answers --------------------------------------------------------------------------

_CONTEXT = re.compile(r"^Context from the planner: (.*)$", re.MULTILINE)
_SCHEMA = re.compile(r"^Argument schema \(JSON\): (.*)$", re.MULTILINE)
_STEP = re.compile(r"^Step \d+:$", re.MULTILINE)


def executor_reply(request: dict[str, Any]) -> str:
    """The planner's Context as the tool's first required argument, wrapped in prose and a fence."""
    text = user_text(request)
    context = _CONTEXT.search(text)
    schema = _SCHEMA.search(text)
    value = context.group(1).strip() if context else ""
    names = list(json.loads(schema.group(1))) if schema else ["query"]
    arguments = {names[0]: value}
    return f"The tool needs one argument.\n```json\n{json.dumps(arguments)}\n```"


def analysis_reply(request: dict[str, Any]) -> str:
    return (
        "**Objective:** answer the query.\nConstraints:\n- none\n"
        "Sub-questions:\n1. Find the facts the query asks about.\nRelevant tools: Search"
    )


def generic_responder(stop_after: int = 2) -> Responder:
    """Plausible replies without knowing the task: the verifier STOPs after ``stop_after`` steps."""

    def respond(role: str, request: dict[str, Any]) -> str:
        if role == "initializer":
            return analysis_reply(request)
        if role == "executor":
            return executor_reply(request)
        if role == "verifier":
            steps = len(_STEP.findall(user_text(request)))
            verdict = "STOP" if steps >= stop_after else "CONTINUE"
            return (
                f"Analysis: {steps} step(s) so far.\nOpen questions:\n- none\nConclusion: {verdict}"
            )
        if role == "generalist":
            return "The memory names it.\nAnswer: unknown"
        if role == "judge":
            return "Analysis: compared.\nVerdict: False"
        return "Justification: look it up\nContext: query\nSub-Goal: find it\nTool Name: Search"

    return respond


_QUERY = re.compile(r"^Query: (.*)$", re.MULTILINE)
_STEP_BLOCK = re.compile(r"^Step \d+:\n(.*?)(?=^Step \d+:|\Z)", re.MULTILINE | re.DOTALL)
_TOOL_LINE = re.compile(r"^  Tool: (.*)$", re.MULTILINE)
_COMMAND_LINE = re.compile(r"^  Command: (.*)$", re.MULTILINE)
_RESULT = re.compile(r"^  Result:\n((?:    .*\n?)*)", re.MULTILINE)


def evidence_in_prompt(text: str) -> list[Any]:
    """The tool results a verifier/generalist prompt shows, as ``Evidence`` for a solver."""
    from agentflow_env.tasks.base import Evidence

    evidence = []
    for block in _STEP_BLOCK.findall(text):
        tool, result = _TOOL_LINE.search(block), _RESULT.search(block)
        if tool is None or result is None:
            continue
        output = "\n".join(line[4:] for line in result.group(1).rstrip("\n").split("\n"))
        command = _COMMAND_LINE.search(block)
        arguments = {"command": command.group(1)} if command else {}
        evidence.append(Evidence(tool.group(1).strip(), arguments, output, True))
    return evidence


def task_responder(tasks: Any, fallback: Responder | None = None) -> Responder:
    """Correct replies for known tasks: the verifier and the generalist run the task's solver
    (the rule backends' reader) on the evidence shown in the prompt, so LLM-module episodes
    should end exactly like rule-module ones.

    ``tasks`` is a sequence of tasks or a function ``question -> Task | None`` (e.g. reading the
    current task of an env)."""
    from agentflow_env.modules.rule import solver_for

    if callable(tasks):
        find = tasks
    else:
        by_question = {task.question: task for task in tasks}
        find = by_question.get
    fallback = fallback or generic_responder()

    def respond(role: str, request: dict[str, Any]) -> str | Reply:
        text = user_text(request)
        query = _QUERY.search(text)
        task = find(query.group(1).strip()) if query else None
        if task is None or role not in ("verifier", "generalist"):
            return fallback(role, request)
        answer = solver_for(task).solve(evidence_in_prompt(text))
        if role == "verifier":
            verdict = "STOP" if answer is not None else "CONTINUE"
            return f"Analysis: checked the memory.\nOpen questions:\n- none\nConclusion: {verdict}"
        return f"The results state it.\nAnswer: {answer if answer is not None else 'unknown'}"

    return respond


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before every reply")
    parser.add_argument("--stop-after", type=int, default=2, help="verifier STOPs at this step")
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(generic_responder(args.stop_after), delay_s=args.delay).start()
    print(f"PORT {server.port}", flush=True)
    try:
        sys.stdin.read()  # serve until stdin closes (the parent process ends or closes it)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
