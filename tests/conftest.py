"""Fixtures shared by several test modules."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
# Test modules share cases and fixtures by module name (``from test_trl import tiny_model``)
# across the layer folders, whichever folder pytest collects first.
for _folder in sorted(Path(__file__).parent.iterdir()):
    if _folder.is_dir() and any(_folder.glob("test_*.py")):
        sys.path.append(str(_folder))
from vllm_server import VLLMServer, start_vllm_server, stop_vllm_server  # noqa: E402


def load_adapter(path: str | Path, name: str) -> types.ModuleType:
    """Load an adapter file by path the way OpenRLHF loads ``--train.agent_func_path``
    (``importlib.util.spec_from_file_location``, then ``exec_module``): a fresh module on every
    call, not registered in ``sys.modules`` (``adapters/`` is not a package). ``path`` is absolute
    or relative to the repository root."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LLAMA_STYLE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


@pytest.fixture(scope="session")
def llama_style_hf_tokenizer() -> Any:
    """A second tokenizer unlike the bundled one: a bigger byte-level BPE, other special tokens,
    a BOS and a Llama-3 style chat template (a ``transformers.PreTrainedTokenizerFast``)."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from agentflow_env.tasks.synthetic import training_text

    specials = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(itertools.islice(training_text(2), 6000)), trainer=trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        chat_template=LLAMA_STYLE_TEMPLATE,
    )


@pytest.fixture
def tiny_llama_dir(tmp_path: Any) -> Any:
    """A randomly initialised one-layer Llama saved with the bundled tokenizer (no downloads)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer

    tokenizer = load_default_tokenizer()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    to_hf_tokenizer(tokenizer).save_pretrained(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """One real vLLM server (CPU build) for the whole test session, serving the tiny random
    Llama of ``scripts/build_tiny_llama.py`` (``tests/vllm_server.py``); stopped at the end.
    Fails, naming ``scripts/install_vllm_env.sh``, when ``.venv-vllm`` is missing."""
    server, process = start_vllm_server(tmp_path_factory.mktemp("vllm"))
    print(f"\nvLLM server healthy after {server.started_in_s:.0f} s at {server.base_url}")
    try:
        yield server
    finally:
        stop_vllm_server(process)


_FOLDER_MARKS = {"adapters": pytest.mark.trainer}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark by folder: ``tests/adapters/`` runs the trainers (``trainer``); the files at the top
    of ``tests/`` cross every layer (``e2e``). ``pytest tests/workflow`` stays a quick loop, and
    ``pytest -m "not slow and not trainer and not vllm"`` a quick pass over everything."""
    here = Path(__file__).resolve().parent
    for item in items:
        relative = item.path.resolve().relative_to(here)
        if len(relative.parts) == 1:
            item.add_marker(pytest.mark.e2e)
        elif relative.parts[0] in _FOLDER_MARKS:
            item.add_marker(_FOLDER_MARKS[relative.parts[0]])
