"""``TurnCreditGRPOTrainer``: TRL's ``GRPOTrainer`` with per-token advantages from the rollout.

TRL computes one advantage per completion (the group-normalised reward) and, in its loss,
accepts advantages of shape ``(batch, tokens)`` from subclasses. This subclass takes the
``token_advantages`` field that ``make_rollout_func(..., credit=...)`` adds (one value per
completion token: each planner turn's advantage on its action tokens, 0 on feedback) and hands
that tensor to TRL's loss instead (the credit itself: ``agentflow_env.rollout``'s
``token_advantages``); everything else (sampling, clipping, loss aggregation,
logging of the reward) is TRL's. Without the field it is exactly ``GRPOTrainer``.

    sys.path.insert(0, "adapters/trl")
    from rollout import make_rollout_func
    from turn_credit import TurnCreditGRPOTrainer

    trainer = TurnCreditGRPOTrainer(
        model, reward_funcs=env_reward, train_dataset=dataset, args=GRPOConfig(...),
        rollout_func=make_rollout_func(env_kwargs, credit="monte_carlo", value_forks=2))

What it cannot do: TRL logs its own (broadcast) advantages, not these; and the per-token
values are computed on each process for its own prompts, so a group of ``num_generations``
copies split across processes is normalised in parts (keep ``per_device_train_batch_size`` a
multiple of ``num_generations``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from trl import GRPOTrainer

from agentflow_env.rollout import padded_rows

TOKEN_ADVANTAGES = "token_advantages"


class TurnCreditGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages are the rollout's ``token_advantages`` when present."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._token_advantages: list[Sequence[float]] | None = None
        inner = self.rollout_func
        if inner is None:
            raise ValueError("TurnCreditGRPOTrainer needs a rollout_func (make_rollout_func)")

        def capture(prompts: list[Any], trainer: Any) -> dict[str, list]:
            output = inner(prompts, trainer)
            self._token_advantages = output.get(TOKEN_ADVANTAGES)
            return output

        self.rollout_func = capture

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        self._token_advantages = None
        output = super()._generate_and_score_completions(inputs)
        rows = self._token_advantages
        if rows is not None:
            output["advantages"] = per_token_tensor(
                rows, output["completion_ids"].shape[1], output["completion_ids"].device
            )
        return output


def per_token_tensor(
    rows: Sequence[Sequence[float]], width: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``rows`` right-padded with zeros (or cut) to ``width`` tokens (``padded_rows``), as a
    float tensor (TRL right-pads completions the same way)."""
    values = torch.tensor(padded_rows(rows, width), dtype=torch.float32)
    return values.reshape(len(rows), width).to(device)
