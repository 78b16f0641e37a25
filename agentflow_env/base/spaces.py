"""Spaces for free text, token ids and planner actions.

``gymnasium.spaces.Text`` accepts only characters of a fixed charset; real prompts, search
results and model outputs contain anything. These spaces accept every ``str`` and every id
sequence within a vocabulary. Vector envs batch them as tuples (``shared_memory=False``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Space

# Printable ASCII, Latin-1, Greek, CJK, emoji and a few whitespace characters: enough variety
# for random actions to exercise the parser without producing unpaired surrogates.
_SAMPLE_RANGES = ((0x20, 0x7E), (0xA0, 0xFF), (0x391, 0x3C9), (0x4E00, 0x4EFF), (0x1F600, 0x1F64F))


def _sample_text(rng: np.random.Generator) -> str:
    """Up to 63 random characters from ``_SAMPLE_RANGES`` and whitespace."""
    length = int(rng.integers(0, 64))
    chars = []
    for _ in range(length):
        roll = rng.random()
        if roll < 0.1:
            chars.append(str(rng.choice(["\n", "\t", " "])))
            continue
        low, high = _SAMPLE_RANGES[int(rng.integers(len(_SAMPLE_RANGES)))]
        chars.append(chr(int(rng.integers(low, high + 1))))
    return "".join(chars)


class AnyText(Space[str]):
    """Any Python string up to ``max_length`` characters."""

    def __init__(self, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        self.max_length = int(max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _sample_text(self.np_random)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length


class TokenIds(Space[np.ndarray]):
    """A 1-D ``int64`` array of token ids of any length.

    Ids lie in ``[0, id_limit)``; ``id_limit`` defaults to ``vocab_size``. Flat observations
    carry the policy's own ids verbatim, which may lie beyond the tokenizer's vocabulary (models
    pad their embedding), so there ``id_limit`` is larger. ``sample`` draws from the vocabulary.
    """

    def __init__(
        self,
        vocab_size: int,
        seed: int | np.random.Generator | None = None,
        *,
        id_limit: int | None = None,
    ):
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        self.vocab_size = int(vocab_size)
        self.id_limit = self.vocab_size if id_limit is None else int(id_limit)
        if self.id_limit < self.vocab_size:
            raise ValueError(f"id_limit {self.id_limit} is below vocab_size {self.vocab_size}")
        super().__init__(shape=None, dtype=np.int64, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        length = int(self.np_random.integers(1, 64))
        return self.np_random.integers(0, self.vocab_size, size=length, dtype=np.int64)

    def contains(self, x: Any) -> bool:
        if isinstance(x, Sequence) and not isinstance(x, str):
            x = np.asarray(x)
        if not isinstance(x, np.ndarray) or x.ndim != 1:
            return False
        if x.size == 0:
            return True
        return bool(np.issubdtype(x.dtype, np.integer) and x.min() >= 0 and x.max() < self.id_limit)

    def __repr__(self) -> str:
        if self.id_limit == self.vocab_size:
            return f"TokenIds(vocab_size={self.vocab_size})"
        return f"TokenIds(vocab_size={self.vocab_size}, id_limit={self.id_limit})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TokenIds)
            and other.vocab_size == self.vocab_size
            and other.id_limit == self.id_limit
        )


ACTION_KEYS = frozenset({"token_ids", "text", "logprobs"})


class PlannerActionSpace(Space[Any]):
    """What a planner may send: its text, its token ids, or ``{"token_ids", "logprobs"}``.

    - text: any ``str`` up to ``max_length`` characters;
    - token ids: a non-empty 1-D sequence (or integer array) of ids in ``[0, id_limit)``;
    - a mapping with ``"token_ids"`` (or ``"text"``) and optionally ``"logprobs"``: one real
      number per id (``None`` for a missing one), or ``None``; no other keys.

    ``sample`` returns text (random characters), so random actions exercise the parser.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        id_limit: int | None = None,
        max_length: int = 1 << 20,
        seed: int | np.random.Generator | None = None,
    ):
        self.text = AnyText(max_length)
        self.token_ids = TokenIds(vocab_size, id_limit=id_limit)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _sample_text(self.np_random)

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return self.text.contains(x)
        if isinstance(x, Mapping):
            return self._contains_mapping(x)
        return self._contains_ids(x)

    def _contains_ids(self, x: Any) -> bool:
        if isinstance(x, bytes | bytearray) or not isinstance(x, Sequence | np.ndarray):
            return False
        try:
            return len(x) > 0 and self.token_ids.contains(x)
        except (TypeError, ValueError, OverflowError):  # ragged or odd contents
            return False

    def _contains_mapping(self, x: Mapping[Any, Any]) -> bool:
        if not set(x) <= ACTION_KEYS or ("token_ids" in x) == ("text" in x):
            return False
        if "text" in x:
            body_ok = isinstance(x["text"], str) and self.text.contains(x["text"])
            size = None
        else:
            body_ok = self._contains_ids(x["token_ids"])
            size = len(x["token_ids"]) if body_ok else None
        return body_ok and _logprobs_fit(x.get("logprobs"), size)

    def __repr__(self) -> str:
        return f"PlannerActionSpace({self.token_ids!r}, max_length={self.text.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PlannerActionSpace)
            and other.text == self.text
            and other.token_ids == self.token_ids
        )


def _logprobs_fit(logprobs: Any, size: int | None) -> bool:
    """``None``, or one number (or ``None``) per action id, none of them positive infinity."""
    if logprobs is None:
        return True
    if isinstance(logprobs, np.ndarray):
        logprobs = logprobs.tolist()
    if isinstance(logprobs, str | bytes) or not isinstance(logprobs, Sequence):
        return False
    if size is not None and len(logprobs) != size:
        return False
    return all(
        value is None
        or (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool)
            and not (math.isinf(float(value)) and float(value) > 0)
        )
        for value in logprobs
    )
