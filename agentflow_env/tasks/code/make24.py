"""Make-24 puzzles: a safe exact checker, a brute-force solver, and the tasks built on them.

An answer is an arithmetic expression over the given numbers, each used exactly once, with only
binary ``+ - * /`` and parentheses, whose exact (rational) value is the target. Expressions are
parsed with ``ast`` and evaluated with ``Fraction``: nothing is ever ``eval``-ed.

The checker (the reward) evaluates the answer; the rule solver does not. It stops at the first
tool call that submits a well-formed expression over exactly the puzzle's numbers (a Calculator
expression, or the last line a Python program printed) and answers with it, whatever its value,
so a planner gets one scored expression per episode.
"""

from __future__ import annotations

import ast
import functools
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from agentflow_env.tasks.base import Evidence, PlanStep, Task
from agentflow_env.tasks.code.evidence import CALCULATOR_TOOL, PYTHON_TOOL

MAKE24 = "make24"
TARGET = 24
CARD_RANGE = (1, 13)
MAX_ANSWER_CHARS = 200

_OPERATIONS: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_SYMBOLS = str.maketrans({"×": "*", "·": "*", "∗": "*", "÷": "/", "−": "-", "–": "-"})
_CLAIMED_VALUE = re.compile(r"=\s*-?\d+(?:\.\d+)?\s*$")
_QUESTIONS = (
    "Using each of the numbers {numbers} exactly once, with + - * / and parentheses, "
    "write an expression equal to {target}.",
    "Combine the numbers {numbers}, each exactly once, using only + - * / and parentheses, "
    "into an expression whose value is {target}.",
)


class InvalidExpression(ValueError):
    """The text is not an allowed arithmetic expression over the puzzle's numbers."""


