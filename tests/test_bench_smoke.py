"""Smoke test of the benchmark suite: ``python -m bench --quick`` writes every figure.

It checks the JSON's shape only (a ratio, or an explicit not-available record with its reason);
the quick run's sizes are too small for its ratios to mean anything, and times are never asserted.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

EXPECTED = [
    "step_vs_tokenize.structured",
    "step_vs_tokenize.flat",
    "flat_growth.turn10_vs_turn1",
    "flat_growth.turn30_vs_turn1",
    "step_cost.turns_flat",
    "step_cost.turns_structured",
    "step_cost.corpus_growth",
    "memory.envs_64_vs_1",
    "memory.envs_256_vs_1",
    "memory.episode_turns_structured",
    "memory.episode_turns_flat",
    "concurrency.episodes_per_s_1_vs_1",
    "concurrency.episodes_per_s_8_vs_1",
    "concurrency.episodes_per_s_64_vs_1",
    "concurrency.episodes_per_s_256_vs_1",
    "concurrency.client_cpu_per_episode",
    "concurrency.curve",
    "concurrency.client_instructions_per_episode",
    "concurrency_uvloop.client_cpu_per_episode",
    "concurrency.episodes_per_s_64_vs_1_loaded",
    "concurrency.episodes_per_s_256_vs_1_loaded",
    "loop_blocking.longest_hold_64",
    "loop_blocking.hold_per_turn_64",
    "loop_blocking.longest_hold_256",
    "loop_blocking.hold_per_turn_256",
    "loop_blocking.p99_lag_ms_256",
    "fork_cost.vs_history_length",
    "fork_cost.bytes_vs_history_length",
    "retrieval.tool_vs_bm25s_10k",
    "retrieval.tool_vs_bm25s_200k",
    "retrieval.tool_vs_bm25s_1M",
    "retrieval.rank_bm25_vs_bm25s_10k",
    "retrieval.rank_bm25_vs_bm25s_200k",
    "retrieval.rank_bm25_vs_bm25s_1M",
    "retriever_server.qps_64_vs_1",
    "service.step_overhead_flat",
    "service.step_overhead_structured",
    "service.token_ids_json_vs_binary",
    "service.scale_out_2_vs_1",
    "service.sessions_curve",
]


def test_quick_suite_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["quick"] is True
    figures = payload["figures"]
    missing = [key for key in EXPECTED if key not in figures]
    assert not missing, missing
    for key, record in figures.items():
        if record["available"]:
            assert isinstance(record["ratio"], float) and math.isfinite(record["ratio"]), key
            assert record["ratio"] > 0, key
            assert record["what"] and record["against"], key
        else:
            assert isinstance(record["reason"], str) and record["reason"], key
    fork = figures["fork_cost.vs_history_length"]
    assert fork["available"] and len(fork["curve_fork_bytes_flat"]) == 30
    breakdown = figures["concurrency.client_cpu_per_episode"]["breakdown_ms"]
    assert "tokenization" in breakdown and "HTTP" in breakdown
    assert "curve_step_ms" in figures["step_cost.turns_flat"]
    for key in EXPECTED:
        assert key in run.stdout, key
