"""Prompts made incrementally are exactly the prompts made afresh.

A structured prompt is re-encoded only from the last safe cut the previous prompt of the episode
shares with it (``PromptEncoder``, ``SplitPoints``), and the texts that do not change within an
episode (memory steps, the query analysis, tool cards, AgentFlow's metadata and step dicts) are
rendered once per record. Here every observation, over many episodes and turns, prompt styles,
observation modes and tokenizers (the bundled one, a Hugging Face one, one with Qwen 2's
pre-tokenizer regex and NFC), equals a full re-render from uncached copies of its records
and a full re-encode; the cut rule holds on hostile text; and a tokenizer whose cuts are not safe
is caught and encoded whole.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import random
import re
from dataclasses import asdict
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

import agentflow_env  # noqa: F401  (registers the envs)
from agentflow_env.base.hf_tokens import HFChatTokenizer
from agentflow_env.base.tokens import (
    LLAMA3_SPLIT,
    NEWLINE_SPLITS,
    QWEN2_SPLIT,
    SPECIAL_TOKENS,
    BundledTokenizer,
    SplitPoints,
    load_default_tokenizer,
    split_points_of,
)
from agentflow_env.base.untrusted import BREAK, PlainText, neutralize_chat_markup
from agentflow_env.modules.agentflow_prompts import command_messages
from agentflow_env.modules.agentflow_prompts import generalist_messages as af_generalist_messages
from agentflow_env.modules.agentflow_prompts import verifier_messages as af_verifier_messages
from agentflow_env.modules.llm import LLMQueryAnalysis
from agentflow_env.modules.prompts import (
    executor_messages,
    generalist_messages,
    initializer_messages,
    verifier_messages,
)
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import PlannerAction, format_planner_action
from agentflow_env.workflow.agentflow_format import (
    memory_actions,
    memory_actions_text,
    tool_metadata,
    tool_metadata_text,
    toolbox_metadata,
    toolbox_metadata_text,
)
from agentflow_env.workflow.memory import Memory
from agentflow_env.workflow.observations import Observation, PromptEncoder
from agentflow_env.workflow.prompts import cards_text, planner_messages

STYLES = ("full", "compact", "agentflow")
MODES = ("structured", "flat")
TOKENIZERS = ("bundled", "hf", "newline")
HOSTILE_PIECES = [
    " ", "  ", "\n", "\n\n", "\n\n\n", "\r\n", "\t", " \n", "\n ", "\n  ", "\u00a0", "\u2028",
    "\u0085", "\u0301", "e\u0301", "'s", "'ll", "'", "Step", " 12", "1234", ":", ".", "{", "}",
    "<|im_end|>", "<|im_start|>", "<|eot_id|>", "<|", "|>", "<", "x", "Ab", "\u4e16", "\U0001f600",
    "\x1c", "\u200b",
]  # fmt: skip


def _newline_rule_tokenizer() -> BundledTokenizer:
    """A small byte-level BPE with Qwen 2's pre-tokenizer regex and an NFC normalizer."""
    from agentflow_env.tasks.synthetic import training_text

    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = _split(QWEN2_SPLIT)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(itertools.islice(training_text(3), 3000)), trainer=trainer)
    return BundledTokenizer(backend, name="newline-rule-test")


@pytest.fixture(scope="module")
def newline_tokenizer() -> BundledTokenizer:
    return _newline_rule_tokenizer()


@pytest.fixture(scope="module")
def tokenizer(request: Any, llama_style_hf_tokenizer: Any, newline_tokenizer: Any) -> Any:
    which = request.param
    if which == "bundled":
        return load_default_tokenizer()
    if which == "hf":
        return HFChatTokenizer(llama_style_hf_tokenizer, name="llama-style-test")
    if which == "newline":
        return newline_tokenizer
    return _bundled_variant(which)


def _bundled_variant(which: str) -> BundledTokenizer:
    """The bundled vocabulary under another configuration (merges apply within any piece)."""
    backend = Tokenizer.from_str(load_default_tokenizer().backend.to_str())
    if which.endswith("nfc"):
        backend.normalizer = normalizers.NFC()
    if which.startswith("llama3"):
        backend.pre_tokenizer = _split(LLAMA3_SPLIT)
    return BundledTokenizer(backend, name=which)


# -- the cut rule ------------------------------------------------------------------------------
@pytest.mark.parametrize("tokenizer", TOKENIZERS, indirect=True)
def test_every_tokenizer_here_shows_its_cuts(tokenizer: Any) -> None:
    splits = tokenizer.split_points
    assert isinstance(splits, SplitPoints)
    assert splits.cut_before_space == (tokenizer.name != "newline-rule-test")


