"""Checking a trainer's token sequence against the env's flat ids, and saying where they part.

A trainer that builds its own sequence (OpenRLHF tokenizes the first prompt and every feedback
text itself and appends the sampled ids) must end up with exactly the ids the env recorded, or
it trains on tokens the policy never saw. ``TrainerSequence`` records the trainer's side of one
trajectory as it grows (its prompt ids, the ids and log-probs sampled each turn, the action
ranges); ``check_prompt`` compares it with the env's current observation before every turn and
raises ``TokenMismatchError`` with ``describe_mismatch``'s message: which part of the env's
sequence differs (the first prompt, turn k's action, the feedback after turn k), what each side
holds there, and what the evidence points to. A tokenizer is blamed only when encoding the env's
text of that part with the trainer's tokenizer gives other ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.workflow.session import Session

Encode = Callable[[str], "list[int] | None"]
"""The trainer's tokenization of a text, as it encodes prompts and feedback (``None``: failed)."""


def hf_encoder(hf_tokenizer: Any) -> Encode:
    """A Hugging Face tokenizer's ``Encode``: the text alone, no special tokens added (how
    OpenRLHF tokenizes prompts and feedback); ``None`` if encoding fails."""

    def encode(text: str) -> list[int] | None:
        try:
            ids = hf_tokenizer(text=text, add_special_tokens=False)["input_ids"]
            return [int(i) for i in ids]
        except Exception:  # a diagnostic only: no evidence either way
            return None

    return encode


class TokenMismatchError(RuntimeError):
    """A trainer's prompt ids differ from the env's (the message says where, and why if known)."""


@dataclass(frozen=True)
class MismatchHints:
    """How a mismatch message names the trainer and the fixes on its side."""

    trainer: str = "the trainer"
    tokenizer_name: str = "the env's tokenizer"
    tokenizer_fix: str = "build the env with the policy model's tokenizer"
    prompt_cut_fix: str = "raise the trainer's maximum sequence length"


