"""The pre-flight check's report: ordered PASS/FAIL items with their evidence, and facts."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

EVIDENCE_WIDTH = 78


@dataclass(frozen=True)
class CheckItem:
    """One checked property: its name, whether it holds and what was seen."""

    name: str
    passed: bool
    evidence: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "evidence": self.evidence}


def failed_item(name: str, error: BaseException) -> CheckItem:
    """The item ``name`` failed because something raised while checking it."""
    return CheckItem(name, False, f"raised {type(error).__name__}: {error}")


def guarded(name: str, check: Callable[[], CheckItem]) -> CheckItem:
    """``check()``, or the item's failure with the exception as evidence if it raises: a module
    or tool that raises fails its item and never crashes the whole check."""
    try:
        return check()
    except Exception as error:
        return failed_item(name, error)


@dataclass
class PreflightReport:
    """The outcome of ``run_preflight``: the items in order and facts about the configuration."""

    env_id: str
    seed: int
    items: list[CheckItem] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every item passed (a report without items is not ok)."""
        return bool(self.items) and all(item.passed for item in self.items)

    @property
    def failed(self) -> list[CheckItem]:
        return [item for item in self.items if not item.passed]

    def item(self, name: str) -> CheckItem:
        """The item called ``name``; ``KeyError`` if there is none."""
        for item in self.items:
            if item.name == name:
                return item
        raise KeyError(f"no item {name!r}; items: {[i.name for i in self.items]}")

    def summary(self) -> str:
        failed = self.failed
        if not failed:
            return f"All {len(self.items)} checks passed."
        names = ", ".join(item.name for item in failed)
        return f"{len(failed)} of {len(self.items)} checks failed: {names}"

    def render(self) -> str:
        """A readable table: PASS/FAIL, item, evidence (wrapped), then the facts and a summary."""
        width = max([len("item"), *(len(item.name) for item in self.items)])
        lines = [f"Pre-flight check of {self.env_id} (seed {self.seed})", ""]
        lines.append(f"{'':4}  {'item':<{width}}  evidence")
        indent = " " * (4 + 2 + width + 2)
        for item in self.items:
            mark = "PASS" if item.passed else "FAIL"
            wrapped = _wrap(item.evidence, EVIDENCE_WIDTH)
            lines.append(f"{mark}  {item.name:<{width}}  {wrapped[0]}")
            lines.extend(indent + part for part in wrapped[1:])
        if self.facts:
            lines += ["", "Facts:"]
            key_width = max(len(key) for key in self.facts)
            for key, value in self.facts.items():
                wrapped = _wrap(_fact_text(value), EVIDENCE_WIDTH)
                lines.append(f"  {key:<{key_width}}  {wrapped[0]}")
                lines.extend(" " * (key_width + 4) + part for part in wrapped[1:])
        lines += ["", self.summary()]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (``json.dumps`` writes it)."""
        return {
            "env_id": self.env_id,
            "seed": self.seed,
            "ok": self.ok,
            "items": [item.as_dict() for item in self.items],
            "facts": {key: _plain(value) for key, value in self.facts.items()},
        }


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False) or [""]


def _fact_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "(none)"
    return str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


__all__ = ["CheckItem", "PreflightReport", "failed_item", "guarded"]
