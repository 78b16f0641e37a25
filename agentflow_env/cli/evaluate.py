"""``agentflow-env eval`` and ``agentflow-env ablate``: concurrent episodes, diagnostics with 95%
confidence intervals, a trajectory log and summary files in a fresh output folder."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agentflow_env.cli.common import UsageError, clip, positive_int
from agentflow_env.cli.eval_suites import (
    add_suite_arguments,
    plan_suite_run,
    suite_listing,
    suite_note,
)
from agentflow_env.cli.planners import (
    add_env_and_planner_arguments,
    local_planner,
    make_env,
    planner_endpoint,
    planner_errors,
)
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.evaluation.ablations import parse_variant, write_ablation_results
from agentflow_env.evaluation.metrics import format_table
from agentflow_env.evaluation.output import (
    EPISODES,
    SUMMARY,
    TURN_LOG,
    EpisodeRows,
    OutputExistsError,
    prepare_output_dir,
    write_json,
)
from agentflow_env.evaluation.plots import INSTALL_HINT
from agentflow_env.evaluation.runner import EvalResult, evaluate
from agentflow_env.evaluation.session_planners import (
    BlockingPlanner,
    ChatPlanner,
    ExpertSessionPlanner,
    PlannerFactory,
    RandomSessionPlanner,
)
from agentflow_env.llm.client import as_backend
from agentflow_env.workflow.turn_log import TurnLog

DEFAULT_EPISODES = 100


def _add_common(parser: argparse.ArgumentParser, episodes_help: str = "") -> tuple[str, ...]:
    parser.add_argument(
        "--episodes",
        type=positive_int,
        default=None,
        help=f"episodes per run (default: {DEFAULT_EPISODES}{episodes_help})",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="episode i runs the task of seed + i (default: 0)"
    )
    parser.add_argument(
        "--concurrency", type=positive_int, default=8, help="episodes running at once"
    )
    parser.add_argument(
        "--no-budget-curve",
        action="store_true",
        help="skip success by turn budget (it costs one generalist call per shorter budget)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return add_env_and_planner_arguments(parser)


def add_eval_commands(commands: Any) -> None:
    evaluation = commands.add_parser(
        "eval",
        help="evaluate a planner: diagnostics with 95%% CIs, a per-turn log, summary.json",
        description="Evaluate a planner over seeded tasks (or a dataset's records, or a "
        "published suite's episodes: --suite), many episodes at once; writes OUT/turns.jsonl, "
        "OUT/episodes.jsonl and OUT/summary.json.",
    )
    evaluation.add_argument("--out", help="a new folder for the results (required)")
    settings = _add_common(evaluation, "; with --suite, the whole suite")
    add_suite_arguments(evaluation)
    evaluation.set_defaults(handler=_eval_command, env_settings=settings)

    ablate = commands.add_parser(
        "ablate",
        help="evaluate one planner on the same tasks across named env variants",
        description="Evaluate the same planner and tasks under each variant (env settings over "
        "the base options); writes OUT/results.md, OUT/results.json, OUT/ablation.png and the "
        "runs' turn log.",
    )
    ablate.add_argument("--out", required=True, help="a new folder for the results")
    ablate.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help='a variant: its name and env settings, e.g. flat=\'{"observation_mode": "flat"}\' '
        "(repeatable; 'base={}' is the base options alone)",
    )
    ablate.add_argument(
        "--variants", default=None, help="a JSON file: an object of name -> env settings"
    )
    settings = _add_common(ablate)
    ablate.set_defaults(handler=_ablate_command, env_settings=settings)


def _planner_factory(args: argparse.Namespace, env: Any, shared: dict[str, Any]) -> PlannerFactory:
    """One planner per episode; a served or local model is built once and shared."""
    if args.planner == "expert":
        return lambda index: ExpertSessionPlanner()
    if args.planner == "random":
        return lambda index: RandomSessionPlanner(args.seed, index)
    if args.planner == "openai":
        if "chat" not in shared:
            shared["chat"] = ChatPlanner(
                as_backend(planner_endpoint(args)), temperature=args.temperature
            )
        return lambda index: shared["chat"]
    if args.planner.startswith("hf:"):
        if "local" not in shared:
            shared["local"] = BlockingPlanner(local_planner(args), asyncio.Lock())
        return lambda index: shared["local"]
    raise UsageError(
        f"unknown --planner {args.planner!r}: choose expert, random, openai or hf:PATH"
    )


def _run(
    args: argparse.Namespace,
    overrides: Mapping[str, Any],
    run: str | None,
    log: TurnLog,
    rows: EpisodeRows,
    shared: dict[str, Any],
    seeds: Sequence[int] | None = None,
) -> EvalResult:
    """One evaluation: episodes ``args.seed + i``, or one per seed of ``seeds``."""
    env = make_env(args, dict(overrides)).unwrapped
    if not isinstance(env, AgentFlowEnv):
        env.close()
        raise UsageError(f"--env {args.env} is not an AgentFlow environment")
    finished: list[bool] = []
    total = len(seeds) if seeds is not None else args.episodes
    bar = tqdm(total=total, desc=run or args.planner, disable=args.quiet, file=sys.stderr)

    def progress(row: Mapping[str, Any]) -> None:
        rows.write({"run": run, **row})
        finished.append(bool(row["diagnostics"]["success"]))
        bar.update(1)
        bar.set_postfix(success=f"{sum(finished) / len(finished):.0%}")

    try:
        return evaluate(
            env,
            _planner_factory(args, env, shared),
            episodes=None if seeds is not None else args.episodes,
            seed=args.seed,
            seeds=seeds,
            concurrency=args.concurrency,
            log=log,
            run=run,
            budget_curve=not args.no_budget_curve,
            progress=progress,
        )
    except planner_errors(args.planner) as error:
        raise UsageError(f"the planner's endpoint failed: {clip(str(error))}") from error
    finally:
        bar.close()
        env.close()


def _outputs(args: argparse.Namespace) -> tuple[Path, TurnLog, EpisodeRows]:
    try:
        folder = prepare_output_dir(args.out)
    except OutputExistsError as error:
        raise UsageError(f"--out {error}") from error
    return folder, TurnLog(folder / TURN_LOG), EpisodeRows(folder / EPISODES)


def _with_defaults(args: argparse.Namespace) -> None:
    """``--episodes`` and ``--seed`` as given, else their defaults (runs without a suite)."""
    args.episodes = args.episodes or DEFAULT_EPISODES
    args.seed = 0 if args.seed is None else args.seed


def _eval_command(args: argparse.Namespace) -> int:
    if args.list_suites:
        print(suite_listing())
        return 0
    if not args.out:
        raise UsageError("--out is required: a new folder for the results")
    suite_run = plan_suite_run(args) if args.suite else None
    if suite_run is None:
        _with_defaults(args)
    folder, log, rows = _outputs(args)
    try:
        if suite_run is None:
            result = _run(args, {}, None, log, rows, {})
        else:
            note = suite_note(suite_run)
            if note:
                print(note, file=sys.stderr)
            result = _run(args, suite_run.env_kwargs, None, log, rows, {}, suite_run.seeds)
    finally:
        log.close()
        rows.close()
    about = suite_run.summary() if suite_run is not None else {}
    summary = {"planner": args.planner, "env": args.env, **about, **result.summary}
    write_json(folder / SUMMARY, summary)
    print(format_table({args.planner: result.summary}))
    print(f"\nper-turn log: {folder / TURN_LOG}\nsummary: {folder / SUMMARY}")
    return 0


def _variants(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    variants: dict[str, dict[str, Any]] = {}
    if args.variants:
        try:
            loaded = json.loads(Path(args.variants).read_text("utf-8"))
        except (OSError, ValueError) as error:
            raise UsageError(f"--variants {args.variants}: cannot read it ({error})") from error
        if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
            raise UsageError(f"--variants {args.variants}: expected an object of name -> settings")
        variants.update(loaded)
    for text in args.variant:
        try:
            name, settings = parse_variant(text)
        except ValueError as error:
            raise UsageError(f"--variant {error}") from error
        variants[name] = settings
    if not variants:
        raise UsageError("give at least one --variant NAME=JSON (or --variants FILE)")
    return variants


def _ablate_command(args: argparse.Namespace) -> int:
    _with_defaults(args)
    variants = _variants(args)
    folder, log, rows = _outputs(args)
    summaries: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] = {}
    try:
        for name, settings in variants.items():
            summaries[name] = _run(args, settings, name, log, rows, shared).summary
    finally:
        log.close()
        rows.close()
    written = write_ablation_results(
        folder, summaries, variants, planner=args.planner, env_id=args.env
    )
    print(format_table(summaries))
    print("\n" + "\n".join(f"{label}: {path}" for label, path in written.items()))
    if "plot" not in written:
        print(f"no plot: {INSTALL_HINT}")
    return 0