def parse_expression(text: str) -> ast.expr:
    """The expression tree of ``text``; only integer literals and binary + - * / are allowed.

    Tolerates surrounding backticks or quotes, a trailing period, Unicode operator signs and a
    trailing claimed value (``... = 24``), which is ignored: the value is always recomputed.
    """
    cleaned = text.strip().strip("`'\"").strip().rstrip(".").translate(_SYMBOLS)
    cleaned = _CLAIMED_VALUE.sub("", cleaned).strip()
    if not cleaned:
        raise InvalidExpression("the expression is empty")
    if len(cleaned) > MAX_ANSWER_CHARS:
        raise InvalidExpression(f"the expression is longer than {MAX_ANSWER_CHARS} characters")
    try:
        tree = ast.parse(cleaned, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise InvalidExpression("not a valid arithmetic expression") from None
    _check_nodes(tree, cleaned)
    return tree


def _check_nodes(node: ast.AST, source: str) -> None:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATIONS:
        _check_nodes(node.left, source)
        _check_nodes(node.right, source)
    elif not (isinstance(node, ast.Constant) and type(node.value) is int):
        raise InvalidExpression(
            f"only integers and binary + - * / are allowed, not {type(node).__name__}"
        )
    elif not (ast.get_source_segment(source, node) or "").isdecimal():  # no 0x18, 2_4
        raise InvalidExpression("numbers must be written in plain decimal digits")


def literals(tree: ast.expr) -> list[int]:
    """The integer literals of a checked expression tree, left to right."""
    if isinstance(tree, ast.BinOp):
        return literals(tree.left) + literals(tree.right)
    assert isinstance(tree, ast.Constant) and isinstance(tree.value, int)
    return [tree.value]


def evaluate(tree: ast.expr) -> Fraction:
    """The exact value of a checked expression tree; raises ``InvalidExpression`` on x / 0."""
    if isinstance(tree, ast.Constant):
        assert isinstance(tree.value, int)
        return Fraction(tree.value)
    assert isinstance(tree, ast.BinOp)
    left, right = evaluate(tree.left), evaluate(tree.right)
    if isinstance(tree.op, ast.Div) and right == 0:
        raise InvalidExpression("division by zero")
    return _OPERATIONS[type(tree.op)](left, right)


def submitted_expression(text: str, numbers: Sequence[int]) -> str | None:
    """The canonical form of ``text`` if it is an allowed expression using each of ``numbers``
    exactly once, else ``None``. Its value is not computed: this says what was submitted, not
    whether it is right."""
    try:
        tree = parse_expression(text)
    except InvalidExpression:
        return None
    if Counter(literals(tree)) != Counter(numbers):
        return None
    return ast.unparse(tree)


def verified_expression(text: str, numbers: Sequence[int], target: int = TARGET) -> str | None:
    """The canonical form of ``text`` if it solves the puzzle, else ``None``."""
    try:
        tree = parse_expression(text)
        if Counter(literals(tree)) != Counter(numbers) or evaluate(tree) != target:
            return None
    except InvalidExpression:
        return None
    return ast.unparse(tree)


@dataclass(frozen=True)
class Make24Checker:
    """``checker(answer)`` is True when the answer solves the puzzle (any valid expression).

    Set as ``Task.checker`` for scoring, since exact match cannot list
    every valid expression.
    """

    numbers: tuple[int, ...]
    target: int = TARGET

    def __call__(self, answer: str | None) -> bool:
        return (
            answer is not None
            and verified_expression(answer, self.numbers, self.target) is not None
        )


@dataclass(frozen=True)
class Make24Solver:
    """Answers with the latest expression a successful tool call submitted, never evaluating it.

    A call submits the expression it carries when that expression uses each of the puzzle's
    numbers exactly once with only ``+ - * /`` and parentheses: a Calculator call its
    ``expression`` argument, a Python call the last non-empty line it printed (optionally
    ``... = 24``; the claimed value is ignored). Partial expressions (``8 * 3``) submit nothing.
    The verifier stops at the first submission, so it is the planner's one scored answer; only
    the reward (``Make24Checker``) says whether its value is the target.
    """

    numbers: tuple[int, ...]

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        found = None
        for item in evidence:
            candidate = self._candidate(item)
            if candidate is not None:
                found = submitted_expression(candidate, self.numbers) or found
        return found

    @staticmethod
    def _candidate(item: Evidence) -> str | None:
        if not item.ok:
            return None
        if item.tool == CALCULATOR_TOOL:
            return str(item.arguments.get("expression", ""))
        if item.tool == PYTHON_TOOL:
            lines = [line for line in item.output.splitlines() if line.strip()]
            return lines[-1] if lines else None
        return None


# -- brute force ------------------------------------------------------------------------------
def find_solution(numbers: Sequence[int], target: int = TARGET) -> str | None:
    """A short canonical expression over ``numbers`` equal to ``target``, or ``None``."""
    goal, best = Fraction(target), None
    if len(numbers) == 1:
        return str(numbers[0]) if numbers[0] == target else None
    for left, right in _splits(tuple(sorted(numbers))):
        for a, x in _reachable(left).items():
            for b, y in _reachable(right).items():
                for value, text in _combinations(a, x, b, y):
                    if value == goal and (best is None or len(text) < len(best)):
                        best = text
    return None if best is None else ast.unparse(ast.parse(best, mode="eval").body)


def _splits(numbers: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every way to cut ``numbers`` into two non-empty parts (each unordered cut once)."""
    last, cuts = len(numbers) - 1, []
    for mask in range(1, 1 << last):  # the last number is always on the right
        left = tuple(n for i, n in enumerate(numbers[:last]) if mask >> i & 1)
        right = tuple(n for i, n in enumerate(numbers) if i == last or not mask >> i & 1)
        cuts.append((left, right))
    return cuts


@functools.lru_cache(maxsize=8192)
def _reachable(numbers: tuple[int, ...]) -> dict[Fraction, str]:
    """Every value the sorted ``numbers`` can make, each with its shortest expression found.

    Every expression splits into two sub-multisets at its last operation, so combining the
    values of every split is exhaustive. Callers must not mutate the (cached) result.
    """
    if len(numbers) == 1:
        return {Fraction(numbers[0]): str(numbers[0])}
    values: dict[Fraction, str] = {}
    for left, right in _splits(numbers):
        for a, x in _reachable(left).items():
            for b, y in _reachable(right).items():
                for value, text in _combinations(a, x, b, y):
                    if value not in values or len(text) < len(values[value]):
                        values[value] = text
    return values


def _combinations(a: Fraction, x: str, b: Fraction, y: str) -> list[tuple[Fraction, str]]:
    combined = [(a + b, f"({x} + {y})"), (a * b, f"({x} * {y})")]
    combined += [(a - b, f"({x} - {y})"), (b - a, f"({y} - {x})")]
    if b != 0:
        combined.append((a / b, f"({x} / {y})"))
    if a != 0:
        combined.append((b / a, f"({y} / {x})"))
    return combined


# -- tasks ------------------------------------------------------------------------------------
def puzzle_key(numbers: Sequence[int]) -> str:
    """What the train/test split hashes: the multiset of numbers (order does not matter)."""
    return f"{MAKE24}:{','.join(str(n) for n in sorted(numbers))}"


def draw_numbers(rng: random.Random, count: int = 4) -> tuple[int, ...]:
    """Random cards until a solvable hand comes up (most hands are)."""
    while True:
        numbers = tuple(rng.randint(*CARD_RANGE) for _ in range(count))
        if find_solution(numbers) is not None:
            return numbers


def build_make24_task(numbers: tuple[int, ...], rng: random.Random, split: str) -> Task:
    """The puzzle for ``numbers``; the gold plan checks the simplest solution with Calculator."""
    solution = find_solution(numbers)
    if solution is None:
        raise ValueError(f"{numbers} cannot make {TARGET}")
    shown = ", ".join(str(n) for n in numbers)
    question = rng.choice(_QUESTIONS).format(numbers=shown, target=TARGET)
    step = PlanStep(
        CALCULATOR_TOOL,
        f"Check that {solution} uses each number once and equals {TARGET}.",
        solution,
        "A candidate expression must be evaluated to confirm its value.",
    )
    return Task(
        task_id=f"code-{MAKE24}-{'-'.join(str(n) for n in numbers)}",
        question=question,
        gold_answers=(solution,),
        kind=MAKE24,
        hops=1,
        split=split,
        sub_questions=(f"Which expression over {shown} has the value {TARGET}?",),
        constraints=(
            f"Use each of the numbers {shown} exactly once.",
            "Use only + - * / and parentheses.",
            "Answer with the expression.",
        ),
        gold_plan=(step,),
        solver=Make24Solver(numbers),
        checker=Make24Checker(numbers),
        metadata={
            "numbers": numbers,
            "target": TARGET,
            "task_key": puzzle_key(numbers),
        },
    )
