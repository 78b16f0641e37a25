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
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from rollout import LOG_KEYS, trainer_lockstep
from turn_credit import TurnCreditGRPOTrainer

from agentflow_env.rollout import TrainerSample, group_key, group_signal, turn_sample_advantages

TURN_SAMPLES = "turn_samples"
"""The rollout output's field holding, per trajectory, its list of ``TrainerSample``."""
_ROW_FIELDS = (*LOG_KEYS, "error")


@dataclass
class TurnRows:
    """One generation batch as rows: ``inputs`` (the row's trajectory's dataset row),
    ``served`` (the stand-in ``rollout_func``'s output, ``env_mask`` 0 on rows that must not
    train), ``owners`` (the trajectory's index in the batch; -1 for padding), ``advantages``."""

    inputs: list[dict[str, Any]]
    served: dict[str, list[Any]]
    owners: list[int]
    advantages: list[float]

    @property
    def padding(self) -> int:
        return self.owners.count(-1)


def row_advantages(prompts: Sequence[Any], output: Mapping[str, Any]) -> list[float]:
    """One advantage per turn sample of ``output`` (trajectories in order, turns in order), by the
    rollout's ``turn_credit`` and ``turn_normalize`` over the trajectories with equal labels.
    Under ``monte_carlo`` a trajectory without value estimates gets 0 and stays out."""
    trajectories: list[list[TrainerSample]] = output[TURN_SAMPLES]
    method = output.get("turn_credit", "broadcast")
    samples = [s for t in trajectories for s in t]
    groups = [group_key(p) for p, t in zip(prompts, trajectories, strict=True) for _ in t]
    keep = list(range(len(samples)))
    values = None
    if method == "monte_carlo":
        values = {
            samples_[0].trajectory_id: v
            for samples_, v in zip(trajectories, output["turn_values"], strict=True)
            if v is not None and samples_
        }
        keep = [i for i, s in enumerate(samples) if s.trajectory_id in values]
    out = [0.0] * len(samples)
    if keep:
        chosen = turn_sample_advantages(
            [samples[i] for i in keep],
            [groups[i] for i in keep],
            method,
            normalize=output.get("turn_normalize", "trajectory"),
            values=values,
        )
        for index, advantage in zip(keep, chosen, strict=True):
            out[index] = advantage
    return out


def turn_rows(
    inputs: Sequence[Mapping[str, Any]],
    output: Mapping[str, Any],
    *,
    rows_across_ranks: Callable[[int], int],
    multiple: int,
    eos: int,
) -> TurnRows:
    """``output`` (a ``samples="turns"`` rollout of ``inputs``' prompts) as TRL rows: every turn
    sample in order, then padding rows up to ``rows_across_ranks(real rows)`` rounded up to a
    multiple of ``multiple``. A failed trajectory's rows (and padding) carry ``env_mask`` 0."""
    if TURN_SAMPLES not in output:
        raise ValueError("the rollout gave no turn samples: use make_rollout_func(samples='turns')")
    prompts = [x["prompt"] for x in inputs]
    advantages = row_advantages(prompts, output)
    served: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs")}
    served.update({k: [] for k in ("env_mask", "env_reward", *_ROW_FIELDS)})
    rows_inputs: list[dict[str, Any]] = []
    owners: list[int] = []
    for index, samples in enumerate(output[TURN_SAMPLES]):
        for sample in samples:
            trains = sample.failure is None
            served["prompt_ids"].append(list(sample.prompt_ids))
            served["completion_ids"].append(list(sample.response_ids))
            served["logprobs"].append(sample.logprobs or [math.nan] * len(sample.response_ids))
            served["env_mask"].append([m if trains else 0 for m in sample.response_mask])
            served["env_reward"].append(float(sample.reward))
            for key in _ROW_FIELDS:  # the trajectory's own figures, once: on its last row
                served[key].append(output[key][index] if sample is samples[-1] else None)
            rows_inputs.append(dict(inputs[index]))
            owners.append(index)
    target = max(int(rows_across_ranks(len(owners))), len(owners))
    target = -(-target // multiple) * multiple
    filler = served["prompt_ids"][0] if owners else [eos]
    for _ in range(target - len(owners)):
        for key, value in (("prompt_ids", filler), ("completion_ids", [eos]), ("logprobs", [0.0])):
            served[key].append(list(value))
        served["env_mask"].append([0])
        served["env_reward"].append(0.0)
        for key in _ROW_FIELDS:
            served[key].append(None)
        rows_inputs.append(dict(inputs[0]))
        owners.append(-1)
        advantages.append(0.0)
    return TurnRows(rows_inputs, served, owners, advantages)


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
