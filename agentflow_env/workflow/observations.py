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

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces

from agentflow_env.base.spaces import AnyText, TokenIds
from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.base.untrusted import PlainText
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.action_input import MAX_TOKEN_ID
from agentflow_env.workflow.agentflow_source import AgentFlowWording
from agentflow_env.workflow.memory import Memory
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

    def as_gym(self) -> dict[str, Any]:
        return {"text": self.text, "token_ids": np.asarray(self.token_ids, dtype=np.int64)}


class PromptEncoder:
    """Renders and tokenizes structured prompts, encoding a repeated first message only once.

    The system message (instructions, tool cards) is the same on every turn of every episode
    and is most of the prompt. Its ids are reused when encoding it apart gives exactly the ids of
    encoding the whole prompt; that is checked once per distinct first message, so the ids
    always equal ``tokenizer.encode(text)``.
    """

    def __init__(self, tokenizer: ChatTokenizer, max_cached: int = 64) -> None:
        self.tokenizer = tokenizer
        self.plain = PlainText(tokenizer)
        self.max_cached = max_cached
        self._prefixes: dict[str, tuple[str, list[int]] | None] = {}

    def render(self, messages: Sequence[Message]) -> Observation:
        """The prompt for ``messages``; their contents are untrusted and rendered as plain text."""
        messages = [
            {"role": m["role"], "content": self.plain.neutralize(m["content"])} for m in messages
        ]
        text = self.tokenizer.render_chat(messages, add_generation_prompt=True)
        return Observation(text, self._encode(messages, text), tuple(messages))

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
    wording: AgentFlowWording | None = None
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
        return self.encoder.render(view.messages()), Observation("", [])


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
