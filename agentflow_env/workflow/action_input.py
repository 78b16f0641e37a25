"""Reading what the planner sent, validated whole before anything runs.

An action is the planner's text, its token ids, or a mapping ``{"token_ids" | "text",
"logprobs"}``. ``read_action`` never raises: whatever it gets, it returns an ``ActionInput`` whose
``error`` says why the action cannot be used (the turn then counts as an invalid action). Ids the
policy produced are kept verbatim, even ids the tokenizer cannot decode (vLLM may sample ids up to
the model's padded embedding size), so a trainer's sequence and the env's never diverge.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.base.untrusted import PlainText, repair_surrogates

MAX_TOKEN_ID = 2**31 - 1
"""Largest id kept verbatim; anything else is not a token id at all (negative, huge, not finite)."""
DEFAULT_MAX_ACTION_TOKENS = 2048
"""Safe default cap on one planner action (a policy exploring can emit megabytes): the
``max_action_tokens`` setting's default."""
MAX_CHARS_PER_TOKEN = 32
"""A text action is cut to ``max_action_tokens * MAX_CHARS_PER_TOKEN`` characters before
encoding, so a huge string costs what its cap allows, not its length."""


@dataclass
class ActionInput:
    """The action's ids (verbatim when given as ids), the text to parse, and any error."""

    text: str
    ids: list[int]
    given_as_ids: bool
    error: str | None = None
    cut: bool = False
    logprobs: list[float] | None = None


def read_action(
    action: Any,
    tokenizer: ChatTokenizer,
    max_action_tokens: int | None,
    logprobs: Any = None,
    plain: PlainText | None = None,
) -> ActionInput:
    """Text actions are encoded once, as plain text; id actions are kept and decoded only to parse.

    ``logprobs`` (or a mapping's ``"logprobs"``) must be one finite-or-NaN number per action id;
    ``None`` means none were given.
    """
    plain = plain or PlainText(tokenizer)
    try:
        if isinstance(action, Mapping):
            logprobs = action.get("logprobs", logprobs)
            action = action.get("token_ids", action.get("text"))
        read = _read_body(action, tokenizer, max_action_tokens, plain)
    except Exception as exc:  # a tokenizer or container that misbehaves: the turn is invalid
        return ActionInput("", [], False, f"unreadable action: {type(exc).__name__}: {exc}"[:300])
    if logprobs is not None:
        values, problem = _read_logprobs(logprobs)
        if problem is None and values is not None and read.cut:
            values = values[: len(read.ids)]
        if problem is None and values is not None and len(values) != len(read.ids):
            problem = f"got {len(values)} log-probs for {len(read.ids)} action tokens"
        if problem is not None:
            read.error = read.error or problem
        else:
            read.logprobs = values
    return read


def _read_body(
    action: Any, tokenizer: ChatTokenizer, max_action_tokens: int | None, plain: PlainText
) -> ActionInput:
    if isinstance(action, bytes | bytearray):
        action = bytes(action).decode("utf-8", errors="replace")
    if isinstance(action, str):
        return _read_text(action, tokenizer, max_action_tokens, plain)
    if isinstance(action, np.ndarray) or hasattr(action, "tolist"):
        array = np.asarray(action)
        if array.ndim != 1:
            return _invalid(f"action ids must be a 1-D sequence, got shape {array.shape}")
        return _read_ids(array.tolist(), tokenizer, max_action_tokens)
    if isinstance(action, Sequence):
        return _read_ids(action, tokenizer, max_action_tokens)
    kind = type(action).__name__
    return _invalid(f"action must be a str or a sequence of token ids, got {kind}")


def _read_text(
    text: str, tokenizer: ChatTokenizer, max_action_tokens: int | None, plain: PlainText
) -> ActionInput:
    text = repair_surrogates(text)
    cut = False
    if max_action_tokens is not None and len(text) > max_action_tokens * MAX_CHARS_PER_TOKEN:
        text, cut = text[: max_action_tokens * MAX_CHARS_PER_TOKEN], True
    # A trailing end-of-turn spelling ends the turn; the rest is plain text.
    text = _strip_eos(text, tokenizer)
    read = ActionInput(text, plain.encode(text), False, cut=cut)
    return _capped(read, tokenizer, max_action_tokens)


def _read_ids(
    values: Sequence[Any], tokenizer: ChatTokenizer, max_action_tokens: int | None
) -> ActionInput:
    cut = max_action_tokens is not None and len(values) > max_action_tokens
    if cut:
        values = values[:max_action_tokens]
    ids = []
    for value in values:
        token_id = _as_token_id(value)
        if token_id is None:
            shown = repr(value)[:40]
            return _invalid(f"action ids must be integers in [0, {MAX_TOKEN_ID}], got {shown}")
        ids.append(token_id)
    if not ids:
        return ActionInput("", [], True, "the action has no token ids")
    vocab = tokenizer.vocab_size
    unknown = [i for i in ids if i >= vocab]
    if unknown:
        error = (
            f"the action holds {len(unknown)} token id(s) outside the tokenizer's vocabulary "
            f"[0, {vocab}), e.g. {unknown[:3]}; they are kept but cannot be read"
        )
        return ActionInput("", ids, True, error, cut=cut)
    return ActionInput(_strip_eos(tokenizer.decode(ids), tokenizer), ids, True, cut=cut)


def _as_token_id(value: Any) -> int | None:
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, numbers.Integral):
        number = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(float(value)):
        if not float(value).is_integer():
            return None
        number = int(float(value))
    else:
        return None
    return number if 0 <= number <= MAX_TOKEN_ID else None


def _read_logprobs(logprobs: Any) -> tuple[list[float] | None, str | None]:
    if isinstance(logprobs, np.ndarray) or hasattr(logprobs, "tolist"):
        logprobs = np.asarray(logprobs).reshape(-1).tolist()
    if isinstance(logprobs, str | bytes) or not isinstance(logprobs, Sequence):
        return None, f"log-probs must be a sequence of numbers, got {type(logprobs).__name__}"
    values = []
    for value in logprobs:
        if value is None:  # some trainers pass a missing log-prob as None: keep it as NaN
            values.append(math.nan)
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None, f"log-probs must be numbers, got {repr(value)[:40]}"
        number = float(value)
        if math.isinf(number) and number > 0:
            return None, "log-probs must be <= 0, got +inf"
        values.append(number)
    return values, None


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


def _invalid(error: str) -> ActionInput:
    return ActionInput("", [], False, error)
