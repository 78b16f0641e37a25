"""Model-backed planners for evaluation and inference.

``OpenAIPlanner`` asks any OpenAI-compatible endpoint (or chat backend) for the next action
text; it follows the planner protocol (``await next_action(session)``: many sessions on one
event loop, sharing one client) and keeps the Gymnasium calling style, ``act(observation,
info)`` (with ``aact``, its coroutine). ``HFPlanner`` generates with a local ``transformers``
causal LM straight from the observation's token ids and returns the generated ids (with their
log-probs, as ``agentflow_env.rollout.agents.hf_generation`` defines them), so the env records them
verbatim; it acts in the Gymnasium calling style only, which
``agentflow_env.rollout.agents.episodes.ObservationPlanner`` adapts to the protocol.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentflow_env.base.loop_runner import LoopRunner
from agentflow_env.llm.client import ChatBackend, LLMEndpoint, as_backend
from agentflow_env.rollout.agents.hf_generation import hf_generate
from agentflow_env.workflow.session import Session

__all__ = [
    "HFPlanner",
    "OpenAIPlanner",
    "Sampling",
    "messages_from_observation",
    "session_messages",
]

_CHATML_MESSAGE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


def _chatml_messages(text: str) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in _CHATML_MESSAGE.findall(text)]


def messages_from_observation(observation: Any, env: Any = None) -> list[dict[str, str]]:
    """The chat messages behind an observation.

    ChatML text (the bundled tokenizer's format, and Qwen's) is split back into its messages,
    which also covers a growing ``observation_mode="flat"`` conversation. Otherwise the env's
    current session renders them, and without an env the whole text becomes one user message.
    """
    text = observation.get("text", "") if isinstance(observation, Mapping) else str(observation)
    messages = _chatml_messages(text)
    if messages:
        return messages
    session = getattr(getattr(env, "unwrapped", env), "session", None)
    if session is not None:
        return list(session.messages())
    return [{"role": "user", "content": text}]


def session_messages(session: Session) -> list[dict[str, str]]:
    """The chat messages behind ``session``'s current prompt: its ChatML text split back into
    messages, else the messages the session renders."""
    observation = session.observation
    messages = _chatml_messages(observation.text if observation is not None else "")
    return messages or list(session.messages())


@dataclass(frozen=True)
class Sampling:
    """How a served planner samples; ``None`` leaves a parameter to the endpoint or server."""

    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None


class OpenAIPlanner:
    """The planner as a chat model behind an OpenAI-compatible endpoint.

    Args:
        backend: an ``LLMEndpoint`` (or any chat backend, e.g. ``VLLMEngine``), shared by all
            the episodes it acts in.
        env: optional; used to read messages when the observation is not ChatML text
            (``act``).
        temperature: override the endpoint's sampling temperature for planner turns.
        max_tokens: the longest reply; for ``next_action``, ``None`` means the session's
            ``max_action_tokens`` (where the env cuts an action anyway, so a comparison with
            another setup is not skewed by a shorter cap), and for ``act`` the endpoint's own.
        sampling: the request's sampling as a whole (in place of ``temperature``).
    """

    def __init__(
        self,
        backend: LLMEndpoint | ChatBackend,
        env: Any = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = 512,
        sampling: Sampling | None = None,
    ) -> None:
        if sampling is not None and temperature is not None:
            raise ValueError("give temperature or sampling, not both")
        self.backend = as_backend(backend)
        self.env = env
        self.sampling = sampling or Sampling(temperature=temperature)
        self.max_tokens = max_tokens
        self._runner: LoopRunner | None = None

    @property
    def temperature(self) -> float | None:
        return self.sampling.temperature

    @temperature.setter
    def temperature(self, value: float | None) -> None:
        self.sampling = replace(self.sampling, temperature=value)

    def reply_cap(self, session: Session) -> int | None:
        """``next_action``'s ``max_tokens``: the planner's own, else the session's action cap."""
        return self.max_tokens if self.max_tokens is not None else session.config.max_action_tokens

    async def next_action(self, session: Session) -> str:
        """The next action text for ``session`` (a cut-off reply is returned as is)."""
        return await self._reply(session_messages(session), self.reply_cap(session))

    async def aact(self, observation: Any, info: Mapping[str, Any] | None = None) -> str:
        """The next action text (a cut-off reply is returned as is; the env flags what it can't parse)."""
        return await self._reply(messages_from_observation(observation, self.env), self.max_tokens)

    def act(self, observation: Any, info: Mapping[str, Any] | None = None) -> str:
        if self._runner is None:
            self._runner = LoopRunner()
        return self._runner.run(self.aact(observation, info))

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    async def _reply(self, messages: list[dict[str, str]], max_tokens: int | None) -> str:
        sampling = self.sampling
        given: dict[str, Any] = {
            "top_p": sampling.top_p,
            "frequency_penalty": sampling.frequency_penalty,
            "presence_penalty": sampling.presence_penalty,
        }  # sent only when set, as a chat backend reads None
        reply = await self.backend.chat(
            messages,
            temperature=sampling.temperature,
            max_tokens=max_tokens,
            **{key: value for key, value in given.items() if value is not None},
        )
        return reply.text


class HFPlanner:
    """A local ``transformers`` causal LM generating from the observation's token ids.

    The model must share the env's vocabulary (train it with the env's tokenizer, or build the
    env with the model's tokenizer). ``act`` returns ``{"token_ids": [...], "logprobs": [...]}``
    (or the bare id list with ``return_logprobs=False``); ``env.step`` accepts both and keeps
    the ids verbatim. The log-probs are those of the distribution each token was sampled from
    (``agentflow_env.rollout.agents.hf_generation``: after temperature, top-k and top-p).

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