@pytest.mark.parametrize("tokenizer", [*TOKENIZERS, "bundled-nfc", "llama3"], indirect=True)
@settings(max_examples=150, derandomize=True, deadline=None)
@given(pieces=st.lists(st.sampled_from(HOSTILE_PIECES) | st.characters(), max_size=40))
def test_encoding_the_two_sides_of_a_cut_gives_the_whole_texts_ids(
    tokenizer: Any, pieces: list[str]
) -> None:
    text = "".join(pieces).encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
    splits = tokenizer.split_points
    whole = tokenizer.encode(text)
    cuts = [at for at in range(len(text) + 1) if splits.is_cut(text, at)]
    for at in cuts:
        assert tokenizer.encode(text[:at]) + tokenizer.encode(text[at:]) == whole, (text, at)
    found, at = [], splits.next_cut(text, 0)
    while at >= 0:
        found.append(at)
        at = splits.next_cut(text, at + 1)
    assert found == cuts
    for start in range(len(text)):  # bounded searches find the first and last cut before an end
        for end in (start + 1, start + 3, start + 9):
            inside = [c for c in cuts if start <= c < end]
            assert splits.next_cut(text, start, end) == (inside[0] if inside else -1)
            assert splits.last_cut(text, start, end) == (inside[-1] if inside else -1)


def test_a_naive_cut_at_an_indented_line_would_change_the_ids() -> None:
    tok = load_default_tokenizer()
    text = "Step 2:\n  Sub-Goal: find it"
    at = text.index("Sub-Goal")
    assert tok.encode(text[:at]) + tok.encode(text[at:]) != tok.encode(text)
    assert not tok.split_points.is_cut(text, at)
    assert tok.split_points.is_cut(text, at - 1)  # the last space joins the word after it


def _backend(
    pre_tokenizer: Any = None, normalizer: Any = None, added: list[AddedToken] | None = None
) -> Tokenizer:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.add_special_tokens(added or [AddedToken("<|end|>", special=True)])
    return backend


def _split(pattern: str) -> Any:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(_backend(normalizer=normalizers.Lowercase()), id="lowercasing"),
        pytest.param(_backend(normalizer=normalizers.NFKC()), id="nfkc"),
        pytest.param(_backend(pre_tokenizers.ByteLevel(add_prefix_space=True)), id="prefix-space"),
        pytest.param(_backend(pre_tokenizers.ByteLevel(use_regex=False)), id="no-regex"),
        pytest.param(_backend(pre_tokenizers.Whitespace()), id="whitespace"),
        pytest.param(_backend(pre_tokenizers.Metaspace()), id="metaspace"),
        pytest.param(_backend(_split(r"\s+|\S+")), id="unknown-regex"),
        pytest.param(_backend(added=[AddedToken("<|x|>", lstrip=True)]), id="lstrip"),
        pytest.param(_backend(added=[AddedToken("<|x|>", rstrip=True)]), id="rstrip"),
        pytest.param(_backend(added=[AddedToken("a b", special=True)]), id="spaced-token"),
        pytest.param(_backend(added=[AddedToken("\n\n", special=True)]), id="newline-token"),
    ],
)
def test_no_cuts_where_the_configuration_does_not_show_them(backend: Tokenizer) -> None:
    assert split_points_of(backend) is None


def test_known_configurations_show_their_cuts() -> None:
    assert split_points_of(_backend()) is not None
    assert split_points_of(_backend(normalizer=normalizers.NFC())) is not None
    for pattern in NEWLINE_SPLITS:
        assert split_points_of(_backend(_split(pattern))).cut_before_space is False  # type: ignore[union-attr]
    truncating = _backend()
    truncating.enable_truncation(16)
    assert split_points_of(truncating) is None
    assert split_points_of(object()) is None


def test_a_slow_hugging_face_tokenizer_shows_no_cuts() -> None:
    class Slow:
        eos_token_id, pad_token_id, is_fast, name_or_path = 0, 0, False, "slow"

    assert HFChatTokenizer(Slow()).split_points is None


def test_a_tokenizer_with_its_own_encode_shows_no_cuts(llama_style_hf_tokenizer: Any) -> None:
    class Bundled(BundledTokenizer):
        def encode(self, text: str) -> list[int]:
            return super().encode(text.upper())

    class Wrapped(HFChatTokenizer):
        def encode(self, text: str) -> list[int]:
            return super().encode(text.upper())

    assert Bundled(load_default_tokenizer().backend).split_points is None
    assert Wrapped(llama_style_hf_tokenizer).split_points is None
    assert HFChatTokenizer(llama_style_hf_tokenizer).split_points is not None


