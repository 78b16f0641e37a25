"""The token item and the tokenizer facts.

In flat observation mode every prompt is the previous prompt + the action's ids + the feedback's
ids, and the trainer's sample (``Trajectory.flat_sample``) masks exactly the action ids. The
item checks that on the records of an expert episode, and that the tokenizer's chat template
renders the same conversation (first messages, then each action and feedback) to exactly those
ids: a template that re-renders earlier turns differently breaks what a trainer that re-renders
the conversation would train on. A difference is told by its first token and character, and by
the part of the flat sequence holding it (``segments`` of ``agentflow_env.rollout.checks.token_check``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.base.untrusted import special_token_strings
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.evaluation.preflight.episodes import (
    ExpertRun,
    StepLog,
    run_expert,
)
from agentflow_env.evaluation.preflight.report import CheckItem
from agentflow_env.modules import ROLES
from agentflow_env.rollout.checks.token_check import TrainerSequence, segments
from agentflow_env.workflow.prompts import Message, step_feedback
from agentflow_env.workflow.session import Session
from agentflow_env.workflow.trajectory import TurnRecord

TOKENS = "policy tokens masked"
SHOWN_TOKENS = 12
_ASSISTANT_MARK = "PREFLIGHT-ASSISTANT-TEXT"


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter one's length if one is a
    prefix of the other); ``None`` if they are equal."""
    if list(a) == list(b):
        return None
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def assistant_text(tokenizer: ChatTokenizer, action_ids: Sequence[int]) -> str:
    """An action as the content of its assistant message: its text without a closing end-of-turn
    token (the template adds it), ids past the vocabulary left out as the env leaves them out."""
    ids = list(action_ids)
    if ids and ids[-1] == tokenizer.eos_token_id:
        ids = ids[:-1]
    return tokenizer.decode([i for i in ids if i < tokenizer.vocab_size])


def check_flat_tokens(base: AgentFlowEnv, seed: int, log: StepLog) -> CheckItem:
    """The item on a flat-mode copy of ``base`` (its config with ``observation_mode="flat"``)."""
    flat = type(base)(base.config.updated(observation_mode="flat"))
    try:
        return _check_flat(flat, seed, log)
    finally:
        flat.close()


def _check_flat(flat: AgentFlowEnv, seed: int, log: StepLog) -> CheckItem:
    tokenizer, plain = flat.tokenizer, flat.prompt_encoder.plain
    conversations: list[list[Message]] = []  # the messages behind each observation

    def on_reset(session: Session) -> None:
        first = session.messages()
        conversations.append([{**m, "content": plain.neutralize(m["content"])} for m in first])

    def on_step(session: Session, info: dict[str, Any], ended: bool) -> None:
        action = assistant_text(tokenizer, session.turn_records[-1].action_ids)
        if ended:
            user = "The episode is over. " + str(info.get("final_text", ""))
        else:
            user = step_feedback(session.memory, session.turn + 1, session.config.max_turns)
        conversations.append(
            [
                *conversations[-1],
                {"role": "assistant", "content": action},
                {"role": "user", "content": plain.neutralize(user)},
            ]
        )

    run = run_expert(flat, flat, seed, log, "flat expert", on_reset, on_step)
    if run.error is not None:
        failure = f"the flat episode failed: {type(run.error).__name__}: {run.error}"
        dropped = drops_assistant_text(tokenizer)
        return CheckItem(TOKENS, False, failure + (f"; {dropped}" if dropped else ""))
    turns = flat.trajectory().turns
    if not turns:
        return CheckItem(TOKENS, False, "the flat episode has no turns")
    problem = _growth_problem(turns, run) or _mask_problem(flat, turns)
    problem = problem or _template_problem(flat, run, conversations)
    if problem:
        return CheckItem(TOKENS, False, problem)
    sample = flat.trajectory().flat_sample()
    marked = sum(sample.loss_mask)
    return CheckItem(
        TOKENS,
        True,
        f"flat sample of {len(turns)} turn(s), {len(sample.input_ids)} tokens: the {marked} "
        f"marked 1 are exactly the actions' ids, the other {len(sample.input_ids) - marked} are "
        f"0; each prompt = previous prompt + action + feedback ids; the chat template renders "
        f"the conversation to the same ids at all {len(conversations)} prompts",
    )


def _growth_problem(turns: Sequence[TurnRecord], run: ExpertRun) -> str | None:
    """Each prompt is the previous prompt + action + feedback, and the observations are them."""
    prompts = [list(t.prompt_ids) for t in turns]
    prompts.append([int(i) for i in run.observations[-1]["token_ids"]])
    for index, turn in enumerate(turns):
        grown = list(turn.prompt_ids) + list(turn.action_ids) + list(turn.feedback_ids)
        at = first_difference(prompts[index + 1], grown)
        if at is not None:
            return (
                f"the prompt after turn {turn.turn} is not turn {turn.turn}'s prompt + action + "
                f"feedback: they differ at token {at} ({prompts[index + 1][at : at + 6]} vs "
                f"{grown[at : at + 6]})"
            )
    for index, observation in enumerate(run.observations[:-1]):
        if [int(i) for i in observation["token_ids"]] != prompts[index]:
            return f"turn {index + 1}'s recorded prompt ids are not the observation it was given"
    return None


