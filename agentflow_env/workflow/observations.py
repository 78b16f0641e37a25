"""Planner observations: prompts rendered afresh (structured) or grown token-exactly (flat).

How prompts evolve over an episode is an ``ObservationStrategy`` the session is given, one per
``ObservationMode`` setting:

- ``StructuredObservations`` (``observation_mode="structured"``, AgentFlow's way): every prompt is
  rendered afresh from memory; nothing is appended, so the feedback is empty.
- ``FlatObservations`` (``observation_mode="flat"``): one conversation grown token-exactly, each
  prompt being the previous prompt's ids + the action's ids + the feedback's ids.

``make_observations(mode, encoder)`` builds the strategy a setting names.
"""

from __future__ import annotations

import bisect
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces

from agentflow_env.base.spaces import AnyText, TokenIds
from agentflow_env.base.tokens import ChatTokenizer, SplitPoints
from agentflow_env.base.untrusted import PlainText
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.action_input import MAX_TOKEN_ID
from agentflow_env.workflow.memory import Memory
from agentflow_env.workflow.prompt_pack import PromptPack
from agentflow_env.workflow.prompts import (
    Message,
    chat_continuation,
    planner_messages,
    step_feedback,
)


@dataclass
class Observation:
    """The planner's next prompt: chat-rendered text ending with the assistant header, and its ids."""

    text: str
    token_ids: list[int]
    messages: tuple[Message, ...] = ()
    """The plain chat messages (role + content, no template markup) ``text`` renders, for a trainer
    that applies its own chat template: the whole prompt when rendered afresh, the one user message
    of appended feedback; empty for a grown flat prompt."""
    cuts: EncodedCuts | None = field(default=None, repr=False, compare=False)
    """Where ``PromptEncoder`` cut ``text`` when encoding it (bookkeeping: the episode's next
    prompt re-encodes only from the last cut before what changed); ``None`` where unknown."""

    def as_gym(self) -> dict[str, Any]:
        return {"text": self.text, "token_ids": np.asarray(self.token_ids, dtype=np.int64)}


@dataclass(frozen=True)
class EncodedCuts:
    """The safe cuts (``SplitPoints``) an observation's ids were encoded at: ``(character
    offset, number of ids before it)``, ascending, so ``token_ids[:count]`` are exactly the ids of
    ``text[:offset]``."""

    splits: SplitPoints
    """The tokenizer's rule the cuts follow (an observation from another tokenizer is ignored)."""
    points: tuple[tuple[int, int], ...]


