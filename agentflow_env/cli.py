"""The ``agentflow-env`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm import tqdm

from agentflow_env.episodes import EpisodeRecord, run_episode, summarize
from agentflow_env.render import render_turn


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentflow-env", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run planner episodes and print a summary")
    run.add_argument("--env", default="AgentFlow-Search-v0", help="registered environment id")
    run.add_argument("--planner", default="expert", help="expert | random | openai | hf:PATH")
    run.add_argument("--episodes", type=int, default=3)
    run.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    run.add_argument("--hops", type=int, default=None, help="documents each question needs")
    run.add_argument("--kinds", default=None, help="comma-separated: bridge,comparison,arithmetic")
    run.add_argument("--split", default="test", choices=["train", "test", "all"])
    run.add_argument("--max-turns", type=int, default=10)
    run.add_argument("--fresh-world", action="store_true", help="a new small world per episode")
    run.add_argument("--modules", default="rule", choices=["rule", "llm"], help="frozen modules")
    run.add_argument("--reward", default="exact_match", choices=["exact_match", "f1", "llm_judge"])
    run.add_argument(
        "--tokenizer", default=None, help="env tokenizer (default: bundled, or hf:PATH's)"
    )
    served = run.add_argument_group("served planner (--planner openai)")
    served.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1"
    )
    served.add_argument("--model", default=None)
    served.add_argument("--api-key", default=None)
    served.add_argument("--temperature", type=float, default=None)
    local = run.add_argument_group("local planner (--planner hf:PATH)")
    local.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    local.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    run.add_argument("--out", default=None, help="write one JSON line per episode here")
    verbosity = run.add_mutually_exclusive_group()
    verbosity.add_argument("--verbose", action="store_true", help="print every turn")
    verbosity.add_argument("--quiet", action="store_true", help="print only the summary")
    run.set_defaults(handler=_run_command)
    _add_retrieval_commands(commands)
    return parser


def _add_retrieval_commands(commands: Any) -> None:
    index = commands.add_parser("build-index", help="index a corpus JSONL once, cached on disk")
    index.add_argument("--corpus", required=True, help="corpus JSONL: {id, contents} per line")
    index.add_argument(
        "--out",
        default=None,
        help="cache dir; the index goes to OUT/<corpus_id> "
        "(default: $AGENTFLOW_ENV_CACHE/indexes or ~/.cache/agentflow_env/indexes)",
    )
    index.add_argument("--force", action="store_true", help="rebuild even if cached")
    index.set_defaults(handler=_build_index_command)

    serve = commands.add_parser(
        "serve-retriever", help="serve a corpus over Search-R1's POST /retrieve protocol"
    )
    serve.add_argument("--corpus", required=True, help="corpus JSONL: {id, contents} per line")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument("--topk", type=int, default=3, help="when a request gives none")
    serve.add_argument("--cache-dir", default=None, help="index cache dir (as build-index --out)")
    serve.add_argument("--no-cache", action="store_true", help="build in memory, skip the disk")
    serve.add_argument("--batch-window-ms", type=float, default=2.0)
    serve.set_defaults(handler=_serve_retriever_command)


def _build_index_command(args: argparse.Namespace) -> int:
    from agentflow_env.retrieval.index_store import build_index_command

    return build_index_command(args.corpus, args.out, force=args.force)


def _serve_retriever_command(args: argparse.Namespace) -> int:
    from agentflow_env.retrieval.server import serve_corpus_file

    return serve_corpus_file(
        args.corpus,
        host=args.host,
        port=args.port,
        topk=args.topk,
        cache_dir=args.cache_dir,
        use_cache=not args.no_cache,
        batch_window_s=args.batch_window_ms / 1000,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


def _run_command(args: argparse.Namespace) -> int:
    import agentflow_env  # noqa: F401  (registers the environments)

    kwargs: dict[str, Any] = {
        "split": args.split,
        "max_turns": args.max_turns,
        "modules": args.modules,
        "reward": args.reward,
    }
    tokenizer = args.tokenizer or _planner_tokenizer(args.planner)
    if tokenizer is not None:
        kwargs["tokenizer"] = tokenizer
    if args.hops is not None:
        kwargs["hops"] = args.hops
    if args.kinds:
        kwargs["kinds"] = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if args.fresh_world:
        kwargs["fresh_world"] = True
    env = gym.make(args.env, **kwargs)
    planner = _make_planner(args, env)
    show_turns = args.verbose or (not args.quiet and args.episodes <= 5)
    records: list[EpisodeRecord] = []
    out = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115
    try:
        bar = tqdm(
            range(args.episodes),
            desc=f"{args.planner} planner",
            disable=show_turns or args.quiet,
            file=sys.stderr,
        )
        for index in bar:
            record = run_episode(env, planner, seed=args.seed + index)
            records.append(record)
            if show_turns:
                _print_episode(record)
            if out is not None:
                out.write(json.dumps(record.as_dict(), ensure_ascii=False) + "\n")
            bar.set_postfix(success=f"{sum(r.success for r in records) / len(records):.0%}")
    finally:
        if out is not None:
            out.close()
        close_planner = getattr(planner, "close", None)
        if callable(close_planner):
            close_planner()
        env.close()
    summary = summarize(records)
    print(
        f"Summary ({args.planner} planner, {summary['episodes']} episodes): "
        f"success rate {summary['success_rate']:.1%}, mean turns {summary['mean_turns']:.2f}, "
        f"tool calls {summary['tool_calls']}, invalid calls {summary['invalid_calls']}"
    )
    return 0


def _make_planner(args: argparse.Namespace, env: gym.Env) -> Any:
    from agentflow_env.planners import ExpertPlanner, RandomPlanner

    name = args.planner
    if name == "expert":
        return ExpertPlanner(env)
    if name == "random":
        return RandomPlanner(env, seed=args.seed)
    if name == "openai":
        from agentflow_env.llm import LLMEndpoint
        from agentflow_env.llm_planners import OpenAIPlanner

        overrides = {"base_url": args.base_url, "model": args.model, "api_key": args.api_key}
        endpoint = LLMEndpoint.from_env(
            "planner", **{k: v for k, v in overrides.items() if v is not None}
        )
        return OpenAIPlanner(endpoint, env, temperature=args.temperature)
    if name.startswith("hf:"):
        from agentflow_env.llm_planners import HFPlanner

        return HFPlanner(name[3:], do_sample=args.sample, seed=args.seed, device=args.device)
    raise SystemExit(f"unknown planner {name!r}: choose expert, random, openai or hf:PATH")


def _planner_tokenizer(planner: str) -> str | None:
    """A local model's own tokenizer, when its directory has one (its ids must match the env's)."""
    if not planner.startswith("hf:"):
        return None
    path = Path(planner[3:])
    has_tokenizer = (path / "tokenizer.json").is_file() or (
        path / "tokenizer_config.json"
    ).is_file()
    return str(path) if has_tokenizer else None


def _print_episode(record: EpisodeRecord) -> None:
    print(f"\n=== {record.task_id}: {record.question}")
    for entry in record.memory_entries():
        print(render_turn(entry))
    mark = "SUCCESS" if record.success else "FAILURE"
    print(f"Answer: {record.answer!r}  gold: {list(record.gold_answers)}  [{mark}]")


if __name__ == "__main__":
    raise SystemExit(main())
