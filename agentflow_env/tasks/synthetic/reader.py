"""Reads facts back out of document text: the exact inverse of the templates in ``documents.py``.

Only complete sentences (ending in a single period) are read, so text cut short by a memory view
loses the facts of its last, broken sentence and nothing else.
"""

from __future__ import annotations

import functools
import re
import string
from typing import NamedTuple

from agentflow_env.tasks.synthetic.documents import (
    FACT_TEMPLATES,
    INTRO_TEMPLATES,
    SUBJECT_SLOTS,
    Template,
)
from agentflow_env.tasks.synthetic.schema import (
    ENTITY_TYPES,
    NUMBER,
    OCCUPATIONS,
    ORG_KINDS,
    SCHEMA,
    TEXT,
    YEAR,
)

TYPE_RELATION = "type"


class Fact(NamedTuple):
    """``subject`` is the entity's name (title without its ``(type)`` disambiguator)."""

    subject: str
    relation: str
    value: str


_NAME = r"[A-Z][a-z]+(?: [A-Z][a-z]+)*"
_SUBJECT = r"[A-Z][^.]*?"
_TEXT_VALUES = {"occupation": OCCUPATIONS, "org_kind": tuple(ORG_KINDS)}
_CUT_MARKER = re.compile(r"(?:\.\.\.|…)$")
_TITLE = re.compile(r"^(?P<name>.+) \((?P<type>" + "|".join(ENTITY_TYPES) + r")\)$")


def _value_regex(entity_type: str, relation: str) -> str:
    kind = SCHEMA[entity_type][relation]
    if kind == YEAR:
        return r"\d{4}"
    if kind == NUMBER:
        return r"\d+"
    if kind == TEXT:
        values = sorted(_TEXT_VALUES[relation], key=len, reverse=True)
        return "|".join(re.escape(v) for v in values)
    return _NAME


class _CompiledTemplate(NamedTuple):
    regex: re.Pattern[str]
    groups: tuple[tuple[str, str], ...]  # (group name, relation)


def _compile(template: Template) -> _CompiledTemplate:
    parts: list[str] = []
    groups: list[tuple[str, str]] = []
    for literal, slot, _, _ in string.Formatter().parse(template.pattern):
        words = literal.split(" ")
        parts.append(" ".join("an?" if w == "a" else re.escape(w) for w in words))
        if not slot:
            continue
        if slot in SUBJECT_SLOTS:
            parts.append(_SUBJECT)
        else:
            group = f"g{len(groups)}"
            groups.append((group, slot))
            parts.append(f"(?P<{group}>{_value_regex(template.entity_type, slot)})")
    return _CompiledTemplate(re.compile("".join(parts)), tuple(groups))


_INTRO_REGEXES = {t: tuple(_compile(x) for x in INTRO_TEMPLATES[t]) for t in ENTITY_TYPES}
_FACT_REGEXES = {t: tuple(_compile(x) for x in FACT_TEMPLATES[t]) for t in ENTITY_TYPES}


def split_title(title: str) -> tuple[str, str | None]:
    """``"Vantoria (film)"`` -> ``("Vantoria", "film")``; a plain title has no type."""
    match = _TITLE.match(title.strip())
    if match:
        return match.group("name"), match.group("type")
    return title.strip(), None


def complete_sentences(text: str) -> list[str]:
    """Sentences that end in one period; a cut-off tail is dropped.

    A trailing ellipsis marks a cut: ``"...in Keldra...."`` keeps its last sentence, while
    ``"...in Keld..."`` loses it (the name may have been cut short).
    """
    text = _CUT_MARKER.sub("", text.strip())
    sentences = re.split(r"(?<=\.)\s+", text)
    return [s for s in sentences if s.endswith(".") and not s.endswith("..")]


def extract_facts(title: str, text: str) -> list[Fact]:
    """All facts stated in a document, each as (name, relation, value text).

    The first fact is ``(name, "type", entity type)`` when the text or title says the type.
    """
    return list(_extract_cached(title, text))


@functools.lru_cache(maxsize=8192)
def _extract_cached(title: str, text: str) -> tuple[Fact, ...]:
    name, entity_type = split_title(title)
    facts: list[Fact] = []
    type_known_from_text = False
    for sentence in complete_sentences(text):
        types = (entity_type,) if entity_type else ENTITY_TYPES
        found = _match(sentence, _INTRO_REGEXES, types)
        if found is not None:
            entity_type, values = found
            if not type_known_from_text:
                facts.insert(0, Fact(name, TYPE_RELATION, entity_type))
                type_known_from_text = True
        else:
            found = _match(sentence, _FACT_REGEXES, types)
            if found is None:
                continue
            values = found[1]
        facts.extend(Fact(name, relation, value) for relation, value in values)
    if not type_known_from_text and entity_type:
        facts.insert(0, Fact(name, TYPE_RELATION, entity_type))
    return tuple(dict.fromkeys(facts))


def _match(
    sentence: str,
    regexes: dict[str, tuple[_CompiledTemplate, ...]],
    types: tuple[str, ...],
) -> tuple[str, list[tuple[str, str]]] | None:
    for entity_type in types:
        for compiled in regexes[entity_type]:
            match = compiled.regex.fullmatch(sentence)
            if match:
                return entity_type, [(rel, match.group(g)) for g, rel in compiled.groups]
    return None
