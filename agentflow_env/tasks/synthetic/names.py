"""Made-up names built from syllables, so that no pretrained model can know the entities."""

from __future__ import annotations

import random
from collections.abc import Iterable

_ONSETS = (
    "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
    "br", "dr", "kr", "th", "st", "tr", "sk", "vr", "gl", "zh",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "u", "ae", "ia", "ou", "ei", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "x", "nd", "sk")
_SIMPLE_ONSETS = _ONSETS[:14]


class NameFactory:
    """Draws capitalised words that are unique within one world.

    ``reserved`` words (the vocabulary of templates and fillers) are never produced, so a name
    token never collides with a template word and stays a rare, discriminative search term.
    """

    def __init__(self, rng: random.Random, reserved: Iterable[str] = ()) -> None:
        self._rng = rng
        self._used: set[str] = {w.lower() for w in reserved}

    def using(self, rng: random.Random) -> NameFactory:
        """A factory drawing from ``rng`` that shares this one's used words (both stay unique)."""
        other = NameFactory(rng)
        other._used = self._used
        return other

    def word(self, min_syllables: int = 2, max_syllables: int = 3) -> str:
        """A fresh word never returned before by this factory (mostly short ones)."""
        while True:
            n = min_syllables if self._rng.random() < 0.7 else max_syllables
            parts = []
            for i in range(n):
                onset = self._rng.choice(_ONSETS if i == 0 else _SIMPLE_ONSETS)
                coda = self._rng.choice(_CODAS) if i == n - 1 else ""
                parts.append(onset + self._rng.choice(_VOWELS) + coda)
            candidate = "".join(parts)
            if len(candidate) >= 4 and candidate not in self._used:
                self._used.add(candidate)
                return candidate.capitalize()
