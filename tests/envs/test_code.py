"""AgentFlow-Code-v0 tasks: make-24 checker and solver, fact arithmetic, program-shaped
questions, splits, and expert/random planners in the env."""

from __future__ import annotations

import collections
import itertools
import operator
import pickle
import random
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.retrieval.corpus import format_documents
from agentflow_env.rollout.agents.episodes import run_episode
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner
from agentflow_env.tasks.base import Evidence, Task
from agentflow_env.tasks.code import (
    COMPUTE,
    FACT_MATH,
    FAMILY_NAMES,
    KINDS,
    MAKE24,
    CodeTaskSource,
    ComputedAnswerSolver,
    FactMathSolver,
    Make24Checker,
    Make24Solver,
    find_solution,
    split_of,
    verified_expression,
)
from agentflow_env.tasks.code.source import fixed_world
from agentflow_env.tasks.synthetic.sampling import walk
from agentflow_env.tools.calculator import CalculatorTool
from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.search import SearchTool

# What a planner might write for any make-24 puzzle (run by the Python tool, not here).
PYTHON_SOLVER = """
from fractions import Fraction
from itertools import permutations

def combine(items):
    if len(items) == 1:
        yield items[0]
        return
    for i, j in permutations(range(len(items)), 2):
        (a, x), (b, y) = items[i], items[j]
        rest = [item for k, item in enumerate(items) if k not in (i, j)]
        options = [(a + b, f"({x} + {y})"), (a - b, f"({x} - {y})"), (a * b, f"({x} * {y})")]
        if b:
            options.append((a / b, f"({x} / {y})"))
        for option in options:
            yield from combine([*rest, option])

for value, text in combine([(Fraction(n), str(n)) for n in NUMBERS]):
    if value == 24:
        print(text)
        break
"""


def code_env(**kwargs: Any) -> AgentFlowEnv:
    tools = [PythonTool(), CalculatorTool(), SearchTool()]
    source_kwargs = {k: kwargs.pop(k) for k in ("kinds", "split", "fresh_world") if k in kwargs}
    return AgentFlowEnv(task_source=CodeTaskSource(**source_kwargs), tools=tools, **kwargs)


def evidence(tool: str, output: str, ok: bool = True, **arguments: str) -> Evidence:
    return Evidence(tool, arguments, output, ok)


# -- the make-24 checker ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer",
    [
        "(3 - 1) * 8 + 8",
        "8 * (3 + 1) - 8",
        "((8 / 3) * (1 + 8))",
        "8*(1+8)/3",
        "`8 + 8 * (3 - 1)` ",
        "(8 ÷ 3) × (1 + 8) = 24",
    ],
)
def test_checker_accepts_valid_alternative_expressions(answer: str) -> None:
    assert Make24Checker((3, 8, 8, 1))(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "8 * 3 * 1 + 8 - 8",  # 8 used three times
        "(3 - 1) * 8 + 8 + 1 - 1",  # 1 used twice
        "3 * 8 * 1",  # an 8 missing
        "8 * 3 * 8 / 8",  # 1 missing
        "8 + 8 + 3 + 1",  # wrong value
        "(3 - 1) * 8 + 8 = 20 + 4",
        "24",
        "(3 - 1) * 8.0 + 8",  # not an integer literal
        "(3 - 1) * 0x8 + 8",  # not in decimal digits
        "8 - (-1 - 3) * 8 - 16",  # unary minus (and a new number)
        "(3 - 1) ** 3 * 8 - 8 + 1",  # power
        "8 * (3 + 1) // 1 - 8",  # floor division
        "8 / (8 - 8) + 3 * 1",  # division by zero
        "__import__('os').system('true')",
        "(lambda: 24)()",
        "(3 - 1) * 8 + 8 if True else 0",
        "[(3 - 1) * 8 + 8][0]",
        "str((3 - 1) * 8 + 8)",
        "print((3 - 1) * 8 + 8)",
        "",
        None,
        "(" * 300 + "8" + ")" * 300,
    ],
)
def test_checker_rejects_wrong_expressions(answer: str | None) -> None:
    assert not Make24Checker((3, 8, 8, 1))(answer)


