"""Untrusted log values as safe text and HTML, and the small formatters the viewer's pages and
the eval plots share.

Everything read from a trajectory log (questions, actions, tool outputs, even ids and numbers)
may be anything: text holding ``<script>``, ``</pre>`` or quotes, lone surrogates, control
characters, or a value of an unexpected type. ``esc`` turns any value into HTML-escaped text
that is valid UTF-8 and cannot end the element it is placed in.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from agentflow_env.base.untrusted import repair_surrogates

__all__ = [
    "as_float",
    "as_int",
    "as_list",
    "as_mapping",
    "as_text",
    "esc",
    "fmt_bool",
    "fmt_number",
    "fmt_rate",
    "json_text",
    "shorten_text",
]

# C0 controls but tab, newline and carriage return; DEL; C1 controls.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _visible_control(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x20:
        return chr(0x2400 + code)  # the Unicode "control pictures": NUL -> U+2400, ...
    return "\u2421" if code == 0x7F else "\ufffd"


def as_text(value: Any) -> str:
    """``value`` as display text: strings as they are, ``None`` empty, numbers formatted,
    anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        text = fmt_number(value)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, indent=2, default=repr)
        except ValueError:  # a circular structure cannot come from JSON, but be safe
            text = repr(value)
    return _CONTROL.sub(_visible_control, repair_surrogates(text))


def json_text(value: Any) -> str:
    """``value`` as indented JSON (keys sorted), for arguments and nested diagnostics."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted
        return repr(value)


def esc(value: Any) -> str:
    """``value`` as HTML-escaped text, safe in element content and quoted attributes."""
    return html.escape(as_text(value), quote=True)


def shorten_text(value: Any, limit: int) -> str:
    """``as_text(value)`` on one line, cut to ``limit`` characters with an ellipsis."""
    text = " ".join(as_text(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def as_float(value: Any) -> float | None:
    """A finite number, or ``None`` (booleans, text and NaN are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def as_int(value: Any) -> int | None:
    number = as_float(value)
    return int(number) if number is not None and number == int(number) else None


def fmt_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return as_text(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def fmt_rate(value: Any) -> str:
    """A rate in [0, 1] as a percentage; empty for ``None``."""
    number = as_float(value)
    return "" if number is None else f"{100 * number:.0f}%"


def fmt_bool(value: Any) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return as_text(value)