class PromptEncoder:
    """Renders and tokenizes structured prompts, encoding a repeated first message only once.

    The system message (instructions, tool cards) is the same on every turn of every episode
    and is most of the prompt. Its ids are reused when encoding it apart gives exactly the ids of
    encoding the whole prompt; that is checked once per distinct first message, so the ids
    always equal ``tokenizer.encode(text)``.

    Where the tokenizer shows where its encodings may be cut (``split_points``: the bundled
    tokenizer and Hugging Face fast tokenizers of the common byte-level kinds), the rest is
    encoded in pieces cut there, mostly at paragraph breaks, and the observation keeps its cuts
    (``EncodedCuts``). The episode's next prompt shares all but its end with this one (memory
    grows by whole steps); its ids are this one's up to the last cut both share, then the new
    rest encoded in pieces, so a step's encoding costs what changed, not the whole prompt. The
    first ``verify`` prompts encoded in pieces are also encoded whole and compared; a difference
    (never seen: the cuts are safe by construction) turns the pieces off for good.
    """

    MIN_PIECE_CHARS = 64
    """A piece ends at the first paragraph break (with a safe cut) this far past its start..."""
    MAX_PIECE_CHARS = 1024
    """...or, with none before this, at the first safe cut after it."""
    MAX_KEPT_PIECES = 512
    """How many pieces' ids are kept (``_encode_piece``), the least recently used dropped..."""
    MAX_KEPT_PIECE_CHARS = 4096
    """...and how long a kept piece may be."""

    def __init__(self, tokenizer: ChatTokenizer, max_cached: int = 64, *, verify: int = 8) -> None:
        self.tokenizer = tokenizer
        self.plain = PlainText(tokenizer)
        self.max_cached = max_cached
        self._prefixes: dict[str, tuple[str, list[int]] | None] = {}
        splits = getattr(tokenizer, "split_points", None)
        self.splits: SplitPoints | None = splits if isinstance(splits, SplitPoints) else None
        """The tokenizer's safe cuts; ``None``: every prompt is encoded as before, whole after
        the cached first message."""
        self._unverified = verify
        self._pieces: dict[str, list[int]] = {}

    def render(
        self, messages: Sequence[Message], previous: Observation | None = None
    ) -> Observation:
        """The prompt for ``messages``; their contents are untrusted and rendered as plain text.

        ``previous``: the episode's prompt before this one, whose ids are reused up to the last
        cut the two prompts share (the ids equal ``tokenizer.encode(text)`` either way)."""
        messages = [
            {"role": m["role"], "content": self.plain.neutralize(m["content"])} for m in messages
        ]
        text = self.tokenizer.render_chat(messages, add_generation_prompt=True)
        if self.splits is None:
            return Observation(text, self._encode(messages, text), tuple(messages))
        ids, cuts = self._encode_in_pieces(messages, text, previous, self.splits)
        return Observation(text, ids, tuple(messages), cuts)

    def _encode(self, messages: Sequence[Message], text: str) -> list[int]:
        if not messages:
            return self.tokenizer.encode(text)
        key = messages[0]["role"] + "\x00" + messages[0]["content"]
        if key not in self._prefixes:
            return self._learn(key, messages[0], text)
        cached = self._prefixes[key]
        if cached is None or not text.startswith(cached[0]):
            return self.tokenizer.encode(text)
        prefix, prefix_ids = cached
        return prefix_ids + self.tokenizer.encode(text[len(prefix) :])

    def _encode_in_pieces(
        self,
        messages: Sequence[Message],
        text: str,
        previous: Observation | None,
        splits: SplitPoints,
    ) -> tuple[list[int], EncodedCuts | None]:
        start, ids, points, shared = _reusable(text, previous, splits)
        if not points:
            start, ids = self._first_message(messages, text)
        # The text up to where the two prompts part is likely shared with the next prompt too:
        # the first piece ends at the last cut before it, so the next prompt can start there.
        near = -1
        if shared - start > self.MIN_PIECE_CHARS:
            near = splits.last_cut(text, max(start, shared - self.MIN_PIECE_CHARS * 4), shared)
        while start < len(text):
            cut = near if near > start else self._piece_end(text, start, splits)
            stop = len(text) if cut < 0 else cut
            ids += self._encode_piece(text[start:stop])
            if cut >= 0:
                points.append((cut, len(ids)))
            start = stop
        if self._unverified > 0:
            self._unverified -= 1
            whole = self.tokenizer.encode(text)
            if whole != ids:
                self.splits = None
                return whole, None
        return ids, EncodedCuts(splits, tuple(points))

    def _encode_piece(self, piece: str) -> list[int]:
        """``tokenizer.encode(piece)``; the ids of recent short pieces are kept (the prompt's
        fixed text between cuts: instructions, the step line, the chat glue), most recent use
        last."""
        pieces = self._pieces
        ids = pieces.pop(piece, None)
        if ids is None:
            ids = self.tokenizer.encode(piece)
            if len(piece) > self.MAX_KEPT_PIECE_CHARS:
                return ids
            if len(pieces) >= self.MAX_KEPT_PIECES:
                with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                    pieces.pop(next(iter(pieces)))  # (another thread may drop it first)
        pieces[piece] = ids
        return ids

    def _first_message(self, messages: Sequence[Message], text: str) -> tuple[int, list[int]]:
        """Where encoding in pieces starts without a previous prompt: after the cached first
        message (its ids copied), else at the start."""
        if not messages:
            return 0, []
        key = messages[0]["role"] + "\x00" + messages[0]["content"]
        if key not in self._prefixes:
            self._learn(key, messages[0], text)
        cached = self._prefixes[key]
        if cached is None or not text.startswith(cached[0]):
            return 0, []
        return len(cached[0]), list(cached[1])

    def _piece_end(self, text: str, start: int, splits: SplitPoints) -> int:
        """The cut ending the piece that starts at ``start`` (-1: the piece runs to the end)."""
        late = start + self.MAX_PIECE_CHARS
        brk = text.find("\n\n", start + self.MIN_PIECE_CHARS, late)
        while brk >= 0:
            cut = splits.next_cut(text, brk, brk + 3)
            if cut >= 0:
                return cut
            brk = text.find("\n\n", brk + 2, late)
        return splits.next_cut(text, late) if late < len(text) else -1

    def _learn(self, key: str, first: Message, text: str) -> list[int]:
        ids = self.tokenizer.encode(text)
        prefix = self.tokenizer.render_chat([first], add_generation_prompt=False)
        usable = None
        if text.startswith(prefix):
            prefix_ids = self.tokenizer.encode(prefix)
            if prefix_ids + self.tokenizer.encode(text[len(prefix) :]) == ids:
                usable = (prefix, prefix_ids)
        if len(self._prefixes) >= self.max_cached:
            self._prefixes.pop(next(iter(self._prefixes)))
        self._prefixes[key] = usable
        return ids


