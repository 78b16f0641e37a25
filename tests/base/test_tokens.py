"""The bundled byte-level BPE: exact round trips, ChatML, the HF wrapper and the shipped file."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from types import ModuleType

import pytest

from agentflow_env.base.tokens import (
    END_OF_TEXT,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    BundledTokenizer,
    ChatTokenizer,
    load_default_tokenizer,
    to_hf_tokenizer,
)

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_tokenizer.py"
MESSAGES = [
    {"role": "system", "content": "You are the planner."},
    {"role": "user", "content": " Question: who founded Veloria?\n\nTools: Search"},
    {
        "role": "assistant",
        "content": "Justification: j\nContext: c\nSub-Goal: s\nTool Name: Search",
    },
]


@pytest.fixture(scope="module")
def tok() -> BundledTokenizer:
    return load_default_tokenizer()


def _random_text(rng: random.Random) -> str:
    """Random Unicode scalar values, biased toward tricky ones (spaces, controls, specials)."""
    pieces = [" ", "  ", "\n", "\r\n", "\t", "\x00", "\u00a0", "\u200d", "\ufeff", "\U0001f600"]
    pieces += list(SPECIAL_TOKENS) + [
        "<|im_",
        "|>",
        "<|",
        "\u4e16\u754c",
        "\u05e9\u05dc\u05d5\u05dd",
    ]
    out = []
    for _ in range(rng.randint(0, 30)):
        kind = rng.random()
        if kind < 0.3:
            out.append(rng.choice(pieces))
        elif kind < 0.6:
            out.append(chr(rng.randint(0x20, 0x7E)))
        else:
            code = rng.randint(0, 0x10FFFF)
            while 0xD800 <= code <= 0xDFFF:  # surrogates are not encodable text
                code = rng.randint(0, 0x10FFFF)
            out.append(chr(code))
    return "".join(out)


def test_is_a_chat_tokenizer(tok: BundledTokenizer) -> None:
    assert isinstance(tok, ChatTokenizer)
    assert tok.name
    assert load_default_tokenizer() is tok


def test_vocab_size_is_about_512(tok: BundledTokenizer) -> None:
    assert 500 <= tok.vocab_size <= 512


def test_special_tokens_are_single_ids(tok: BundledTokenizer) -> None:
    ids = [tok.encode(token) for token in SPECIAL_TOKENS]
    assert all(len(token_ids) == 1 for token_ids in ids)
    assert len({token_ids[0] for token_ids in ids}) == 3
    assert tok.encode(IM_END) == [tok.eos_token_id]
    assert tok.encode(END_OF_TEXT) == [tok.pad_token_id]
    # Not split, even when glued to other text.
    assert tok.encode(f"x{IM_START}user") == tok.encode("x") + tok.encode(IM_START) + tok.encode(
        "user"
    )
    assert tok.decode([tok.eos_token_id]) == IM_END


@pytest.mark.parametrize(
    "text",
    [
        "",
        " leading space",
        "  two",
        "\n\nnewlines\n",
        "emoji \U0001f680\U0001f469\u200d\U0001f4bb",
        IM_END,
        f" {IM_START} ",
        "nul\x00byte",
        "\u0645\u0631\u062d\u0628\u0627",
        "a\u0301",
    ],
)
def test_round_trip_examples(tok: BundledTokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text


def test_round_trip_random_unicode(tok: BundledTokenizer) -> None:
    rng = random.Random(2024)
    for _ in range(500):
        text = _random_text(rng)
        assert tok.decode(tok.encode(text)) == text, repr(text)


def test_render_chat_is_chatml(tok: BundledTokenizer) -> None:
    expected = (
        "<|im_start|>system\nYou are the planner.<|im_end|>\n"
        "<|im_start|>user\n Question: who founded Veloria?\n\nTools: Search<|im_end|>\n"
        "<|im_start|>assistant\nJustification: j\nContext: c\nSub-Goal: s\nTool Name: Search"
        "<|im_end|>\n"
    )
    assert tok.render_chat(MESSAGES, add_generation_prompt=False) == expected
    assert tok.render_chat(MESSAGES) == expected + "<|im_start|>assistant\n"
    assert tok.render_chat([]) == "<|im_start|>assistant\n"


def test_rendered_chat_encodes_and_decodes_exactly(tok: BundledTokenizer) -> None:
    text = tok.render_chat(MESSAGES)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert ids.count(tok.eos_token_id) == len(MESSAGES)
    assert ids[0] == tok.encode(IM_START)[0]


def test_hf_wrapper_matches(tok: BundledTokenizer) -> None:
    pytest.importorskip("transformers")
    hf = to_hf_tokenizer(tok)
    assert hf.eos_token_id == tok.eos_token_id
    assert hf.pad_token_id == tok.pad_token_id
    assert hf.bos_token is None
    assert len(hf) == tok.vocab_size
    rendered = hf.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == tok.render_chat(MESSAGES)
    rendered = hf.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=False)
    assert rendered == tok.render_chat(MESSAGES, add_generation_prompt=False)
    rng = random.Random(5)
    for text in [tok.render_chat(MESSAGES)] + [_random_text(rng) for _ in range(50)]:
        assert hf.encode(text, add_special_tokens=False) == tok.encode(text)
        assert hf.decode(tok.encode(text)) == tok.decode(tok.encode(text))


def _load_build_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_tokenizer", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_file_is_what_the_build_script_produces(tmp_path: Path) -> None:
    output = tmp_path / "tokenizer.json"
    assert _load_build_script().main(["--output", str(output)]) == 0
    rebuilt = json.loads(output.read_text(encoding="utf-8"))
    shipped = json.loads(load_default_tokenizer().to_json())
    assert rebuilt["model"]["vocab"] == shipped["model"]["vocab"]
    assert rebuilt["model"]["merges"] == shipped["model"]["merges"]
    assert rebuilt["added_tokens"] == shipped["added_tokens"]


def test_compression_on_generated_documents(tok: BundledTokenizer) -> None:
    from agentflow_env.tasks.synthetic import SyntheticTaskSource

    world = SyntheticTaskSource().world
    assert world is not None
    documents = [doc.contents for doc in world.corpus.documents]
    n_chars = sum(len(doc) for doc in documents)
    n_tokens = sum(len(ids) for ids in tok.encode_batch(documents))
    assert n_chars / n_tokens > 2.0


def test_planner_keys_and_tool_names_are_single_tokens(tok: BundledTokenizer) -> None:
    for piece in ("Justification", "Context", "Sub", "Goal", "Tool", " Name", " Search"):
        assert len(tok.encode(piece)) == 1, piece
