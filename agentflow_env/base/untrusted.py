"""Untrusted text as plain text: no special tokens, no lone surrogates, bounded length.

Planner fields, tool outputs, retrieved documents and LLM module replies can spell a tokenizer's
special tokens (``<|im_end|>``, ``<|start_header_id|>``, ...). Encoded as they are, those spellings
become real special-token ids: a fake "system" turn inside an observation. Only the env's own chat
glue may produce special ids, so every piece of untrusted text is passed through ``PlainText``:

- ``neutralize(text)`` breaks each special-token spelling with a zero-width space after its first
  character, so *any* consumer that tokenizes the text (the env, OpenRLHF's executor tokenizing
  feedback, a trainer re-tokenizing a prompt) gets plain-text ids. It also replaces lone
  surrogates, which no tokenizer accepts, with U+FFFD.
- ``encode(text)`` encodes a planner's text action as plain text without changing it (the
  tokenizer's own "split special tokens" switch), so ``decode(ids) == text`` still holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from agentflow_env.base.tokens import ChatTokenizer

__all__ = [
    "BREAK",
    "PlainText",
    "neutralize_chat_markup",
    "repair_surrogates",
    "shorten",
    "special_token_strings",
]

BREAK = "\u200b"  # zero-width space: invisible, and never part of a special token
_SURROGATE = re.compile("[\ud800-\udfff]")


def repair_surrogates(text: str) -> str:
    """``text`` with surrogate pairs joined and lone surrogates replaced by U+FFFD."""
    if text.isascii() or _SURROGATE.search(text) is None:  # isascii: a flag, no scan
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# Special-token spellings of the common chat-model families, for text sent to a served model
# whose tokenizer the env does not know (the frozen modules' endpoint): ChatML and Llama-3 style
# ``<|...|>``, DeepSeek's full-width ``<｜...｜>``, Gemma's turn markers, Llama-2/Mistral ``[INST]``
# and the sentencepiece ``<s>``/``</s>``.
_CHAT_MARKUP = re.compile(
    r"<[|\uff5c][^<>|\uff5c\s]{1,48}[|\uff5c]>"
    r"|</?(?:start_of_turn|end_of_turn|s|bos|eos|pad|unk)>"
    r"|\[/?(?:INST|SYS|AVAILABLE_TOOLS|TOOL_CALLS|TOOL_RESULTS)\]"
    r"|<</?SYS>>"
)


def neutralize_chat_markup(text: str) -> str:
    """``text`` with lone surrogates repaired and common chat-template markers broken.

    For text sent to a served model (its server applies its own template and tokenizer); the
    env's own observations use the exact markers of its tokenizer (``PlainText``).
    """
    text = repair_surrogates(text)
    if text.count("<") + text.count("[") > _FEW_MARKUP_STARTS:
        return _CHAT_MARKUP.sub(_broken, text)
    # Every marker starts with "<" or "[": trying the pattern only there finds the matches a
    # scan of every position finds (the same, left to right, without overlaps), much faster.
    starts = [i for mark in "<[" for i in _positions(text, mark)]
    starts.sort()
    pieces: list[str] = []
    done = 0
    for start in starts:
        match = _CHAT_MARKUP.match(text, start) if start >= done else None
        if match is not None:
            pieces += (text[done:start], _broken(match))
            done = match.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


_FEW_MARKUP_STARTS = 64
"""With more "<" and "[" than this, one scan of the whole text is faster than a try at each."""


def _broken(match: re.Match[str]) -> str:
    """A matched marker with a zero-width space after its first character."""
    marker = match.group(0)
    return marker[0] + BREAK + marker[1:]


def _positions(text: str, mark: str) -> list[int]:
    found = []
    at = text.find(mark)
    while at >= 0:
        found.append(at)
        at = text.find(mark, at + 1)
    return found


def shorten(text: str, max_chars: int, note: str = " ...[shortened]") -> str:
    """``text`` cut to ``max_chars`` characters, saying so."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + note


def special_token_strings(tokenizer: Any) -> tuple[str, ...]:
    """Every string the tokenizer turns into one added/special token id (longest first)."""
    found: set[str] = set()
    explicit = getattr(tokenizer, "special_tokens", None)
    if isinstance(explicit, Iterable) and not isinstance(explicit, str):
        found.update(str(t) for t in explicit)
    for holder in (tokenizer, getattr(tokenizer, "hf", None), getattr(tokenizer, "backend", None)):
        if holder is None:
            continue
        decoder = getattr(holder, "added_tokens_decoder", None)
        if decoder is None and callable(getattr(holder, "get_added_tokens_decoder", None)):
            decoder = holder.get_added_tokens_decoder()
        if isinstance(decoder, dict):
            found.update(str(getattr(t, "content", t)) for t in decoder.values())
        specials = getattr(holder, "all_special_tokens", None)
        if isinstance(specials, list | tuple):
            found.update(str(t) for t in specials)
    for token_id in (tokenizer.eos_token_id, tokenizer.pad_token_id):
        try:
            found.add(tokenizer.decode([token_id]))
        except Exception:  # a tokenizer that cannot decode its own ids adds nothing here
            continue
    return tuple(
        sorted((t for t in found if len(t) >= 2 and BREAK not in t), key=len, reverse=True)
    )


class PlainText:
    """Makes untrusted text safe to place inside one tokenizer's chat prompts."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer
        self.markers = special_token_strings(tokenizer)
        pattern = "|".join(re.escape(m) for m in self.markers)
        self._marker = re.compile(pattern) if pattern else None
        self._plain_encoder = _plain_encoder(tokenizer)

    def neutralize(self, text: str) -> str:
        """``text`` without lone surrogates and with every special-token spelling broken."""
        text = repair_surrogates(text)
        if self._marker is None:
            return text
        # Breaking one spelling cannot create another (the break is in none of them), but
        # overlapping spellings can hide one another: repeat until nothing matches.
        for _ in range(8):
            broken = self._marker.sub(lambda m: m.group(0)[0] + BREAK + m.group(0)[1:], text)
            if broken == text:
                break
            text = broken
        return text

    def encode(self, text: str) -> list[int]:
        """Ids for ``text`` with special-token spellings encoded as the characters they are."""
        text = repair_surrogates(text)
        if self._plain_encoder is not None:
            return self._plain_encoder(text)
        return self.tokenizer.encode(self.neutralize(text))


def _plain_encoder(tokenizer: Any) -> Any:
    """The tokenizer's own switch for encoding special-token spellings as plain text, if any."""
    split = getattr(tokenizer, "encode_plain", None)
    if callable(split):
        return split
    hf = getattr(tokenizer, "hf", None)
    if hf is not None and getattr(hf, "is_fast", False):

        def encode(text: str) -> list[int]:
            return list(hf.encode(text, add_special_tokens=False, split_special_tokens=True))

        return encode
    return None
