"""Token ids for observations: a small bundled byte-level BPE with a ChatML chat format.

The package ships its own ~512-token BPE (``data/tokenizer.json``, built by
``scripts/build_tokenizer.py``) so the environment works offline and tiny models can be trained
on a CPU; a small vocabulary lets unseen fictional names be spelled from sub-word pieces.
Only the Rust ``tokenizers`` library is used here; ``to_hf_tokenizer`` imports transformers
lazily for trainers that need a Hugging Face tokenizer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "CHATML_TEMPLATE",
    "DEFAULT_VOCAB_SIZE",
    "END_OF_TEXT",
    "IM_END",
    "IM_START",
    "SPECIAL_TOKENS",
    "BundledTokenizer",
    "ChatTokenizer",
    "load_default_tokenizer",
    "render_chatml",
    "to_hf_tokenizer",
    "train_bpe",
]

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Trained first, so they get ids 0, 1, 2.
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)
DEFAULT_VOCAB_SIZE = 512
DEFAULT_TOKENIZER_RESOURCE = "data/tokenizer.json"

# The usual ChatML Jinja template; renders exactly like ``render_chatml``.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@runtime_checkable
class ChatTokenizer(Protocol):
    """What the environment needs from a tokenizer: exact text <-> ids and a chat format."""

    @property
    def name(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_token_id(self) -> int: ...

    @property
    def pad_token_id(self) -> int: ...

    def encode(self, text: str) -> list[int]:
        """Ids for ``text``, adding no special tokens and no prefix space."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text for ``ids``, special tokens kept."""
        ...

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The prompt text for a conversation of ``{"role": ..., "content": ...}`` messages."""
        ...


def render_chatml(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
    """ChatML: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message."""
    parts = [f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages]
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


class BundledTokenizer:
    """A byte-level BPE over ``tokenizers.Tokenizer`` with ChatML special tokens.

    ``decode(encode(s)) == s`` for every string of Unicode scalar values (lone surrogates cannot
    be UTF-8 encoded). Text that spells a special token encodes to that token's single id.
    """

    def __init__(self, tokenizer: Tokenizer, name: str = "agentflow-bpe") -> None:
        self._tokenizer = tokenizer
        self._name = name
        ids: dict[str, int] = {}
        for token in SPECIAL_TOKENS:
            token_id = tokenizer.token_to_id(token)
            if token_id is None or tokenizer.encode(token, add_special_tokens=False).ids != [
                token_id
            ]:
                raise ValueError(f"tokenizer does not encode {token!r} as one special token")
            ids[token] = token_id
        self._plain = Tokenizer.from_str(tokenizer.to_str())
        self._plain.encode_special_tokens = True
        self._eos_token_id = ids[IM_END]
        self._pad_token_id = ids[END_OF_TEXT]
        self._im_start_id = ids[IM_START]

    @classmethod
    def from_file(cls, path: str, name: str = "agentflow-bpe") -> BundledTokenizer:
        return cls(Tokenizer.from_file(path), name=name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    @property
    def eos_token_id(self) -> int:
        return self._eos_token_id

    @property
    def pad_token_id(self) -> int:
        return self._pad_token_id

    @property
    def im_start_id(self) -> int:
        return self._im_start_id

    @property
    def backend(self) -> Tokenizer:
        """The underlying ``tokenizers.Tokenizer`` (do not mutate it)."""
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_plain(self, text: str) -> list[int]:
        """Like ``encode``, but special-token spellings become the characters they are."""
        return list(self._plain.encode(text, add_special_tokens=False).ids)

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return SPECIAL_TOKENS

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [list(e.ids) for e in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        return render_chatml(messages, add_generation_prompt)

    def to_json(self) -> str:
        return str(self._tokenizer.to_str(pretty=True))

    def __repr__(self) -> str:
        return f"BundledTokenizer(name={self._name!r}, vocab_size={self.vocab_size})"


@functools.lru_cache(maxsize=1)
def load_default_tokenizer() -> BundledTokenizer:
    """The tokenizer shipped in the package (loaded once per process)."""
    resource = resources.files("agentflow_env").joinpath(DEFAULT_TOKENIZER_RESOURCE)
    return BundledTokenizer(Tokenizer.from_str(resource.read_text(encoding="utf-8")))


def train_bpe(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> BundledTokenizer:
    """Train a byte-level BPE: the special tokens, all 256 byte symbols, then merges.

    No normalizer and no prefix space, so encoding is exactly reversible. Training is
    deterministic for a given text sequence.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return BundledTokenizer(tokenizer)


def to_hf_tokenizer(tok: BundledTokenizer) -> PreTrainedTokenizerFast:
    """A ``transformers`` fast tokenizer with the same ids, special tokens and chat template.

    ``apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`` on the result
    equals ``tok.render_chat(messages)``. Imports transformers on first use.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tok.backend.to_str()),
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        bos_token=None,
        unk_token=None,
        chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )
