"""A config field and its checks: ``setting()`` (a field with its help, section and bounds),
checking a value against the field's type, and the JSON form of a value."""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from agentflow_env.envs.config.choices import SECTIONS


class UnknownSettingError(ValueError):
    """A setting the variant does not have (or would ignore); the message lists its settings."""


def setting(
    default: Any,
    *,
    help: str,
    section: str,
    none_means: str | None = None,
    minimum: float | None = None,
    check: Callable[[Any], None] | None = None,
    json_form: str | None = None,
    choices: Callable[[], Sequence[str]] | None = None,
) -> Any:
    """A config field: its default and ``metadata``.

    ``help`` is the one-line help (the command line shows it); ``section`` one of ``SECTIONS``;
    ``none_means`` what ``None`` stands for (shown as the default, and in messages); ``minimum``
    an inclusive lower bound for numbers; ``check`` a validator run before the type check
    (raising ``ValueError``); ``json_form`` how the value is written in JSON, when its type does
    not say it; ``choices`` the values a command line offers, when they are open to additions (a
    registry's names, read when the options are made; ``check`` holds the value to them).
    """
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {list(SECTIONS)}, got {section!r}")
    metadata: dict[str, Any] = {"help": help, "section": section}
    for key, value in (
        ("none_means", none_means),
        ("minimum", minimum),
        ("check", check),
        ("json_form", json_form),
        ("choices", choices),
    ):
        if value is not None:
            metadata[key] = value
    return field(default=default, metadata=metadata)


# -- checking a value against a field's type ---------------------------------------------------
@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


@functools.cache
def field_defaults(cls: type) -> dict[str, Any]:
    return {item.name: item.default for item in dataclasses.fields(cls)}


def equals_default(value: Any, default: Any) -> bool:
    if default is None:
        return value is None
    return bool(value is default or value == default)


def union_members(hint: Any) -> tuple[Any, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return (hint,)


def is_sequence(hint: Any) -> bool:
    return get_origin(hint) in (Sequence, list, tuple)


def is_literal(hint: Any) -> bool:
    return get_origin(hint) is Literal


def _matches(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin = get_origin(hint)
    if origin is Literal:
        return any(type(value) is type(choice) and value == choice for choice in get_args(hint))
    if origin in (Union, types.UnionType):
        return any(_matches(value, member) for member in get_args(hint))
    if is_sequence(hint):
        (item,) = get_args(hint)[:1] or (Any,)
        return isinstance(value, list | tuple) and all(_matches(v, item) for v in value)
    if origin is Mapping:
        return isinstance(value, Mapping)
    if origin is os.PathLike:
        return isinstance(value, os.PathLike)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if getattr(hint, "_is_protocol", False) and not getattr(hint, "_is_runtime_protocol", False):
        return True  # a protocol isinstance cannot check
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "None"
    if is_literal(hint):
        return f"one of {list(get_args(hint))}"
    members = union_members(hint)
    if len(members) > 1:
        parts = [_describe(member) for member in members]
        return ", ".join(parts[:-1]) + " or " + parts[-1]
    if is_sequence(hint):
        return f"a list of {_describe(get_args(hint)[0])} items"
    names = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    if get_origin(hint) is Mapping:
        return "a mapping"
    if get_origin(hint) is os.PathLike:
        return "a path"
    return f"a {getattr(hint, '__name__', str(hint))}"


def check_field(item: dataclasses.Field, hint: Any, value: Any) -> Any:
    """``value`` checked against the field's type, choices and bounds; lists become tuples."""
    name, meta = item.name, item.metadata
    check = meta.get("check")
    if check is not None:
        check(value)
    members = union_members(hint)
    optional = type(None) in members
    sequences = [m for m in members if is_sequence(m)]
    if sequences and isinstance(value, list):
        value = tuple(value)
    one_or_many = [get_args(s)[0] for s in sequences if get_args(s)[0] in members]
    if one_or_many and is_literal(one_or_many[0]) and value is not None:
        _check_choices(name, value, get_args(one_or_many[0]))
    if not _matches(value, hint):
        literals = [m for m in members if is_literal(m)]
        if literals and len(literals) == len(members) - optional:
            choices = [c for m in literals for c in get_args(m)]
            none_means = meta.get("none_means")
            alternative = (f" (or None: {none_means})" if none_means else " (or None)") * optional
            raise ValueError(f"{name} must be one of {choices}{alternative}, got {value!r:.80}")
        raise ValueError(f"{name} must be {_describe(hint)}, got {value!r:.80}")
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        minimum = meta.get("minimum")
        if minimum is not None and value < minimum:
            raise ValueError(f"{name} must be >= {minimum}{' or None' * optional}, got {value!r}")
    return value


def _check_choices(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """One choice or a list of them: unknown ones, or none at all, are named."""
    values = [value] if isinstance(value, str) else list(value)
    unknown = [v for v in values if v not in choices]
    if unknown or not values:
        found = f"unknown {name} {unknown}" if unknown else f"no {name}"
        raise ValueError(f"{found}; expected some of {list(choices)}")


class NoJSONForm(Exception):
    """The value (named in the message) has no JSON form."""


def json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: json_value(v) for k, v in value.items()}
    raise NoJSONForm(f"a {type(value).__name__} object")
