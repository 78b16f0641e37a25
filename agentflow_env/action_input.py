"""Reading what the planner sent: text or token ids, capped, with a readable error if unusable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentflow_env.tokens import ChatTokenizer


@dataclass
class ActionInput:
    """The action's ids (verbatim when given as ids), the text to parse, and any error."""

    text: str
    ids: list[int]
    given_as_ids: bool
    error: str | None = None
    cut: bool = False


def read_action(action: Any, tokenizer: ChatTokenizer, max_tokens: int | None) -> ActionInput:
    """Text actions are encoded once; id actions are kept as given and decoded only to parse."""
    if isinstance(action, bytes):
        action = action.decode("utf-8", errors="replace")
    if isinstance(action, str):
        return _capped(ActionInput(action, tokenizer.encode(action), False), tokenizer, max_tokens)
    if isinstance(action, np.ndarray) or (
        isinstance(action, Sequence) and not isinstance(action, str)
    ):
        try:
            ids = [int(i) for i in np.asarray(action).reshape(-1).tolist()]
        except (TypeError, ValueError):
            kind = type(action).__name__
            return ActionInput("", [], False, f"action ids must be integers, got {kind}")
        bad = [i for i in ids if not 0 <= i < tokenizer.vocab_size]
        if bad:
            error = f"action ids out of vocabulary range [0, {tokenizer.vocab_size}): {bad[:5]}"
            return ActionInput("", [], True, error)
        read = ActionInput(_strip_eos(tokenizer.decode(ids), tokenizer), ids, True)
        return _capped(read, tokenizer, max_tokens)
    kind = type(action).__name__
    return ActionInput(
        "", [], False, f"action must be a str or a sequence of token ids, got {kind}"
    )


def _capped(read: ActionInput, tokenizer: ChatTokenizer, cap: int | None) -> ActionInput:
    if cap is None or len(read.ids) <= cap:
        return read
    ids = read.ids[:cap]
    text = _strip_eos(tokenizer.decode(ids), tokenizer)
    return ActionInput(text, ids, read.given_as_ids, read.error, cut=True)


def _strip_eos(text: str, tokenizer: ChatTokenizer) -> str:
    eos = tokenizer.decode([tokenizer.eos_token_id])
    while eos and text.endswith(eos):
        text = text[: -len(eos)]
    return text