def _reusable(
    text: str, previous: Observation | None, splits: SplitPoints
) -> tuple[int, list[int], list[tuple[int, int]], int]:
    """From ``previous``'s cuts, the last one before ``text`` and ``previous.text`` part that is
    a safe cut of ``text`` too: its offset, the ids before it and the cuts up to it; and how many
    characters the two texts share."""
    cuts = previous.cuts if previous is not None else None
    if cuts is None or cuts.splits is not splits or not cuts.points:
        return 0, [], [], 0
    points, old, old_ids = cuts.points, previous.text, previous.token_ids  # type: ignore[union-attr]
    shared = _shared_length(text, old)
    index = bisect.bisect_right(points, (shared, len(old_ids)))
    while index > 0:
        index -= 1
        at, count = points[index]
        if count <= len(old_ids) and splits.is_cut(text, at):
            return at, old_ids[:count], list(points[: index + 1]), shared
    return 0, [], [], shared


def _shared_length(one: str, other: str) -> int:
    """The length of the longest common prefix of ``one`` and ``other``."""
    low, high = 0, min(len(one), len(other))
    while low < high:  # one[:low] == other[:low], and they differ before ``high``, if at all
        middle = (low + high + 1) // 2
        if one.startswith(other[low:middle], low):
            low = middle
        else:
            high = middle - 1
    return low


def grow_prompt(
    plain: PlainText, prompt: Observation, action_ids: list[int], user_text: str
) -> tuple[Observation, Observation]:
    """A flat-mode step: ``prompt + action + feedback`` exactly, and the feedback alone.

    The feedback is tokenized on its own (as OpenRLHF does), so its ids never merge with the
    action's; it carries the chat glue that closes the assistant turn and opens the next one.
    ``user_text`` is untrusted (tool output, planner fields) and becomes plain text. The action
    ids stand as the policy produced them; ids the tokenizer cannot decode add no text.
    """
    tokenizer = plain.tokenizer
    ended = bool(action_ids) and action_ids[-1] == tokenizer.eos_token_id
    content = plain.neutralize(user_text)
    text = chat_continuation(tokenizer, content, after_eos=ended)
    feedback = Observation(text, tokenizer.encode(text), ({"role": "user", "content": content},))
    readable = [i for i in action_ids if i < tokenizer.vocab_size]
    grown = Observation(
        prompt.text + tokenizer.decode(readable) + text,
        prompt.token_ids + action_ids + feedback.token_ids,
    )
    return grown, feedback


@dataclass(frozen=True)
class PromptView:
    """What an observation strategy reads to write the planner's next prompt."""

    memory: Memory
    tools: ToolSet
    max_turns: int
    style: str = "full"
    show_sub_questions: bool = True
    final_text: str | None = None
    """The generalist's text once the episode is over; ``None`` while it runs."""
    termination: str = "verifier"
    """Who may end the episode (``SessionConfig.termination``): the prompt describes the
    planner's finish action where it may finish."""
    wording: PromptPack | None = None
    """AgentFlow's own words from the user's checkout (``SessionConfig.agentflow_wording``)."""

    @property
    def next_turn(self) -> int:
        """The turn the next prompt asks for (counting from 1)."""
        return len(self.memory) + 1

    def messages(self) -> list[Message]:
        """The structured prompt's messages for the next turn, rendered from memory."""
        return planner_messages(
            self.memory,
            self.tools,
            self.next_turn,
            self.max_turns,
            style=self.style,
            show_sub_questions=self.show_sub_questions,
            termination=self.termination,
            wording=self.wording,
        )


