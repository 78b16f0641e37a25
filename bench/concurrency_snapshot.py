"""``PYTHONPATH=. python bench/concurrency_snapshot.py``: the concurrency figures at 1 / 64 / 256
episodes and the client CPU profile, as one JSON line: the same measurement on two checkouts
(run it in each) compares them on one machine the same day."""

from __future__ import annotations

import json

import bench  # noqa: F401  (puts bench/ on the path for its scripts)
from bench.concurrency import concurrency_figures

if __name__ == "__main__":
    figures = concurrency_figures([1, 64, 256], 8, 0.1)
    out = {
        key: {
            "ratio": value.get("ratio"),
            "cpu": value.get("client_cpu_ms_per_episode", value.get("measured")),
        }
        for key, value in figures.items()
        if value.get("available")
    }
    out["breakdown_ms"] = figures["concurrency.client_cpu_per_episode"]["breakdown_ms"]
    print(json.dumps(out))
