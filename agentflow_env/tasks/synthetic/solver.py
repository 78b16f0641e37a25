"""The answer solver the offline rule modules use: facts from retrieved text only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentflow_env.retrieval.corpus import parse_documents
from agentflow_env.tasks.base import Evidence
from agentflow_env.tasks.synthetic.program import ARITHMETIC, Program, evaluate
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
        for title, text in parse_documents(item.output):
            facts = extract_facts(title, text)
            relations = {f.relation: f.value for f in facts if f.relation != TYPE_RELATION}
            entity_type = next((f.value for f in facts if f.relation == TYPE_RELATION), None)
            entity_type = entity_type or _infer_type(relations)
            if entity_type is None or not relations:
                continue
            table.setdefault((split_title(title)[0], entity_type), {}).update(relations)
    return table


def _infer_type(relations: dict[str, str]) -> str | None:
    candidates = [t for t in ENTITY_TYPES if relations.keys() <= SCHEMA[t].keys()]
    return candidates[0] if len(candidates) == 1 else None


def calculator_values(evidence: Sequence[Evidence]) -> list[float]:
    """Numbers output by successful Calculator calls."""
    values = []
    for item in evidence:
        if item.ok and item.tool == CALCULATOR_TOOL:
            try:
                values.append(float(item.output.strip().replace(",", "")))
            except ValueError:
                continue
    return values


@dataclass(frozen=True)
class SyntheticSolver:
    """Answers one question program from evidence; holds only the program (cheap to pickle).

    Arithmetic answers also need a Calculator call that produced the right number: the rule
    modules never do arithmetic themselves, the planner has to ask for it.
    """

    program: Program

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        outcome = evaluate(self.program, read_evidence(evidence))
        if outcome is None:
            return None
        if self.program.kind == ARITHMETIC:
            target = outcome.value
            if target is None or not any(
                abs(v - target) < 1e-6 for v in calculator_values(evidence)
            ):
                return None
        return outcome.answer
