"""Keeping several processes' generate calls in step.

When the generate calls of several processes are collectives (vLLM server mode, tensor-parallel
vLLM, ZeRO-3, FSDP), every rank must make the same calls with the same batch sizes. The batched
driver (``rollout.driver.run_episodes(..., lockstep=...)``) asks a ``MaxAcrossRanks`` collective
for the largest live batch before each call and pads its own to it. A trainer passes its own
collective (TRL's adapter: the accelerator's ``gather``); ``distributed_max`` is one over
``torch.distributed`` for use without a trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MaxAcrossRanks = Callable[[int], int]
"""``max_across_ranks(local_value) -> the maximum over all ranks``: a collective every rank calls."""


def distributed_max(group: Any = None) -> MaxAcrossRanks:
    """``MaxAcrossRanks`` over a ``torch.distributed`` process group (the default group if
    ``None``), for use without a trainer."""
    import torch
    import torch.distributed as dist

    def max_across_ranks(value: int) -> int:
        device = torch.device("cpu")
        if dist.get_backend(group) == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        tensor = torch.tensor([int(value)], dtype=torch.long, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
        return int(tensor.item())

    return max_across_ranks


__all__ = ["MaxAcrossRanks", "distributed_max"]
