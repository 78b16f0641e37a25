"""Planner observations: prompts rendered afresh (structured) or grown token-exactly (flat)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.base.untrusted import PlainText
from agentflow_env.workflow.prompts import Message, chat_continuation


@dataclass
class Observation:
    """The planner's next prompt: chat-rendered text ending with the assistant header, and its ids."""

    text: str
    token_ids: list[int]

    def as_gym(self) -> dict[str, Any]:
        return {"text": self.text, "token_ids": np.asarray(self.token_ids, dtype=np.int64)}


class PromptEncoder:
    """Renders and tokenizes structured prompts, encoding a repeated first message only once.

    The system message (instructions, tool cards) is the same on every turn of every episode
    and is most of the prompt. Its ids are reused when encoding it apart gives exactly the ids of
    encoding the whole prompt; that is checked once per distinct first message, so the ids
    always equal ``tokenizer.encode(text)``.
    """

    def __init__(self, tokenizer: ChatTokenizer, max_cached: int = 64) -> None:
        self.tokenizer = tokenizer
        self.plain = PlainText(tokenizer)
        self.max_cached = max_cached
        self._prefixes: dict[str, tuple[str, list[int]] | None] = {}

    def render(self, messages: Sequence[Message]) -> Observation:
        """The prompt for ``messages``; their contents are untrusted and rendered as plain text."""
        messages = [
            {"role": m["role"], "content": self.plain.neutralize(m["content"])} for m in messages
        ]
        text = self.tokenizer.render_chat(messages, add_generation_prompt=True)
        if not messages:
            return Observation(text, self.tokenizer.encode(text))
        key = messages[0]["role"] + "\x00" + messages[0]["content"]
        if key not in self._prefixes:
            return Observation(text, self._learn(key, messages[0], text))
        cached = self._prefixes[key]
        if cached is None or not text.startswith(cached[0]):
            return Observation(text, self.tokenizer.encode(text))
        prefix, prefix_ids = cached
        return Observation(text, prefix_ids + self.tokenizer.encode(text[len(prefix) :]))

    def _learn(self, key: str, first: Message, text: str) -> list[int]:
        ids = self.tokenizer.encode(text)
        prefix = self.tokenizer.render_chat([first], add_generation_prompt=False)
        usable = None
        if text.startswith(prefix):
            prefix_ids = self.tokenizer.encode(prefix)
            if prefix_ids + self.tokenizer.encode(text[len(prefix) :]) == ids:
                usable = (prefix, prefix_ids)
        if len(self._prefixes) >= self.max_cached:
            self._prefixes.pop(next(iter(self._prefixes)))
        self._prefixes[key] = usable
        return ids


def grow_prompt(
    plain: PlainText, prompt: Observation, action_ids: list[int], user_text: str
) -> tuple[Observation, Observation]:
    """A flat-mode step: ``prompt + action + feedback`` exactly, and the feedback alone.

    The feedback is tokenized on its own (as OpenRLHF does), so its ids never merge with the
    action's; it carries the chat glue that closes the assistant turn and opens the next one.
    ``user_text`` is untrusted (tool output, planner fields) and becomes plain text. The action
    ids stand as the policy produced them; ids the tokenizer cannot decode add no text.
    """
    tokenizer = plain.tokenizer
    ended = bool(action_ids) and action_ids[-1] == tokenizer.eos_token_id
    text = chat_continuation(tokenizer, plain.neutralize(user_text), after_eos=ended)
    feedback = Observation(text, tokenizer.encode(text))
    readable = [i for i in action_ids if i < tokenizer.vocab_size]
    grown = Observation(
        prompt.text + tokenizer.decode(readable) + text,
        prompt.token_ids + action_ids + feedback.token_ids,
    )
    return grown, feedback
