"""Encyclopedia-style paraphrase templates and the renderer that turns an entity into text.

Each template is a sentence with ``{S}`` (the full name), ``{s}`` (the name or a short reference
such as a surname or "The film") and one slot per fact it states, named after the relation.
Intro templates come first in a document and also say what type the entity is. The reader
(``reader.py``) compiles the same templates into regular expressions, so text and reader stay
exact inverses: add a template here and the reader learns it too.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentflow_env.tasks.synthetic.schema import (
    ALBUM,
    CITY,
    COUNTRY,
    FILM,
    NOVEL,
    ORGANISATION,
    PERSON,
)

TITLE_NOUNS: tuple[str, ...] = (
    "Nights", "Rising", "Echoes", "Dawn", "Shadows", "Song", "Road", "Garden", "Winter",
    "Harbor", "Letters", "Crown", "River", "Lanterns", "Orchard", "Tide", "Mirror", "Silence",
)  # fmt: skip
TITLE_PATTERNS: tuple[str, ...] = ("{w}", "{w} {n}", "The {w} {n}", "{n} of {w}")

_INTROS: dict[str, tuple[str, ...]] = {
    PERSON: (
        "{S} is a {occupation}.",
        "{S} is a {occupation} born in {birth_year}.",
        "{S} is a {occupation} from {birthplace}.",
    ),
    CITY: (
        "{S} is a city in {country}.",
        "{S} is a city located in {country}.",
        "{S} is a city with a long history.",
        "{S} is a city in {country} with {population} inhabitants.",
    ),
    COUNTRY: (
        "{S} is a sovereign country.",
        "{S} is a country whose capital is {capital}.",
        "{S} is a country that became independent in {independence_year}.",
    ),
    ORGANISATION: (
        "{S} is a {org_kind}.",
        "{S} is a {org_kind} based in {headquarters}.",
        "{S} is a {org_kind} founded in {founding_year}.",
    ),
    FILM: (
        "{S} is a feature film.",
        "{S} is a film directed by {director}.",
        "{S} is a {release_year} film directed by {director}.",
        "{S} is a {release_year} film.",
    ),
    NOVEL: (
        "{S} is a novel.",
        "{S} is a novel by {author}.",
        "{S} is a {publication_year} novel written by {author}.",
        "{S} is a novel first published in {publication_year}.",
    ),
    ALBUM: (
        "{S} is a music album.",
        "{S} is an album by {artist}.",
        "{S} is a {release_year} album by {artist}.",
    ),
}

# Single-fact templates first (a paraphrase knob of 1 keeps only the first per fact).
_FACTS: dict[str, tuple[str, ...]] = {
    PERSON: (
        "{s} was born in {birth_year}.",
        "{s} was born in the year {birth_year}.",
        "The birth year of {s} is {birth_year}.",
        "{s} was born in the city of {birthplace}.",
        "{s} is a native of {birthplace}.",
        "The birthplace of {s} is {birthplace}.",
        "{s} works for {employer}.",
        "{s} is employed by {employer}.",
        "The employer of {s} is {employer}.",
        "{s} was born in {birthplace} in {birth_year}.",
        "{s} was born in {birth_year} in {birthplace}.",
    ),
    CITY: (
        "{s} lies in {country}.",
        "{s} is located in the country of {country}.",
        "{s} is part of {country}.",
        "{s} has a population of {population}.",
        "The population of {s} is {population}.",
        "About {population} people live in {s}.",
    ),
    COUNTRY: (
        "The capital of {s} is {capital}.",
        "{capital} is the capital of {s}.",
        "{s} has {capital} as its capital.",
        "{s} became independent in {independence_year}.",
        "{s} gained independence in {independence_year}.",
        "Independence came to {s} in {independence_year}.",
    ),
    ORGANISATION: (
        "{s} was founded in {founding_year}.",
        "{s} was established in {founding_year}.",
        "The founding year of {s} is {founding_year}.",
        "{s} was founded by {founder}.",
        "{founder} founded {s}.",
        "The founder of {s} is {founder}.",
        "{s} is headquartered in {headquarters}.",
        "The headquarters of {s} are in {headquarters}.",
        "{s} has its head office in {headquarters}.",
        "{s} was founded by {founder} in {founding_year}.",
        "{s} was founded in {founding_year} by {founder}.",
    ),
    FILM: (
        "{s} was directed by {director}.",
        "{director} directed {s}.",
        "The director of {s} is {director}.",
        "{s} was released in {release_year}.",
        "{s} premiered in {release_year}.",
        "{s} came out in {release_year}.",
        "{s} was produced by {studio}.",
        "{studio} produced {s}.",
        "The studio behind {s} is {studio}.",
    ),
    NOVEL: (
        "{s} was written by {author}.",
        "{author} wrote {s}.",
        "The author of {s} is {author}.",
        "{s} was published in {publication_year}.",
        "{s} first appeared in print in {publication_year}.",
        "The publication year of {s} is {publication_year}.",
        "{s} was published by {publisher}.",
        "{publisher} published {s}.",
        "The publisher of {s} is {publisher}.",
    ),
    ALBUM: (
        "{s} was recorded by {artist}.",
        "{artist} recorded {s}.",
        "The artist behind {s} is {artist}.",
        "{s} was released in {release_year}.",
        "{s} came out in {release_year}.",
        "The release year of {s} is {release_year}.",
        "{s} was released on {label}.",
        "{label} released {s}.",
        "The record label of {s} is {label}.",
    ),
}

# Sentences that state no extractable fact (the reader must find nothing in them).
_FILLERS: dict[str, tuple[str, ...]] = {
    PERSON: (
        "{s} has given few interviews over the years.",
        "Critics have often praised the work of {s}.",
        "Little is known about the early life of {s}.",
        "{s} is known for a quiet and careful style.",
    ),
    CITY: (
        "{s} is known for its old markets and narrow streets.",
        "The climate of {s} is mild for most of the year.",
        "Visitors to {s} often admire its central square.",
        "{s} hosts several festivals every summer.",
    ),
    COUNTRY: (
        "{s} has a varied landscape of hills and plains.",
        "The economy of {s} relies on trade and farming.",
        "{s} belongs to several regional alliances.",
    ),
    ORGANISATION: (
        "{s} has grown steadily over the decades.",
        "The history of {s} is documented in its annual reports.",
        "{s} employs staff across several departments.",
    ),
    FILM: (
        "{s} received mixed reviews from critics.",
        "The soundtrack of {s} was widely praised.",
        "{s} was shown at several festivals.",
    ),
    NOVEL: (
        "{s} has been translated into several languages.",
        "Critics praised the prose of {s}.",
        "{s} remains popular with readers.",
    ),
    ALBUM: (
        "{s} features eleven tracks.",
        "The cover art of {s} became well known.",
        "{s} received positive reviews.",
    ),
}

SUBJECT_SLOTS = frozenset({"S", "s"})


@dataclass(frozen=True)
class Template:
    """One sentence pattern for one entity type and the relations it states."""

    entity_type: str
    pattern: str
    relations: tuple[str, ...]
    intro: bool


def _slots(pattern: str) -> tuple[str, ...]:
    return tuple(name for _, name, _, _ in string.Formatter().parse(pattern) if name)


def _templates(table: Mapping[str, Sequence[str]], intro: bool) -> dict[str, tuple[Template, ...]]:
    return {
        entity_type: tuple(
            Template(
                entity_type,
                p,
                tuple(s for s in _slots(p) if s not in SUBJECT_SLOTS),
                intro,
            )
            for p in patterns
        )
        for entity_type, patterns in table.items()
    }


INTRO_TEMPLATES: dict[str, tuple[Template, ...]] = _templates(_INTROS, intro=True)
FACT_TEMPLATES: dict[str, tuple[Template, ...]] = _templates(_FACTS, intro=False)
FILLERS = _FILLERS

_SHORT_SUBJECT = {FILM: "The film", NOVEL: "The novel", ALBUM: "The album"}


def template_vocabulary() -> set[str]:
    """Every word the templates, fillers and title patterns use (names must avoid them)."""
    words: set[str] = set(w.lower() for w in TITLE_NOUNS)
    for table in (_INTROS, _FACTS, _FILLERS):
        for patterns in table.values():
            for pattern in patterns:
                words.update(re.findall(r"[a-z]+", re.sub(r"\{[^}]*\}", " ", pattern.lower())))
    return words


def render_text(
    entity_type: str,
    name: str,
    facts: Mapping[str, str],
    rng: random.Random,
    paraphrases: int = 3,
    fillers: tuple[int, int] = (1, 3),
) -> str:
    """Render every fact in ``facts`` (relation -> value text) as encyclopedia sentences.

    ``paraphrases`` caps how many templates per fact are used; the intro comes first, the other
    sentences (facts and fillers) are shuffled.
    """
    intros = [t for t in INTRO_TEMPLATES[entity_type] if set(t.relations) <= facts.keys()]
    intro = rng.choice(intros[: max(1, paraphrases)])
    remaining = [r for r in facts if r not in intro.relations]
    body: list[str] = []
    while remaining:
        relation = remaining[0]
        singles = [t for t in FACT_TEMPLATES[entity_type] if t.relations == (relation,)]
        combined = [
            t
            for t in FACT_TEMPLATES[entity_type]
            if len(t.relations) > 1
            and relation in t.relations
            and set(t.relations) <= set(remaining)
        ]
        candidates = singles[: max(1, paraphrases)] + (combined if paraphrases > 1 else [])
        if not candidates:
            raise ValueError(f"no template states {entity_type}.{relation}")
        template = rng.choice(candidates)
        body.append(_fill(template.pattern, entity_type, name, facts, rng))
        remaining = [r for r in remaining if r not in template.relations]
    n_fillers = rng.randint(*fillers)
    for pattern in rng.sample(_FILLERS[entity_type], k=min(n_fillers, len(_FILLERS[entity_type]))):
        body.append(_fill(pattern, entity_type, name, facts, rng))
    rng.shuffle(body)
    return " ".join([_fill(intro.pattern, entity_type, name, facts, rng), *body])


def _fill(
    pattern: str, entity_type: str, name: str, facts: Mapping[str, str], rng: random.Random
) -> str:
    values = dict(facts)
    values["S"] = name
    values["s"] = _subject_reference(entity_type, name, pattern.startswith("{s}"), rng)
    sentence = pattern.format(**values)
    return re.sub(r"\ba ([aeioAEIO])", r"an \1", sentence)


def _subject_reference(entity_type: str, name: str, at_start: bool, rng: random.Random) -> str:
    options = [name]
    if entity_type == PERSON and " " in name:
        options.append(name.rsplit(" ", 1)[1])
    if at_start and entity_type in _SHORT_SUBJECT:
        options.append(_SHORT_SUBJECT[entity_type])
    return rng.choice(options)
