"""Spaces for free text and token ids.

``gymnasium.spaces.Text`` accepts only characters of a fixed charset; real prompts, search
results and model outputs contain anything. These spaces accept every ``str`` and every id
sequence within a vocabulary. Vector envs batch them as tuples (``shared_memory=False``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Space

# Printable ASCII, Latin-1, Greek, CJK, emoji and a few whitespace characters: enough variety
# for random actions to exercise the parser without producing unpaired surrogates.
_SAMPLE_RANGES = ((0x20, 0x7E), (0xA0, 0xFF), (0x391, 0x3C9), (0x4E00, 0x4EFF), (0x1F600, 0x1F64F))


class AnyText(Space[str]):
    """Any Python string up to ``max_length`` characters."""

    def __init__(self, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        self.max_length = int(max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, 64))
        chars = []
        for _ in range(length):
            roll = self.np_random.random()
            if roll < 0.1:
                chars.append(str(self.np_random.choice(["\n", "\t", " "])))
                continue
            low, high = _SAMPLE_RANGES[int(self.np_random.integers(len(_SAMPLE_RANGES)))]
            chars.append(chr(int(self.np_random.integers(low, high + 1))))
        return "".join(chars)

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
