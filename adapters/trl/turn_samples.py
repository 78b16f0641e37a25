"""``TurnSamplesGRPOTrainer``: Flow-GRPO on one training row per planner turn, through TRL's loss.

``make_rollout_func(..., samples="turns")`` returns every trajectory's turn samples
(``TrainerSample``: the exact structured prompt ids the policy was given, the exact sampled ids,
their log-probs). Before TRL's own ``_generate_and_score_completions`` this trainer runs the
rollout, then hands TRL one dataset row per turn and a stand-in ``rollout_func`` returning the
rows; TRL pads, masks, scores and splits them as its own completions, and its loss reads them
unchanged, with each row's advantage from ``turn_sample_advantages`` in place of TRL's.

    sys.path.insert(0, "adapters/trl")
    from rollout import env_reward, make_rollout_func
    from turn_samples import TurnSamplesGRPOTrainer

    trainer = TurnSamplesGRPOTrainer(model, reward_funcs=env_reward, args=GRPOConfig(...),
        train_dataset=dataset, rollout_func=make_rollout_func(env_kwargs, samples="turns"))

Padding rows (zero advantage, completion and loss mask) only make the count a multiple of
``steps_per_generation`` and equal across ranks. Normalisation, limits: ``adapters/trl/README.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from rollout import trainer_lockstep
from turn_batch import TURN_SAMPLES, TurnRows, row_advantages, turn_rows
from turn_credit import TurnCreditGRPOTrainer

from agentflow_env.rollout import group_signal


class TurnSamplesGRPOTrainer(TurnCreditGRPOTrainer):
    """``TurnCreditGRPOTrainer`` that also trains ``samples="turns"`` rollouts, one row per turn.

    ``samples``: the rollout's shape; by default the ``samples`` attribute of the
    ``rollout_func`` that ``make_rollout_func`` returns (give it when the function is wrapped).
    A flat rollout trains exactly as under ``TurnCreditGRPOTrainer``. ``turn_rows`` holds the
    last batch's rows (their trajectories and advantages)."""

    def __init__(self, *args: Any, samples: str | None = None, **kwargs: Any) -> None:
        shape = samples or getattr(kwargs.get("rollout_func"), "samples", "flat")
        if shape not in ("flat", "turns"):
            raise ValueError(f"samples must be 'flat' or 'turns', got {shape!r:.40}")
        super().__init__(*args, **kwargs)
        self.samples = shape
        self.turn_rows: TurnRows | None = None

    def rows_across_ranks(self, count: int) -> int:
        """The largest row count on any process (one collective; ``count`` on one process)."""
        lockstep = trainer_lockstep(self)
        return count if lockstep is None else lockstep(count)

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        if self.samples != "turns":
            return super()._generate_and_score_completions(inputs)
        training = bool(getattr(self.model, "training", False))
        rollout: Any = self.rollout_func
        args: Any = self.args
        tokenizer: Any = self.processing_class
        if self.use_vllm and self.state.global_step != self._last_loaded_step:
            self.vllm_generation.sync_weights()  # TRL's own step before it calls rollout_func
            self._last_loaded_step = self.state.global_step
        output = rollout([x["prompt"] for x in inputs], self)
        rows = turn_rows(
            inputs,
            output,
            rows_across_ranks=self.rows_across_ranks,
            multiple=args.steps_per_generation if training else 1,
            eos=tokenizer.eos_token_id,
        )
        with _serving(self, rows.served):
            scored = super()._generate_and_score_completions(rows.inputs)
        device = scored["completion_ids"].device
        padding = torch.tensor([o < 0 for o in rows.owners], device=device)
        scored["completion_mask"] = scored["completion_mask"].masked_fill(padding[:, None], 0)
        scored["advantages"] = torch.tensor(rows.advantages, dtype=torch.float32, device=device)
        self.turn_rows = rows
        self._log_turn_rows(rows, output["env_reward"], "train" if training else "eval")
        return scored

    def _log_turn_rows(self, rows: TurnRows, rewards: Sequence[float], mode: str) -> None:
        """TRL's reward figures over trajectories (TRL computed them over rows), the group
        signal and the rows per step, all processes together."""
        device = self.accelerator.device
        counts = torch.tensor([len(rows.owners) - rows.padding, rows.padding, len(rewards)])
        real, padding, trajectories = self.accelerator.gather(counts.to(device)).view(-1, 3).sum(0)
        local = torch.tensor([float(r) for r in rewards], device=device)
        everyone = self.accelerator.gather(local)
        group = self.num_generations if mode == "train" else self.num_generations_eval
        signal = group_signal(everyone.tolist(), int(group or 1))
        figures = {
            "reward": float(everyone.mean()),
            "reward_std": float(everyone.std()) if everyone.numel() > 1 else 0.0,
            "frac_reward_zero_std": signal["equal_reward_groups"],
        }
        metrics = self._metrics[mode]
        for name, value in figures.items():
            if metrics[name]:
                metrics[name][-1] = value  # replaces TRL's figure over rows for this batch
        metrics["turns/informative_groups"].append(signal["informative_groups"])
        metrics["turns/rows"].append(float(real))
        metrics["turns/padding_rows"].append(float(padding))
        metrics["turns/rows_per_trajectory"].append(float(real) / max(1, int(trajectories)))


@contextlib.contextmanager
def _serving(trainer: Any, served: dict[str, list[Any]]) -> Iterator[None]:
    """For one call of TRL's ``_generate_and_score_completions``: ``rollout_func`` returns the
    rows already made, and TRL groups rewards one row at a time (its advantages, not used, come
    out 0; a row count need not be a multiple of ``num_generations``)."""
    saved = trainer.rollout_func, trainer.num_generations, trainer.num_generations_eval
    trainer.rollout_func = lambda prompts, caller: served
    trainer.num_generations = trainer.num_generations_eval = 1
    try:
        yield
    finally:
        trainer.rollout_func, trainer.num_generations, trainer.num_generations_eval = saved


__all__ = ["TURN_SAMPLES", "TurnRows", "TurnSamplesGRPOTrainer", "row_advantages", "turn_rows"]