# -- whole episodes ----------------------------------------------------------------------------
def _fresh_copy(memory: Memory) -> Memory:
    """The same memory from new records (nothing rendered for them yet)."""
    fresh = Memory(memory.query, memory.tools)
    if memory.analysis is not None:
        fresh.set_analysis(dataclasses.replace(memory.analysis))
    for entry in memory.entries:
        fresh.add_entry(dataclasses.replace(entry))
    return fresh


def _reference(session: Any, tok: Any) -> tuple[str, list[int]]:
    """The session's next structured prompt rendered afresh and encoded whole."""
    config = session.config
    messages = planner_messages(
        _fresh_copy(session.memory),
        session.tools,
        len(session.memory) + 1,
        config.max_turns,
        style=config.prompt_style,
        show_sub_questions=config.show_sub_questions,
        termination=config.termination,
        wording=config.agentflow_wording,
    )
    plain = PlainText(tok)
    shown = [{"role": m["role"], "content": plain.neutralize(m["content"])} for m in messages]
    text = tok.render_chat(shown, add_generation_prompt=True)
    return text, tok.encode(text)


def _action(task: Any, turn: int, rng: random.Random) -> str:
    step = task.gold_plan[min(turn, len(task.gold_plan) - 1)]
    kind = rng.random()
    if kind < 0.5:
        return format_planner_action("Follow the plan.", step.context, step.sub_goal, step.tool)
    if kind < 0.65:
        return format_planner_action("Other.", f"words {rng.random()}", "Look.", "Search")
    if kind < 0.75:
        return format_planner_action("Sum.", "12 + 30 * 2", "Add.", "Calculator")
    if kind < 0.85:
        return format_planner_action("Odd.", "<|im_end|>\n\n<|eot_id|> x", "Break.", "NoSuchTool")
    return "Tool Name: Search\nContext: " + "long text\n\n  " * rng.randint(1, 40)


def _check_episode(
    env: Any, tok: Any, seed: int, mode: str, *, fork_at: int | None = None
) -> tuple[int, int]:
    """Steps one episode, checking every structured prompt; counts (prompts checked, steps)."""
    rng = random.Random(seed)
    obs, _ = env.reset(seed=seed)
    session = env.unwrapped.session
    checked = steps = 0
    text, ids = _reference(session, tok)
    assert obs["text"] == text and obs["token_ids"].tolist() == ids
    checked += 1
    done = False
    while not done:
        if fork_at is not None and session.turn == fork_at:
            _check_fork(session, tok, rng)
        obs, _, terminated, truncated, _ = env.step(_action(session.task, session.turn, rng))
        steps += 1
        done = terminated or truncated
        if mode == "structured":
            text, ids = _reference(session, tok)
            assert obs["text"] == text, (seed, session.turn)
            assert obs["token_ids"].tolist() == ids, (seed, session.turn)
            checked += 1
    return checked, steps


def _check_fork(session: Any, tok: Any, rng: random.Random) -> None:
    """A fork stepped apart: its prompts and the original's stay exact and apart."""
    import asyncio

    async def run() -> None:
        fork = session.fork()
        for _ in range(2):
            if fork.done:
                break
            outcome = await fork.step(_action(fork.task, fork.turn + 3, rng))
            if fork.observations.name == "structured" and not fork.done:
                text, ids = _reference(fork, tok)
                assert outcome.observation.text == text
                assert outcome.observation.token_ids == ids

    asyncio.run(run())


@pytest.mark.parametrize("tokenizer", TOKENIZERS, indirect=True)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("style", STYLES)
def test_prompts_equal_a_full_render_and_encode(tokenizer: Any, mode: str, style: str) -> None:
    env = gym.make(
        "AgentFlow-Search-v0",
        tokenizer=tokenizer,
        prompt_style=style,
        observation_mode=mode,
        max_turns=9,
        hops=3,
        termination="both" if style == "compact" else "verifier",
        show_sub_questions=style != "full",
    )
    encoder = env.unwrapped.prompt_encoder
    checked = 0
    for seed in range(6):
        checked += _check_episode(env, tokenizer, seed, mode, fork_at=2 if seed == 1 else None)[0]
    assert checked >= 6 if mode == "flat" else checked >= 30
    assert encoder.splits is tokenizer.split_points  # the pieces were used, never turned off
    env.close()


