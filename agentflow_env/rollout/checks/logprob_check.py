"""Is the gradient right? The sampler's log-probs against a Hugging Face model's forward pass.

Any trainer's samples (OpenRLHF, verl, SkyRL, TRL; ``trainer_samples`` reads each one's own
objects) come down to a ``LogprobSample``: the prompt ids, the completion ids after it, a mask
with 1 on the planner's tokens and the log-prob the rollout recorded for each completion token.
``check_logprobs`` scores the completions with a causal LM, as a trainer does (float32
``log_softmax(logits / temperature)``), and returns ``train_diagnostics.logprob_gap``'s summary.
At the weights that sampled them the gap is float noise (below 1e-4 on CPU fp32); above 1e-3 it
is a bug: a precision mismatch, a wrong token alignment, a temperature applied twice or not at
all. ``agentflow-env check-logprobs`` runs it on a JSONL file of samples.

The samples file, one JSON object per line::

    {"prompt_ids": [int, ...],      # at least one token
     "completion_ids": [int, ...],  # what follows the prompt: actions and the env's feedback
     "mask": [0 | 1, ...],          # 1 on the planner's sampled tokens (len(completion_ids))
     "logprobs": [float | null, ...],  # the sampler's log-prob of each completion token
                                       # (len(completion_ids); read only where mask is 1;
                                       # null: not recorded, counted as unscored)
     "temperature": float}          # optional: the sampling temperature (the check leaves out
                                    # samples drawn at another temperature than it scores at)

``sample_dump`` writes such a file from inside a trainer's rollout workers (the adapters call it
when ``AGENTFLOW_DUMP_SAMPLES`` is set). torch is imported where it is used.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentflow_env.base.errors import DatasetError
from agentflow_env.base.jsonl import jsonl_line, read_jsonl
from agentflow_env.base.settings import ENV_VARS, read_env_var
from agentflow_env.rollout.checks.train_diagnostics import logprob_gap

__all__ = [
    "DEFAULT_THRESHOLD",
    "DUMP_ENV",
    "DUMP_MAX_ENV",
    "LogprobSample",
    "SampleDump",
    "at_temperature",
    "check_logprobs",
    "dump_samples",
    "read_samples",
    "sample_dump",
    "score_samples",
    "write_samples",
]

DEFAULT_THRESHOLD = 1e-3
"""A max gap above this, at the weights that sampled the tokens, is a bug."""
DUMP_ENV = "AGENTFLOW_DUMP_SAMPLES"
"""Path of the JSONL file the adapters append their samples to (``{pid}``: the process id)."""
DUMP_MAX_ENV = "AGENTFLOW_DUMP_SAMPLES_MAX"
"""At most this many samples per process (default 64): the first ones, sampled at step 0."""
DEFAULT_DUMP_MAX: int = ENV_VARS[DUMP_MAX_ENV].default


@dataclass(frozen=True)
class LogprobSample:
    """One trajectory as the check reads it (the module docstring's fields); ``logprobs`` has
    NaN where the sampler recorded none; ``temperature``, if known, is the sampling one."""

    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    temperature: float | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("prompt_ids is empty: the first completion token cannot be scored")
        n = len(self.completion_ids)
        if len(self.mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"completion_ids, mask and logprobs differ in length "
                f"({n}, {len(self.mask)}, {len(self.logprobs)})"
            )
        if any(m not in (0, 1) for m in self.mask):
            raise ValueError("mask holds values other than 0 and 1")

    @classmethod
    def build(
        cls,
        prompt_ids: Sequence[Any],
        completion_ids: Sequence[Any],
        mask: Sequence[Any],
        logprobs: Sequence[Any],
        temperature: Any = None,
    ) -> LogprobSample:
        """From any sequences of numbers (lists, tensors' ``tolist()``); ``None`` log-probs
        become NaN."""
        return cls(
            [int(t) for t in prompt_ids],
            [int(t) for t in completion_ids],
            [int(m) for m in mask],
            [math.nan if lp is None else float(lp) for lp in logprobs],
            None if temperature is None else float(temperature),
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> LogprobSample:
        """A JSON object with the module docstring's fields (others are ignored)."""
        missing = [
            k for k in ("prompt_ids", "completion_ids", "mask", "logprobs") if k not in record
        ]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)}")
        for key in ("prompt_ids", "completion_ids", "mask", "logprobs"):
            if not isinstance(record[key], list):
                raise ValueError(f"{key} must be a list, got {type(record[key]).__name__}")
        try:
            return cls.build(
                record["prompt_ids"],
                record["completion_ids"],
                record["mask"],
                record["logprobs"],
                record.get("temperature"),
            )
        except (TypeError, ValueError) as error:
            raise ValueError(str(error)) from None

    def as_record(self) -> dict[str, Any]:
        """The JSON object (NaN log-probs as ``null``)."""
        record: dict[str, Any] = {
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "mask": self.mask,
            "logprobs": [None if math.isnan(lp) else lp for lp in self.logprobs],
        }
        if self.temperature is not None:
            record["temperature"] = self.temperature
        return record


