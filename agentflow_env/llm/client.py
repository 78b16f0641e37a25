"""An async client for OpenAI-compatible chat-completions endpoints (``vllm serve`` and friends).

One ``ChatClient`` per endpoint is shared by every env of the process (``get_client``). An
aiohttp session (its connection pool) is bound to the event loop that created it, and each env
drives its sessions on its own private loop, so the client keeps one session and one concurrency
semaphore per running loop, created lazily (``LoopSessions``, as the remote retriever does).
(aiohttp rather than httpx: httpcore's pool rescans every connection on each request, which
costs ~4x the CPU at 64 concurrent requests; see docs/llm.md.) Failed attempts (timeouts,
connection errors, HTTP 429/5xx, malformed JSON, a body without a choice) are retried with
exponential backoff and jitter; after the last one the call raises ``LLMError``, a
``ModuleError`` that the session records and turns into a clean episode end.

A reply is never asked for again: empty or whitespace-only content is what the model wrote
(the same greedy or seeded request gets it again, and re-drawing a sampled one until it has
text would bias the samples), so it comes back as the result and the caller judges it (an LLM
module records it as its failure; a planner's reply is its action). HTTP 4xx fails at once;
a 400 saying the prompt is longer than the model's context is a ``ContextLengthError``.

aiohttp (a core dependency) is imported when the first ``ChatClient`` is made, so endpoints,
results and errors are usable without it. The first client also registers ``close_clients`` with
``LoopRunner`` (``on_loop_close``): an env closing its loop closes that loop's pools.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from agentflow_env.base.errors import ModuleError
from agentflow_env.base.loop_runner import on_loop_close
from agentflow_env.base.loop_sessions import LoopSessions
from agentflow_env.base.settings import (
    LLM_ENDPOINT_FIELDS,
    LLM_ROLES,
    llm_env_var,
    read_env_var,
)
from agentflow_env.base.untrusted import neutralize_chat_markup

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "ChatBackend",
    "ChatClient",
    "ChatResult",
    "ContextLengthError",
    "LLMEndpoint",
    "LLMError",
    "ResponseFormatError",
    "as_backend",
    "close_clients",
    "get_client",
    "require_aiohttp",
]

Message = Mapping[str, str]
# Environment variable suffix -> LLMEndpoint field, e.g. AGENTFLOW_LLM_BASE_URL -> base_url.
_ENV_FIELDS = {suffix: suffix.lower() for suffix in LLM_ENDPOINT_FIELDS}


class LLMError(ModuleError):
    """An LLM call failed after its last retry (or with an error that retrying cannot fix)."""


class ContextLengthError(LLMError):
    """The server refused the request because its prompt is longer than the model's context
    (an HTTP 400 that says so): a fact about this one request, not about the setup."""


class ResponseFormatError(LLMError):
    """The server refused the request's ``response_format`` (an HTTP 400 that names it): the
    caller may ask again without one."""


_RESPONSE_FORMAT = re.compile(r"response_format|json_schema|guided|structured output", re.I)
"""How servers name the structured-output request in a 400's body (OpenAI, vLLM)."""

_CONTEXT_LENGTH = re.compile(r"context length|context_length|max_model_len|context window", re.I)
"""How servers say a prompt is over the context in a 400's body: vLLM ("This model's maximum
context length is N tokens"), OpenAI (code ``context_length_exceeded``), SGLang and TGI alike."""


def require_aiohttp() -> None:
    """Raise a clear ``ImportError`` when aiohttp is not installed (a broken install)."""
    try:
        import aiohttp  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            'the LLM backends need aiohttp: pip install "agentflow-env[llm]" (or pip install aiohttp)'
        ) from exc