def test_tasks_pickle_with_their_solver_and_checker() -> None:
    for kind in KINDS:
        task = _tasks(kind, 1)[0]
        copy = pickle.loads(pickle.dumps(task))
        assert copy == task and copy.solver == task.solver
        assert copy.checker == task.checker


def test_checker_is_exact_where_floats_are_not() -> None:
    assert 8 / (3 - 8 / 3) != 24  # floating point misses it...
    assert verified_expression("8/(3-8/3)", (3, 3, 8, 8)) == "8 / (3 - 8 / 3)"  # ...fractions not


def _independent_solvable(numbers: Sequence[int]) -> bool:
    ops = (operator.add, operator.sub, operator.mul, operator.truediv)

    def apply(op: Any, a: Fraction | None, b: Fraction | None) -> Fraction | None:
        if a is None or b is None or (op is operator.truediv and b == 0):
            return None
        return op(a, b)

    for (a, b, c, d), (x, y, z) in itertools.product(
        itertools.permutations([Fraction(n) for n in numbers]), itertools.product(ops, repeat=3)
    ):
        shapes = (
            apply(z, apply(y, apply(x, a, b), c), d),
            apply(z, apply(x, a, apply(y, b, c)), d),
            apply(y, apply(x, a, b), apply(z, c, d)),
            apply(x, a, apply(z, apply(y, b, c), d)),
            apply(x, a, apply(y, b, apply(z, c, d))),
        )
        if any(v == 24 for v in shapes):
            return True
    return False


def test_brute_force_agrees_with_an_independent_search() -> None:
    rng = random.Random(5)
    hands: list[tuple[int, ...]] = [(1, 1, 1, 1), (3, 3, 8, 8), (1, 5, 5, 5), (1, 1, 2, 7)]
    hands += [tuple(rng.randint(1, 13) for _ in range(4)) for _ in range(16)]
    for hand in hands:
        solution = find_solution(hand)
        assert (solution is not None) == _independent_solvable(hand), hand
        assert solution is None or verified_expression(solution, hand) == solution


def test_make24_solver_takes_one_submitted_expression_per_call_and_never_evaluates_it() -> None:
    solver = Make24Solver((3, 8, 8, 1))
    valid = "(3-1)*8 + 8"
    assert solver.solve([]) is None
    assert solver.solve([evidence("Search", valid, query=valid)]) is None
    assert solver.solve([evidence("Calculator", "24", ok=False, expression=valid)]) is None
    assert solver.solve([evidence("Calculator", "24", expression="8 + 8 + 8")]) is None  # numbers
    assert solver.solve([evidence("Calculator", "24", expression="8 * 3")]) is None  # partial
    assert solver.solve([evidence("Calculator", "24", expression=valid)]) == "(3 - 1) * 8 + 8"
    # A wrong value is still a submission: the verifier stops on it and the reward scores it 0.
    wrong = evidence("Calculator", "40", expression="(3 + 1) * 8 + 8")
    assert solver.solve([wrong]) == "(3 + 1) * 8 + 8"
    assert not Make24Checker((3, 8, 8, 1))(solver.solve([wrong]))
    printed = evidence("Python", "searching...\n((8 * (1 + 8)) / 3) = 24\n", code="...")
    assert solver.solve([printed]) == "8 * (1 + 8) / 3"
    # Only the last printed line counts: printing many candidates submits the last one.
    spray = evidence("Python", f"{valid}\n8 + 8 + 3 + 1\n", code="...")
    assert solver.solve([spray]) == "8 + 8 + 3 + 1"
    assert solver.solve([evidence("Python", valid, ok=False, code="...")]) is None


# -- compute and fact solvers -----------------------------------------------------------------
def test_computed_answer_solver_answers_a_computation_over_the_inputs_without_checking_it() -> None:
    solver = ComputedAnswerSolver((1_000_000,))
    code = "n = 1_000_000\n..."
    assert solver.solve([evidence("Python", "78,498\n", code=code)]) == "78498"
    assert solver.solve([evidence("Calculator", "78498", expression="1000000 // 12")]) == "78498"
    assert solver.solve([evidence("Python", "Count: 78498 primes", code=code)]) == "78498"
    assert solver.solve([evidence("Python", "78498 78499", code=code)]) == "78499"  # the last
    assert solver.solve([evidence("Python", "2.5", code=code)]) == "2.5"
    assert solver.solve([evidence("Python", "12.0", code=code)]) == "12"
    # Not a result: a failed call, a non-computing tool, no number printed.
    assert solver.solve([evidence("Python", "78498", ok=False, code=code)]) is None
    assert solver.solve([evidence("Search", "78498", query="primes below 1000000")]) is None
    assert solver.solve([evidence("Python", "(no output)", code=code)]) is None
    # Not about this task: the input does not write the question's numbers.
    assert solver.solve([evidence("Python", "78498", code="print(78498)")]) is None
    assert solver.solve([evidence("Calculator", "7", expression="3 + 4")]) is None