@pytest.mark.parametrize("style", STYLES)
def test_long_episodes_stay_exact_and_encode_only_what_changed(style: str) -> None:
    tok = _CountingTokenizer(load_default_tokenizer())
    env = gym.make("AgentFlow-Search-v0", tokenizer=tok, prompt_style=style, max_turns=31)
    rng = random.Random(7)
    for seed in range(2):
        obs, _ = env.reset(seed=seed)
        session = env.unwrapped.session
        for turn in range(30):
            action = format_planner_action(
                "More.", f"unrelated words {seed} {turn}", "G.", "Search"
            )
            if rng.random() < 0.2:
                action = _action(session.task, turn, rng)
            before = obs["text"]
            tok.chars = 0
            obs, _, terminated, truncated, _ = env.step(action)
            encoded = tok.chars
            if terminated or truncated:
                break
            text, ids = _reference(session, tok)
            assert obs["text"] == text and obs["token_ids"].tolist() == ids
            if turn >= 12:  # past the encoder's checks of its first prompts (whole encodes)
                shared = len(os.path.commonprefix([before, text]))
                assert encoded <= len(text) - shared + 1100, (turn, encoded, len(text), shared)
                assert encoded < len(text) // 2, (turn, encoded, len(text))
    env.close()


class _CountingTokenizer:
    """The bundled tokenizer, counting the characters it is asked to encode."""

    def __init__(self, inner: BundledTokenizer) -> None:
        self.inner = inner
        self.chars = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode(self, text: str) -> list[int]:
        self.chars += len(text)
        return self.inner.encode(text)

    def decode(self, ids: Any) -> str:
        return self.inner.decode(ids)

    def render_chat(self, messages: Any, add_generation_prompt: bool = True) -> str:
        return self.inner.render_chat(messages, add_generation_prompt)


class _WholeTextTokenizer:
    """Encodes a whole text as one id, yet claims safe cuts: every piece changes the ids."""

    name, vocab_size, eos_token_id, pad_token_id = "whole", 10**6, 0, 0
    split_points = SplitPoints(cut_before_space=True)

    def encode(self, text: str) -> list[int]:
        return [len(text) % self.vocab_size]

    def decode(self, ids: Any) -> str:
        return "?"

    def render_chat(self, messages: Any, add_generation_prompt: bool = True) -> str:
        body = "".join(f"[{m['role']}]{m['content']}" for m in messages)
        return body + ("[assistant]" if add_generation_prompt else "")


def test_cuts_that_change_the_ids_are_caught_and_turned_off() -> None:
    encoder = PromptEncoder(_WholeTextTokenizer())
    previous: Observation | None = None
    for turn in range(4):
        user = "Query: q\n\n" + "\n\n".join(
            f"Step {i}: a long line of words" * 5 for i in range(turn)
        )
        messages = [{"role": "system", "content": "tools " * 40}, {"role": "user", "content": user}]
        observation = encoder.render(messages, previous=previous)
        assert observation.token_ids == [len(observation.text)]
        previous = observation
    assert encoder.splits is None


def test_an_observation_of_another_tokenizer_is_not_reused(newline_tokenizer: Any) -> None:
    bundled = load_default_tokenizer()
    messages = [
        {"role": "system", "content": "tools"},
        {"role": "user", "content": "Query: a\n\nMemory:\n" + "Step 1:\n  Tool: Search\n" * 90},
    ]
    foreign = PromptEncoder(newline_tokenizer).render(messages)
    assert foreign.cuts is not None and foreign.cuts.points
    mine = PromptEncoder(bundled).render(messages, previous=foreign)
    assert mine.token_ids == bundled.encode(mine.text) != foreign.token_ids


# -- texts rendered once -----------------------------------------------------------------------
def _played_session(style: str, turns: int = 4) -> Any:
    env = gym.make("AgentFlow-Search-v0", prompt_style=style, max_turns=10, hops=3)
    env.reset(seed=3)
    rng = random.Random(3)
    session = env.unwrapped.session
    for turn in range(turns):
        env.step(_action(session.task, turn, rng))
    return session


