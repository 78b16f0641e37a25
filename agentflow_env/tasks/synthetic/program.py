"""Question programs: what a question asks, as data, and how to evaluate it over a fact table.

The same evaluator computes gold answers (over the world's tables) and solver answers (over
facts read from retrieved text), so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentflow_env.tasks.synthetic.schema import is_entity_kind, value_kind

BRIDGE = "bridge"
COMPARISON = "comparison"
ARITHMETIC = "arithmetic"
KINDS: tuple[str, ...] = (BRIDGE, COMPARISON, ARITHMETIC)

LOOKUP = "lookup"
MIN_OPERATIONS = frozenset({"earlier", "smaller"})
MAX_OPERATIONS = frozenset({"later", "larger"})
DIFFERENCE = "difference"
SUM = "sum"
_SYMMETRIC = MIN_OPERATIONS | MAX_OPERATIONS | {SUM}

# (entity name, entity type) -> relation -> value text
FactTable = Mapping[tuple[str, str], Mapping[str, str]]


@dataclass(frozen=True)
class EntityRef:
    name: str
    type: str


@dataclass(frozen=True)
class Chain:
    """Start at an entity and follow relations; the last relation gives the value."""

    start: EntityRef
    relations: tuple[str, ...]


@dataclass(frozen=True)
class Program:
    """``kind`` is bridge/comparison/arithmetic; ``operation`` says how chain values combine."""

    kind: str
    operation: str
    chains: tuple[Chain, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "operation": self.operation,
            "chains": [
                {
                    "start": {"name": c.start.name, "type": c.start.type},
                    "relations": list(c.relations),
                }
                for c in self.chains
            ],
        }

    def key(self) -> str:
        """Canonical text of the program (operand order ignored where it does not matter)."""
        data = self.to_dict()
        if self.operation in _SYMMETRIC:
            data["chains"] = sorted(data["chains"], key=lambda c: json.dumps(c, sort_keys=True))
        return json.dumps(data, sort_keys=True)

    def digest(self) -> str:
        return hashlib.sha256(self.key().encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Outcome:
    answer: str
    expression: str | None = None
    """For arithmetic: the calculation, e.g. ``"1990 - 1975"``."""
    value: float | None = None


def follow(chain: Chain, table: FactTable) -> tuple[EntityRef, str] | None:
    """The entity holding the chain's last relation and that relation's value, if all known."""
    current = chain.start
    for i, relation in enumerate(chain.relations):
        value = table.get((current.name, current.type), {}).get(relation)
        if value is None:
            return None
        if i == len(chain.relations) - 1:
            return current, value
        kind = value_kind(current.type, relation)
        if kind is None or not is_entity_kind(kind):
            return None
        current = EntityRef(value, kind)
    return None


def evaluate(program: Program, table: FactTable) -> Outcome | None:
    """The program's answer from the facts in ``table``, or ``None`` if a fact is missing."""
    results = [follow(chain, table) for chain in program.chains]
    if any(r is None for r in results):
        return None
    found = [r for r in results if r is not None]
    if program.operation == LOOKUP:
        return Outcome(found[0][1])
    try:
        numbers = [int(value) for _, value in found]
    except ValueError:
        return None
    if program.operation in MIN_OPERATIONS | MAX_OPERATIONS:
        if len(set(numbers)) != len(numbers):
            return None
        pick = min if program.operation in MIN_OPERATIONS else max
        best = pick(range(len(numbers)), key=lambda i: numbers[i])
        return Outcome(found[best][0].name)
    if program.operation == DIFFERENCE:
        a, b = numbers
        return Outcome(str(a - b), f"{a} - {b}", float(a - b))
    if program.operation == SUM:
        total = sum(numbers)
        return Outcome(str(total), " + ".join(str(n) for n in numbers), float(total))
    raise ValueError(f"unknown operation {program.operation!r}")
