"""Questions that are naturally answered by a short program: counting primes, Fibonacci numbers
modulo m, digit sums of big powers, and the like.

Each family draws its parameters from the rng, computes the gold answer here (at generation
time, privileged: it goes into ``gold_answers`` for the reward and nowhere else) and gives the
expert a Python program that prints it. The program and the answer function are written
independently, so the expert tests cross-check them.

The rule modules get a ``ComputedAnswerSolver`` that holds only the parameters (they are in the
question): the verifier stops at the first Python or Calculator call whose input writes them
and that printed a number, and the generalist answers with that number, right or wrong.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from agentflow_env.tasks.base import PlanStep, Task
from agentflow_env.tasks.code.evidence import PYTHON_TOOL, ComputedAnswerSolver

COMPUTE = "compute"
Params = dict[str, int]


@dataclass(frozen=True)
class Family:
    """One kind of computational question."""

    name: str
    draw: Callable[[random.Random], Params]
    question: str
    """``str.format`` template over the parameters."""
    answer: Callable[..., int]
    code: str
    """``str.format`` template of the expert's program (literal braces doubled)."""


def _prime_count(n: int) -> int:
    composite = [False] * n
    count = 0
    for k in range(2, n):
        if not composite[k]:
            count += 1
            for multiple in range(k * k, n, k):
                composite[multiple] = True
    return count


def _fibonacci_mod(k: int, m: int) -> int:
    def pair(i: int) -> tuple[int, int]:  # (F(i), F(i + 1)) mod m by fast doubling
        if i == 0:
            return 0, 1
        a, b = pair(i // 2)
        c, d = a * (2 * b - a) % m, (a * a + b * b) % m
        return (d, (c + d) % m) if i % 2 else (c, d)

    return pair(k)[0]


def _collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _divisor_count(n: int) -> int:
    count, p = 1, 2
    while p * p <= n:
        exponent = 0
        while n % p == 0:
            n //= p
            exponent += 1
        count *= exponent + 1
        p += 1
    return count * (2 if n > 1 else 1)


def _trailing_zeros(n: int) -> int:
    zeros, power = 0, 5
    while power <= n:
        zeros += n // power
        power *= 5
    return zeros


def _multiples_sum(n: int, a: int, b: int) -> int:
    def below(d: int) -> int:
        count = (n - 1) // d
        return d * count * (count + 1) // 2

    return below(a) + below(b) - below(a * b // math.gcd(a, b))


def _draw_multiples(rng: random.Random) -> Params:
    a, b = sorted(rng.sample(range(2, 14), 2))
    return {"n": rng.randint(100, 1_000_000), "a": a, "b": b}


FAMILIES: tuple[Family, ...] = (
    Family(
        "prime_count",
        lambda rng: {"n": rng.randint(1_000, 200_000)},
        "How many prime numbers are there below {n}?",
        _prime_count,
        "n = {n}\n"
        "sieve = bytearray([1]) * n\n"
        "sieve[0:2] = b'\\x00\\x00'\n"
        "for i in range(2, int(n ** 0.5) + 1):\n"
        "    if sieve[i]:\n"
        "        sieve[i * i :: i] = bytearray(len(range(i * i, n, i)))\n"
        "print(sum(sieve))",
    ),
    Family(
        "fibonacci_mod",
        lambda rng: {"k": rng.randint(30, 5_000), "m": rng.choice((1_000, 9_973, 1_000_007))},
        "What is F({k}) modulo {m}, where F(1) = F(2) = 1 and F(n) = F(n - 1) + F(n - 2)?",
        _fibonacci_mod,
        "a, b = 0, 1\nfor _ in range({k}):\n    a, b = b, (a + b) % {m}\nprint(a)",
    ),
    Family(
        "power_digit_sum",
        lambda rng: {"a": rng.randint(2, 9), "b": rng.randint(50, 600)},
        "What is the sum of the decimal digits of {a} to the power of {b}?",
        lambda a, b: sum(int(d) for d in str(a**b)),
        "print(sum(int(digit) for digit in str({a} ** {b})))",
    ),
    Family(
        "collatz_steps",
        lambda rng: {"n": rng.randint(10, 100_000)},
        "Starting from {n} and repeatedly replacing n by n / 2 if n is even or by 3n + 1 if it "
        "is odd, how many steps does it take to reach 1?",
        _collatz_steps,
        "n, steps = {n}, 0\n"
        "while n != 1:\n"
        "    n = 3 * n + 1 if n % 2 else n // 2\n"
        "    steps += 1\n"
        "print(steps)",
    ),
    Family(
        "divisor_count",
        lambda rng: {"n": rng.randint(1_000, 10_000_000)},
        "How many positive divisors does {n} have?",
        _divisor_count,
        "n = {n}\n"
        "count = 0\n"
        "d = 1\n"
        "while d * d <= n:\n"
        "    if n % d == 0:\n"
        "        count += 1 if d * d == n else 2\n"
        "    d += 1\n"
        "print(count)",
    ),
    Family(
        "factorial_trailing_zeros",
        lambda rng: {"n": rng.randint(100, 1_000_000)},
        "How many trailing zeros does {n} factorial ({n}!) have when written in decimal?",
        _trailing_zeros,
        "n, zeros = {n}, 0\nwhile n:\n    n //= 5\n    zeros += n\nprint(zeros)",
    ),
    Family(
        "multiples_sum",
        _draw_multiples,
        "What is the sum of all positive integers below {n} that are multiples of {a} or {b}?",
        _multiples_sum,
        "print(sum(k for k in range(1, {n}) if k % {a} == 0 or k % {b} == 0))",
    ),
)
FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)


def draw_compute(rng: random.Random) -> tuple[Family, Params]:
    family = rng.choice(FAMILIES)
    return family, family.draw(rng)


def compute_key(family: Family, params: Params) -> str:
    """What the train/test split hashes: the family and its parameters."""
    return f"{COMPUTE}:{family.name}:" + ",".join(f"{k}={params[k]}" for k in sorted(params))


def build_compute_task(family: Family, params: Params, split: str) -> Task:
    """The task for one family and parameter draw; the gold plan runs the family's program."""
    answer = family.answer(**params)
    step = PlanStep(
        PYTHON_TOOL,
        "Compute the answer with a short program and print it.",
        family.code.format(**params),
        "The answer needs exact computation that is too long to do by hand.",
    )
    name = "-".join([family.name, *(str(params[k]) for k in sorted(params))])
    return Task(
        task_id=f"code-{COMPUTE}-{name}",
        question=family.question.format(**params),
        gold_answers=(str(answer),),
        kind=COMPUTE,
        hops=1,
        split=split,
        sub_questions=("What does a program computing this print?",),
        constraints=("Answer with an integer, in plain digits.",),
        gold_plan=(step,),
        solver=ComputedAnswerSolver(tuple(params[k] for k in sorted(params))),
        metadata={
            "family": family.name,
            "params": dict(params),
            "task_key": compute_key(family, params),
        },
    )
