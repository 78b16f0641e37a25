"""What the CPU recipe and its probes share: determinism, the SFT start, paired held-out evaluation.

``recipe.py`` (Flow-GRPO vs its SFT start, with a null control) and ``compare_credit.py`` build on
these. Held-out evaluation is paired: every model is scored on the same test-split episodes,
greedy and at the training temperature, and ``paired_gain`` reads a difference with its interval
from per-episode outcomes rather than from two separate rates.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters" / "trl"))
from rollout import HFGenerator, run_episodes  # noqa: E402

from agentflow_env.evaluation.suites import get_suite  # noqa: E402

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
"""The committed SFT starts (``checkpoints/README.md``: the command and settings that made them)."""
COMMITTED_STARTS = {"sft800": "sft_step800.safetensors", "sft1200": "sft_step1200.safetensors"}


def committed_start(name: str) -> Path:
    """The file of a committed SFT start by name (``sft800``, ``sft1200``)."""
    if name not in COMMITTED_STARTS:
        raise SystemExit(f"unknown start {name!r}; committed starts: {sorted(COMMITTED_STARTS)}")
    return CHECKPOINTS / COMMITTED_STARTS[name]


def load_start(model: Any, start: str | Path) -> Any:
    """Loads a committed start (by name) or a weights file (``.safetensors`` or a torch
    ``state_dict`` ``.pt``) into ``model``; returns the model."""
    path = committed_start(start) if str(start) in COMMITTED_STARTS else Path(start)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_model

        load_model(model, str(path))  # strict; tied embeddings are stored once
    else:
        model.load_state_dict(torch.load(path))
    return model


def seed_everything(seed: int, threads: int = 2) -> None:
    """Seeds Python, NumPy and torch and fixes the thread count: on one machine a CPU run then
    repeats. (``torch.use_deterministic_algorithms`` is left off: it made SFT steps about four
    times slower on CPU, and across machines float results differ anyway.)"""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)


class PairedEvaluator:
    """Per-episode held-out outcomes on fixed test-split episodes (the same ones every call).

    ``greedy`` scores greedy decoding; ``sampled`` scores ``k`` samples per episode at a
    temperature (pass@1 is their mean, pass@k whether any succeeded).
    """

    def __init__(
        self,
        tokenizer: Any,
        suite: str,
        episodes: int | None,
        max_action_tokens: int,
        batch: int = 250,
        samples: str = "flat",
    ) -> None:
        """``suite``: a published evaluation suite (``agentflow-env eval --list-suites``); its
        first ``episodes`` episodes (all if ``None``). ``samples``: the sample shape the policy
        trains in, whose prompts it is scored on (``"turns"``: AgentFlow's structured prompts)."""
        self.tokenizer = tokenizer
        self.samples = samples
        self.suite = get_suite(suite)
        self.suite.check_fingerprint()
        self.specs = self.suite.seed_pairs(episodes)
        self.max_action_tokens = max_action_tokens
        self.batch = batch

    def _run(self, specs: Sequence[Any], generate: Any) -> list[Any]:
        results: list[Any] = []
        for start in range(0, len(specs), self.batch):
            results += run_episodes(
                specs[start : start + self.batch],
                generate,
                self.tokenizer,
                max_action_tokens=self.max_action_tokens,
                samples=self.samples,
            )
        return results

    def greedy(self, model: Any, episodes: int | None = None) -> dict[str, Any]:
        """Greedy success per episode and the summary rates."""
        start = time.time()
        generate = HFGenerator(
            model, self.tokenizer.pad_token_id, [self.tokenizer.eos_token_id], greedy=True
        )
        results = self._run(self.specs[: episodes or len(self.specs)], generate)
        outcomes = [int(r.success) for r in results]
        return {
            **rate(outcomes),
            "mean_turns": sum(r.turns for r in results) / len(results),
            "invalid_actions": sum(r.metrics.get("invalid_actions", 0) for r in results)
            / len(results),
            "outcomes": outcomes,
            "eval_s": time.time() - start,
        }

    def sampled(
        self,
        model: Any,
        temperature: float,
        k: int,
        episodes: int,
        seed: int = 0,
        greedy_outcomes: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """pass@1 (mean over ``k`` samples) and pass@k at ``temperature`` on the first
        ``episodes`` episodes; sampling is seeded so the figure repeats. With the greedy outcomes
        of the same episodes, also ``sampling_headroom``'s figures."""
        start = time.time()
        torch.manual_seed(seed)
        generate = HFGenerator(
            model,
            self.tokenizer.pad_token_id,
            [self.tokenizer.eos_token_id],
            temperature=temperature,
        )
        specs = [spec for spec in self.specs[:episodes] for _ in range(k)]
        results = self._run(specs, generate)
        wins = [[int(r.success) for r in results[i * k : (i + 1) * k]] for i in range(episodes)]
        any_win = [int(any(w)) for w in wins]
        per_episode = [sum(w) / k for w in wins]
        mixed = sum(1 for w in wins if 0 < sum(w) < k) / episodes
        headroom = {}
        if greedy_outcomes is not None:
            headroom = sampling_headroom(greedy_outcomes[:episodes], wins)
        return {
            "temperature": temperature,
            "k": k,
            "episodes": episodes,
            "pass_at_1": sum(per_episode) / episodes,
            f"pass_at_{k}": sum(any_win) / episodes,
            "mixed_groups": mixed,
            **headroom,
            "eval_s": time.time() - start,
        }


def sampling_headroom(greedy: Sequence[int], wins: Sequence[Sequence[int]]) -> dict[str, float]:
    """What a group of samples could teach greedy decoding, per episode: ``greedy_fails_group_
    succeeds`` (greedy fails, a sample succeeds: the groups that can change greedy's answer),
    ``greedy_succeeds_group_fails`` (greedy succeeds, a sample fails: groups that defend it),
    ``greedy_fails_group_fails`` (all fail: no signal). ``wins``: each episode's sample
    outcomes."""
    if len(greedy) != len(wins) or not wins:
        raise ValueError("one greedy outcome and one group of samples per episode")
    pairs = list(zip(greedy, wins, strict=True))
    n = len(pairs)
    return {
        "greedy_fails_group_succeeds": sum(1 for g, w in pairs if not g and any(w)) / n,
        "greedy_succeeds_group_fails": sum(1 for g, w in pairs if g and not all(w)) / n,
        "greedy_fails_group_fails": sum(1 for g, w in pairs if not g and not any(w)) / n,
    }


def rate(outcomes: Sequence[int]) -> dict[str, Any]:
    """Success rate with its 95% Wilson interval."""
    n = len(outcomes)
    p = sum(outcomes) / n
    z = 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"episodes": n, "success": p, "ci95": [centre - half, centre + half]}


def paired_gain(before: Sequence[int], after: Sequence[int]) -> dict[str, Any]:
    """The success difference ``after - before`` on the same episodes, in points, with a 95%
    interval from the per-episode differences (normal approximation of the paired mean)."""
    if len(before) != len(after):
        raise ValueError("paired outcomes must cover the same episodes")
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / max(1, n - 1)
    half = 1.96 * math.sqrt(var / n)
    return {
        "points": 100 * mean,
        "ci95_points": [100 * (mean - half), 100 * (mean + half)],
        "won": sum(1 for d in diffs if d > 0),
        "lost": sum(1 for d in diffs if d < 0),
        "episodes": n,
    }


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "n": n}


def write(path: Path, data: dict[str, Any]) -> None:
    """One result file, indented JSON."""
    path.write_text(json.dumps(data, indent=1))
