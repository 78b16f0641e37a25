"""Random question programs over a world, validated to be well posed.

``hops`` is the number of documents a question needs. Bridge questions follow one chain of 1-4
relations; comparisons and arithmetic combine two chains (2-4 documents). A program is kept
only if every needed document is a different entity and the answer is well defined (no ties,
no answer already named in the question).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable

from agentflow_env.tasks.synthetic import phrasing as ph
from agentflow_env.tasks.synthetic.program import (
    ARITHMETIC,
    BRIDGE,
    COMPARISON,
    DIFFERENCE,
    LOOKUP,
    SUM,
    Chain,
    EntityRef,
    Program,
)
from agentflow_env.tasks.synthetic.schema import (
    ENTITY_TYPES,
    NUMBER,
    SCHEMA,
    TEXT,
    YEAR,
    is_entity_kind,
)
from agentflow_env.tasks.synthetic.world import Entity, World

BUCKETS: dict[str, tuple[int, ...]] = {
    BRIDGE: (1, 2, 3, 4),
    COMPARISON: (2, 3, 4),
    ARITHMETIC: (2, 3, 4),
}
MAX_CHAIN = 3
_COMPARABLE: tuple[str, ...] = tuple(
    sorted({r for rels in SCHEMA.values() for r, kind in rels.items() if kind in (YEAR, NUMBER)})
)
_YEAR_RELATIONS = tuple(r for r in _COMPARABLE if r != "population")


# -- type-level paths ---------------------------------------------------------------------------
@functools.cache
def _paths(
    length: int, finals: frozenset[str] | None = None
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """All (start type, relations) of ``length`` whose last relation is in ``finals``.

    ``finals=None`` allows any relation that has a checkable answer (not free text).
    """
    paths: list[tuple[str, tuple[str, ...]]] = []

    def extend(start: str, current: str, relations: tuple[str, ...]) -> None:
        for relation, kind in SCHEMA[current].items():
            if len(relations) + 1 == length:
                if kind != TEXT and (finals is None or relation in finals):
                    paths.append((start, (*relations, relation)))
            elif is_entity_kind(kind):
                extend(start, kind, (*relations, relation))

    for entity_type in ENTITY_TYPES:
        extend(entity_type, entity_type, ())
    return tuple(paths)


def walk(world: World, start: Entity, relations: tuple[str, ...]) -> list[Entity]:
    """The entities whose documents a chain reads (the start and each intermediate)."""
    holders = [start]
    for relation in relations[:-1]:
        target = world.target(holders[-1], relation)
        assert target is not None
        holders.append(target)
    return holders


def _distinct(entities: Iterable[Entity]) -> bool:
    keys = [e.key for e in entities]
    return len(keys) == len(set(keys))


def _ref(entity: Entity) -> EntityRef:
    return EntityRef(entity.name, entity.type)


# -- program sampling -------------------------------------------------------------------------
def sample_program(world: World, rng: random.Random, kind: str, hops: int) -> Program | None:
    """One random program of ``kind`` needing ``hops`` documents, or ``None`` if this draw failed."""
    if hops not in BUCKETS.get(kind, ()):
        return None
    if kind == BRIDGE:
        return _sample_bridge(world, rng, hops)
    if kind == COMPARISON:
        return _sample_comparison(world, rng, hops)
    return _sample_arithmetic(world, rng, hops)


def _sample_bridge(world: World, rng: random.Random, hops: int) -> Program | None:
    start_type, relations = rng.choice(_paths(hops))
    start = rng.choice(world.of_type(start_type))
    holders = walk(world, start, relations)
    answer = world.target(holders[-1], relations[-1])
    if not _distinct([*holders, *([answer] if answer else [])]):
        return None
    return Program(BRIDGE, LOOKUP, (Chain(_ref(start), relations),))


def _chain_lengths(rng: random.Random, hops: int, shared_start: bool) -> tuple[int, int]:
    """Relations per chain so that the two chains read ``hops`` documents in all."""
    total = hops + 1 if shared_start else hops
    length_a = rng.randint(max(1, total - MAX_CHAIN), min(MAX_CHAIN, total - 1))
    return length_a, total - length_a


def _feasible(final: str, length: int) -> bool:
    return bool(_paths(length, frozenset({final})))


def _two_chains(
    world: World,
    rng: random.Random,
    lengths: tuple[int, int],
    finals: tuple[str, str],
    shared_start: bool,
) -> tuple[tuple[Chain, Chain], list[int]] | None:
    """Two numeric chains reading ``sum(lengths)`` distinct documents (one less if they share
    their start), and their values."""
    options_a = _paths(lengths[0], frozenset({finals[0]}))
    options_b = _paths(lengths[1], frozenset({finals[1]}))
    if not options_a:
        return None
    start_a_type, relations_a = rng.choice(options_a)
    if shared_start:
        options_b = tuple(p for p in options_b if p[0] == start_a_type and p[1] != relations_a)
    if not options_b:
        return None
    start_b_type, relations_b = rng.choice(options_b)
    start_a = rng.choice(world.of_type(start_a_type))
    start_b = start_a if shared_start else rng.choice(world.of_type(start_b_type))
    holders_a = walk(world, start_a, relations_a)
    holders_b = walk(world, start_b, relations_b)
    needed = holders_a + (holders_b[1:] if shared_start else holders_b)
    if not _distinct(needed):
        return None
    values = [int(holders_a[-1].attributes[finals[0]]), int(holders_b[-1].attributes[finals[1]])]
    chains = (Chain(_ref(start_a), relations_a), Chain(_ref(start_b), relations_b))
    return chains, values


def _sample_comparison(world: World, rng: random.Random, hops: int) -> Program | None:
    lengths = _chain_lengths(rng, hops, shared_start=False)
    relations = [r for r in _COMPARABLE if all(_feasible(r, n) for n in lengths)]
    relation = rng.choice(relations)
    drawn = _two_chains(world, rng, lengths, (relation, relation), shared_start=False)
    if drawn is None or drawn[1][0] == drawn[1][1]:
        return None
    operation = rng.choice(ph.COMPARISON_OPERATIONS.get(relation, ("earlier", "later")))
    return Program(COMPARISON, operation, drawn[0])


def _sample_arithmetic(world: World, rng: random.Random, hops: int) -> Program | None:
    shared_start = rng.random() < 0.35
    lengths = _chain_lengths(rng, hops, shared_start)
    if rng.random() < 0.3:
        finals = ("population", "population")
        operation = rng.choice((DIFFERENCE, SUM))
    else:
        finals = (
            rng.choice([r for r in _YEAR_RELATIONS if _feasible(r, lengths[0])]),
            rng.choice([r for r in _YEAR_RELATIONS if _feasible(r, lengths[1])]),
        )
        operation = DIFFERENCE
    drawn = _two_chains(world, rng, lengths, finals, shared_start)
    if drawn is None or drawn[1][0] == drawn[1][1]:
        return None
    chains, values = drawn
    if operation == DIFFERENCE and values[0] < values[1]:
        chains = (chains[1], chains[0])
    return Program(ARITHMETIC, operation, chains)
