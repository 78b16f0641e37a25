"""Turn question programs into ``Task`` objects: phrasing, sub-questions, gold plan, answers."""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentflow_env.tasks.base import PlanStep, Task
from agentflow_env.tasks.synthetic import phrasing as ph
from agentflow_env.tasks.synthetic.program import (
    ARITHMETIC,
    BRIDGE,
    COMPARISON,
    SUM,
    Chain,
    Program,
    evaluate,
)
from agentflow_env.tasks.synthetic.sampling import BUCKETS, sample_program, walk
from agentflow_env.tasks.synthetic.schema import (
    CREATOR_RELATION,
    NUMBER,
    PERSON,
    SCHEMA,
    WORK_YEAR_RELATION,
    YEAR,
)
from agentflow_env.tasks.synthetic.solver import CALCULATOR_TOOL, SEARCH_TOOL, SyntheticSolver
from agentflow_env.tasks.synthetic.world import Entity, World

TEST_FRACTION_PERCENT = 20


# -- phrasing ---------------------------------------------------------------------------------
def _chain_phrase(chain: Chain, rng: random.Random) -> str:
    """A noun phrase for the entity holding the chain's last relation."""
    text = ph.start_phrase(chain.start.type, chain.start.name, rng.randrange(2))
    for relation in chain.relations[:-1]:
        text = rng.choice(ph.RELATION_PHRASES[relation]).format(x=text)
    return text


def _chain_sub_questions(chain: Chain) -> list[str]:
    questions = []
    subject = ph.start_phrase(chain.start.type, chain.start.name)
    for relation in chain.relations:
        questions.append(ph.capitalize(ph.FINAL_QUESTIONS[relation][0].format(x=subject)))
        subject = f"that {ph.ROLE_NOUNS.get(relation, 'one')}"
    return questions


def _question_text(program: Program, rng: random.Random) -> tuple[str, int]:
    """The question and which phrasing was used."""
    chains = program.chains
    if program.kind == BRIDGE:
        templates = ph.FINAL_QUESTIONS[chains[0].relations[-1]]
        index = rng.randrange(len(templates))
        return ph.capitalize(templates[index].format(x=_chain_phrase(chains[0], rng))), index
    final = chains[0].relations[-1]
    a, b = _chain_phrase(chains[0], rng), _chain_phrase(chains[1], rng)
    if program.kind == COMPARISON:
        templates = ph.COMPARISON_QUESTIONS[(final, program.operation)]
        index = rng.randrange(len(templates))
        return templates[index].format(a=a, b=b), index
    if final == "population":
        pool = (
            ph.POPULATION_SUM_QUESTIONS
            if program.operation == SUM
            else ph.POPULATION_DIFFERENCE_QUESTIONS
        )
        index = rng.randrange(len(pool))
        return pool[index].format(a=a, b=b), index
    if _is_age_question(program) and rng.random() < 0.5:
        work = ph.start_phrase(chains[0].start.type, chains[0].start.name)
        text = ph.AGE_QUESTION.format(person=b, work=work, event=ph.AGE_EVENTS[final])
        return text, len(ph.YEAR_DIFFERENCE_QUESTIONS)
    final_b = chains[1].relations[-1]
    index = rng.randrange(len(ph.YEAR_DIFFERENCE_QUESTIONS))
    text = ph.YEAR_DIFFERENCE_QUESTIONS[index].format(
        noun_a=ph.EVENT_NOUNS[final].format(x=a),
        noun_b=ph.EVENT_NOUNS[final_b].format(x=b),
        clause_a=ph.EVENT_CLAUSES[final].format(x=a),
    )
    return text, index


def _is_age_question(program: Program) -> bool:
    """``How old was the director of the film W when it was released?``"""
    first, second = program.chains
    work_type = first.start.type
    return (
        first.start == second.start
        and work_type in WORK_YEAR_RELATION
        and first.relations == (WORK_YEAR_RELATION[work_type],)
        and second.relations == (CREATOR_RELATION[work_type], "birth_year")
    )


def _sub_questions(program: Program) -> tuple[str, ...]:
    questions = [q for chain in program.chains for q in _chain_sub_questions(chain)]
    if program.kind == COMPARISON:
        questions.append(ph.COMPARISON_SUB_QUESTIONS[program.operation])
    elif program.kind == ARITHMETIC:
        what = "sum" if program.operation == SUM else "difference"
        questions.append(f"What is the {what} of the two numbers?")
    return tuple(dict.fromkeys(questions))


# -- tasks ------------------------------------------------------------------------------------
def split_of(program: Program) -> str:
    """Train or test, from a stable hash of the program (not of its phrasing)."""
    return "test" if int(program.digest()[:8], 16) % 100 < TEST_FRACTION_PERCENT else "train"