def read_samples(path: str | Path) -> list[LogprobSample]:
    """Every sample of a JSONL file (``.gz`` too); a bad line is a ``DatasetError`` naming it."""
    samples = []
    for where, record in read_jsonl(Path(path)):
        try:
            samples.append(LogprobSample.from_record(record))
        except ValueError as error:
            raise DatasetError(f"{path}, {where}: {error}") from None
    return samples


def write_samples(path: str | Path, samples: Sequence[LogprobSample]) -> None:
    """Write ``samples`` as JSONL (the folder created)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as file:
        for sample in samples:
            file.write(jsonl_line(sample.as_record()))


def score_samples(
    model: Any, samples: Sequence[LogprobSample], temperature: float = 1.0, batch_size: int = 4
) -> list[list[float]]:
    """The model's log-prob of each completion token: one forward pass over prompt + completion
    per sample (batches of ``batch_size``, right-padded, with an attention mask), the logits of
    the position before each token, in float32, divided by ``temperature``, log-softmaxed. The
    model runs in eval mode without gradients, then gets its training mode back."""
    import torch

    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    device = next(model.parameters()).device
    rows: list[list[float]] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(samples), batch_size):
                rows += _score_batch(
                    torch, model, samples[start : start + batch_size], temperature, device
                )
    finally:
        if was_training:
            model.train()
    return rows


def _score_batch(
    torch: Any, model: Any, batch: Sequence[LogprobSample], temperature: float, device: Any
) -> list[list[float]]:
    sequences = [s.prompt_ids + s.completion_ids for s in batch]
    width = max(len(seq) for seq in sequences)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[row, : len(seq)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
    rows: list[list[float]] = []
    for row, sample in enumerate(batch):
        p, c = len(sample.prompt_ids), len(sample.completion_ids)
        if c == 0:
            rows.append([])
            continue
        scaled = logits[row, p - 1 : p + c - 1].float() / temperature
        tokens = torch.tensor(sample.completion_ids, dtype=torch.long, device=scaled.device)
        logps = torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        rows.append(logps.cpu().tolist())
    return rows


def at_temperature(
    samples: Sequence[LogprobSample], temperature: float
) -> tuple[list[LogprobSample], list[LogprobSample]]:
    """``(kept, left_out)``: the samples drawn at ``temperature`` (or at an unknown one), and
    those whose recorded sampling temperature is another (e.g. greedy evaluation rows)."""
    kept: list[LogprobSample] = []
    left_out: list[LogprobSample] = []
    for sample in samples:
        other = sample.temperature is not None and abs(sample.temperature - temperature) > 1e-9
        (left_out if other else kept).append(sample)
    return kept, left_out


def check_logprobs(
    model: Any, samples: Sequence[LogprobSample], temperature: float = 1.0, batch_size: int = 4
) -> dict[str, Any]:
    """``logprob_gap`` of the samples' recorded log-probs against ``score_samples``: ``max``,
    ``mean``, ``tokens``, ``unscored``, ``worst`` and ``where`` (per position kind). Every sample
    is scored at ``temperature``, whatever it records (``at_temperature`` selects)."""
    trainer = score_samples(model, samples, temperature, batch_size)
    return logprob_gap([s.logprobs for s in samples], trainer, [s.mask for s in samples])


class SampleDump:
    """Appends samples to a JSONL file, the first ``limit`` this process gives it; each line is
    one ``write`` to a file opened for appending, so processes may share the file."""

    def __init__(self, path: str | Path, limit: int = DEFAULT_DUMP_MAX) -> None:
        self.path = Path(str(path).replace("{pid}", str(os.getpid())))
        self.limit = limit
        self.written = 0
        self._lock = threading.Lock()

    @property
    def full(self) -> bool:
        return self.written >= self.limit

    def add(self, sample: LogprobSample) -> None:
        line = jsonl_line(sample.as_record()).encode("utf-8")
        with self._lock:
            if self.full:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
            self.written += 1


_DUMPS: dict[tuple[str, int, int], SampleDump] = {}
_DUMPS_LOCK = threading.Lock()


def sample_dump(environ: Mapping[str, str] | None = None) -> SampleDump | None:
    """This process's ``SampleDump`` when ``AGENTFLOW_DUMP_SAMPLES`` names a file (at most
    ``AGENTFLOW_DUMP_SAMPLES_MAX`` samples, default 64), else ``None``; one per setting."""
    path = read_env_var(DUMP_ENV, environ)
    if not path:
        return None
    limit = read_env_var(DUMP_MAX_ENV, environ)
    with _DUMPS_LOCK:
        key = (path, limit, os.getpid())  # a forked worker writes its own ``{pid}`` file
        dump = _DUMPS.get(key)
        if dump is None:
            dump = _DUMPS[key] = SampleDump(path, limit)
    return dump


def dump_samples(read: Callable[[], Iterable[LogprobSample]], log: logging.Logger) -> None:
    """When ``AGENTFLOW_DUMP_SAMPLES`` is set and this process's dump is not full, append the
    samples ``read`` returns (it runs only then). A debugging aid never stops training: a bad
    setting or a sample that cannot be read is logged as a warning."""
    try:
        dump = sample_dump()
        if dump is None or dump.full:
            return
        for sample in read():
            dump.add(sample)
    except (OSError, ValueError) as error:
        log.warning("%s: no sample written (%s)", DUMP_ENV, error)
