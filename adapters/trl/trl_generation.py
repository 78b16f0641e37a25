"""The TRL trainer's generation paths and collective, for ``rollout.py``'s ``rollout_func``.

``trainer_generate``: TRL's vLLM engine when the trainer uses it, else Hugging Face generation on
the unwrapped training model (``HFGenerator``: the package's one log-prob definition);
``trainer_lockstep``: the ranks' ``MaxAcrossRanks`` over the trainer's accelerator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentflow_env.rollout import Generate, HFGenerator, MaxAcrossRanks, sampled_logprob


def trainer_generate(trainer: Any, greedy: bool = False) -> Generate:
    """The trainer's generation path: TRL's vLLM engine if enabled, else ``generate`` on the
    unwrapped training model with the trainer's temperature, top-p and top-k (``greedy``:
    argmax decoding instead, e.g. dynamic sampling's screen)."""
    if getattr(trainer, "use_vllm", False):
        return _vllm_generate(trainer, greedy)
    from trl.models import unwrap_model_for_generation

    sampling: dict[str, Any] = {"greedy": True}
    if not greedy:
        sampling = {"temperature": float(trainer.temperature), "top_p": float(trainer.top_p)}
        sampling["top_k"] = trainer.top_k
    generator = HFGenerator(
        model=None,  # unwrapped at each call
        pad_token_id=trainer.processing_class.pad_token_id,
        eos_token_ids=list(trainer.eos_token_ids),
        **sampling,
    )

    def generate(prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Any:
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
        ) as unwrapped:
            generator.model = unwrapped
            return generator(prompts, max_new_tokens)

    return generate


def _vllm_generate(trainer: Any, greedy: bool = False) -> Generate:
    """One vLLM sample per prompt (the prompts of a group differ after the first turn).

    TRL syncs vLLM's weights before calling ``rollout_func``; the per-turn cap is set through
    ``max_completion_length`` for the call. In server mode (and colocated with tensor parallelism)
    every call is a collective slicing the results by ``rank * batch size``: the driver's
    lockstep keeps the ranks in step. vLLM's unknown log-probs (``None``) become NaN.
    ``greedy``: temperature 0 for the call.
    """
    engine = trainer.vllm_generation

    def generate(prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Any:
        saved = engine.max_completion_length
        temperature = engine.temperature if greedy else None
        engine.max_completion_length = max_new_tokens
        if greedy:
            engine.temperature = 0.0
        try:
            _, completion_ids, logprobs, _ = engine.generate(
                prompts=[list(p) for p in prompts], images=None, num_generations=1
            )
        finally:
            engine.max_completion_length = saved
            if greedy:
                engine.temperature = temperature
        completions = [list(c) for c in completion_ids]
        if logprobs is None:
            return completions, None
        return completions, [
            None if seq is None else [sampled_logprob(lp) for lp in seq] for seq in logprobs
        ]

    return generate


def trainer_lockstep(trainer: Any) -> MaxAcrossRanks | None:
    """``MaxAcrossRanks`` over the trainer's accelerator, or ``None`` on a single process (no
    collective is needed there)."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or accelerator.num_processes <= 1:
        return None

    def max_across_ranks(value: int) -> int:
        local = torch.tensor([int(value)], dtype=torch.long, device=accelerator.device)
        return int(accelerator.gather(local).max().item())

    return max_across_ranks


__all__ = ["trainer_generate", "trainer_lockstep"]
