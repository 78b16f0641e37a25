"""Tool variants for ablations: a tool renamed, re-described, made flaky, cut short or slowed.

``ToolVariant`` wraps a built tool and delegates ``validate``, ``timeout_s``, ``stop_grace_s``
and ``run`` to it, changing only what its ``VariantOptions`` say. In an env's ``tools`` setting
the options sit beside the tool's own in a JSON object, valid for any tool::

    {"name": "Search", "rename": "Lookup", "description": "...", "failure_rate": 0.2,
     "max_output_chars": 300, "latency_s": 0.5}

Injected failures are reproducible without state on the tool (one tool serves many concurrent
episodes): whether a call fails is a hash of the episode seed (``ToolContext.seed``), the
original tool's name and the call's validated arguments, compared with ``failure_rate``. So the
same seed and calls give the same failures, a raised rate fails a superset of the calls, and a
repeated identical call in one episode gets the same outcome (a query that is down stays down
for the episode). An episode without a seed hashes its context's random ``episode_key``
instead: not reproducible across episodes, but the same within one, and a fork of the episode
(which keeps the key) fails exactly the calls the original fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentflow_env.tools.base import Tool, ToolArgumentError, ToolCard, ToolContext, ToolResult
from agentflow_env.tools.registry import canonical_tool_name

VARIANT_OPTIONS: tuple[str, ...] = (
    "rename",
    "description",
    "failure_rate",
    "max_output_chars",
    "latency_s",
)
"""The option keys any tool object may carry; ``build_tool`` takes them out before the factory."""


@dataclass(frozen=True)
class VariantOptions:
    """How a variant differs from its tool; the defaults change nothing.

    ``rename``: the name the planner sees and calls. ``description``: the card's description.
    ``failure_rate``: the probability in [0, 1] that a call fails (``kind="injected"``).
    ``max_output_chars``: outputs are cut to this many characters, saying how many were cut.
    ``latency_s``: seconds of sleep added to every call (inside the call's timeout).
    Bad values raise ``ValueError`` naming the option.
    """

    rename: str | None = None
    description: str | None = None
    failure_rate: float = 0.0
    max_output_chars: int | None = None
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.rename is not None:
            _check_rename(self.rename)
        if self.description is not None and not isinstance(self.description, str):
            raise ValueError(f"description must be a string, got {self.description!r:.80}")
        rate = _number("failure_rate", self.failure_rate)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"failure_rate must be between 0 and 1, got {self.failure_rate!r}")
        if self.max_output_chars is not None:
            cap = self.max_output_chars
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
                raise ValueError(f"max_output_chars must be an integer >= 0, got {cap!r:.80}")
        if _number("latency_s", self.latency_s) < 0:
            raise ValueError(f"latency_s must be a number >= 0, got {self.latency_s!r}")

    @property
    def changes_nothing(self) -> bool:
        return self == VariantOptions()


def _number(option: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{option} must be a finite number, got {value!r:.80}")
    return float(value)


def _check_rename(name: Any) -> None:
    if not isinstance(name, str):
        raise ValueError(f"rename must be a string (the tool's new name), got {name!r:.80}")
    if not canonical_tool_name(name):
        raise ValueError(f"rename must be a non-empty name with a letter or digit, got {name!r}")
    if name != name.strip() or any(not char.isprintable() for char in name):
        raise ValueError(
            f"rename must be one line without surrounding spaces or control characters, "
            f"got {name!r:.80}"
        )


def split_variant_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], VariantOptions]:
    """``options`` of a tool object split into the factory's and the variant's (checked)."""
    factory = {key: value for key, value in options.items() if key not in VARIANT_OPTIONS}
    variant = {key: options[key] for key in VARIANT_OPTIONS if key in options}
    return factory, VariantOptions(**variant)


def with_variant(tool: Tool, options: VariantOptions) -> Tool:
    """``tool`` itself when ``options`` change nothing, else a ``ToolVariant`` of it."""
    return tool if options.changes_nothing else ToolVariant(tool, options)


class ToolVariant(Tool):
    """``tool`` as ``options`` change it; everything they do not change is the tool's own.

    A renamed variant names itself, not the original, in its card's examples and in the errors
    it passes on (an argument error or a failed result starting with the original name), so a
    planner never sees the old name; outputs are passed on unchanged. A rename with the same
    ``canonical_tool_name`` as the original ("search_tool" for Search) still answers to it.
    """

    def __init__(self, tool: Tool, options: VariantOptions) -> None:
        self.tool = tool
        self.options = options
        card = tool.card
        if options.rename is not None:
            card = _renamed_card(card, options.rename)
        if options.description is not None:
            card = dataclasses.replace(card, description=options.description)
        self.card = card
        self.aliases = tool.aliases if options.rename is None else ()  # a rename hides old names

    @property
    def timeout_s(self) -> float:
        return self.tool.timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self.tool.timeout_s = value

    @property
    def stop_grace_s(self) -> float | None:
        return self.tool.stop_grace_s

    @stop_grace_s.setter
    def stop_grace_s(self, value: float | None) -> None:
        self.tool.stop_grace_s = value

    @property
    def original_name(self) -> str:
        """The name of the tool underneath every variant layer."""
        inner = self.tool
        return inner.original_name if isinstance(inner, ToolVariant) else inner.name

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self.tool.validate(arguments)
        except ToolArgumentError as error:
            raise ToolArgumentError(self._own_name(str(error))) from None

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        latency = float(self.options.latency_s)
        if latency > 0:
            await asyncio.sleep(latency)
            if context.time_limit_s is not None:  # the slow start uses up part of the limit
                remaining = max(context.time_limit_s - latency, 0.0)
                context = dataclasses.replace(context, time_limit_s=remaining)
        if self._fails(arguments, context):
            result = ToolResult.failure(
                f"{self.name} is unavailable (injected failure)", kind="injected"
            )
        else:
            result = await self.tool.run(arguments, context)
            if result.error is not None:
                result.error = self._own_name(result.error)
            self._cut(result)
        if latency > 0:
            result.metadata["injected_latency_s"] = latency
        return result

    def _fails(self, arguments: Mapping[str, Any], context: ToolContext) -> bool:
        rate = float(self.options.failure_rate)
        if rate <= 0.0:
            return False
        if rate >= 1.0:
            return True
        key = context.episode_key if context.seed is None else context.seed
        return failure_draw(key, self.original_name, arguments) < rate

    def _cut(self, result: ToolResult) -> None:
        cap = self.options.max_output_chars
        if cap is None or len(result.output) <= cap:
            return
        dropped = len(result.output) - cap
        result.output = result.output[:cap] + f"\n...[output cut: {dropped} more characters]"
        result.metadata["injected_cut_chars"] = dropped

    def _own_name(self, message: str) -> str:
        """``message`` with a leading original name replaced by this variant's name."""
        original = self.tool.name
        if self.name == original or not message.startswith(original):
            return message
        rest = message[len(original) :]
        return self.name + rest if rest[:1] in (":", " ") else message

    def __repr__(self) -> str:
        return f"ToolVariant({self.tool!r}, {self.options!r})"


def _renamed_card(card: ToolCard, name: str) -> ToolCard:
    """``card`` under ``name``; its examples' calls (``Search(query=...)``) use the new name."""
    call = re.compile(rf"\b{re.escape(card.name)}(?=\()")
    demos = tuple(
        {key: call.sub(name, text) if key == "command" else text for key, text in demo.items()}
        for demo in card.demo_commands
    )
    return dataclasses.replace(card, name=name, demo_commands=demos)


def failure_draw(seed: int, tool_name: str, arguments: Mapping[str, Any]) -> float:
    """A number in [0, 1) fixed by the episode seed (or key), the tool and the call's arguments."""
    key = json.dumps(
        [seed, canonical_tool_name(tool_name), arguments],
        sort_keys=True,
        default=repr,
        ensure_ascii=True,
    )
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


__all__ = [
    "VARIANT_OPTIONS",
    "ToolVariant",
    "VariantOptions",
    "failure_draw",
    "split_variant_options",
    "with_variant",
]
