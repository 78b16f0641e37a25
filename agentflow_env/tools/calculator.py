"""A safe arithmetic calculator: an ``ast`` walk over a whitelist, never ``eval``.

Tolerances, in order: currency signs are dropped; ``×``/``·``/``x`` between numbers mean
multiply, ``÷`` divide, ``^`` power, ``−`` minus; whitespace is collapsed; a trailing ``=`` or
``?`` is dropped. Commas are thousands separators (``1,200``) only in expressions without
function calls; inside a call such as ``max(1,200)`` they separate arguments. Prose holding one
arithmetic expression ("compute 1990 - 1975 please") is reduced to that expression.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from agentflow_env.tools.base import Tool, ToolArgumentError, ToolCard, ToolContext, ToolResult

Number = int | float

MAX_INPUT_CHARS = 2000
MAX_EXPRESSION_CHARS = 500
MAX_DEPTH = 200
MAX_MAGNITUDE = 10**300
MAX_ROUND_DIGITS = 15


class CalculatorError(ValueError):
    """The expression cannot be evaluated; the message is shown to the planner."""


_FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int]] = {
    # name -> (function, min args, max args)
    "abs": (abs, 1, 1),
    "round": (round, 1, 2),
    "min": (min, 1, 32),
    "max": (max, 1, 32),
    "sqrt": (math.sqrt, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}

_FUNCTION_NAMES = "|".join(_FUNCTIONS)
_CALL = re.compile(rf"\b(?:{_FUNCTION_NAMES})\s*\(")
_CURRENCY = re.compile(r"[$€£¥]")
# "2x3", "2 x 3", "(1+2)x3" -> multiply; "0x1F" stays a hexadecimal literal.
_TIMES_WORD = re.compile(r"(?<=[\d.)])(?:(?<!\b0)[xX]|\s+[xX]\s+)(?=[\d.(])")
_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,]|\.\d*,)")
_EXPONENT = r"(?<=\d)[eE](?=[+-]?\d)"  # the "e" of 1e10 is part of a number, not a word
_MATH_SPAN = re.compile(rf"(?:\b(?:{_FUNCTION_NAMES})\b|{_EXPONENT}|[\d.+\-*/%()^,\s])+")
_NUMBER_WITH_LETTERS = re.compile(rf"{_EXPONENT}|\b0[xX][0-9a-fA-F]+\b")
_LETTER = re.compile(r"[^\W\d_]")
_CODE_MARKER = re.compile(r"[_\[\]{}'\"\\;@]|\)\s*\.|\b(?:lambda|import)\b|\bif\b.*\belse\b")
_OPERATOR_OR_CALL = re.compile(rf"[+\-*/%^]|\b(?:{_FUNCTION_NAMES})\b")


def evaluate_expression(text: str) -> tuple[Number, str]:
    """Evaluate ``text`` (an expression or prose holding one); return (value, normalized)."""
    if len(text) > MAX_INPUT_CHARS:
        raise CalculatorError(f"input is too long ({len(text)} chars; limit {MAX_INPUT_CHARS})")
    normalized = _normalize(text)
    if not normalized:
        raise CalculatorError("the expression is empty")
    try:
        return _evaluate_normalized(normalized), normalized
    except CalculatorError:
        # Prose has words (or an "= result") around the expression; code-like text is never
        # rescued, so "(1).__class__" or "lambda: 1" fail instead of evaluating to 1.
        if not _looks_like_prose(normalized):
            raise
        extracted = _extract_expression(normalized)
        if extracted is None:
            raise
    try:
        return _evaluate_normalized(extracted), extracted
    except CalculatorError as error:
        raise CalculatorError(
            f"{error} (in the expression '{extracted}' found in the text)"
        ) from None


def format_number(value: Number) -> str:
    """Integers as plain digits; floats to 6 decimals, trailing zeros stripped."""
    if isinstance(value, int):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1e15 or 0 < magnitude < 1e-6:
        return f"{value:.6g}"
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _normalize(text: str) -> str:
    text = _CURRENCY.sub("", text)
    text = text.replace("×", "*").replace("·", "*").replace("∗", "*")
    text = text.replace("÷", "/").replace("−", "-").replace("^", "**")
    text = " ".join(text.split())
    text = _TIMES_WORD.sub(" * ", text)
    text = text.rstrip(" =?")
    if not _CALL.search(text):
        text = _THOUSANDS.sub(lambda match: match.group(0).replace(",", ""), text)
    return text.strip()


def _looks_like_prose(text: str) -> bool:
    words = _LETTER.search(_NUMBER_WITH_LETTERS.sub("", text))
    return bool(words or "=" in text) and not _CODE_MARKER.search(text)


def _extract_expression(text: str) -> str | None:
    """The single arithmetic span in prose; ``None`` if there is none, raises if there are many."""
    candidates: list[str] = []
    for match in _MATH_SPAN.finditer(text):
        span = _trim_span(match.group(0))
        if not span or not re.search(r"\d", span):
            continue
        before = text[: match.start()].rstrip()
        if span[0] in "+-" and before and span[1:2] == " ":
            return None  # "a - 3": a binary operator applied to a word, not a signed number
        candidates.append(span)
    with_operators = [c for c in candidates if _OPERATOR_OR_CALL.search(c.lstrip("+-"))]
    if len(with_operators) > 1:
        shown = "; ".join(with_operators[:3])
        raise CalculatorError(f"found several expressions ({shown}); give one per call")
    if len(with_operators) == 1:
        chosen = with_operators[0]
    elif not with_operators and len(candidates) == 1:
        chosen = candidates[0]
    else:
        return None
    if chosen[-1] in "+-*/%^(":
        return None  # "3 + y": an operator applied to a word
    return chosen


def _trim_span(span: str) -> str:
    span = span.strip().strip(",").rstrip(".").strip()
    while span.count(")") > span.count("(") and span.startswith(")"):
        span = span[1:].lstrip()
    while span.count("(") > span.count(")") and span.endswith("("):
        span = span[:-1].rstrip()
    while span.count("(") > span.count(")") and span.startswith("("):
        span = span[1:].lstrip()
    while span.count(")") > span.count("(") and span.endswith(")"):
        span = span[:-1].rstrip()
    return span.strip().strip(",").strip()


def _evaluate_normalized(expression: str) -> Number:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"expression is too long ({len(expression)} chars; limit {MAX_EXPRESSION_CHARS})"
        )
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as error:
        raise CalculatorError(f"invalid expression: {error.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise CalculatorError("invalid expression: too complex to parse") from None
    try:
        value = _Evaluator().visit(tree.body, 0)
    except CalculatorError:
        raise
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("result is too large") from None
    except RecursionError:
        raise CalculatorError("expression is nested too deeply") from None
    except (ArithmeticError, ValueError, TypeError) as error:
        raise CalculatorError(f"cannot evaluate: {error}") from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


class _Evaluator:
    """Evaluates a whitelisted expression tree, checking magnitude after every step."""

    def visit(self, node: ast.AST, depth: int) -> Number:
        if depth > MAX_DEPTH:
            raise CalculatorError(f"expression is nested too deeply (limit {MAX_DEPTH})")
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise CalculatorError(f"unsupported literal {value!r}; only numbers are allowed")
            return _checked(value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left = self.visit(node.left, depth + 1)
            right = self.visit(node.right, depth + 1)
            if isinstance(node.op, ast.Pow):
                _check_power(left, right)
            return _checked(_BINARY[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _checked(_UNARY[type(node.op)](self.visit(node.operand, depth + 1)))
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        raise CalculatorError(_describe_unsupported(node))

    def _call(self, node: ast.Call, depth: int) -> Number:
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            called = f" '{node.func.id}'" if isinstance(node.func, ast.Name) else ""
            raise CalculatorError(f"unsupported function{called}; allowed: {', '.join(_FUNCTIONS)}")
        name = node.func.id
        function, low, high = _FUNCTIONS[name]
        if node.keywords:
            raise CalculatorError(f"{name}() takes no keyword arguments")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise CalculatorError(f"{name}() does not accept *arguments")
        if not low <= len(node.args) <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            raise CalculatorError(f"{name}() takes {expected} argument(s), got {len(node.args)}")
        args = [self.visit(arg, depth + 1) for arg in node.args]
        if name in ("min", "max"):
            return _checked(function(args))
        if name == "round" and len(args) == 2:
            digits = args[1]
            if not isinstance(digits, int) or abs(digits) > MAX_ROUND_DIGITS:
                raise CalculatorError(
                    f"round() digits must be an integer in -{MAX_ROUND_DIGITS}..{MAX_ROUND_DIGITS}"
                )
        if name == "sqrt" and args[0] < 0:
            raise CalculatorError("sqrt() of a negative number")
        return _checked(function(*args))


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse powers whose result would exceed the magnitude limit, before computing them."""
    if abs(base) <= 1 or exponent <= 0:
        return
    limit_log10 = math.log10(MAX_MAGNITUDE)
    if exponent * math.log10(abs(base)) > limit_log10:
        raise CalculatorError(f"power is too large (results are limited to 1e{int(limit_log10)})")


