"""Figure records, the printed table and the JSON file of ``python -m bench``.

Every figure is a ratio against a baseline measured in the same run (absolute times on a shared
machine are noise); the absolute numbers ride along for reading. A figure that cannot be
measured (the feature does not exist, a dependency is missing, the size does not fit the time
budget) is recorded as ``{"available": false, "reason": ...}``, never left out.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

Record = dict[str, Any]


def ratio(
    value: float,
    baseline: float,
    *,
    what: str,
    against: str,
    target: float | None = None,
    higher_is_better: bool = False,
    **extra: Any,
) -> Record:
    """A figure: ``value / baseline``, with what each is, and the issue's target if it has one."""
    result = value / baseline if baseline else float("inf")
    record: Record = {
        "available": True,
        "ratio": result,
        "what": what,
        "against": against,
        "measured": value,
        "baseline": baseline,
    }
    if target is not None:
        record["target"] = target
        record["higher_is_better"] = higher_is_better
        record["met"] = result >= target if higher_is_better else result <= target
    record.update(extra)
    return record


def not_available(reason: str, **extra: Any) -> Record:
    """A figure that this run could not measure, and why."""
    return {"available": False, "reason": reason, **extra}


def machine() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


def print_table(figures: dict[str, Record]) -> None:
    """One line per figure: key, ratio, target and whether it is met."""
    width = max(len(k) for k in figures) + 2
    print(f"\n{'figure':<{width}}{'ratio':>9}  {'target':<9}{'met':<5} what (vs baseline)")
    for key, record in figures.items():
        if not record["available"]:
            print(f"{key:<{width}}{'n/a':>9}  {'':<9}{'':<5} {record['reason']}")
            continue
        target = record.get("target")
        sign = "" if target is None else (">=" if record.get("higher_is_better") else "<=")
        shown_target = "" if target is None else f"{sign}{target:g}"
        met = "" if "met" not in record else ("yes" if record["met"] else "NO")
        print(
            f"{key:<{width}}{record['ratio']:>8.2f}x  {shown_target:<9}{met:<5} "
            f"{record['what']} vs {record['against']}"
        )


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=float), encoding="utf-8")