def _mask_problem(flat: AgentFlowEnv, turns: Sequence[TurnRecord]) -> str | None:
    """The flat sample's mask is 1 exactly on the action ids, 0 elsewhere."""
    sample = flat.trajectory().flat_sample()
    expected = [0] * len(turns[0].prompt_ids)
    for index, turn in enumerate(turns):
        expected += [1] * len(turn.action_ids)
        if index + 1 < len(turns):
            expected += [0] * len(turn.feedback_ids)
    at = first_difference(sample.loss_mask, expected)
    if at is not None:
        return f"the loss mask differs from 1-on-actions at token {at} of {len(expected)}"
    marked = [i for i, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m == 1]
    actions = [i for turn in turns for i in turn.action_ids]
    at = first_difference(marked, actions)
    if at is not None:
        return f"the tokens marked 1 differ from the actions' ids at action token {at}"
    return None


def _template_problem(
    flat: AgentFlowEnv, run: ExpertRun, conversations: Sequence[Sequence[Message]]
) -> str | None:
    """The chat template renders each conversation so far to the env's prompt ids."""
    tokenizer = flat.tokenizer
    parts = segments(TrainerSequence(session=flat.session))
    for index, (messages, observation) in enumerate(
        zip(conversations, run.observations, strict=False)
    ):
        rendered = tokenizer.render_chat(messages, add_generation_prompt=True)
        ours = [int(i) for i in observation["token_ids"]]
        theirs = tokenizer.encode(rendered)
        at = first_difference(theirs, ours)
        if at is None:
            continue
        part = next((p.name for p in parts if p.start <= at < p.start + len(p.ids)), "its end")
        text = str(observation["text"])
        char = first_difference(rendered, text)
        where = "the first prompt" if index == 0 else f"the prompt after turn {index}"
        texts = (
            "the texts are equal: only their split into tokens differs"
            if char is None
            else f"first differing character {char}: template {rendered[char : char + 40]!r}, "
            f"flat {text[char : char + 40]!r}"
        )
        return (
            f"{where}: the chat template re-renders the conversation so far to other ids than "
            f"the grown flat prompt, first at token {at} of {len(ours)} ({len(theirs)} "
            f"re-rendered), in {part}: template ids {theirs[at : at + 6]}, flat ids "
            f"{ours[at : at + 6]}; {texts}"
        )
    return None


def drops_assistant_text(tokenizer: ChatTokenizer) -> str | None:
    """What is wrong when the chat template leaves out an earlier assistant turn's text (then
    no feedback can follow an action in the template's own glue); ``None`` if it keeps it."""
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": _ASSISTANT_MARK},
        {"role": "user", "content": "next"},
    ]
    text = tokenizer.render_chat(messages, add_generation_prompt=True)
    if _ASSISTANT_MARK in text:
        return None
    return (
        "the chat template drops the text of an earlier assistant turn: it renders "
        f"[user, assistant {_ASSISTANT_MARK!r}, user] as {text!r}"
    )


def closes_assistant_turns(tokenizer: ChatTokenizer) -> str:
    """Whether the chat template puts the end-of-turn token after an assistant message."""
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _ASSISTANT_MARK}]
    text = tokenizer.render_chat(messages, add_generation_prompt=False)
    after = text[text.index(_ASSISTANT_MARK) + len(_ASSISTANT_MARK) :]
    eos = tokenizer.decode([tokenizer.eos_token_id])
    if eos and after.startswith(eos):
        return f"yes ({eos!r} right after an assistant message)"
    if eos and eos in after:
        return f"yes ({eos!r} in {after!r} after an assistant message)"
    return f"no: after an assistant message comes {after!r}, without the end-of-turn {eos!r}"


def env_facts(base: AgentFlowEnv, first_prompt_tokens: int | None) -> dict[str, Any]:
    """Facts about the configuration, each computed on its own (a failing one says why)."""
    tokenizer = base.tokenizer
    getters: dict[str, Any] = {
        "tokenizer": lambda: f"{tokenizer.name} ({type(tokenizer).__name__})",
        "vocab size": lambda: tokenizer.vocab_size,
        "special/added tokens": lambda: _clipped(special_token_strings(tokenizer)),
        "end-of-turn token": lambda: (
            f"{tokenizer.decode([tokenizer.eos_token_id])!r} (id {tokenizer.eos_token_id})"
        ),
        "template closes assistant turns": lambda: closes_assistant_turns(tokenizer),
        "first prompt tokens": lambda: (
            "unknown (no episode started)" if first_prompt_tokens is None else first_prompt_tokens
        ),
        "max_turns": lambda: base.session_config.max_turns,
        "observation mode": lambda: base.session_config.observation_mode,
        "tools": lambda: list(base.tools.names),
        "modules": lambda: {role: type(getattr(base.modules, role)).__name__ for role in ROLES},
    }
    facts: dict[str, Any] = {}
    for key, getter in getters.items():
        try:
            facts[key] = getter()
        except Exception as error:
            facts[key] = f"error: {type(error).__name__}: {error}"
    return facts


def _clipped(tokens: Sequence[str]) -> list[str]:
    shown = sorted(tokens)[:SHOWN_TOKENS]
    if len(tokens) > SHOWN_TOKENS:
        shown.append(f"... ({len(tokens)} in all)")
    return shown