def test_computed_answer_solver_needs_every_input() -> None:
    solver = ComputedAnswerSolver((3, 5, 1000))
    assert solver.solve([evidence("Python", "1", code="range(1, 1000) if k % 3")]) is None
    both = "sum(k for k in range(1, 1_000) if k % 3 == 0 or k % 5 == 0)"
    assert solver.solve([evidence("Python", "233168", code=both)]) == "233168"


def _tasks(kind: str, count: int, split: str = "train", **kwargs: Any) -> list[Task]:
    source = CodeTaskSource(kinds=kind, split=split, **kwargs)
    return [source.sample(np.random.default_rng(seed)) for seed in range(count)]


def test_fact_solver_needs_every_document_and_a_computation_over_the_facts() -> None:
    world = fixed_world(0)
    for task in _tasks(FACT_MATH, 15):
        assert isinstance(task.solver, FactMathSolver) and task.metadata["world_seed"] == 0
        program = task.solver.program
        keys = [
            holder.key
            for chain in program.chains
            for holder in walk(
                world, world.find(chain.start.name, chain.start.type), chain.relations
            )
        ]
        found = [
            evidence("Search", format_documents([world.document(key)]), query=key) for key in keys
        ]
        answer = task.gold_answers[0]
        expression = task.gold_plan[-1].context  # the expert's calculation over the fact values
        right = evidence("Calculator", answer, expression=expression)
        wrong = evidence("Calculator", str(int(answer) + 1), expression=expression)
        unrelated = evidence("Calculator", answer, expression=answer)  # not over the facts
        assert task.solver.solve(found) is None
        assert task.solver.solve([*found, unrelated]) is None
        for missing in range(len(found)):
            assert task.solver.solve([*found[:missing], *found[missing + 1 :], right]) is None
        assert task.solver.solve([*found, right]) == answer
        # The printed value is never checked: a wrong result over the facts is the answer.
        assert task.solver.solve([*found, wrong]) == str(int(answer) + 1)
        python = evidence("Python", f"Answer: {answer}\n", code=f"print({expression})")
        assert task.solver.solve([*found, python]) == answer


# -- the source -------------------------------------------------------------------------------
def test_every_kind_and_family_comes_up_and_sampling_is_seeded() -> None:
    source = CodeTaskSource()
    tasks = [source.sample(np.random.default_rng(seed)) for seed in range(150)]
    assert {t.kind for t in tasks} == set(KINDS)
    assert {t.metadata["family"] for t in tasks if t.kind == COMPUTE} == set(FAMILY_NAMES)
    again = [source.sample(np.random.default_rng(seed)) for seed in range(150)]
    assert [t.task_id for t in tasks] == [t.task_id for t in again]
    assert [t.question for t in tasks] == [t.question for t in again]


@pytest.mark.parametrize("kind", KINDS)
def test_train_and_test_are_disjoint(kind: str) -> None:
    keys = {}
    for split in ("train", "test"):
        tasks = _tasks(kind, 60, split)
        assert all(t.split == split and split_of(t.metadata["task_key"]) == split for t in tasks)
        keys[split] = {t.metadata["task_key"] for t in tasks}
    assert keys["train"] and keys["test"] and not keys["train"] & keys["test"]


def test_fresh_worlds_are_new_and_split_by_seed_parity() -> None:
    train = _tasks(FACT_MATH, 10, fresh_world=True)
    test = _tasks(FACT_MATH, 10, "test", fresh_world=True)
    assert {t.metadata["world_seed"] % 2 for t in train} == {0}
    assert {t.metadata["world_seed"] % 2 for t in test} == {1}
    assert len({t.metadata["world_seed"] for t in train}) == 10