@dataclass(frozen=True)
class LLMEndpoint:
    """Where and how to call one OpenAI-compatible model.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is
            appended; a trailing ``/chat/completions`` is accepted too).
        model: the served model name (``vllm serve MODEL`` serves it as ``MODEL``).
        api_key: sent as a bearer token when set (vLLM ignores it unless started with one).
        timeout_s: hard limit on one attempt, from sending the request to the parsed reply.
        max_retries: extra attempts after the first one fails with a retryable error.
        max_concurrency: requests in flight at once, per event loop.
        temperature, max_tokens: sampling defaults for calls that do not override them.
        backoff_s, max_backoff_s: the first retry waits about ``backoff_s``, doubling up to the cap.
    """

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 3
    max_concurrency: int = 64
    temperature: float = 0.0
    max_tokens: int = 1024
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def __post_init__(self) -> None:
        if not self.base_url:
            raise ValueError("LLMEndpoint needs a base_url (e.g. http://127.0.0.1:8000/v1)")
        if not self.model:
            raise ValueError("LLMEndpoint needs a model name")
        if self.timeout_s <= 0 or self.max_retries < 0 or self.max_concurrency < 1:
            raise ValueError(
                "timeout_s must be > 0, max_retries >= 0 and max_concurrency >= 1; got "
                f"{self.timeout_s}, {self.max_retries}, {self.max_concurrency}"
            )

    @property
    def chat_url(self) -> str:
        url = self.base_url.rstrip("/")
        return url if url.endswith("/chat/completions") else url + "/chat/completions"

    @classmethod
    def from_env(
        cls, role: str | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> LLMEndpoint:
        """Build from ``AGENTFLOW_LLM_*`` variables, with ``AGENTFLOW_<ROLE>_*`` taking precedence.

        ``overrides`` (non-None keyword arguments) win over both. ``role`` is e.g. ``"verifier"``.
        """
        if role and role.upper() not in LLM_ROLES:
            raise ValueError(
                f"no AGENTFLOW_{role.upper()}_* variables are declared; the roles are "
                f"{[r.lower() for r in LLM_ROLES]} (agentflow_env.base.settings.LLM_ROLES)"
            )
        values: dict[str, Any] = {}
        for prefix in ["LLM"] + ([role] if role else []):
            for suffix, name in _ENV_FIELDS.items():
                value = read_env_var(llm_env_var(prefix, suffix), environ)
                if value is not None:
                    values[name] = value
        values.update({k: v for k, v in overrides.items() if v is not None})
        missing = [name for name in ("base_url", "model") if not values.get(name)]
        if missing:
            where = f"AGENTFLOW_LLM_* or AGENTFLOW_{role.upper()}_*" if role else "AGENTFLOW_LLM_*"
            raise ValueError(
                f"no LLM endpoint configured for the {role or 'LLM'}: missing {missing}; pass an "
                f"LLMEndpoint or set {where} (e.g. AGENTFLOW_LLM_BASE_URL, AGENTFLOW_LLM_MODEL)"
            )
        return cls(**values)

    def with_options(self, **changes: Any) -> LLMEndpoint:
        """A copy with some fields changed."""
        return replace(self, **changes)


@dataclass(frozen=True)
class ChatResult:
    """One completion. ``truncated`` is True when the model hit ``max_tokens`` (finish "length")."""

    text: str
    finish_reason: str | None
    latency_s: float
    attempts: int
    model: str = ""
    usage: Mapping[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def blank(self) -> bool:
        """Whether the text is empty or whitespace only (the model wrote nothing usable)."""
        return not self.text.strip()

    def meta(self) -> dict[str, Any]:
        """What the event log keeps about the call besides its text."""
        return {
            "latency_s": round(self.latency_s, 4),
            "attempts": self.attempts,
            "finish_reason": self.finish_reason,
            "truncated": self.truncated,
            "usage": self.token_usage(),
        }

    def token_usage(self) -> dict[str, int]:
        """The endpoint's ``usage`` token counts (prompt, completion), where it reported them."""
        counts = {}
        for key in ("prompt_tokens", "completion_tokens"):
            value = self.usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                counts[key] = value
        return counts


class ChatBackend(Protocol):
    """What the LLM modules need: ``ChatClient`` (HTTP) or ``VLLMEngine`` (in-process)."""

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        top_p: float | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
    ) -> ChatResult: ...


def as_backend(target: LLMEndpoint | ChatBackend) -> ChatBackend:
    """The shared client for an endpoint, or the backend itself."""
    return get_client(target) if isinstance(target, LLMEndpoint) else target


class _RetryableError(Exception):
    pass


@dataclass
class _LoopState:
    http: aiohttp.ClientSession
    semaphore: asyncio.Semaphore


def _open_pool(endpoint: LLMEndpoint) -> _LoopState:
    """The running loop's session and semaphore for ``endpoint``."""
    import aiohttp

    limit = endpoint.max_concurrency
    headers = dict(_JSON)
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    # One keep-alive connection per request in flight: the connector's limit is the semaphore's,
    # so a request never waits for a connection the pool could open.
    http = aiohttp.ClientSession(
        headers=headers,
        connector=aiohttp.TCPConnector(limit=limit),
        timeout=aiohttp.ClientTimeout(total=None),  # asyncio.timeout bounds each attempt
    )
    return _LoopState(http, asyncio.Semaphore(limit))


def _http_of(state: _LoopState) -> aiohttp.ClientSession:
    return state.http


class ChatClient:
    """Chat completions against one endpoint, safe to share across envs, loops and threads."""

    def __init__(self, endpoint: LLMEndpoint) -> None:
        require_aiohttp()
        on_loop_close(close_clients)  # envs close their loop's pools when they close
        self.endpoint = endpoint
        self._pools = LoopSessions(partial(_open_pool, endpoint), session_of=_http_of)
        with _clients_lock:
            _every_client.add(self)

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        top_p: float | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """One completion; retried on transient failures; ``LLMError`` when all attempts fail.

        ``top_p`` and the penalties are sent only when given (else the server's defaults hold);
        so is ``response_format`` (e.g. ``{"type": "json_schema", ...}``), and a 400 that names
        it raises ``ResponseFormatError``.
        """
        import aiohttp

        ep = self.endpoint
        body: dict[str, Any] = {
            "model": ep.model,
            # Message contents carry untrusted text (tool outputs, documents): plain text only.
            "messages": [
                {**m, "content": neutralize_chat_markup(str(m.get("content", "")))}
                for m in messages
            ],
            "temperature": ep.temperature if temperature is None else temperature,
            "max_tokens": ep.max_tokens if max_tokens is None else max_tokens,
        }
        if stop:
            body["stop"] = list(stop)
        if seed is not None:
            body["seed"] = seed
        optional = {
            "top_p": top_p,
            "frequency_penalty": frequency_penalty,
            "presence_penalty": presence_penalty,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        if response_format is not None:
            body["response_format"] = dict(response_format)
        payload = _to_json(body).encode("utf-8")  # once for all attempts
        structured = response_format is not None
        started = time.perf_counter()
        errors: list[str] = []
        for attempt in range(ep.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt))
            state = self._pools.get()  # per attempt: the pool may have been closed meanwhile
            try:
                async with state.semaphore:
                    if _HAS_TIMEOUT:  # no extra coroutine or task per attempt
                        async with asyncio.timeout(ep.timeout_s):
                            data = await self._post(state.http, payload, structured)
                    else:  # pragma: no cover - Python 3.10
                        data = await asyncio.wait_for(
                            self._post(state.http, payload, structured), ep.timeout_s
                        )
                text, finish = _read_choice(data)
            except asyncio.TimeoutError:
                errors.append(f"attempt {attempt + 1}: timed out after {ep.timeout_s:g}s")
                continue
            except aiohttp.ClientError as exc:
                errors.append(f"attempt {attempt + 1}: connection error: {exc!r}")
                continue
            except _RetryableError as exc:
                errors.append(f"attempt {attempt + 1}: {exc}")
                continue
            return ChatResult(
                text=text,
                finish_reason=finish,
                latency_s=time.perf_counter() - started,
                attempts=attempt + 1,
                model=str(data.get("model", ep.model)),
                usage=dict(data.get("usage") or {}),
            )
        raise LLMError(
            f"{ep.model} at {ep.chat_url}: {len(errors)} attempt(s) failed: " + "; ".join(errors)
        )

    async def _post(
        self, http: aiohttp.ClientSession, payload: bytes, structured: bool = False
    ) -> dict[str, Any]:
        # The session sends the Content-Type (and any key): no headers merged per request.
        async with http.post(self.endpoint.chat_url, data=payload) as response:
            status = response.status
            raw = await response.read()
        if status == 429 or status >= 500:
            raise _RetryableError(f"HTTP {status}: {_text(raw)[:200]}")
        if status >= 400:  # a bad request, key or model name: retrying won't help
            body = _text(raw)
            error: type[LLMError] = LLMError
            if status == 400 and _CONTEXT_LENGTH.search(body):
                error = ContextLengthError
            elif status in (400, 422) and structured and _RESPONSE_FORMAT.search(body):
                error = ResponseFormatError
            raise error(
                f"{self.endpoint.model} at {self.endpoint.chat_url}: HTTP {status}: {body[:500]}"
            )
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _RetryableError(
                f"malformed JSON reply: {exc}; body: {_text(raw)[:200]!r}"
            ) from exc
        if not isinstance(data, dict):
            raise _RetryableError(f"reply is not a JSON object: {str(data)[:200]!r}")
        return data

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter: about backoff_s * 2**(attempt-1), capped, x[0.5, 1.5)."""
        ep = self.endpoint
        base = min(ep.max_backoff_s, ep.backoff_s * 2 ** (attempt - 1))
        return base * (0.5 + random.random())

    async def aclose(self) -> None:
        """Close this client's connection pool on the running loop (other loops' are kept)."""
        await self._pools.aclose()


_JSON = {"Content-Type": "application/json"}
# json.dumps(body, ensure_ascii=False), without making an encoder per call.
_to_json = json.JSONEncoder(ensure_ascii=False).encode
_HAS_TIMEOUT = sys.version_info >= (3, 11)  # asyncio.timeout: a deadline without a task


def _text(raw: bytes) -> str:
    """A reply's body as text, for error messages."""
    return raw.decode("utf-8", errors="replace")


