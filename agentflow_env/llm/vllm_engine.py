"""An optional in-process vLLM engine serving the frozen modules (no HTTP server in between).

UNTESTED: this engine has never been run, on a GPU or anywhere else. vLLM was not installed and
no GPU was available where it was written; the only test covers ``require_vllm``'s error when
vLLM is missing. Its calls into vLLM (``AsyncEngineArgs``, ``AsyncLLMEngine.from_engine_args``,
``get_tokenizer``, ``generate``, ``SamplingParams``) are written against vLLM's async engine API
but have never been executed. Serving the model (``vllm serve MODEL``) and pointing an
``LLMEndpoint`` at it instead goes through the HTTP client, which the tests exercise against a
scripted OpenAI-compatible server (see docs/llm.md).

``VLLMEngine`` has the same ``chat`` method as ``ChatClient``, so any LLM module or the judge
takes it in place of an endpoint::

    engine = VLLMEngine("Qwen/Qwen2.5-7B-Instruct", gpu_memory_utilization=0.3)
    modules = build_modules({"verifier": LLMVerifier(engine), "generalist": LLMGeneralist(engine)})

vLLM is imported when an engine is built, never at package import. Drive one engine from one
event loop: vLLM's async engine is meant to bind its output handler to the loop of its first
request (read from vLLM's code, never observed here).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.llm.client import ChatResult, LLMError

__all__ = ["VLLMEngine", "require_vllm"]

_request_ids = itertools.count()


def require_vllm() -> Any:
    """The ``vllm`` module, or an ImportError that says how to get it."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "VLLMEngine needs vLLM, which is not installed. Install it on a machine with a "
            "supported GPU (`pip install vllm`), or serve the model with `vllm serve MODEL` and "
            "point the modules at it with an LLMEndpoint instead (see docs/llm.md)."
        ) from exc
    return vllm


class VLLMEngine:
    """vLLM's ``AsyncLLMEngine`` behind the ``ChatBackend`` interface (untested: never run).

    Args:
        model: a Hugging Face id or local path.
        temperature, max_tokens: sampling defaults for calls that do not override them.
        engine_kwargs: passed to ``vllm.AsyncEngineArgs`` (e.g. ``gpu_memory_utilization``,
            ``max_model_len``, ``tensor_parallel_size``).
    """

    def __init__(
        self, model: str, *, temperature: float = 0.0, max_tokens: int = 1024, **engine_kwargs: Any
    ) -> None:
        vllm = require_vllm()
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._vllm = vllm
        self._engine = vllm.AsyncLLMEngine.from_engine_args(
            vllm.AsyncEngineArgs(model=model, **engine_kwargs)
        )
        self._tokenizer: Any = None

    async def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        top_p: float | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
    ) -> ChatResult:
        started = time.perf_counter()
        optional = {
            "top_p": top_p,
            "frequency_penalty": frequency_penalty,
            "presence_penalty": presence_penalty,
        }
        params = self._vllm.SamplingParams(
            temperature=self.temperature if temperature is None else temperature,
            max_tokens=self.max_tokens if max_tokens is None else max_tokens,
            stop=list(stop) if stop else None,
            seed=seed,
            **{key: value for key, value in optional.items() if value is not None},
        )
        try:
            if self._tokenizer is None:
                self._tokenizer = await self._engine.get_tokenizer()
            prompt = self._tokenizer.apply_chat_template(
                [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
            )
            final = None
            async for output in self._engine.generate(prompt, params, f"af-{next(_request_ids)}"):
                final = output
        except Exception as exc:  # the engine's errors vary by version; report them uniformly
            raise LLMError(
                f"vLLM engine ({self.model}) failed: {type(exc).__name__}: {exc}"
            ) from exc
        if final is None or not final.outputs:
            raise LLMError(f"vLLM engine ({self.model}) returned no output")
        # An empty text is the model's answer, as from ChatClient: the caller judges it.
        completion = final.outputs[0]
        return ChatResult(
            text=completion.text,
            finish_reason=completion.finish_reason,
            latency_s=time.perf_counter() - started,
            attempts=1,
            model=self.model,
        )