@dataclass
class TrainerSequence:
    """A trainer's token sequence for one trajectory, kept as it grows so that a failed
    trajectory can still be returned whole and a mismatch can be explained.

    ``session`` is the env's episode; ``first_prompt_text`` its first prompt's text (default: the
    session's). ``tokens`` is the trainer's sequence so far, ``ranges`` the action spans in it,
    ``action_ids`` / ``action_logprobs`` what was sampled each turn, ``pending`` the last turn's
    sample until the env's step takes it (``take_action``): the bridge for a trainer whose step
    callback gets only the action's text.
    """

    session: Session | None = None
    first_prompt_text: str | None = None
    tokens: list[int] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    action_ids: list[list[int]] = field(default_factory=list)
    action_logprobs: list[list[float] | None] = field(default_factory=list)
    finish_reason: str | None = None
    pending: tuple[list[int], list[float] | None] | None = None

    def begin_turn(self, prompt_ids: Sequence[int]) -> None:
        """The trainer's whole prompt for the next turn."""
        self.tokens = [int(i) for i in prompt_ids]

    def end_turn(self, ids: list[int], logprobs: list[float] | None, finish: str | None) -> None:
        """The ids (and log-probs) sampled for the turn, appended as the trainer appends them."""
        start = len(self.tokens)
        self.tokens = self.tokens + ids
        self.ranges.append((start, start + len(ids)))
        self.action_ids.append(ids)
        self.action_logprobs.append(logprobs)
        self.finish_reason = finish
        self.pending = (ids, logprobs)

    def take_action(self) -> tuple[list[int], list[float] | None] | None:
        """The ids (and log-probs) sampled since the last call, for the env's step; ``None`` if
        nothing was (the trainer did not sample through the engine the adapter gave it)."""
        pending, self.pending = self.pending, None
        return pending

    def rollout_log_probs(self) -> list[float]:
        """Per-token sampling log-probs of ``tokens`` (0 off the actions and where unknown)."""
        values = [0.0] * len(self.tokens)
        for (start, end), logprobs in zip(self.ranges, self.action_logprobs, strict=True):
            if logprobs is not None:
                values[start:end] = logprobs
        return values

    def start_turn(
        self, prompt_ids: Sequence[int], encode: Encode | None, hints: MismatchHints, cap: int
    ) -> int:
        """``begin_turn`` and ``check_prompt``; returns the turn's token cap: the env's
        ``max_action_tokens`` (where the env cuts an action), else ``cap``."""
        self.begin_turn(prompt_ids)
        self.check_prompt(encode, hints)
        session = self.session
        return (session.config.max_action_tokens if session is not None else None) or cap

    def check_prompt(self, encode: Encode | None, hints: MismatchHints) -> None:
        """Raise ``TokenMismatchError`` if ``tokens`` differ from the env's current prompt."""
        session = self.session
        if session is None or session.observation is None:
            return
        expected = list(session.observation.token_ids)
        if self.tokens != expected:
            raise TokenMismatchError(describe_mismatch(self.tokens, expected, self, encode, hints))

    def sample_problem(self, tokens: Any, ranges: Any) -> str | None:
        """What is wrong with a trainer's finished sample (its tokens and action ranges) unless
        it holds, at each action range, exactly the ids sampled that turn; ``None`` if nothing."""
        try:
            tokens = list(tokens)
            spans = [(int(a), int(b)) for a, b in ranges]
        except (TypeError, ValueError) as exc:
            return f"no usable tokens and action ranges ({exc!r})"
        if len(spans) != len(self.action_ids):
            return f"{len(spans)} actions, but {len(self.action_ids)} were sampled"
        for turn, ((start, end), ids) in enumerate(zip(spans, self.action_ids, strict=True), 1):
            if tokens[start:end] != ids:
                return f"other ids for turn {turn}'s action than the engine returned"
        return None

    def failure_sample(
        self, fallback: Sequence[int], filler: int, min_length: int = 1
    ) -> tuple[list[int], list[tuple[int, int]], list[float]]:
        """Tokens, action ranges and log-probs for a reward-0 sample of this trajectory: the
        trainer's tokens up to the failure (``fallback``, e.g. the encoded dataset prompt, if it
        had none yet), padded with ``filler`` to ``min_length``."""
        tokens, ranges = list(self.tokens), list(self.ranges)
        if not tokens:
            tokens = list(fallback)
        if len(tokens) < min_length:
            tokens = tokens + [filler] * (min_length - len(tokens))
        log_probs = self.rollout_log_probs()
        return tokens, ranges, log_probs + [0.0] * (len(tokens) - len(log_probs))

    def sampled(self, turn: int) -> list[int] | None:
        """The ids sampled for ``turn`` (1-based), if that turn was sampled."""
        return self.action_ids[turn - 1] if 0 < turn <= len(self.action_ids) else None


def describe_mismatch(
    theirs: Sequence[int],
    ours: Sequence[int],
    sequence: TrainerSequence,
    encode: Encode | None,
    hints: MismatchHints,
) -> str:
    """Where the trainer's prompt ids (``theirs``) and the env's (``ours``) part, what each side
    holds there, and the cause the evidence points to (a tokenizer is blamed only when encoding
    the env's text with ``encode``, the trainer's tokenization, gives other ids)."""
    theirs, ours = list(theirs), list(ours)
    at = next(
        (i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b),
        min(len(theirs), len(ours)),
    )
    segment = _cause_segment(sequence, at)
    where = segment.name if segment else "past the env's last token"
    show_theirs = theirs[at : at + 6] or "nothing (its sequence ends there)"
    show_ours = ours[at : at + 6] or "nothing (its sequence ends there)"
    who = hints.trainer
    message = (
        f"{who}'s prompt ids differ from the env's at token {at} ({len(theirs)} vs "
        f"{len(ours)} tokens), in {where}: {who} has {show_theirs}, the env has {show_ours}."
    )
    return message + " " + _diagnose(theirs, ours, segment, sequence, encode, hints)


@dataclass(frozen=True)
class Segment:
    """One part of the env's flat sequence: the first prompt, an action or a feedback."""

    name: str
    kind: str  # "prompt", "action" or "feedback"
    start: int
    ids: list[int]
    text: str | None = None
    turn: int = 0
    cut: bool = False


