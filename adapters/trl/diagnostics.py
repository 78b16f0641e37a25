"""``AgentFlowGRPOTrainer``: TRL's ``GRPOTrainer`` that answers "is the gradient right?" every step.

Over ``TurnSamplesGRPOTrainer`` (per-token advantages when the rollout gives them; one row per
planner turn for a ``samples="turns"`` rollout, where every figure below is over turn rows) it
adds:

- the log-prob agreement on planner tokens: the sampler's recorded log-probs against this
  trainer's own forward pass at the same weights, before the update (``diag/logprob_gap_max``,
  ``_mean``, and where the worst gap sits); entropy on planner tokens; KL to the starting policy
  (the k3 estimator against a frozen copy of the model as it was when training began);
- the signal in the batch: groups with equal rewards, all-zero groups, mean |advantage|;
- wall time split into generation, env and update;
- a held-out probe every ``held_out_every`` steps: greedy pass@1, sampled pass@1 and pass@k on
  a small frozen set of episodes;
- ``null_control=True``: the advantages permuted across each batch before the loss sees them,
  the control a gain is measured against.

Figures go to TRL's metrics (``diag/*``, ``time/*``, ``held_out/*``, averaged per logging step
like TRL's own) and, one line per step, to ``diagnostics_path`` (JSONL). Definitions:
``agentflow_env.rollout.checks.train_diagnostics``; how to read them: ``docs/training-diagnostics.md``.

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
from rollout import HFGenerator, run_episodes
from transformers import TrainerCallback
from turn_samples import TurnSamplesGRPOTrainer

from agentflow_env.rollout import DiagnosticsLog, group_signal, logprob_gap, permuted


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
        self._log = DiagnosticsLog(diagnostics_path) if diagnostics_path else None
        self._start_model: Any = None
        if kl_to_start:
            self._start_model = copy.deepcopy(self.model)
            self._start_model.eval().requires_grad_(False)
        self.held_out_specs = list(held_out_specs)
        self.held_out_every = held_out_every
        self.held_out_k = held_out_k
        self.max_action_tokens = max_action_tokens
        self._pending: dict[str, Any] = {}
        self.rollout_timing: dict[str, float] = {}  # filled by make_rollout_func's rollout
        self._rewards: list[float] | None = None
        self.diagnostics_every = max(1, diagnostics_every)
        self._batches = 0
        inner: Any = self.rollout_func

        def timed(prompts: list[Any], trainer: Any) -> dict[str, list]:
            start = time.time()
            output = inner(prompts, trainer)
            self._pending["time/rollout_s"] = time.time() - start
            for name, seconds in self.rollout_timing.items():
                self._pending[f"time/{name}"] = seconds
            self.rollout_timing = {}
            self._rewards = [float(r) for r in output.get("env_reward", [])]
            return output

        self.rollout_func = timed
        self.add_callback(_StepEnd(self))

    # -- generation: advantages, diagnostics ------------------------------------------------
    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        start = time.time()
        output = super()._generate_and_score_completions(inputs)
        if self.null_control:
            output["advantages"] = self._permute(output["advantages"])
        if getattr(self.model, "training", False):
            self._pending.update(self._signal(output))
            if self._batches % self.diagnostics_every == 0:
                self._pending.update(self._forward_diagnostics(output))
            self._batches += 1
            self._pending["time/generate_and_score_s"] = time.time() - start
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
        planner = mask.bool()
        tokens = max(1, int(planner.sum()))
        record: dict[str, Any] = {
            "diag/planner_tokens": int(planner.sum()),
            "diag/entropy": float(entropy[planner].sum()) / tokens,
            "diag/answer_tokens": int(planner.sum()) / max(1, mask.size(0)),
        }
        if start_logps is not None:
            delta = (start_logps - logps)[planner]
            record["diag/kl_to_start"] = float((delta.exp() - delta - 1).sum()) / tokens
        sampling = output.get("sampling_per_token_logps")
        if sampling is not None:
            gap = logprob_gap(sampling.tolist(), logps.tolist(), mask.int().tolist())
            record.update(
                {
                    "diag/logprob_gap_max": gap["max"],
                    "diag/logprob_gap_mean": gap["mean"],
                    "diag/logprob_gap_worst": gap["worst"],
                    "diag/logprob_gap_where": gap["where"],
                }
            )
        return record

    # -- the step: update time, held-out probe, logging -------------------------------------
    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        start = time.time()
        loss = super().training_step(model, inputs, num_items_in_batch)
        elapsed = time.time() - start
        generation = self._pending.pop("time/generate_and_score_s", None)
        if generation is not None:
            rollout = self._pending.get("time/rollout_s", 0.0)
            self._pending["time/scoring_and_diagnostics_s"] = generation - rollout
            elapsed -= generation
        self._pending["time/update_s"] = self._pending.get("time/update_s", 0.0) + elapsed
        return loss

    def _end_step(self, step: int) -> None:
        """After each optimizer step: the step's figures to TRL's metrics and the JSONL; the
        held-out probe when it is due."""
        pending, self._pending = self._pending, {}
        for name, value in pending.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._metrics["train"][name].append(float(value))
        if self._log is not None:
            self._log.write({"step": step, **pending})
        if self.held_out_every > 0 and step % self.held_out_every == 0:
            self._record_held_out(step)

    def _record_held_out(self, step: int) -> None:
        if not self.held_out_specs:
            return
        result = held_out_probe(
            self.accelerator.unwrap_model(self.model),
            self.processing_class,
            self.held_out_specs,
            temperature=float(self.temperature),
            k=self.held_out_k,
            max_action_tokens=self.max_action_tokens,
            samples=self.samples,
        )
        if self._log is not None:
            self._log.write({"step": step, **{f"held_out/{k}": v for k, v in result.items()}})
        self.state.log_history.append(
            {"step": step, **{f"held_out/{k}": v for k, v in result.items()}}
        )


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


def held_out_probe(
    model: Any,
    tokenizer: Any,
    specs: Sequence[Any],
    *,
    temperature: float,
    k: int,
    max_action_tokens: int,
    samples: str = "flat",
) -> dict[str, float]:
    """Greedy pass@1, sampled pass@1 and pass@k at ``temperature`` on ``specs``, in the
    observation mode of the trained sample shape ``samples``."""
    eos = [tokenizer.eos_token_id]
    greedy = HFGenerator(model, tokenizer.pad_token_id, eos, greedy=True)
    sampler = HFGenerator(model, tokenizer.pad_token_id, eos, temperature=temperature)
    options = {"max_action_tokens": max_action_tokens, "samples": samples}
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