def _read_choice(data: Mapping[str, Any]) -> tuple[str, str | None]:
    """The first choice's text (``null`` content read as ``""``) and finish reason. A body
    without ``choices[0].message`` is retryable; an empty text is the model's answer."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
        content = message.get("content")
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise _RetryableError(f"reply has no choices[0].message: {str(data)[:200]!r}") from exc
    if content is not None and not isinstance(content, str):
        raise _RetryableError(f"choices[0].message.content is not text: {str(content)[:200]!r}")
    return content or "", finish


_clients: dict[LLMEndpoint, ChatClient] = {}
_every_client: weakref.WeakSet[ChatClient] = weakref.WeakSet()
_clients_lock = threading.RLock()


def get_client(endpoint: LLMEndpoint) -> ChatClient:
    """The process-wide client for ``endpoint`` (one pool per event loop inside it)."""
    with _clients_lock:
        client = _clients.get(endpoint)
        if client is None:
            client = _clients[endpoint] = ChatClient(endpoint)
        return client


async def close_clients() -> None:
    """Close every client's pool on the running loop; call it before closing a loop that used
    LLM backends (pools left open are dropped, unclosed, once their loop has closed)."""
    with _clients_lock:
        clients = list(_every_client)
    for client in clients:
        await client.aclose()