ObservationMode = Literal["structured", "flat"]
"""The ``observation_mode`` settings, each the name of a strategy in ``OBSERVATION_MODES``."""


class ObservationStrategy(ABC):
    """How the planner's prompts evolve over an episode: one strategy per observation mode.

    A strategy holds no episode state (one instance serves many sessions); it reads the
    episode through a ``PromptView``.
    """

    name: ClassVar[str]
    """The ``observation_mode`` setting that names this strategy."""
    grows: ClassVar[bool] = False
    """Whether each prompt is the previous one + the action + the feedback, exactly: then a
    prompt is the whole conversation so far (one flat training sample, a total token budget)."""

    def __init__(self, encoder: PromptEncoder) -> None:
        self.encoder = encoder

    def first(self, view: PromptView) -> Observation:
        """The episode's first prompt (the same in every mode)."""
        return self.encoder.render(view.messages())

    @abstractmethod
    def next(
        self, prompt: Observation, action_ids: list[int], view: PromptView
    ) -> tuple[Observation, Observation]:
        """The prompt after ``prompt`` and the action ``action_ids``, and the feedback appended
        to get it (empty when nothing is appended)."""

    def feedback_info(self, feedback: Observation) -> dict[str, Any]:
        """The keys ``info`` carries about a step's feedback (none by default)."""
        return {}

    def token_id_limit(self, vocab_size: int) -> int:
        """Ids in an observation lie in ``[0, token_id_limit)``."""
        return vocab_size

    def observation_space(self, vocab_size: int) -> spaces.Dict:
        """The Gymnasium space of this mode's observations ``{"text", "token_ids"}``."""
        limit = self.token_id_limit(vocab_size)
        return spaces.Dict({"text": AnyText(), "token_ids": TokenIds(vocab_size, id_limit=limit)})

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class StructuredObservations(ObservationStrategy):
    """Each prompt rendered afresh from memory (AgentFlow); the feedback is empty."""

    name = "structured"

    def next(
        self, prompt: Observation, action_ids: list[int], view: PromptView
    ) -> tuple[Observation, Observation]:
        return self.encoder.render(view.messages(), previous=prompt), Observation("", [])


class FlatObservations(ObservationStrategy):
    """One conversation grown token-exactly: previous ids + action ids + feedback ids.

    The action ids stand as the policy produced them, even ids past the tokenizer's vocabulary
    (a padded embedding), so observations admit every id an action may hold.
    """

    name = "flat"
    grows = True

    def next(
        self, prompt: Observation, action_ids: list[int], view: PromptView
    ) -> tuple[Observation, Observation]:
        return grow_prompt(self.encoder.plain, prompt, action_ids, self.feedback_message(view))

    def feedback_message(self, view: PromptView) -> str:
        """The user turn that follows an action: the step's result, or the episode's end."""
        if view.final_text is not None:
            return "The episode is over. " + view.final_text
        return step_feedback(
            view.memory,
            view.next_turn,
            view.max_turns,
            show_open_questions=view.show_sub_questions,
        )

    def feedback_info(self, feedback: Observation) -> dict[str, Any]:
        info: dict[str, Any] = {
            "feedback_text": feedback.text,
            "feedback_token_ids": list(feedback.token_ids),
        }
        if feedback.messages:  # the same feedback as one plain message, for any chat template
            info["feedback_message"] = dict(feedback.messages[-1])
        return info

    def token_id_limit(self, vocab_size: int) -> int:
        return MAX_TOKEN_ID + 1


OBSERVATION_MODES: Mapping[str, type[ObservationStrategy]] = {
    mode.name: mode for mode in (StructuredObservations, FlatObservations)
}
"""The strategies by ``observation_mode`` setting."""


def check_observation_mode(mode: str) -> None:
    """Raise ``ValueError`` unless ``mode`` names an observation strategy."""
    if not isinstance(mode, str) or mode not in OBSERVATION_MODES:
        names = " or ".join(repr(name) for name in OBSERVATION_MODES)
        raise ValueError(f"observation_mode must be {names}, got {mode!r}")


def make_observations(mode: str, encoder: PromptEncoder) -> ObservationStrategy:
    """The strategy the ``observation_mode`` setting ``mode`` names, rendering with ``encoder``."""
    check_observation_mode(mode)
    return OBSERVATION_MODES[mode](encoder)
