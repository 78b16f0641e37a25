"""The synthetic world's schema: entity types, their relations, and what each relation points to.

This is static knowledge (like knowing that films have directors), not world data, so readers
and solvers may use it to follow a chain of relations without ever seeing the fact tables.
"""

from __future__ import annotations

PERSON = "person"
CITY = "city"
COUNTRY = "country"
ORGANISATION = "organisation"
FILM = "film"
NOVEL = "novel"
ALBUM = "album"

ENTITY_TYPES: tuple[str, ...] = (PERSON, CITY, COUNTRY, ORGANISATION, FILM, NOVEL, ALBUM)
WORK_TYPES: tuple[str, ...] = (FILM, NOVEL, ALBUM)

# Value kinds that are not entities.
YEAR = "year"
NUMBER = "number"
TEXT = "text"

# entity type -> relation -> value kind (an entity type, YEAR, NUMBER or TEXT).
SCHEMA: dict[str, dict[str, str]] = {
    PERSON: {"occupation": TEXT, "birth_year": YEAR, "birthplace": CITY, "employer": ORGANISATION},
    CITY: {"country": COUNTRY, "population": NUMBER},
    COUNTRY: {"capital": CITY, "independence_year": YEAR},
    ORGANISATION: {
        "org_kind": TEXT,
        "founding_year": YEAR,
        "headquarters": CITY,
        "founder": PERSON,
    },
    FILM: {"director": PERSON, "release_year": YEAR, "studio": ORGANISATION},
    NOVEL: {"author": PERSON, "publication_year": YEAR, "publisher": ORGANISATION},
    ALBUM: {"artist": PERSON, "release_year": YEAR, "label": ORGANISATION},
}

# The person who made a work, per work type.
CREATOR_RELATION: dict[str, str] = {FILM: "director", NOVEL: "author", ALBUM: "artist"}
# The organisation that put out a work, per work type.
PRODUCER_RELATION: dict[str, str] = {FILM: "studio", NOVEL: "publisher", ALBUM: "label"}
# The year a work came out, per work type.
WORK_YEAR_RELATION: dict[str, str] = {
    FILM: "release_year",
    NOVEL: "publication_year",
    ALBUM: "release_year",
}

OCCUPATIONS_BY_ROLE: dict[str, tuple[str, ...]] = {
    FILM: ("film director", "filmmaker"),
    NOVEL: ("novelist", "writer"),
    ALBUM: ("singer", "musician", "composer"),
    "other": ("engineer", "architect", "economist", "painter", "journalist", "lawyer", "chemist"),
}
OCCUPATIONS: tuple[str, ...] = tuple(o for group in OCCUPATIONS_BY_ROLE.values() for o in group)

# Organisation kind -> name suffixes. A work's producer has the kind matching the work type.
ORG_KINDS: dict[str, tuple[str, ...]] = {
    "film studio": ("Pictures", "Studios"),
    "publishing house": ("Press", "Publishing"),
    "record label": ("Records", "Music"),
    "company": ("Industries", "Systems", "Holdings"),
    "university": ("University", "Institute"),
}
PRODUCER_KIND: dict[str, str] = {
    FILM: "film studio",
    NOVEL: "publishing house",
    ALBUM: "record label",
}


def value_kind(entity_type: str, relation: str) -> str | None:
    """What ``relation`` of an ``entity_type`` points to, or ``None`` if it has no such relation."""
    return SCHEMA.get(entity_type, {}).get(relation)


def is_entity_kind(kind: str | None) -> bool:
    return kind in ENTITY_TYPES


def types_with_relation(relation: str) -> tuple[str, ...]:
    return tuple(t for t in ENTITY_TYPES if relation in SCHEMA[t])
