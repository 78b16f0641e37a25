"""Model-backed planners for evaluation and inference.

``OpenAIPlanner`` asks any OpenAI-compatible endpoint for the next action text; ``HFPlanner``
generates with a local ``transformers`` causal LM straight from the observation's token ids and
returns the generated ids (with their log-probs, as ``agentflow_env.rollout.hf_generation``
defines them), so the env records them verbatim. Both expose
``act(observation, info)`` like the scripted planners; ``OpenAIPlanner`` also has ``aact`` for
many sessions on one event loop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.base.loop_runner import LoopRunner
from agentflow_env.llm.client import ChatBackend, LLMEndpoint, as_backend
from agentflow_env.rollout.hf_generation import hf_generate

__all__ = ["HFPlanner", "OpenAIPlanner", "messages_from_observation"]

_CHATML_MESSAGE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


def messages_from_observation(observation: Any, env: Any = None) -> list[dict[str, str]]:
    """The chat messages behind an observation.

    ChatML text (the bundled tokenizer's format, and Qwen's) is split back into its messages,
    which also covers a growing ``observation_mode="flat"`` conversation. Otherwise the env's
    current session renders them, and without an env the whole text becomes one user message.
    """
    text = observation.get("text", "") if isinstance(observation, Mapping) else str(observation)
    messages = [{"role": r, "content": c} for r, c in _CHATML_MESSAGE.findall(text)]
    if messages:
        return messages
    session = getattr(getattr(env, "unwrapped", env), "session", None)
    if session is not None:
        return list(session.messages())
    return [{"role": "user", "content": text}]


class OpenAIPlanner:
    """The planner as a chat model behind an OpenAI-compatible endpoint.

    Args:
        backend: an ``LLMEndpoint`` (or any chat backend, e.g. ``VLLMEngine``).
        env: optional; used to read messages when the observation is not ChatML text.
        temperature, max_tokens: override the endpoint's sampling defaults for planner turns.
    """

    def __init__(
        self,
        backend: LLMEndpoint | ChatBackend,
        env: Any = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = 512,
    ) -> None:
        self.backend = as_backend(backend)
        self.env = env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._runner: LoopRunner | None = None

    async def aact(self, observation: Any, info: Mapping[str, Any] | None = None) -> str:
        """The next action text (a cut-off reply is returned as is; the env flags what it can't parse)."""
        reply = await self.backend.chat(
            messages_from_observation(observation, self.env),
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        return reply.text

    def act(self, observation: Any, info: Mapping[str, Any] | None = None) -> str:
        if self._runner is None:
            self._runner = LoopRunner()
        return self._runner.run(self.aact(observation, info))

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None


class HFPlanner:
    """A local ``transformers`` causal LM generating from the observation's token ids.

    The model must share the env's vocabulary (train it with the env's tokenizer, or build the
    env with the model's tokenizer). ``act`` returns ``{"token_ids": [...], "logprobs": [...]}``
    (or the bare id list with ``return_logprobs=False``); ``env.step`` accepts both and keeps
    the ids verbatim. The log-probs are those of the distribution each token was sampled from
    (``agentflow_env.rollout.hf_generation``: after temperature, top-k and top-p).

    Args:
        path: a local directory or Hugging Face id holding the model (and, ideally, tokenizer).
        do_sample: sample instead of greedy decoding; ``temperature`` and ``top_p`` then apply
            (and the model's generation-config ``top_k``, 50 unless it says otherwise).
        max_new_tokens: cap on one action.
        device: e.g. ``"cpu"`` or ``"cuda"``; default: CUDA when available.
        seed: seeds torch's generator once, for reproducible sampling.
    """

    def __init__(
        self,
        path: str,
        *,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        device: str | None = None,
        seed: int | None = None,
        return_logprobs: bool = True,
    ) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as exc:
            raise ImportError(
                f"HFPlanner needs torch and transformers, which cannot be imported here ({exc}): "
                'pip install torch "agentflow-env[hf]"'
            ) from exc

        self.path = path
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            model: Any = AutoModelForCausalLM.from_pretrained(path)
        except OSError as exc:
            raise OSError(
                f"no causal LM at {path!r}: give a local model directory (config.json and "
                f"weights) or a Hugging Face model id already in the local cache ({exc})"
            ) from exc
        self.model = model.to(self.device).eval()
        self.do_sample = do_sample
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.return_logprobs = return_logprobs
        self.eos_token_ids = _eos_ids(self.model, path)
        if seed is not None:
            torch.manual_seed(seed)

    def act(self, observation: Any, info: Mapping[str, Any] | None = None) -> Any:
        ids = _observation_ids(observation)
        vocab = int(self.model.get_input_embeddings().weight.shape[0])
        if ids and max(ids) >= vocab:
            raise ValueError(
                f"observation token id {max(ids)} is outside the model's vocabulary ({vocab}): "
                "the env and the model must share one tokenizer"
            )
        sampling = {"temperature": self.temperature, "top_p": self.top_p} if self.do_sample else {}
        (generated,), (logprobs,) = hf_generate(
            self.model,
            [ids],
            self.max_new_tokens,
            pad_token_id=None,
            eos_token_ids=self.eos_token_ids,
            do_sample=self.do_sample,
            **sampling,
        )
        if not self.return_logprobs:
            return generated
        return {"token_ids": generated, "logprobs": logprobs}


def _observation_ids(observation: Any) -> list[int]:
    ids = observation.get("token_ids") if isinstance(observation, Mapping) else observation
    if ids is None or isinstance(ids, str):
        raise TypeError("HFPlanner needs the observation's token_ids (a dict observation)")
    return [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]


def _eos_ids(model: Any, path: str) -> list[int]:
    eos: int | Sequence[int] | None = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        try:
            from transformers import AutoTokenizer

            eos = AutoTokenizer.from_pretrained(path).eos_token_id
        except (OSError, ValueError):
            eos = None
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(i) for i in eos]
