"""Hugging Face tokenizers as ``ChatTokenizer``s, and resolving the env's ``tokenizer=`` argument.

``transformers`` is imported lazily: the core runs without it on the bundled tokenizer.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.base.tokens import (
    ChatTokenizer,
    SplitPoints,
    load_default_tokenizer,
    render_chatml,
    split_points_of,
)


class HFChatTokenizer:
    """Wraps a ``transformers`` tokenizer; chat rendering uses its own chat template if it has one.

    ``encode`` adds no special tokens (a BOS is part of the chat template when the model wants
    one), so ``encode`` of a rendered prompt is exactly what the model sees.
    """

    def __init__(self, tokenizer: Any, name: str | None = None) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token; set tokenizer.eos_token first")
        self.hf = tokenizer
        self._name = name or getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__

    @property
    def name(self) -> str:
        return self._name

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    @property
    def eos_token_id(self) -> int:
        return int(self.hf.eos_token_id)

    @property
    def pad_token_id(self) -> int:
        pad = self.hf.pad_token_id
        return int(pad if pad is not None else self.hf.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    @functools.cached_property
    def split_points(self) -> SplitPoints | None:
        """Where this tokenizer's encodings may be cut (``SplitPoints``): read from a fast
        tokenizer's backend; ``None`` for any other, or for a subclass with its own ``encode``."""
        if type(self).encode is not HFChatTokenizer.encode:
            return None
        if not getattr(self.hf, "is_fast", False):
            return None
        return split_points_of(getattr(self.hf, "backend_tokenizer", None))

    def decode(self, ids: Sequence[int]) -> str:
        return str(
            self.hf.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        )

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        if getattr(self.hf, "chat_template", None):
            return str(
                self.hf.apply_chat_template(
                    [dict(m) for m in messages],
                    tokenize=False,
                    add_generation_prompt=add_generation_prompt,
                )
            )
        return render_chatml(messages, add_generation_prompt=add_generation_prompt)

    def __repr__(self) -> str:
        return f"HFChatTokenizer({self.name!r}, vocab_size={self.vocab_size})"


def resolve_tokenizer(spec: Any = None) -> ChatTokenizer:
    """The env's tokenizer from ``None`` (bundled), a ``ChatTokenizer``, a Hugging Face tokenizer
    object, a local path (a directory or a ``tokenizer.json``), or a hub name from the local cache.
    """
    if spec is None:
        return load_default_tokenizer()
    if isinstance(spec, str):
        return HFChatTokenizer(_load_hf(spec), name=spec)
    if hasattr(spec, "apply_chat_template") and hasattr(spec, "encode"):
        return HFChatTokenizer(spec)
    needed = ("encode", "decode", "render_chat", "vocab_size", "eos_token_id")
    missing = [attr for attr in needed if not hasattr(spec, attr)]
    if missing:
        raise TypeError(f"tokenizer {type(spec).__name__} lacks {missing}; see ChatTokenizer")
    return spec


def _load_hf(spec: str) -> Any:
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "loading a tokenizer by path or name needs transformers: pip install 'agentflow-env[hf]'"
        ) from exc
    if os.path.isfile(spec):
        return PreTrainedTokenizerFast(tokenizer_file=spec)
    try:
        return AutoTokenizer.from_pretrained(spec, local_files_only=True)
    except OSError as exc:
        where = "directory" if os.path.isdir(spec) else "local Hugging Face cache"
        raise OSError(
            f"could not load tokenizer {spec!r} from the {where} (offline: nothing is downloaded). "
            "Download it once with `huggingface-cli download` or pass a local path."
        ) from exc
