"""A held-out probe of a policy during training: greedy pass@1, sampled pass@1 and pass@k.

Trainer-neutral: the trainer's adapter hands two generation paths of the model it trains (one
greedy, one sampling at the training temperature); the episodes run in the batched driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow_env.rollout.training.driver import Generate, run_episodes

__all__ = ["held_out_pass_rates"]


def held_out_pass_rates(
    specs: Sequence[Any],
    greedy: Generate,
    sampler: Generate,
    tokenizer: Any,
    *,
    k: int,
    **options: Any,
) -> dict[str, float]:
    """Greedy pass@1, sampled pass@1 and pass@k (``k`` samples per spec) on ``specs`` (labels),
    and the greedy episodes' invalid actions per episode; ``options`` go to ``run_episodes``
    (``max_action_tokens``, ``samples``: the observation mode of the trained shape, ``log``)."""
    first = run_episodes(list(specs), greedy, tokenizer, **options)
    repeated = [spec for spec in specs for _ in range(k)]
    sampled = run_episodes(repeated, sampler, tokenizer, **options)
    wins = [[r.success for r in sampled[i * k : (i + 1) * k]] for i in range(len(specs))]
    n = max(1, len(specs))
    return {
        "episodes": len(specs),
        "greedy_pass_at_1": sum(r.success for r in first) / n,
        "sampled_pass_at_1": sum(sum(w) / k for w in wins) / n,
        f"pass_at_{k}": sum(any(w) for w in wins) / n,
        "invalid_actions": sum(r.metrics.get("invalid_actions", 0) for r in first) / n,
    }
