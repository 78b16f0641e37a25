"""Flow-GRPO on a real planner model with TRL (GPU; not run in CI).

The model plays AgentFlow's planner; the environment (offline rule modules, BM25 search over a
synthetic world by default) owns everything else. Optionally warm-starts with SFT on expert
demonstrations first. Generation uses TRL's vLLM engine with ``--use-vllm`` (colocated by
default), else ``model.generate``.

    python examples/trl/train_grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --use-vllm \\
        --hops 1 2 --max-turns 5 --steps 200 --out runs/grpo-qwen0.5b

The model and its tokenizer must already be in the local Hugging Face cache or be a local path.
Held-out success (greedy, test-split worlds) is printed before and after training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

from agentflow_env.rollout.agents.demonstrations import expert_demonstrations

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters" / "trl"))
from rollout import HFGenerator, env_reward, make_rollout_func, run_episodes, task_prompt  # noqa: E402


def evaluate(model: Any, tokenizer: Any, env: dict[str, Any], episodes: int, tokens: int) -> float:
    """Greedy held-out success on test-split tasks (fresh worlds if ``fresh_world``)."""
    generate = HFGenerator(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], greedy=True)
    specs = [(3_000_000 + i, {**env, "split": "test"}) for i in range(episodes)]
    results = []
    for start in range(0, episodes, 64):
        results += run_episodes(
            specs[start : start + 64], generate, tokenizer, max_action_tokens=tokens
        )
    return sum(r.success for r in results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="hub name (cached) or local path")
    parser.add_argument("--out", default="runs/grpo")
    parser.add_argument("--use-vllm", action="store_true")
    parser.add_argument("--vllm-mode", default="colocate", choices=["colocate", "server"])
    parser.add_argument("--hops", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--prompt-style", default="full", choices=["full", "compact"])
    parser.add_argument(
        "--fixed-world", action="store_true", help="one default world, no fresh ones"
    )
    parser.add_argument("--max-action-tokens", type=int, default=256)
    parser.add_argument("--sft-demos", type=int, default=0, help="expert episodes for a warm start")
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--questions-per-step", type=int, default=8)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient")
    parser.add_argument("--eval-episodes", type=int, default=500)
    args = parser.parse_args()

    env: dict[str, Any] = {
        "hops": args.hops,
        "max_turns": args.max_turns,
        "prompt_style": args.prompt_style,
        "fresh_world": not args.fixed_world,
    }
    if not args.fixed_world:
        env["world_size"] = "small"
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32
    )
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    env_for_model = {**env, "tokenizer": tokenizer}
    on_gpu = torch.cuda.is_available()  # CPU only for a smoke test of this script
    report: dict[str, Any] = {"settings": {**vars(args), "env": env}}
    report["success_initial"] = evaluate(
        model, tokenizer, env, args.eval_episodes, args.max_action_tokens
    )
    print("held-out success before:", report["success_initial"], flush=True)

    if args.sft_demos:
        records = expert_demonstrations(range(args.sft_demos), env_for_model, style="full")
        data = Dataset.from_list(
            [{"prompt": r["prompt"], "completion": r["completion"]} for r in records]
        )
        SFTTrainer(
            model=model,
            args=SFTConfig(
                output_dir=f"{args.out}/sft",
                max_steps=args.sft_steps,
                per_device_train_batch_size=8,
                learning_rate=1e-5,
                bf16=on_gpu,
                use_cpu=not on_gpu,
                report_to=[],
                save_strategy="no",
            ),
            train_dataset=data,
            processing_class=tokenizer,
        ).train()
        report["success_after_sft"] = evaluate(
            model, tokenizer, env, args.eval_episodes, args.max_action_tokens
        )
        print("held-out success after SFT:", report["success_after_sft"], flush=True)

    prompts = [task_prompt(i) for i in range(args.steps * args.questions_per_step)]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=GRPOConfig(
            output_dir=args.out,
            per_device_train_batch_size=args.questions_per_step * args.num_generations,
            num_generations=args.num_generations,
            max_steps=args.steps,
            learning_rate=args.lr,
            beta=args.beta,
            temperature=args.temperature,
            loss_type="grpo",
            scale_rewards="group",
            max_completion_length=args.max_turns * (args.max_action_tokens + 512),
            use_vllm=args.use_vllm,
            vllm_mode=args.vllm_mode,
            bf16=on_gpu,
            use_cpu=not on_gpu,
            logging_steps=5,
            save_strategy="no",
            report_to=[],
        ),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        rollout_func=make_rollout_func(env, max_action_tokens=args.max_action_tokens),
    )
    trainer.train()
    report["success_after_grpo"] = evaluate(
        model, tokenizer, env, args.eval_episodes, args.max_action_tokens
    )
    print("held-out success after GRPO:", report["success_after_grpo"], flush=True)
    trainer.save_model(args.out)
    Path(args.out, "report.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
