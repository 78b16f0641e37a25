"""Planner observations: prompts rendered afresh (structured) or grown token-exactly (flat)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentflow_env.prompts import Message, chat_continuation
from agentflow_env.tokens import ChatTokenizer


@dataclass
class Observation:
    """The planner's next prompt: chat-rendered text ending with the assistant header, and its ids."""

    text: str
    token_ids: list[int]

    def as_gym(self) -> dict[str, Any]:
        return {"text": self.text, "token_ids": np.asarray(self.token_ids, dtype=np.int64)}


def render_prompt(tokenizer: ChatTokenizer, messages: Sequence[Message]) -> Observation:
    """A structured-mode prompt: the whole conversation rendered and tokenized."""
    text = tokenizer.render_chat(messages, add_generation_prompt=True)
    return Observation(text, tokenizer.encode(text))


def grow_prompt(
    tokenizer: ChatTokenizer, prompt: Observation, action_ids: list[int], user_text: str
) -> tuple[Observation, Observation]:
    """A flat-mode step: ``prompt + action + feedback`` exactly, and the feedback alone.

    The feedback is tokenized on its own (as OpenRLHF does), so its ids never merge with the
    action's; it carries the chat glue that closes the assistant turn and opens the next one.
    """
    ended = bool(action_ids) and action_ids[-1] == tokenizer.eos_token_id
    text = chat_continuation(tokenizer, user_text, after_eos=ended)
    feedback = Observation(text, tokenizer.encode(text))
    grown = Observation(
        prompt.text + tokenizer.decode(action_ids) + text,
        prompt.token_ids + action_ids + feedback.token_ids,
    )
    return grown, feedback
