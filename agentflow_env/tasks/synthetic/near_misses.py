"""Near-miss twins: the distractor density knob of a world (``WorldConfig.distractors``).

A twin is an extra entity of the same type as an existing one (its original), with a document of
its own, whose name shares a part with the original's and whose facts are close but not the same:

- a person keeps the surname (or the first name), and gets a birth year one to three years off,
  often the same birthplace or employer;
- an organisation keeps the base word of its name with another suffix (``Vantoria Records`` ->
  ``Vantoria Studios``), often the same headquarters;
- a work keeps the made-up word of its title with another noun (``The Keldra Nights`` ->
  ``Keldra Rising``), often the same creator or producer.

A search for the original therefore ranks its twin high, beside the document that holds the
answer. Each person, organisation and work is given a twin with probability ``density``, decided
by one draw per candidate taken before any twin is made, so the originals chosen at a higher
density include those chosen at a lower one (the twins' own names and facts may differ).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from agentflow_env.tasks.synthetic.documents import TITLE_NOUNS, TITLE_PATTERNS
from agentflow_env.tasks.synthetic.entities import Draft
from agentflow_env.tasks.synthetic.names import NameFactory
from agentflow_env.tasks.synthetic.schema import (
    CITY,
    CREATOR_RELATION,
    OCCUPATIONS_BY_ROLE,
    ORG_KINDS,
    ORGANISATION,
    PERSON,
    PRODUCER_KIND,
    PRODUCER_RELATION,
    WORK_TYPES,
    WORK_YEAR_RELATION,
)

SHARED_FACT_RATE = 0.5
"""How often a twin copies one of its original's related entities (birthplace, creator, ...)."""
_NAME_ATTEMPTS = 8


class NearMissMaker:
    """Draws twins for the entities in ``records`` (which it does not change)."""

    def __init__(
        self, records: Mapping[str, Draft], names: NameFactory, rng: random.Random
    ) -> None:
        self.records = records
        self.names = names
        self.rng = rng
        self.taken = {r.name for r in records.values()}
        self.by_type: dict[str, list[str]] = {}
        for key, record in records.items():
            self.by_type.setdefault(record.type, []).append(key)

    def draw(self, density: float) -> list[tuple[str, Draft]]:
        """``(original key, twin)`` pairs for about a ``density`` fraction of the candidates."""
        candidates = [
            key
            for entity_type in (PERSON, ORGANISATION, *WORK_TYPES)
            for key in self.by_type.get(entity_type, ())
        ]
        draws = [self.rng.random() for _ in candidates]
        twins = []
        for key, draw in zip(candidates, draws, strict=True):
            if draw >= density:
                continue
            twin = self.twin(self.records[key])
            if twin is not None:
                self.taken.add(twin.name)
                twins.append((key, twin))
        return twins

    def twin(self, original: Draft) -> Draft | None:
        if original.type == PERSON:
            return self.person(original)
        if original.type == ORGANISATION:
            return self.organisation(original)
        return self.work(original)

    def _keep(self, original: Draft, relation: str, others: list[str]) -> str:
        """The original's target for ``relation`` half the time, else any of ``others``."""
        if self.rng.random() < SHARED_FACT_RATE:
            return str(original.attrs[relation])
        return self.rng.choice(others)

    def person(self, original: Draft) -> Draft:
        rng = self.rng
        first, surname = original.name.split(" ")
        if rng.random() < 0.5:
            name = f"{self.names.word(2, 2)} {surname}"
        else:
            name = f"{first} {self.names.word()}"
        attrs: dict[str, str | int] = {
            "occupation": rng.choice(OCCUPATIONS_BY_ROLE[original.role or "other"]),
            "birth_year": original.int("birth_year") + rng.choice((-3, -2, -1, 1, 2, 3)),
            "birthplace": self._keep(original, "birthplace", self.by_type[CITY]),
            "employer": self._keep(original, "employer", self.by_type[ORGANISATION]),
        }
        return Draft(PERSON, name, attrs, role="other")

    def organisation(self, original: Draft) -> Draft | None:
        rng = self.rng
        base = original.name.rsplit(" ", 1)[0]
        options = [
            (kind, suffix)
            for kind, suffixes in ORG_KINDS.items()
            for suffix in suffixes
            if f"{base} {suffix}" not in self.taken
        ]
        if not options:
            return None
        kind, suffix = rng.choice(options)
        founder = rng.choice(self.by_type[PERSON])
        attrs: dict[str, str | int] = {
            "org_kind": kind,
            "headquarters": self._keep(original, "headquarters", self.by_type[CITY]),
            "founder": founder,
            "founding_year": self.records[founder].int("birth_year") + rng.randint(22, 50),
        }
        return Draft(ORGANISATION, f"{base} {suffix}", attrs)

    def work(self, original: Draft) -> Draft | None:
        """A twin sharing the title's made-up word (none for a work named after another)."""
        rng, work_type, word = self.rng, original.type, original.word
        if word is None:
            return None
        nouns = [n for n in TITLE_NOUNS if n not in original.name.split(" ")]
        for _ in range(_NAME_ATTEMPTS):
            name = rng.choice(TITLE_PATTERNS[1:]).format(w=word, n=rng.choice(nouns))
            if name not in self.taken:
                break
        else:
            return None
        creators = [k for k in self.by_type[PERSON] if self.records[k].role == work_type]
        producers = [
            k
            for k in self.by_type[ORGANISATION]
            if self.records[k].attrs["org_kind"] == PRODUCER_KIND[work_type]
        ]
        creator = self._keep(original, CREATOR_RELATION[work_type], creators)
        producer = self._keep(original, PRODUCER_RELATION[work_type], producers)
        born = self.records[creator].int("birth_year")
        founded = self.records[producer].int("founding_year")
        attrs: dict[str, str | int] = {
            CREATOR_RELATION[work_type]: creator,
            PRODUCER_RELATION[work_type]: producer,
            WORK_YEAR_RELATION[work_type]: max(
                born + rng.randint(20, 40), founded + rng.randint(1, 20)
            ),
        }
        return Draft(work_type, name, attrs, word=word)