@pytest.mark.parametrize("style", STYLES)
def test_module_prompts_equal_those_of_uncached_records(style: str) -> None:
    session = _played_session(style)
    memory, tools = session.memory, session.tools
    fresh = _fresh_copy(memory)
    for _ in range(2):  # the second time from what the first kept
        assert cards_text(tools) == tools.cards_text()
        assert toolbox_metadata_text(tools) == str(toolbox_metadata(tools))
        assert memory_actions_text(memory) == str(memory_actions(fresh))
        for tool in tools:
            assert tool_metadata_text(tool) == str(tool_metadata(tool))
        assert verifier_messages(memory, tools.names) == verifier_messages(fresh, tools.names)
        assert generalist_messages(memory) == generalist_messages(fresh)
        assert af_verifier_messages(memory, tools) == af_verifier_messages(fresh, tools)
        assert af_generalist_messages(memory) == af_generalist_messages(fresh)
        assert tools.cards_text() in initializer_messages("q?", tools)[1]["content"]
        for tool in tools:
            action = PlannerAction("j", "c <|im_end|>", "s", tool.name)
            renamed = copy.copy(tool)
            renamed.card = dataclasses.replace(tool.card)  # a card nothing was rendered for
            assert executor_messages(action, tool, "q?") == executor_messages(action, renamed, "q?")
            assert command_messages("q?", "s", "c", tool) == command_messages(
                "q?", "s", "c", renamed
            )


def test_a_new_card_is_rendered_anew() -> None:
    session = _played_session("agentflow", turns=1)
    tools = session.tools
    before = toolbox_metadata_text(tools)
    tool = next(iter(tools))
    original = tool.card
    try:
        tool.card = dataclasses.replace(original, description="Another description.")
        assert toolbox_metadata_text(tools) == str(toolbox_metadata(tools)) != before
        assert "Another description." in tool_metadata_text(tool)
    finally:
        tool.card = original
    assert toolbox_metadata_text(tools) == before


def test_unhashable_tools_are_described_every_time() -> None:
    session = _played_session("agentflow", turns=1)
    tool = next(iter(session.tools))
    unhashable = object.__new__(type("Unhashable", (type(tool),), {"__hash__": None}))
    unhashable.__dict__.update(tool.__dict__)
    tools = ToolSet([unhashable])
    for _ in range(2):
        assert tool_metadata_text(unhashable) == str(tool_metadata(unhashable))
        assert toolbox_metadata_text(tools) == str(toolbox_metadata(tools))


def test_the_analysis_event_is_what_asdict_makes() -> None:
    analysis = LLMQueryAnalysis(
        objective="o",
        constraints=("a", "b"),
        sub_questions=("q",),
        tools=("Search",),
        raw="r",
        meta={"latency_s": 0.1, "usage": {"prompt_tokens": 3}, "list": [1, (2, None)]},
    )
    odd = LLMQueryAnalysis(objective="o", meta={"box": _Box()})  # not plain: asdict copies it
    for record in (analysis, odd):
        memory = Memory("q")
        memory.set_analysis(record)
        logged = memory.events[0].payload["analysis"]
        assert logged == asdict(record)
        assert logged["meta"] is not record.meta
        assert type(logged["constraints"]) is tuple
    assert isinstance(logged["meta"]["box"], _Box) and logged["meta"]["box"] is not odd.meta["box"]


class _Box:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Box)

    __hash__ = object.__hash__


def test_entry_records_and_evidence_are_fresh_containers() -> None:
    session = _played_session("full")
    entry = session.memory.entries[0]
    first, second = entry.as_dict(), entry.as_dict()
    assert first == second and first["tool_arguments"] is not second["tool_arguments"]
    first["errors"].append("changed")
    assert entry.as_dict() == second
    fresh = dataclasses.replace(entry)
    assert fresh.as_dict() == second
    assert session.memory.evidence() == _fresh_copy(session.memory).evidence()


# -- untrusted text ----------------------------------------------------------------------------
_MARKUP_PIECES = ["<", "[", "|", "\uff5c", ">", "]", "/", "INST", "SYS", "s", "<<SYS>>",
                  "<|im_end|>", "[/INST]", "<s>", "</s>", "start_of_turn", " ", "\n", "eos",
                  "<<", "\ud800", "\ud83d\ude00", "<" * 70]  # fmt: skip
_CHAT_MARKUP = re.compile(
    r"<[|\uff5c][^<>|\uff5c\s]{1,48}[|\uff5c]>"
    r"|</?(?:start_of_turn|end_of_turn|s|bos|eos|pad|unk)>"
    r"|\[/?(?:INST|SYS|AVAILABLE_TOOLS|TOOL_CALLS|TOOL_RESULTS)\]"
    r"|<</?SYS>>"
)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(pieces=st.lists(st.sampled_from(_MARKUP_PIECES) | st.characters(), max_size=60))
def test_chat_markup_is_broken_where_one_scan_breaks_it(pieces: list[str]) -> None:
    text = "".join(pieces)
    repaired = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    expected = _CHAT_MARKUP.sub(lambda m: m.group(0)[0] + BREAK + m.group(0)[1:], repaired)
    assert neutralize_chat_markup(text) == expected