def _gold_plan(world: World, program: Program, expression: str | None) -> tuple[PlanStep, ...]:
    needed: dict[str, list[str]] = {}
    reached_by: dict[str, tuple[Entity, str]] = {}
    for chain in program.chains:
        start = world.find(chain.start.name, chain.start.type)
        holders = walk(world, start, chain.relations)
        for i, (holder, relation) in enumerate(zip(holders, chain.relations, strict=True)):
            needed.setdefault(holder.key, [])
            if relation not in needed[holder.key]:
                needed[holder.key].append(relation)
            if i > 0:
                reached_by.setdefault(holder.key, (holders[i - 1], chain.relations[i - 1]))
    steps = []
    for key, relations in needed.items():
        entity = world.entity(key)
        shown = ph.display_name(entity.type, entity.name)
        wanted = " and ".join(ph.relation_noun(r) for r in relations)
        if key in reached_by:
            source, via = reached_by[key]
            why = f"{shown} is {ph.relation_noun(via)} of {ph.display_name(source.type, source.name)}."
        else:
            why = f"The question names {shown}."
        steps.append(
            PlanStep(
                SEARCH_TOOL,
                f"Find {wanted} of {shown}.",
                ph.search_query(entity.type, entity.name),
                ph.capitalize(why),
            )
        )
    if expression is not None:
        what = "sum" if program.operation == SUM else "difference"
        steps.append(
            PlanStep(
                CALCULATOR_TOOL,
                f"Compute the {what} of the retrieved numbers.",
                expression,
                f"The answer is the {what} of the numbers found.",
            )
        )
    return tuple(steps)


def _answer_type(world: World, program: Program) -> str:
    if program.kind == ARITHMETIC:
        return NUMBER
    holder_types = set()
    for chain in program.chains:
        start = world.find(chain.start.name, chain.start.type)
        holder_types.add(walk(world, start, chain.relations)[-1].type)
    if program.kind == COMPARISON:
        return holder_types.pop() if len(holder_types) == 1 else "name"
    return SCHEMA[holder_types.pop()][program.chains[0].relations[-1]]


def _constraints(program: Program, answer_type: str) -> tuple[str, ...]:
    if program.kind == ARITHMETIC:
        unit = "people" if program.chains[0].relations[-1] == "population" else "years"
        return (f"Answer with a number of {unit}, in plain digits.",)
    if answer_type == YEAR:
        return ("Answer with a year.",)
    if answer_type == NUMBER:
        return ("Answer with a number, in plain digits.",)
    if answer_type == "name":
        return ("Answer with a name.",)
    if program.kind == COMPARISON:
        return (
            f"Answer with the name of {ph.with_article(answer_type)}, one of the two compared.",
        )
    return (f"Answer with the name of {ph.with_article(answer_type)}.",)


def _aliases(world: World, answer: str, answer_type: str) -> tuple[str, ...]:
    aliases = [answer]
    if answer_type == PERSON and " " in answer:
        surname = answer.rsplit(" ", 1)[1]
        same = [p for p in world.of_type(PERSON) if p.name.rsplit(" ", 1)[1] == surname]
        if len(same) == 1:
            aliases.append(surname)
    return tuple(aliases)


def build_task(
    world: World, program: Program, rng: random.Random, split: str | None = None
) -> Task:
    """The ``Task`` for ``program`` in ``world``; ``split`` defaults to the program's hash split."""
    outcome = evaluate(program, world.fact_table())
    if outcome is None:
        raise ValueError(f"program has no answer in this world: {program.key()}")
    question, phrasing = _question_text(program, rng)
    answer_type = _answer_type(world, program)
    plan = _gold_plan(world, program, outcome.expression)
    hops = sum(1 for step in plan if step.tool == SEARCH_TOOL)
    digest = program.digest()
    return Task(
        task_id=f"synthetic-{world.seed}-{digest[:12]}",
        question=question,
        gold_answers=_aliases(world, outcome.answer, answer_type),
        corpus=world.corpus,
        kind=program.kind,
        hops=hops,
        split=split or split_of(program),
        sub_questions=_sub_questions(program),
        constraints=_constraints(program, answer_type),
        gold_plan=plan,
        solver=SyntheticSolver(program),
        metadata={
            "answer_type": answer_type,
            "program": program.to_dict(),
            "program_key": program.key(),
            "phrasing": phrasing,
            "world_seed": world.seed,
        },
    )


def generate_tasks(
    world: World,
    per_bucket: int = 100,
    kinds: Sequence[str] | None = None,
    hops: Sequence[int] | None = None,
) -> list[Task]:
    """Up to ``per_bucket`` distinct tasks per (kind, hops), deterministic for the world."""
    rng = random.Random(f"synthetic-tasks-{world.seed}")
    seen: set[str] = set()
    tasks = []
    for kind, bucket_hops in BUCKETS.items():
        if kinds is not None and kind not in kinds:
            continue
        for h in bucket_hops:
            if hops is not None and h not in hops:
                continue
            found = 0
            for _ in range(per_bucket * 30):
                if found >= per_bucket:
                    break
                program = sample_program(world, rng, kind, h)
                if program is None or program.key() in seen:
                    continue
                seen.add(program.key())
                tasks.append(build_task(world, program, rng))
                found += 1
    return tasks
