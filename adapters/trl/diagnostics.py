"""``AgentFlowGRPOTrainer``: TRL's ``GRPOTrainer`` that answers "is the gradient right?" every step.

Over ``TurnSamplesGRPOTrainer`` (one row per planner turn for a ``samples="turns"`` rollout,
where every figure is over turn rows) it adds, through ``agentflow_env.rollout``'s trainer-neutral
diagnostics (``planner_token_figures``, ``group_signal``, ``StepFigures``; how to read them:
``docs/training-diagnostics.md``): the log-prob agreement on planner tokens (the sampler's
recorded log-probs against this trainer's forward pass at the same weights, before the update,
and where the worst gap sits), entropy and the k3 KL to a frozen copy of the starting model; the
signal in the batch (equal-reward and all-zero groups, mean |advantage|); wall time split into
generation, env and update; a held-out probe every ``held_out_every`` steps (greedy pass@1,
sampled pass@1, pass@k); and with ``null_control=True`` the advantages permuted across each
batch, the control a gain is measured against; with a dynamic-sampling rollout, what was
dropped and refilled (``dynamic/*``; the dropped groups and their reasons in the JSONL). Figures
go to TRL's metrics (``diag/*``, ``time/*``, ``held_out/*``, averaged per logging step like TRL's
own) and, one line per step, to ``diagnostics_path`` (JSONL).

    sys.path.insert(0, "adapters/trl")
    from diagnostics import AgentFlowGRPOTrainer
    trainer = AgentFlowGRPOTrainer(model, reward_funcs=env_reward, args=GRPOConfig(...),
                                   rollout_func=make_rollout_func(env_kwargs),
                                   diagnostics_path="runs/x/diagnostics.jsonl")
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Sequence
from typing import Any

import torch
from rollout import HFGenerator, logger
from transformers import TrainerCallback
from turn_samples import TurnSamplesGRPOTrainer

from agentflow_env.rollout import (
    StepFigures,
    group_signal,
    held_out_pass_rates,
    permuted,
    planner_token_figures,
)


class AgentFlowGRPOTrainer(TurnSamplesGRPOTrainer):
    """``TurnSamplesGRPOTrainer`` with training diagnostics and an optional null control.

    Args:
        diagnostics_path: JSONL file for one record per step (``None``: metrics only).
        null_control: permute the advantages across each batch (the null control run).
        null_seed: seed of the permutations.
        kl_to_start: keep a frozen copy of the starting model for ``diag/kl_to_start`` (one
            extra forward per step; turn off for large models).
        held_out_specs: ``(seed, env_kwargs)`` pairs or task labels for the held-out probe.
        held_out_every: run the probe every this many optimizer steps (and at the start).
        held_out_k: samples per held-out episode for sampled pass@1 and pass@k.
        max_action_tokens: the per-turn cap the held-out probe uses (as the rollout's).
        diagnostics_every: compute the forward-pass figures (log-prob gap, entropy, KL to the
            start: one or two extra forward passes over the batch) on every this many
            generation batches; the signal and timing figures are logged on every one.
    """

    def __init__(
        self,
        *args: Any,
        diagnostics_path: str | None = None,
        null_control: bool = False,
        null_seed: int = 0,
        kl_to_start: bool = True,
        held_out_specs: Sequence[Any] = (),
        held_out_every: int = 0,
        held_out_k: int = 8,
        max_action_tokens: int = 32,
        diagnostics_every: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.null_control = null_control
        self._null_rng = random.Random(null_seed)
        self._figures = StepFigures(diagnostics_path)
        self._start_model: Any = None
        if kl_to_start:
            self._start_model = copy.deepcopy(self.model)
            self._start_model.eval().requires_grad_(False)
        self.held_out_specs, self.held_out_every = list(held_out_specs), held_out_every
        self.held_out_k, self.max_action_tokens = held_out_k, max_action_tokens
        self.rollout_timing: dict[str, float] = {}  # filled by make_rollout_func's rollout
        self.refill_report: Any = None  # dynamic sampling's report of the last rollout
        self._rewards: list[float] | None = None
        self.diagnostics_every, self._batches = max(1, diagnostics_every), 0
        inner: Any = self.rollout_func

        def timed(prompts: list[Any], trainer: Any) -> dict[str, list]:
            start = time.time()
            output = inner(prompts, trainer)
            self._figures.rollout(time.time() - start, self.rollout_timing)
            self.rollout_timing = {}
            if self.refill_report is not None:
                self._figures.pending.update(self.refill_report.metrics())
                self._figures.pending["dynamic/dropped_groups"] = self.refill_report.dropped
                self.refill_report = None
            self._rewards = [float(r) for r in output.get("env_reward", [])]
            return output

        self.rollout_func = timed
        self.add_callback(_StepEnd(self))

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        start = time.time()
        output = super()._generate_and_score_completions(inputs)
        if self.null_control:
            output["advantages"] = self._permute(output["advantages"])
        if getattr(self.model, "training", False):
            pending = self._figures.pending
            pending.update(self._signal(output))
            if self._batches % self.diagnostics_every == 0:
                pending.update(self._forward_diagnostics(output))
            self._batches += 1
            pending["time/generate_and_score_s"] = time.time() - start
        return output

    def _permute(self, advantages: torch.Tensor) -> torch.Tensor:
        if advantages.dim() != 1:
            raise ValueError("null_control permutes one advantage per sample; not with credit=")
        order = permuted(range(advantages.numel()), self._null_rng)
        return advantages[torch.as_tensor(order, device=advantages.device)]

    def _signal(self, output: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if self._rewards:
            signal = group_signal(self._rewards, int(self.num_generations or 1))
            record.update({f"diag/{k}": v for k, v in signal.items() if k != "groups"})
        record["diag/mean_abs_advantage_used"] = float(output["advantages"].abs().mean())
        return record

    def _forward_diagnostics(self, output: dict[str, Any]) -> dict[str, Any]:
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        width = output["completion_ids"].size(1)
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        chunk = self.args.per_device_train_batch_size  # as TRL's own forward passes
        with torch.no_grad():
            logps, entropy, _ = self._get_per_token_logps_and_entropies(
                self.model, ids, attention, width, batch_size=chunk, compute_entropy=True
            )
            start_logps = None
            if self._start_model is not None:
                start_logps, _, _ = self._get_per_token_logps_and_entropies(
                    self._start_model, ids, attention, width, batch_size=chunk
                )
        sampling = output.get("sampling_per_token_logps")
        return planner_token_figures(mask, entropy, logps, start_logps, sampling)

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        start = time.time()
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._figures.update(time.time() - start)
        return loss

    def _end_step(self, step: int) -> None:
        """After each optimizer step: the step's figures to TRL's metrics and the JSONL; the
        held-out probe when it is due."""
        for name, value in self._figures.end(step).items():
            self._metrics["train"][name].append(value)
        if self.held_out_every > 0 and step % self.held_out_every == 0:
            self._record_held_out(step)

    def _record_held_out(self, step: int) -> None:
        """Greedy pass@1, sampled pass@1 and pass@k at the training temperature on the held-out
        specs, in the observation mode of the trained shape (``held_out_pass_rates``)."""
        if not self.held_out_specs:
            return
        tokenizer: Any = self.processing_class
        model = self.accelerator.unwrap_model(self.model)
        pad, eos = tokenizer.pad_token_id, [tokenizer.eos_token_id]
        greedy = HFGenerator(model, pad, eos, greedy=True)
        sampler = HFGenerator(model, pad, eos, temperature=float(self.temperature))
        options = {"max_action_tokens": self.max_action_tokens, "samples": self.samples}
        specs, k = self.held_out_specs, self.held_out_k
        result = held_out_pass_rates(specs, greedy, sampler, tokenizer, k=k, log=logger, **options)
        self.state.log_history.append(self._figures.held_out(step, result))


class _StepEnd(TrainerCallback):
    """Hands the trainer each optimizer step's end, and the start of training (the held-out
    probe's first point)."""

    def __init__(self, trainer: AgentFlowGRPOTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.trainer.held_out_every > 0:
            self.trainer._record_held_out(0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer._end_step(state.global_step)
