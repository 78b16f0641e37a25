"""The world's building blocks: its configuration and its entities."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentflow_env.tasks.synthetic.schema import PRODUCER_KIND, WORK_TYPES


@dataclass(frozen=True)
class WorldConfig:
    """How big a world is and how confusing. Rates are per-entity probabilities."""

    countries: int = 12
    cities: int = 60
    organisations: int = 45
    people: int = 130
    films: int = 40
    novels: int = 30
    albums: int = 30
    family_rate: float = 0.2
    """People who share a surname (and birthplace, and almost the birth year) with another."""
    first_name_reuse: float = 0.15
    namesake_rate: float = 0.15
    """Works named exactly like a city, a country or another work (titles get ``(film)``)."""
    city_named_org_rate: float = 0.2
    """Organisations named after a city, e.g. ``Vantoria Records``."""
    shared_title_word_rate: float = 0.2
    """Works whose title reuses the made-up word of an earlier work's title."""
    paraphrases: int = 3
    """Templates per fact to choose from (1: always the canonical sentence)."""
    fillers: tuple[int, int] = (1, 3)
    distractors: float = 0.0
    """Near-miss density in [0, 1]: the fraction of people, organisations and works that get a
    twin, an extra entity with its own document whose name shares a part with theirs and whose
    facts are close but not the same (``near_misses.py``). 0 adds none: the world is exactly
    the one without the setting."""

    @classmethod
    def small(cls) -> WorldConfig:
        """A world of about 50 entities: cheap enough to build a fresh one per episode."""
        return cls(countries=4, cities=10, organisations=8, people=18, films=5, novels=4, albums=4)

    def __post_init__(self) -> None:
        if self.countries < 1 or self.cities < self.countries:
            raise ValueError("need at least one country and one city per country")
        if self.organisations < len(PRODUCER_KIND) or self.people < len(WORK_TYPES):
            raise ValueError("need an organisation per producer kind and a creator per work type")
        if not 0.0 <= self.distractors <= 1.0:
            raise ValueError(f"distractors must be in [0, 1], got {self.distractors!r}")


@dataclass
class Draft:
    """An entity while it is being built (attributes hold target keys for entity relations)."""

    type: str
    name: str
    attrs: dict[str, str | int] = field(default_factory=dict)
    role: str = ""  # for people: the work type they create, or "other"
    word: str | None = None  # for works: the made-up word in the title

    def int(self, relation: str) -> int:
        return int(self.attrs[relation])


@dataclass(frozen=True)
class Entity:
    """One thing in the world. Entity-valued attributes hold the target entity's ``key``."""

    key: str
    type: str
    name: str
    title: str
    attributes: Mapping[str, str | int] = field(hash=False)