def _checked(value: Any) -> Number:
    if isinstance(value, complex):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise CalculatorError(f"unexpected result type {type(value).__name__}")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("result is too large (limit 1e300)")
    return value


def _describe_unsupported(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"unknown name '{node.id}'; only numbers and {', '.join(_FUNCTIONS)} are allowed"
    if isinstance(node, ast.Attribute):
        return "attribute access is not allowed"
    if isinstance(node, ast.Lambda):
        return "lambda is not allowed"
    if isinstance(node, ast.Tuple):
        return "commas are only allowed between function arguments"
    if isinstance(node, ast.BinOp | ast.BoolOp | ast.Compare | ast.UnaryOp):
        return "unsupported operator; allowed: + - * / // % ** and unary + -"
    return f"unsupported syntax ({type(node).__name__})"


class CalculatorTool(Tool):
    """Evaluates one arithmetic expression exactly (integers) or to 6 decimals (floats)."""

    card = ToolCard(
        name="Calculator",
        description=(
            "Evaluates one arithmetic expression and returns its value. Supports numbers, "
            "+ - * / // % ** (or ^), parentheses, and abs, round, min, max, sqrt, floor, ceil."
        ),
        input_schema={
            "expression": {
                "type": "string",
                "description": "the arithmetic expression, e.g. 1990 - 1975",
                "required": True,
            },
        },
        output_type="the value as plain digits (integers) or a decimal with up to 6 places",
        primary_argument="expression",
        demo_commands=(
            {"command": 'Calculator(expression="2024 - 1969")', "description": "years between"},
            {"command": 'Calculator(expression="round(15 / 4, 2)")', "description": "a ratio"},
        ),
        limitations=(
            "arithmetic on numbers only: no variables, units, dates or text",
            "one expression per call; put the numbers in, not the names of facts",
            "inside function calls commas separate arguments: write 1200, not 1,200",
        ),
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        try:
            expression = self.validate(arguments)["expression"]
        except ToolArgumentError as error:
            return ToolResult.failure(str(error))
        try:
            value, normalized = evaluate_expression(expression)
        except CalculatorError as error:
            return ToolResult.failure(f"Calculator: {error}")
        return ToolResult(
            ok=True,
            output=format_number(value),
            metadata={"value": value, "expression": normalized},
        )


__all__ = ["CalculatorError", "CalculatorTool", "evaluate_expression", "format_number"]
