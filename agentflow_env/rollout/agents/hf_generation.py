"""Generation with a Hugging Face causal LM that also returns each sampled token's log-prob.

One definition of "the log-prob of a sampled token" for the whole package (``HFPlanner``,
``HFGenerator`` and so the batched driver, TRL's rollout and the evaluator):

    the log-prob of the sampled token under the distribution ``generate`` actually sampled it
    from: ``log_softmax(scores_t)[token_t]``, where ``scores_t`` are the step's last-position
    logits (float32) after every logits processor ``generate`` applied, in its order:
    temperature, top-k and top-p (and any other configured processor, e.g. a repetition
    penalty). Tokens the top-k / top-p filters removed get probability 0 and the kept ones are
    renormalised, so top-k / top-p renormalisation IS included.

This is what a policy-gradient trainer needs for the behaviour policy's log-prob (the
denominator of an importance ratio, an off-policy mask): the probability with which the token
was in fact drawn. It equals vLLM's ``logprobs_mode="processed_logprobs"``, which TRL's vLLM path
uses, so the HF and vLLM generation paths report the same quantity. With ``top_k`` unset (0 or
``None``) and ``top_p=1`` it is ``log_softmax(logits / temperature)``, TRL's own training
log-prob; with top-k / top-p filtering the two differ even on-policy (as with vLLM).

Greedy decoding (``do_sample=False``) applies no sampling processors: the log-prob is then
``log_softmax(logits)``, the model's distribution at temperature 1 (not 0, the log-prob of a
deterministic choice).

torch is imported where it is used; this module imports without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def hf_generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    pad_token_id: int | None,
    eos_token_ids: Sequence[int],
    do_sample: bool = False,
    **sampling: Any,
) -> tuple[list[list[int]], list[list[float]]]:
    """Batched ``model.generate`` from token ids: each completion's ids, cut after its first
    end-of-turn token, and their log-probs (the module docstring's definition).

    Prompts are left-padded with ``pad_token_id`` (the first end-of-turn id if ``None``).
    ``sampling`` goes to ``generate`` as is (``temperature``, ``top_p``, ``top_k``; a setting
    left out takes the model's generation config value, e.g. ``top_k=50``; ``top_k=None``
    disables the filter). The model runs in eval mode and without gradients, then gets its
    training mode back.
    """
    import torch

    if not prompts:
        return [], []
    eos = [int(e) for e in eos_token_ids]
    if pad_token_id is None and eos:
        pad_token_id = eos[0]
    pad = pad_token_id if pad_token_id is not None else 0
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                pad_token_id=pad_token_id,
                eos_token_id=eos or None,
                return_dict_in_generate=True,
                output_scores=True,
                **sampling,
            )
    finally:
        if was_training:
            model.train()
    new = out.sequences[:, width:].cpu()
    if not out.scores or new.size(1) == 0:
        return [[] for _ in prompts], [[] for _ in prompts]
    scores = torch.stack(out.scores, dim=1).float().cpu()
    logps = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    stops = set(eos)
    completions: list[list[int]] = []
    logprobs: list[list[float]] = []
    for row in range(new.size(0)):
        tokens = new[row].tolist()
        end = next((i + 1 for i, t in enumerate(tokens) if t in stops), len(tokens))
        completions.append(tokens[:end])
        logprobs.append(logps[row, :end].tolist())
    return completions, logprobs


@dataclass
class HFGenerator:
    """A ``Generate`` for the batched driver (``agentflow_env.rollout.training.driver``): ``hf_generate``
    with fixed sampling settings. ``greedy=True`` is for evaluation.

    ``top_k`` ``None`` or 0 means no top-k filter (not the model's default). ``max_batch``
    splits a call into ``generate`` batches of at most that many prompts of similar length
    (``None``: one batch): with long multi-turn prompts of mixed lengths, one big left-padded
    batch spends most of its time on padding and on an attention matrix that no longer fits in
    cache (``bench/`` measures it).
    """

    model: Any
    pad_token_id: int
    eos_token_ids: Sequence[int]
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    greedy: bool = False
    max_batch: int | None = 32

    def __call__(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        sampling: dict[str, Any] = {}
        if not self.greedy:
            sampling = {"temperature": self.temperature, "top_p": self.top_p}
            sampling["top_k"] = self.top_k or None
        options = {
            "pad_token_id": self.pad_token_id,
            "eos_token_ids": self.eos_token_ids,
            "do_sample": not self.greedy,
            **sampling,
        }
        if not self.max_batch or len(prompts) <= self.max_batch:
            return hf_generate(self.model, prompts, max_new_tokens, **options)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        for start in range(0, len(order), self.max_batch):
            rows = order[start : start + self.max_batch]
            ids, lps = hf_generate(
                self.model, [prompts[i] for i in rows], max_new_tokens, **options
            )
            for row, c, lp in zip(rows, ids, lps, strict=True):
                completions[row], logprobs[row] = c, lp
        return completions, logprobs


__all__ = ["HFGenerator", "hf_generate"]
