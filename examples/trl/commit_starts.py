"""Writes the SFT starts of a ``recipe.py --phases sft checkpoints`` run as the committed starts.

``checkpoints/sft_step800.safetensors`` and ``checkpoints/sft_step1200.safetensors`` (safetensors:
no pickle to trust), and ``checkpoints/checkpoints.json``: per start its file's sha256, the
settings and command that made it, its parameter count and its scores on the frozen suite (the
``sft_step800.json`` and ``sft.json`` the run wrote). ``recipe.py --start sft800`` and
``recipe_common.load_start`` load them by name.

    python examples/trl/recipe.py --out runs/sft_start/out --work runs/sft_start/work \\
        --phases sft checkpoints --pass-k 8 --threads 1
    python examples/trl/commit_starts.py --work runs/sft_start/work --out runs/sft_start/out
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_model

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from recipe_common import CHECKPOINTS, COMMITTED_STARTS  # noqa: E402
from train_tiny_cpu import build_model  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402

SFT_COMMAND = (
    "python examples/trl/recipe.py --out runs/sft_start/out --work runs/sft_start/work "
    "--phases sft checkpoints --pass-k 8 --threads 1"
)
SOURCES = {
    "sft800": ("sft_step800.pt", "sft_step800.json"),
    "sft1200": ("sft_model.pt", "sft.json"),
}
KEEP = ("hidden", "layers", "heads", "sft_seed", "sft_demos", "sft_steps", "sft_lr", "threads")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/sft_start/work", help="recipe.py's --work")
    parser.add_argument("--out", default="runs/sft_start/out", help="recipe.py's --out")
    args = parser.parse_args()
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    CHECKPOINTS.mkdir(exist_ok=True)
    record = {}
    for name, (weights, scores) in SOURCES.items():
        result = json.loads((Path(args.out) / scores).read_text())
        settings = {k: result["settings"][k] for k in KEEP}
        model = build_model(tokenizer, settings["hidden"], settings["layers"], settings["heads"])
        model.load_state_dict(torch.load(Path(args.work) / weights))
        target = CHECKPOINTS / COMMITTED_STARTS[name]
        save_model(model, str(target))
        record[name] = {
            "file": target.name,
            "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
            "sft_step": result.get("step", settings["sft_steps"]),
            "parameters": sum(p.numel() for p in model.parameters()),
            "settings": {**settings, "env": result["settings"]["env"]},
            "command": f"{SFT_COMMAND} && python examples/trl/commit_starts.py",
            "sft_train_s": result.get("train_s"),
            "greedy": {k: result["greedy"][k] for k in ("success", "ci95", "episodes")},
            "greedy_invalid_actions": result["greedy"]["invalid_actions"],
            "sampled": result["sampled"],
        }
        print(name, record[name]["greedy"], flush=True)
    (CHECKPOINTS / "checkpoints.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
