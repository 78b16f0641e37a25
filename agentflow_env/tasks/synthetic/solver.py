"""The answer solver the offline rule modules use: facts from retrieved text only."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentflow_env.retrieval.corpus import parse_documents
from agentflow_env.tasks.base import Evidence
from agentflow_env.tasks.synthetic.program import ARITHMETIC, Program, evaluate, follow
from agentflow_env.tasks.synthetic.reader import TYPE_RELATION, extract_facts, split_title
from agentflow_env.tasks.synthetic.schema import ENTITY_TYPES, SCHEMA

SEARCH_TOOL = "Search"
CALCULATOR_TOOL = "Calculator"


def read_evidence(evidence: Sequence[Evidence]) -> dict[tuple[str, str], dict[str, str]]:
    """Facts from every successful Search output, keyed by (entity name, entity type).

    Keying by type keeps a same-named distractor (``Vantoria`` the city vs. ``Vantoria (film)``)
    from lending its facts to the target.
    """
    table: dict[tuple[str, str], dict[str, str]] = {}
    for item in evidence:
        if not item.ok or item.tool != SEARCH_TOOL:
            continue
        for key, relations in _output_facts(item.output):
            table.setdefault(key, {}).update(relations)
    return table


_Relations = tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=1024)  # bounded: outputs can come from a remote retriever
def _output_facts(output: str) -> tuple[tuple[tuple[str, str], _Relations], ...]:
    """The facts of one Search output, document by document: ``((name, type), relations)``.

    Cached: each turn's solve reads every earlier output again (the rule verifier's, then the
    generalist's and the diagnostics'), and the same search gives the same output in every
    episode of a task.
    """
    found = []
    for title, text in parse_documents(output):
        facts = extract_facts(title, text)
        relations = {f.relation: f.value for f in facts if f.relation != TYPE_RELATION}
        entity_type = next((f.value for f in facts if f.relation == TYPE_RELATION), None)
        entity_type = entity_type or _infer_type(relations)
        if entity_type is None or not relations:
            continue
        found.append(((split_title(title)[0], entity_type), tuple(relations.items())))
    return tuple(found)


def _infer_type(relations: dict[str, str]) -> str | None:
    candidates = [t for t in ENTITY_TYPES if relations.keys() <= SCHEMA[t].keys()]
    return candidates[0] if len(candidates) == 1 else None


@dataclass(frozen=True)
class SyntheticSolver:
    """Answers one question program from evidence; holds only the program (cheap to pickle).

    Arithmetic answers come from the planner's own Calculator call: once the facts are read, the
    first successful Calculator call whose expression writes every operand is the answer,
    whatever it printed. The rule modules never do the arithmetic, and never tell a wrong
    result from a right one (a planner gets one scored answer, not one guess per turn).
    """

    program: Program

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        table = read_evidence(evidence)
        outcome = evaluate(self.program, table)
        if outcome is None:
            return None
        if self.program.kind != ARITHMETIC:
            return outcome.answer
        operands = set()
        for chain in self.program.chains:
            found = follow(chain, table)
            if found is not None:
                operands.add(found[1])
        for item in evidence:
            if item.ok and item.tool == CALCULATOR_TOOL and _writes(item.arguments, operands):
                return item.output.strip()
        return None


_NUMBER = re.compile(r"(?<![\w.])\d+")


def _writes(arguments: Mapping[str, Any], operands: set[str]) -> bool:
    """Whether a call's arguments spell every operand as a number."""
    written = set(_NUMBER.findall(" ".join(str(v) for v in arguments.values())))
    return bool(operands) and operands <= written