def segments(sequence: TrainerSequence) -> list[Segment]:
    """The env's flat sequence of ``sequence.session``, part by part."""
    session = sequence.session
    if session is None:
        return []
    records = session.turn_records
    first_ids = records[0].prompt_ids if records else None
    if first_ids is None and session.observation is not None:
        first_ids = tuple(session.observation.token_ids)
    first_text = sequence.first_prompt_text
    if first_text is None and session.initial_observation is not None:
        first_text = session.initial_observation.text
    found = [Segment("the first prompt", "prompt", 0, list(first_ids or ()), first_text)]
    position = len(found[0].ids)
    for record in records:
        action, feedback = list(record.action_ids), list(record.feedback_ids)
        name = f"turn {record.turn}'s action"
        found.append(
            Segment(name, "action", position, action, None, record.turn, record.action_cut)
        )
        position += len(action)
        name = f"the feedback after turn {record.turn}"
        found.append(
            Segment(name, "feedback", position, feedback, record.feedback_text, record.turn)
        )
        position += len(feedback)
    return found


def _cause_segment(sequence: TrainerSequence, at: int) -> Segment | None:
    """The part of the env's sequence that explains a difference starting at token ``at``: an
    earlier action the env did not record as sampled, else the part holding token ``at`` (or the
    text before it, when that part is an action recorded as sampled: the text's length differs)."""
    parts = segments(sequence)
    for part in parts:
        if part.kind == "action" and part.start <= at:
            sampled = sequence.sampled(part.turn)
            if sampled is not None and sampled != part.ids:
                return part
    for index, part in enumerate(parts):
        if part.start <= at < part.start + len(part.ids):
            if part.kind == "action" and index > 0:
                return parts[index - 1]
            return part
    return None


def _diagnose(
    theirs: list[int],
    ours: list[int],
    segment: Segment | None,
    sequence: TrainerSequence,
    encode: Encode | None,
    hints: MismatchHints,
) -> str:
    who, session = hints.trainer, sequence.session
    if segment is None:
        return (
            f"{who}'s sequence has {len(theirs) - len(ours)} more tokens than the env's: it "
            "appended something the env did not record."
        )
    if segment.kind == "action":
        cap = session.config.max_action_tokens if session is not None else None
        sampled = sequence.sampled(segment.turn)
        if segment.cut:
            return (
                f"The env cut turn {segment.turn}'s action at max_action_tokens={cap}, but "
                f"{who} kept all {len(sampled) if sampled is not None else '?'} sampled ids: "
                "the engine returned more tokens than the per-turn cap it was given. Not a "
                "tokenizer problem."
            )
        vocab = session.tokenizer.vocab_size if session is not None else None
        if sampled is not None and vocab is not None and any(i >= vocab for i in sampled):
            return (
                f"Turn {segment.turn}'s sampled ids include ids >= the env tokenizer's vocabulary "
                f"size {vocab} (the model's embedding is padded), and the env did not keep them "
                "verbatim. Not a tokenizer problem: the env must record out-of-vocabulary ids as "
                "given."
            )
        return (
            f"The env did not record the ids the engine sampled for turn {segment.turn} "
            "verbatim. Not a tokenizer problem."
        )
    cut_prompt = segment.kind == "prompt" and 0 < len(theirs) < len(segment.ids)
    if cut_prompt and segment.ids[-len(theirs) :] == theirs:
        return (
            f"{who} kept only the last {len(theirs)} of the first prompt's "
            f"{len(segment.ids)} tokens: {hints.prompt_cut_fix}."
        )
    if segment.text is None:
        return "The env's text for that part is not known, so the tokenizers could not be compared."
    try:
        encoded = encode(segment.text) if encode is not None else None
    except Exception:  # a diagnostic only: no evidence either way
        encoded = None
    if encoded is None:
        return f"{who}'s tokenizer failed to encode the env's text, so no cause could be checked."
    if encoded != segment.ids:
        return (
            f"{who}'s tokenizer and the env's ({hints.tokenizer_name}) encode the env's text of "
            f"{segment.name} to different ids: {hints.tokenizer_fix}."
        )
    return (
        f"{who}'s tokenizer encodes the env's text of {segment.name} to the env's ids, so the "
        f"tokenizers agree there: {who} built its sequence from other text, or changed it."
    )


__all__ = [
    "MismatchHints",
    "Segment",
    "TokenMismatchError",
    "TrainerSequence",
    "describe_mismatch",
    "hf_encoder",
    "segments",
]
