"""Token ids for observations: a small bundled byte-level BPE with a ChatML chat format.

The package ships its own ~512-token BPE (``data/tokenizer.json``, built by
``scripts/build_tokenizer.py``) so the environment works offline and tiny models can be trained
on a CPU; a small vocabulary lets unseen fictional names be spelled from sub-word pieces.
Only the Rust ``tokenizers`` library is used here; ``to_hf_tokenizer`` imports transformers
lazily for trainers that need a Hugging Face tokenizer.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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
    "SplitPoints",
    "load_default_tokenizer",
    "render_chatml",
    "split_points_of",
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


# The pre-tokenizer regexes ``split_points_of`` knows besides GPT-2's (the one
# ``ByteLevel(use_regex=True)`` applies), as tokenizer.json spells them: Llama 3's and Qwen 2's,
# which differ only in how many digits a number piece takes.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
NEWLINE_SPLITS = frozenset({LLAMA3_SPLIT, QWEN2_SPLIT})
_PRINTABLE = "".join(chr(c) for c in range(0x21, 0x7F))
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class SplitPoints:
    """Where a text may be cut so that encoding its two parts apart gives exactly the ids of
    encoding it whole: ``encode(text) == encode(text[:at]) + encode(text[at:])`` whenever
    ``is_cut(text, at)``.

    Built by ``split_points_of`` for a tokenizer whose ids are provably local there: no normalizer
    (or NFC), one of the pre-tokenizer regexes above, added tokens without whitespace or strip
    flags, and a model that encodes each pre-token piece on its own (every ``tokenizers`` model).
    Then a cut is safe where the pieces of the whole text have a boundary and the pieces on each
    side do not depend on the other side:

    - GPT-2's regex, ``ByteLevel``'s own (``cut_before_space``): before the last character of a run of whitespace,
      that character being a space or a newline and the next one printable ASCII. The run's
      other characters form one piece whether the text goes on or ends there; the last one
      starts the next piece (a space joins the word after it, a newline stands alone).
    - Llama 3's and Qwen 2's regexes (``cut_before_space=False``): after a newline and before
      an ASCII letter. A piece holding a newline ends at the first character that is not
      whitespace, and a letter piece starts there, since no newline can lead it.

    The character after the cut never starts an added token, so the added-token split (done
    before the regex) is the same on each side as in the whole text.
    """

    def __init__(self, *, cut_before_space: bool, excluded: str = "") -> None:
        if cut_before_space:
            allowed = "".join(ch for ch in _PRINTABLE if ch not in excluded)
            pattern = f"(?=[ \\n][{re.escape(allowed)}])"
        else:
            allowed = "".join(ch for ch in _LETTERS if ch not in excluded)
            pattern = f"(?<=\\n)(?=[{re.escape(allowed)}])"
        self.cut_before_space = cut_before_space
        self._pattern = re.compile(pattern)

    def is_cut(self, text: str, at: int) -> bool:
        """Whether ``text`` may be cut at ``at`` (never at either end: nothing to split)."""
        return 0 < at < len(text) and self._pattern.match(text, at) is not None

    def next_cut(self, text: str, start: int, end: int | None = None) -> int:
        """The first cut at or after ``start`` and before ``end`` (the end of ``text`` by
        default), or -1 where there is none."""
        stop = len(text) if end is None else min(len(text), end + 1)
        match = self._pattern.search(text, max(start, 1), stop)
        if (
            match is None
            or match.start() >= len(text)
            or (end is not None and match.start() >= end)
        ):
            return -1
        return match.start()

    def last_cut(self, text: str, start: int, end: int) -> int:
        """The last cut at or after ``start`` and before ``end``, or -1 where there is none."""
        last = -1
        for match in self._pattern.finditer(text, max(start, 1), min(len(text), end + 1)):
            if match.start() >= min(end, len(text)):
                break
            last = match.start()
        return last

    def __repr__(self) -> str:
        return f"SplitPoints(cut_before_space={self.cut_before_space})"


def split_points_of(backend: Any) -> SplitPoints | None:
    """The safe cuts of a ``tokenizers.Tokenizer``'s encoding (see ``SplitPoints``), or ``None``
    where they cannot be shown from its configuration (then encode whole texts)."""
    if not isinstance(backend, Tokenizer) or backend.truncation or backend.padding:
        return None
    if getattr(backend.model, "dropout", None):
        return None
    normalizer = _state(backend.normalizer)
    if normalizer is not None and normalizer != {"type": "NFC"}:
        return None
    added = list(backend.get_added_tokens_decoder().values())
    for token in added:
        content = str(token.content)
        if not content or token.lstrip or token.rstrip or token.single_word:
            return None
        if any(ch.isspace() for ch in content):
            return None
    excluded = "".join(sorted({str(token.content)[0] for token in added}))
    cut_before_space = _splits_like_gpt2(_state(backend.pre_tokenizer))
    if cut_before_space is None:
        return None
    return SplitPoints(cut_before_space=cut_before_space, excluded=excluded)


def _state(component: Any) -> Any:
    """A tokenizer component's configuration as plain data (``None`` for none)."""
    if component is None:
        return None
    try:
        return json.loads(component.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return {"type": "unknown"}


def _splits_like_gpt2(config: Any) -> bool | None:
    """``True`` for GPT-2's regex, ``False`` for Llama 3's or Qwen 2's, ``None`` for any other
    pre-tokenizer (or one adding a prefix space)."""
    if not isinstance(config, dict):
        return None
    if config.get("type") == "ByteLevel":
        plain = config.get("add_prefix_space") is False
        return True if plain and config.get("use_regex") is True else None
    if config.get("type") != "Sequence":
        return None
    parts = config.get("pretokenizers") or []
    if len(parts) != 2 or not isinstance(parts[0], dict) or not isinstance(parts[1], dict):
        return None
    split, byte_level = parts
    if byte_level.get("type") != "ByteLevel" or byte_level.get("use_regex") is not False:
        return None
    if byte_level.get("add_prefix_space") is not False:
        return None
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    pattern = (split.get("pattern") or {}).get("Regex")
    return False if pattern in NEWLINE_SPLITS else None


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

    @functools.cached_property
    def split_points(self) -> SplitPoints | None:
        """Where this tokenizer's encodings may be cut (``SplitPoints``); ``None`` for a
        subclass with its own ``encode``."""
        if type(self).encode is not BundledTokenizer.encode:
            return None
        return split_points_of(self._tokenizer)

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
