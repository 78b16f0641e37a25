"""Arithmetic over facts of the synthetic world: look numbers up with Search, then compute.

"What is the average population of A, the capital of B and C, rounded down?" needs one search
per document and then a Calculator or Python call. The rule solver reads the facts from the
retrieved text (never from the world's tables or the gold answer); once every fact is in memory
it stops at the first computation whose input writes all the fact values, and answers with what
that computation printed. It never combines the values itself, nor checks the printed result:
only the reward compares it with the gold answer.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from agentflow_env.tasks.base import Evidence, PlanStep, Task
from agentflow_env.tasks.code.evidence import (
    CALCULATOR_TOOL,
    PYTHON_TOOL,
    addressing_computation,
)
from agentflow_env.tasks.synthetic import phrasing as ph
from agentflow_env.tasks.synthetic.program import Chain, EntityRef, follow
from agentflow_env.tasks.synthetic.sampling import walk
from agentflow_env.tasks.synthetic.schema import (
    ALBUM,
    CITY,
    COUNTRY,
    FILM,
    NOVEL,
    ORGANISATION,
    PERSON,
)
from agentflow_env.tasks.synthetic.solver import SEARCH_TOOL, read_evidence
from agentflow_env.tasks.synthetic.world import Entity, World

FACT_MATH = "fact_math"
MEAN_POPULATION = "mean_population"
POPULATION_SHARE = "population_share"
YEAR_SPAN = "year_span"
OPERATIONS: tuple[str, ...] = (MEAN_POPULATION, POPULATION_SHARE, YEAR_SPAN)

Path = tuple[str, tuple[str, ...]]  # (start entity type, relations)
POPULATION_PATHS: tuple[Path, ...] = (
    (CITY, ("population",)),
    (CITY, ("population",)),  # listed twice: direct lookups are the common case
    (COUNTRY, ("capital", "population")),
    (PERSON, ("birthplace", "population")),
    (ORGANISATION, ("headquarters", "population")),
)
YEAR_PATHS: tuple[Path, ...] = (
    (PERSON, ("birth_year",)),
    (ORGANISATION, ("founding_year",)),
    (COUNTRY, ("independence_year",)),
    (FILM, ("release_year",)),
    (NOVEL, ("publication_year",)),
    (ALBUM, ("release_year",)),
)
_OPERANDS = {MEAN_POPULATION: 3, POPULATION_SHARE: 2, YEAR_SPAN: 3}
_QUESTIONS = {
    MEAN_POPULATION: (
        "What is the average population of {a}, {b} and {c}, rounded down to a whole number?",
        "On average, how many people live in {a}, {b} and {c}? Round down to a whole number.",
    ),
    POPULATION_SHARE: (
        "What percentage of the combined population of {a} and {b} lives in {a}? "
        "Round down to a whole percent.",
        "Of everyone living in {a} or {b}, what percentage lives in {a}, rounded down?",
    ),
    YEAR_SPAN: (
        "How many years separate the earliest and the latest of these events: {a}, {b} and {c}?",
        "How many years passed between the earliest and the latest of {a}, {b} and {c}?",
    ),
}
_FINAL_SUB_QUESTIONS = {
    MEAN_POPULATION: "What is the average of the three populations, rounded down?",
    POPULATION_SHARE: "What percentage of the two populations together is the first?",
    YEAR_SPAN: "How far apart are the earliest and the latest of the three years?",
}


@dataclass(frozen=True)
class FactProgram:
    """Chains to numbers in the world, and how to combine them."""

    operation: str
    chains: tuple[Chain, ...]

    def key(self) -> str:
        chains = [[c.start.name, c.start.type, list(c.relations)] for c in self.chains]
        return json.dumps({"operation": self.operation, "chains": chains}, sort_keys=True)

    def digest(self) -> str:
        return hashlib.sha256(self.key().encode("utf-8")).hexdigest()


def fact_key(world: World, program: FactProgram) -> str:
    """What the train/test split hashes in a fixed world: the world and the program."""
    return f"{FACT_MATH}:{world.seed}:{program.key()}"


def combine(operation: str, values: Sequence[int]) -> int:
    """The answer from the chain values (gold answers only; the solver never combines)."""
    if operation == MEAN_POPULATION:
        return sum(values) // len(values)
    if operation == POPULATION_SHARE:
        return 100 * values[0] // (values[0] + values[1])
    if operation == YEAR_SPAN:
        return max(values) - min(values)
    raise ValueError(f"unknown operation {operation!r}")


def expression(operation: str, values: Sequence[int]) -> str:
    """The calculation the expert asks a tool for (Calculator and Python syntax alike)."""
    listed = ", ".join(str(v) for v in values)
    if operation == MEAN_POPULATION:
        return f"({' + '.join(str(v) for v in values)}) // {len(values)}"
    if operation == POPULATION_SHARE:
        return f"100 * {values[0]} // ({values[0]} + {values[1]})"
    if operation == YEAR_SPAN:
        return f"max({listed}) - min({listed})"
    raise ValueError(f"unknown operation {operation!r}")


def chain_values(program: FactProgram, table: dict) -> list[int] | None:
    """The number each chain ends in, read from ``table``; ``None`` if a fact is missing."""
    values = []
    for chain in program.chains:
        found = follow(chain, table)
        if found is None:
            return None
        try:
            values.append(int(found[1]))
        except ValueError:
            return None
    return values


@dataclass(frozen=True)
class FactMathSolver:
    """Reads the facts from Search outputs, then answers with the first Python/Calculator result
    computed from them (a call whose input writes every fact value), right or wrong.

    Holds only the program (which entities and relations, and the operation's name); the values
    come from retrieved text, and the result is never compared with anything.
    """

    program: FactProgram

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        values = chain_values(self.program, read_evidence(evidence))
        if values is None:
            return None
        found = addressing_computation(evidence, values)
        return None if found is None else found.answer


# -- sampling ---------------------------------------------------------------------------------
def sample_fact_program(world: World, rng: random.Random) -> FactProgram | None:
    """A random well-posed program (every document distinct), or ``None`` if this draw failed."""
    operation = rng.choice(OPERATIONS)
    paths = YEAR_PATHS if operation == YEAR_SPAN else POPULATION_PATHS
    chains, needed = [], []
    for _ in range(_OPERANDS[operation]):
        start_type, relations = rng.choice(paths)
        start = rng.choice(world.of_type(start_type))
        needed += walk(world, start, relations)
        chains.append(Chain(EntityRef(start.name, start.type), relations))
    if len({e.key for e in needed}) != len(needed):
        return None
    program = FactProgram(operation, tuple(chains))
    values = chain_values(program, world.fact_table())
    if values is None or len(set(values)) != len(values):
        return None
    return program


def _chain_phrase(chain: Chain, rng: random.Random) -> str:
    text = ph.start_phrase(chain.start.type, chain.start.name, rng.randrange(2))
    for relation in chain.relations[:-1]:
        text = rng.choice(ph.RELATION_PHRASES[relation]).format(x=text)
    if chain.relations[-1] in ph.EVENT_NOUNS:
        text = ph.EVENT_NOUNS[chain.relations[-1]].format(x=text)
    return text


def _sub_questions(program: FactProgram) -> tuple[str, ...]:
    questions = []
    for chain in program.chains:
        subject = ph.start_phrase(chain.start.type, chain.start.name)
        for relation in chain.relations:
            questions.append(ph.capitalize(ph.FINAL_QUESTIONS[relation][0].format(x=subject)))
            subject = f"that {ph.ROLE_NOUNS.get(relation, 'one')}"
    questions.append(_FINAL_SUB_QUESTIONS[program.operation])
    return tuple(dict.fromkeys(questions))


def _gold_plan(world: World, program: FactProgram, rng: random.Random) -> tuple[PlanStep, ...]:
    steps: list[PlanStep] = []
    searched: set[str] = set()
    for chain in program.chains:
        start = world.find(chain.start.name, chain.start.type)
        holders = walk(world, start, chain.relations)
        for i, (holder, relation) in enumerate(zip(holders, chain.relations, strict=True)):
            if holder.key in searched:
                continue
            searched.add(holder.key)
            source = (holders[i - 1], chain.relations[i - 1]) if i else None
            steps.append(_search_step(holder, relation, source))
    values = chain_values(program, world.fact_table())
    assert values is not None
    calculation = expression(program.operation, values)
    tool, context = CALCULATOR_TOOL, calculation
    if rng.random() < 0.5:
        tool, context = PYTHON_TOOL, f"print({calculation})"
    steps.append(
        PlanStep(
            tool,
            "Combine the retrieved numbers as the question asks.",
            context,
            "All the numbers are in memory; the answer needs exact arithmetic.",
        )
    )
    return tuple(steps)


def _search_step(holder: Entity, relation: str, source: tuple[Entity, str] | None) -> PlanStep:
    """Search ``holder``'s document; ``source`` is the entity and relation that led to it."""
    shown = ph.display_name(holder.type, holder.name)
    if source is None:
        why = f"The question names {shown}."
    else:
        entity, via = source
        why = f"{shown} is {ph.relation_noun(via)} of {ph.display_name(entity.type, entity.name)}."
    return PlanStep(
        SEARCH_TOOL,
        f"Find {ph.relation_noun(relation)} of {shown}.",
        ph.search_query(holder.type, holder.name),
        ph.capitalize(why),
    )


def build_fact_task(world: World, program: FactProgram, rng: random.Random, split: str) -> Task:
    """The task for ``program`` in ``world``."""
    values = chain_values(program, world.fact_table())
    if values is None:
        raise ValueError(f"program has no answer in this world: {program.key()}")
    phrases = [_chain_phrase(c, rng) for c in program.chains]
    template = rng.choice(_QUESTIONS[program.operation])
    question = ph.capitalize(template.format(**dict(zip("abc", phrases, strict=False))))
    plan = _gold_plan(world, program, rng)
    return Task(
        task_id=f"code-{FACT_MATH}-{world.seed}-{program.digest()[:12]}",
        question=question,
        gold_answers=(str(combine(program.operation, values)),),
        corpus=world.corpus,
        kind=FACT_MATH,
        hops=sum(1 for step in plan if step.tool == SEARCH_TOOL),
        split=split,
        sub_questions=_sub_questions(program),
        constraints=("Answer with a whole number, in plain digits.",),
        gold_plan=plan,
        solver=FactMathSolver(program),
        metadata={
            "operation": program.operation,
            "program_key": program.key(),
            "task_key": fact_key(world, program),
            "world_seed": world.seed,
        },
    )
