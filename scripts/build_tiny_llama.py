"""Build a tiny random Llama with the bundled tokenizer: a model vLLM's CPU build can serve.

    python scripts/build_tiny_llama.py OUT [--seed 0]

Two layers, hidden size 128, two heads of 64 (vLLM's CPU attention refuses a head size of 16),
the bundled tokenizer's vocabulary and its ChatML chat template, ``<|im_end|>`` as the end of a
turn. The weights are drawn from ``torch.Generator(seed)`` tensor by tensor, in name order, not
by ``transformers``' initialisers, so one seed gives the same model under any transformers
version. Saved in float32 (safetensors), with the tokenizer and a generation config, so that
``vllm.entrypoints.openai.api_server --model OUT`` and ``AutoModelForCausalLM`` both load it.
Needs torch and transformers (the test venv).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HIDDEN = 128
HEADS = 2  # head size 64
LAYERS = 2
INTERMEDIATE = 256
MAX_POSITIONS = 4096
STD = 0.5
"""The weights' standard deviation: large enough that the greedy reply depends on the prompt."""
OUTPUT_BOOST = 3.0
"""The output rows of ``<|im_end|>`` and of the whitespace tokens are scaled by this, so that on
the env's prompts some greedy replies stop at ``<|im_end|>``, some right away (empty), some are
whitespace only and others run to their cap: every kind of reply a served planner can give."""


def build(out: str | Path, seed: int = 0) -> Path:
    """Write the model, its tokenizer and generation config to ``out``; returns ``out``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer

    tokenizer = load_default_tokenizer()
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            if name.endswith("norm.weight"):
                tensor.fill_(1.0)
            else:
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * STD)
        boosted = [tokenizer.eos_token_id, *whitespace_ids(tokenizer)]
        model.lm_head.weight[boosted] *= OUTPUT_BOOST
    folder = Path(out)
    model.save_pretrained(folder, safe_serialization=True)
    to_hf_tokenizer(tokenizer).save_pretrained(folder)
    GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        do_sample=False,
    ).save_pretrained(folder)
    return folder


def whitespace_ids(tokenizer: Any) -> list[int]:
    """The ids of the tokens whose text is whitespace only (``str.strip`` removes all of it)."""
    return [i for i in range(tokenizer.vocab_size) if not tokenizer.decode([i]).strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out", help="the folder to write the model to")
    parser.add_argument("--seed", type=int, default=0, help="draws the weights (default 0)")
    args = parser.parse_args()
    print(build(args.out, args.seed))


if __name__ == "__main__":
    main()
