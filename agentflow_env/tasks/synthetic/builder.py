"""Draws a world's entities, facts, confusable distractors and documents from one seeded rng."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tasks.synthetic.documents import (
    TITLE_NOUNS,
    TITLE_PATTERNS,
    render_text,
    template_vocabulary,
)
from agentflow_env.tasks.synthetic.entities import Draft, Entity, WorldConfig
from agentflow_env.tasks.synthetic.names import NameFactory
from agentflow_env.tasks.synthetic.near_misses import NearMissMaker
from agentflow_env.tasks.synthetic.schema import (
    ALBUM,
    CITY,
    COUNTRY,
    CREATOR_RELATION,
    FILM,
    NOVEL,
    OCCUPATIONS,
    OCCUPATIONS_BY_ROLE,
    ORG_KINDS,
    ORGANISATION,
    PERSON,
    PRODUCER_KIND,
    PRODUCER_RELATION,
    SCHEMA,
    WORK_TYPES,
    WORK_YEAR_RELATION,
    is_entity_kind,
)


@dataclass(frozen=True)
class BuiltWorld:
    config: WorldConfig
    entities: tuple[Entity, ...]
    confusables: dict[str, tuple[str, ...]]
    corpus: Corpus
    near_misses: dict[str, str]


class WorldBuilder:
    """One use per world: ``WorldBuilder(seed, config).build()``."""

    def __init__(self, seed: int, config: WorldConfig) -> None:
        self.config = config
        self.rng = random.Random(seed)
        reserved = template_vocabulary() | {w.lower() for w in OCCUPATIONS}
        reserved |= {s.lower() for suffixes in ORG_KINDS.values() for s in suffixes}
        self.names = NameFactory(self.rng, reserved)
        self.records: dict[str, Draft] = {}
        self.confusables: dict[str, set[str]] = {}
        self.claimed_names: set[str] = set()  # names that already have a namesake
        self.shared_words: set[str] = set()  # title words already used by two works

    def build(self) -> BuiltWorld:
        self.make_places()
        self.make_organisations()
        self.make_people()
        self.assign_founders()
        self.make_works(FILM, self.config.films)
        self.make_works(NOVEL, self.config.novels)
        self.make_works(ALBUM, self.config.albums)
        entities = self.freeze()
        doc_rng = random.Random(self.rng.getrandbits(64))
        documents = [self.render(e, doc_rng) for e in entities]
        twins: dict[str, str] = {}
        if self.config.distractors > 0:  # drawn last, so the rest of the world stays the same
            twins = self.add_near_misses()
            twin_entities = self.freeze(tuple(twins))
            twin_rng = random.Random(self.rng.getrandbits(64))
            documents += [self.render(e, twin_rng) for e in twin_entities]
            entities += twin_entities
        corpus = Corpus.from_documents(documents)
        confusables = {k: tuple(sorted(v)) for k, v in sorted(self.confusables.items())}
        return BuiltWorld(self.config, entities, confusables, corpus, twins)

    # -- helpers -----------------------------------------------------------------------------
    def add(self, key: str, record: Draft) -> Draft:
        self.records[key] = record
        return record

    def keys(self, entity_type: str) -> list[str]:
        return [k for k, r in self.records.items() if r.type == entity_type]

    def confuse(self, a: str, b: str) -> None:
        self.confusables.setdefault(a, set()).add(b)
        self.confusables.setdefault(b, set()).add(a)

    # -- entities ----------------------------------------------------------------------------
    def make_places(self) -> None:
        rng, cfg = self.rng, self.config
        countries = [f"country-{i:03d}" for i in range(cfg.countries)]
        for key in countries:
            year = rng.randint(1650, 1990)
            self.add(key, Draft(COUNTRY, self.names.word(), {"independence_year": year}))
        populations: set[int] = set()
        for i in range(cfg.cities):
            population = rng.randint(3_000, 4_000_000)
            while population in populations:  # unique, so comparisons never tie
                population += 1
            populations.add(population)
            country = countries[i] if i < len(countries) else rng.choice(countries)
            attrs: dict[str, str | int] = {"country": country, "population": population}
            self.add(f"city-{i:03d}", Draft(CITY, self.names.word(), attrs))
        for key in countries:
            cities = [k for k in self.keys(CITY) if self.records[k].attrs["country"] == key]
            self.records[key].attrs["capital"] = rng.choice(cities)

    def make_organisations(self) -> None:
        rng, cfg = self.rng, self.config
        kinds, cities = list(ORG_KINDS), self.keys(CITY)
        for i in range(cfg.organisations):
            kind = kinds[i % len(kinds)]
            base, namesake_city = self.names.word(), None
            if rng.random() < cfg.city_named_org_rate:
                free = [c for c in cities if self.records[c].name not in self.claimed_names]
                if free:
                    namesake_city = rng.choice(free)
                    base = self.records[namesake_city].name
                    self.claimed_names.add(base)
            key = f"organisation-{i:03d}"
            attrs: dict[str, str | int] = {"org_kind": kind, "headquarters": rng.choice(cities)}
            name = f"{base} {rng.choice(ORG_KINDS[kind])}"
            self.add(key, Draft(ORGANISATION, name, attrs))
            if namesake_city:
                self.confuse(key, namesake_city)

    def make_people(self) -> None:
        rng, cfg = self.rng, self.config
        roles = [FILM] * max(1, (cfg.films + 1) // 2)
        roles += [NOVEL] * max(1, (cfg.novels + 1) // 2)
        roles += [ALBUM] * max(1, (cfg.albums + 1) // 2)
        roles = (roles + ["other"] * cfg.people)[: cfg.people]
        rng.shuffle(roles)
        cities, orgs = self.keys(CITY), self.keys(ORGANISATION)
        first_names: list[str] = []
        full_names: set[str] = set()
        single: list[str] = []  # people not yet in a family pair
        for i, role in enumerate(roles):
            key = f"person-{i:03d}"
            sibling = None
            if single and rng.random() < cfg.family_rate:
                sibling = self.records[single.pop(rng.randrange(len(single)))]
            while True:
                if first_names and rng.random() < cfg.first_name_reuse:
                    first = rng.choice(first_names)
                else:
                    first = self.names.word(2, 2)
                    first_names.append(first)
                surname = sibling.name.split(" ")[1] if sibling else self.names.word()
                if f"{first} {surname}" not in full_names:
                    break
            full_names.add(f"{first} {surname}")
            if sibling:  # near-duplicate facts: same birthplace, almost the same year
                birth_year = sibling.int("birth_year") + rng.choice((-2, -1, 1, 2))
                birthplace = str(sibling.attrs["birthplace"])
            else:
                birth_year, birthplace = rng.randint(1870, 1965), rng.choice(cities)
                single.append(key)
            attrs: dict[str, str | int] = {
                "occupation": rng.choice(OCCUPATIONS_BY_ROLE[role]),
                "birth_year": birth_year,
                "birthplace": birthplace,
                "employer": rng.choice(orgs),
            }
            self.add(key, Draft(PERSON, f"{first} {surname}", attrs, role=role))
        people = self.keys(PERSON)
        for a in people:
            for b in people:
                name_a, name_b = self.records[a].name.split(" "), self.records[b].name.split(" ")
                if a < b and (name_a[0] == name_b[0] or name_a[1] == name_b[1]):
                    self.confuse(a, b)

    def assign_founders(self) -> None:
        people = self.keys(PERSON)
        for key in self.keys(ORGANISATION):
            founder = self.rng.choice(people)
            attrs = self.records[key].attrs
            attrs["founder"] = founder
            attrs["founding_year"] = self.records[founder].int("birth_year") + self.rng.randint(
                22, 50
            )

    def make_works(self, work_type: str, count: int) -> None:
        rng = self.rng
        creators = [k for k in self.keys(PERSON) if self.records[k].role == work_type]
        producers = [
            k
            for k in self.keys(ORGANISATION)
            if self.records[k].attrs["org_kind"] == PRODUCER_KIND[work_type]
        ]
        for i in range(count):
            key = f"{work_type}-{i:03d}"
            creator, producer = rng.choice(creators), rng.choice(producers)
            born = self.records[creator].int("birth_year")
            founded = self.records[producer].int("founding_year")
            year = max(born + rng.randint(20, 40), founded + rng.randint(1, 20))
            name, word, confusable = self.work_name(work_type)
            attrs: dict[str, str | int] = {
                CREATOR_RELATION[work_type]: creator,
                PRODUCER_RELATION[work_type]: producer,
                WORK_YEAR_RELATION[work_type]: year,
            }
            self.add(key, Draft(work_type, name, attrs, word=word))
            if confusable:
                self.confuse(key, confusable)

    def work_name(self, work_type: str) -> tuple[str, str | None, str | None]:
        """A unique work name, its made-up word, and the entity it is confusable with (if any).

        A name gets at most one kind of confusion (a namesake or a title-word sibling), so that
        a search for it never has more than one strong competitor.
        """
        rng, cfg = self.rng, self.config
        if rng.random() < cfg.namesake_rate:
            candidates = [
                k
                for k, r in self.records.items()
                if r.type in (CITY, COUNTRY, *WORK_TYPES)
                and r.type != work_type
                and r.name not in self.claimed_names
                and r.word not in self.shared_words
            ]
            if candidates:
                other = rng.choice(candidates)
                self.claimed_names.add(self.records[other].name)
                return self.records[other].name, None, other
        works = [
            k
            for k, r in self.records.items()
            if r.word and r.word not in self.shared_words and r.name not in self.claimed_names
        ]
        if works and rng.random() < cfg.shared_title_word_rate:
            other = rng.choice(works)
            word, other_name = str(self.records[other].word), self.records[other].name
            nouns = [n for n in TITLE_NOUNS if n not in other_name.split(" ")]
            self.shared_words.add(word)
            return rng.choice(TITLE_PATTERNS[1:]).format(w=word, n=rng.choice(nouns)), word, other
        word = self.names.word()
        return rng.choice(TITLE_PATTERNS).format(w=word, n=rng.choice(TITLE_NOUNS)), word, None

    def add_near_misses(self) -> dict[str, str]:
        """Twins for a ``distractors`` fraction of the entities (``near_misses.py``), from an rng
        of their own: twin key -> original key."""
        rng = random.Random(self.rng.getrandbits(64))
        maker = NearMissMaker(self.records, self.names.using(rng), rng)
        twins: dict[str, str] = {}
        for original, twin in maker.draw(self.config.distractors):
            key = f"{twin.type}-{len(self.keys(twin.type)):03d}"
            self.add(key, twin)
            self.confuse(key, original)
            twins[key] = original
        return twins

    # -- output ------------------------------------------------------------------------------
    def freeze(self, keys: Sequence[str] | None = None) -> tuple[Entity, ...]:
        """Records (all, or those of ``keys``) to entities; a work whose name another entity has
        gets a ``(type)`` title."""
        counts: dict[str, int] = {}
        for record in self.records.values():
            counts[record.name] = counts.get(record.name, 0) + 1
        entities = []
        for key in self.records if keys is None else keys:
            r = self.records[key]
            shared = counts[r.name] > 1 and r.type in WORK_TYPES
            title = f"{r.name} ({r.type})" if shared else r.name
            entities.append(Entity(key, r.type, r.name, title, dict(r.attrs)))
        return tuple(entities)

    def render(self, entity: Entity, rng: random.Random) -> Document:
        facts = {}
        for relation, kind in SCHEMA[entity.type].items():
            value = str(entity.attributes[relation])
            facts[relation] = self.records[value].name if is_entity_kind(kind) else value
        cfg = self.config
        text = render_text(entity.type, entity.name, facts, rng, cfg.paraphrases, cfg.fillers)
        return Document(entity.key, entity.title, text)