def test_source_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="kinds"):
        CodeTaskSource(kinds=["sudoku"])
    with pytest.raises(ValueError, match="split"):
        CodeTaskSource(split="validation")


def test_questions_and_sub_questions_do_not_leak_fact_values() -> None:
    for task in _tasks(FACT_MATH, 20):
        text = " ".join((task.question, *task.sub_questions, *task.constraints))
        assert task.gold_answers[0] not in text.split()
        assert not any(ch.isdigit() for ch in text)


# -- episodes ---------------------------------------------------------------------------------
def test_expert_solves_every_task_over_200_seeds() -> None:
    env = code_env()
    planner = ExpertPlanner(env)
    kinds: collections.Counter[str] = collections.Counter()
    for seed in range(200):
        record = run_episode(env, planner, seed=seed)
        task = env.task
        kinds[task.kind] += 1
        assert record.success and record.reward == 1.0, (task.question, record.memory)
        assert record.metrics["turns"] == len(task.gold_plan)  # no early STOP, no extra turn
        checker = task.checker
        assert checker is None or checker(record.answer)
    env.close()
    assert set(kinds) == set(KINDS) and min(kinds.values()) > 40


def test_expert_solves_test_split_and_fresh_worlds() -> None:
    for kwargs in ({"split": "test"}, {"kinds": FACT_MATH, "fresh_world": True}):
        env = code_env(**kwargs)
        planner = ExpertPlanner(env)
        for seed in range(15):
            assert run_episode(env, planner, seed=seed).success
        env.close()


def test_a_planner_written_brute_force_solves_make24() -> None:
    env = code_env(kinds=MAKE24)
    for seed in range(3):
        env.reset(seed=seed)
        numbers = env.task.metadata["numbers"]
        action = (
            "Justification: search all expressions.\n"
            f"Context: NUMBERS = {list(numbers)}\n{PYTHON_SOLVER}\n"
            "Sub-Goal: find an expression equal to 24.\nTool Name: Python"
        )
        _, _, terminated, _, info = env.step(action)
        assert terminated and info["end_reason"] != "max_turns"
        assert Make24Checker(numbers)(info["answer"])  # any valid expression, maybe not gold
    env.close()


def test_random_planner_rarely_succeeds() -> None:
    env = code_env(max_turns=4)
    planner = RandomPlanner(env, seed=0)
    successes = sum(run_episode(env, planner, seed=seed).success for seed in range(40))
    env.close()
    assert successes <= 2


def test_gym_make_builds_the_registered_configuration() -> None:
    env = gym.make("AgentFlow-Code-v0", kinds=COMPUTE, split="test").unwrapped
    assert env.tools.names == ("Python", "Calculator", "Search")
    env.reset(seed=1)
    assert env.task.kind == COMPUTE and env.task.split == "test"
    env.close()


def test_any_valid_make24_expression_earns_the_reward() -> None:
    import random

    from agentflow_env.envs.env import AgentFlowEnv
    from agentflow_env.tasks.code.make24 import build_make24_task
    from agentflow_env.workflow.actions import format_planner_action

    task = build_make24_task((1, 2, 3, 4), random.Random(0), "train")
    alternatives = [e for e in ("1*2*3*4", "(1+2+3)*4", "4*(3+2+1)") if e not in task.gold_answers]
    env = AgentFlowEnv(tasks=[task], tools=["Calculator"], max_turns=2)
    try:
        for expression in alternatives[:2]:
            env.reset(seed=0)
            action = format_planner_action(
                justification="j", context=expression, sub_goal="make 24", tool_name="Calculator"
            )
            _, reward, terminated, _, info = env.step(action)
            assert terminated and reward == 1.0 and info["success"], info
            assert info["answer"] not in task.gold_answers
        env.reset(seed=0)
        wrong = format_planner_action(
            justification="j", context="1+2+3+4", sub_goal="s", tool_name="Calculator"
        )
        _, reward, terminated, truncated, info = env.step(wrong)
        assert reward == 0.0 and not info.get("success", False)
    finally:
        env.close()


def test_code_env_is_registered_and_passes_the_checker() -> None:
    import warnings

    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    import agentflow_env  # noqa: F401

    env = gym.make("AgentFlow-Code-v0", kinds="compute", split="test")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    env.close()
