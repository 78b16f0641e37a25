"""``agentflow-env check-logprobs``: a trainer's recorded log-probs against a model's forward pass."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentflow_env.base.errors import DatasetError
from agentflow_env.cli.common import UsageError, positive_int
from agentflow_env.rollout.checks.logprob_check import (
    DEFAULT_THRESHOLD,
    at_temperature,
    check_logprobs,
    read_samples,
)

DTYPES = ("float32", "bfloat16", "float16")


def add_check_logprobs_command(commands: Any) -> None:
    check = commands.add_parser(
        "check-logprobs",
        help="is the gradient right? the sampler's log-probs against the model's forward pass",
        description=(
            "Score each sample's completion with a Hugging Face causal LM (float32 "
            "log_softmax(logits / T)) and compare with the log-probs the rollout recorded, on the "
            "planner's tokens (mask 1). Prints the gap summary as JSON; exit status 1 when the max "
            "gap is above --threshold. Samples file: one JSON object per line with prompt_ids, "
            "completion_ids, mask (1 on planner tokens) and logprobs (one per completion token, "
            "null where not recorded); see agentflow_env.rollout.checks.logprob_check. Check with the "
            "weights that sampled them (the starting checkpoint for step-0 samples)."
        ),
    )
    check.add_argument("--model", required=True, help="a local model folder (or a cached hub name)")
    check.add_argument("--samples", required=True, help="JSONL file of samples (.gz too)")
    check.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="the temperature the trainer divides the logits by (its sampling temperature)",
    )
    check.add_argument(
        "--threshold", type=float, default=DEFAULT_THRESHOLD, help="largest acceptable max gap"
    )
    check.add_argument("--batch-size", type=positive_int, default=4, help="samples per forward")
    check.add_argument("--dtype", choices=DTYPES, default="float32", help="the model's weights")
    check.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    check.set_defaults(handler=_check_logprobs_command)


def _check_logprobs_command(args: argparse.Namespace) -> int:
    if not args.temperature > 0:
        raise UsageError(f"--temperature must be positive, got {args.temperature}")
    if not Path(args.samples).is_file():
        raise UsageError(f"--samples {args.samples}: no such file")
    try:
        samples = read_samples(args.samples)
    except DatasetError as error:
        raise UsageError(str(error)) from error
    samples, other = at_temperature(samples, args.temperature)
    if not samples:
        seen = sorted({s.temperature for s in other if s.temperature is not None})
        raise UsageError(
            f"--samples {args.samples} holds no samples drawn at --temperature "
            f"{args.temperature}" + (f" (they were drawn at {seen})" if seen else "")
        )
    model = _load_model(args.model, args.dtype, args.device)
    gap = check_logprobs(model, samples, args.temperature, args.batch_size)
    report = {
        "ok": gap["max"] <= args.threshold,
        "threshold": args.threshold,
        "samples": len(samples),
        "other_temperature": len(other),  # left out: drawn at another temperature
        "temperature": args.temperature,
        **gap,
    }
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _load_model(name: str, dtype: str, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model: Any = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as error:
        raise UsageError(f"--model {name}: cannot load ({error})") from error
    return model.to(device)
