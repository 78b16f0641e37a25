"""What a served env and its clients send each other, as plain JSON data.

The protocol is OpenEnv's (``agentflow_env.service``): a WebSocket session per client, ``reset``
and ``step`` messages, one observation per answer. This module is the one home of the fields
the observation carries beyond OpenEnv's ``reward`` and ``done``, on both sides:

- every answer: ``text``, ``token_ids`` (a JSON list of ints: compact, and what any OpenEnv client
  reads), ``terminated``, ``truncated``, ``info`` (the in-process env's info, JSON-safe) and
  ``metrics`` (the running counts);
- a ``reset``: ``task`` (the task's plain fields) and ``episode_id``;
- a ``step``: ``turn``, the turn just taken as ``TurnRecord.as_dict`` writes it, less its
  prompt ids, which are the ids of the observation the client had (never sent twice; their
  ``prompt_digest`` is, and the client checks it), and
  ``feedback_text``, the text appended to the prompt (flat observations; its ids are the info's
  ``feedback_token_ids``);
- the step that ends the episode: ``end``, the outcome (``EpisodeOutcome.as_info``) and the
  tool service's errors.

``messages`` (the prompt's plain chat messages) come only when the reset asked for them.
"""

from __future__ import annotations

import array
import dataclasses
import enum
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentflow_env.workflow.outcome import EndReason, EpisodeMetrics, EpisodeOutcome
from agentflow_env.workflow.trajectory import TurnRecord

RESET_OPTIONS = frozenset(
    {"label", "samples", "episode_index", "budget_curve", "messages", "task_id"}
)
"""What a ``reset`` may carry in ``options`` besides ``seed``:

- ``label``: a trainer label (``TaskSpec`` JSON or a ``(seed, kwargs)`` pair) naming the task and
  the env kwargs, with ``samples`` (``"flat"`` or ``"turns"``), the shape it is trained as;
- ``episode_index``: ``eval``'s episode ``i`` (a dataset's ``i``-th record, else the task
  ``reset(seed=seed)`` draws), with ``budget_curve`` (the diagnostics' success by turn budget);
- ``task_id``: a task of the server's task list, by id;
- ``messages``: send each prompt's plain chat messages too (planners that build their own chat).
"""

FINGERPRINT_PROBE = "AgentFlow planner: <tool> Wikipedia_Search 12 Ñandú 東京 \n\t END"


def json_safe(value: Any) -> Any:
    """``value`` as JSON data: numpy arrays and scalars, tuples, sets, enums and dataclasses
    become lists, numbers, strings and objects; a non-finite float becomes ``None``; anything else
    unknown its ``repr``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return json_safe(value.value)
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    return repr(value)


def ids_digest(ids: Sequence[int]) -> str:
    """A short hash of a token id sequence (64-bit ids, this machine's byte order)."""
    return hashlib.blake2b(array.array("q", ids).tobytes(), digest_size=8).hexdigest()


def turn_to_wire(record: TurnRecord) -> dict[str, Any]:
    """A turn record as sent: ``as_dict`` less the prompt ids, with their digest."""
    data = record.as_dict()
    data["prompt_digest"] = ids_digest(data.pop("prompt_ids"))
    return data


def turn_from_wire(data: Mapping[str, Any], prompt_ids: Sequence[int]) -> TurnRecord:
    """The turn record the server kept, given the prompt ids of the observation it answered
    (``ValueError`` when they are not the ids the server recorded)."""
    record = {k: v for k, v in data.items() if k != "prompt_digest"}
    digest = data.get("prompt_digest")
    if digest is not None and digest != ids_digest(prompt_ids):
        raise ValueError(f"turn {data.get('turn')}: the server recorded other prompt ids")
    # The prompt ids are the client's own observation ids, ints already: not converted again.
    turn = TurnRecord.from_dict({**record, "prompt_ids": ()})
    return dataclasses.replace(turn, prompt_ids=tuple(prompt_ids))


def outcome_from_wire(data: Mapping[str, Any]) -> EpisodeOutcome:
    """The episode's outcome from ``EpisodeOutcome.as_info`` data."""
    return EpisodeOutcome(
        answer=data.get("answer"),
        final_text=str(data.get("final_text", "")),
        gold_answers=tuple(data.get("gold_answers", ())),
        success=bool(data.get("success", False)),
        score=float(data.get("score", 0.0)),
        reward=float(data.get("reward", 0.0)),
        end_reason=EndReason(data["end_reason"]),
        module_errors=tuple(data.get("module_errors", ())),
        metrics=dict(data.get("metrics", {})),
        diagnostics=dict(data.get("diagnostics", {})),
    )


def metrics_from_wire(data: Mapping[str, Any]) -> EpisodeMetrics:
    """The running counts as sent (fields this version does not know are left out)."""
    known = {f.name for f in dataclasses.fields(EpisodeMetrics)}
    return EpisodeMetrics(**{k: v for k, v in data.items() if k in known})


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of how ``tokenizer`` (a ``ChatTokenizer``) encodes a probe text and a chat
    turn, with its vocabulary size and end-of-turn id: a client and a server whose fingerprints
    differ would not agree on token ids."""
    chat = tokenizer.render_chat([{"role": "user", "content": FINGERPRINT_PROBE}])
    data = [
        tokenizer.vocab_size,
        tokenizer.eos_token_id,
        tokenizer.encode(FINGERPRINT_PROBE),
        tokenizer.encode(chat),
    ]
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]
