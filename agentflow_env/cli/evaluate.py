"""``agentflow-env eval`` and ``agentflow-env ablate``: concurrent episodes, diagnostics with 95%
confidence intervals, a trajectory log and summary files in a fresh output folder (or, with
``--resume``, the folder of an interrupted run, which gets only its missing episodes)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
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
    RUN_DEFAULTS,
    add_env_and_planner_arguments,
    local_planner,
    make_env,
    planner_endpoint,
    planner_errors,
)
from agentflow_env.envs.config import settings_from_args
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import config_class
from agentflow_env.evaluation.ablations import parse_variant, write_ablation_results
from agentflow_env.evaluation.metrics import format_table, summarize_diagnostics
from agentflow_env.evaluation.output import (
    EPISODES,
    SUMMARY,
    TURN_LOG,
    UNSET,
    EpisodeRows,
    OutputExistsError,
    ResumeError,
    SettingsMismatchError,
    resume_output_dir,
    start_output_dir,
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
    parser.add_argument(
        "--resume",
        action="store_true",
        help="finish the interrupted run in --out: keep its finished episodes, run only the "
        "missing ones (its settings must be the same) and summarise them all",
    )
    return add_env_and_planner_arguments(parser)


def add_eval_commands(commands: Any) -> None:
    evaluation = commands.add_parser(
        "eval",
        help="evaluate a planner: diagnostics with 95%% CIs, a per-turn log, summary.json",
        description="Evaluate a planner over seeded tasks (or a dataset's records, or a "
        "published suite's episodes: --suite), many episodes at once; writes OUT/turns.jsonl, "
        "OUT/episodes.jsonl and OUT/summary.json.",
    )
    evaluation.add_argument(
        "--out", help="a new folder for the results (required; with --resume, an interrupted run's)"
    )
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
    ablate.add_argument(
        "--out",
        required=True,
        help="a new folder for the results (with --resume, an interrupted run's)",
    )
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
    done: Sequence[Mapping[str, Any]] = (),
) -> EvalResult:
    """One evaluation: episodes ``args.seed + i``, or one per seed of ``seeds``; the episodes
    of ``run`` among ``done`` (a resumed folder's rows) are kept, not run again."""
    total = len(seeds) if seeds is not None else args.episodes
    kept = {row["index"]: row for row in done if row.get("run") == run and row["index"] < total}
    missing = [index for index in range(total) if index not in kept]
    if not missing:
        return _combined(kept.values(), [])
    env = make_env(args, dict(overrides)).unwrapped
    if not isinstance(env, AgentFlowEnv):
        env.close()
        raise UsageError(f"--env {args.env} is not an AgentFlow environment")
    finished = [bool(row["diagnostics"].get("success")) for row in kept.values()]
    bar = tqdm(
        total=total,
        initial=len(kept),
        desc=run or args.planner,
        disable=args.quiet,
        file=sys.stderr,
    )

    def progress(row: Mapping[str, Any]) -> None:
        rows.write({"run": run, **row})
        finished.append(bool(row["diagnostics"]["success"]))
        bar.update(1)
        bar.set_postfix(success=f"{sum(finished) / len(finished):.0%}")

    try:
        result = evaluate(
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
            indices=missing if kept else None,
        )
    except planner_errors(args.planner) as error:
        raise UsageError(f"the planner's endpoint failed: {clip(str(error))}") from error
    finally:
        bar.close()
        env.close()
    return _combined(kept.values(), result.rows) if kept else result


def _combined(kept: Iterable[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> EvalResult:
    """A resumed run's rows and summary, as one uninterrupted run gives them: in episode order
    (the bootstrap intervals depend on it)."""
    rows = sorted(
        ({k: v for k, v in row.items() if k != "run"} for row in [*kept, *new]),
        key=lambda row: row["index"],
    )
    return EvalResult(rows, summarize_diagnostics([row["diagnostics"] for row in rows]))


def _outputs(
    args: argparse.Namespace, settings: Mapping[str, Any]
) -> tuple[Path, TurnLog, EpisodeRows, list[dict[str, Any]]]:
    """The output folder (fresh, or resumed with its finished episodes' rows)."""
    done: list[dict[str, Any]] = []
    try:
        if args.resume:
            resumed = resume_output_dir(args.out, settings)
            folder, done = resumed.folder, resumed.rows
            if done or resumed.torn_lines or resumed.dropped_turn_lines:
                notes = [f"kept {len(done)} finished episodes"]
                if resumed.torn_lines:
                    notes.append(f"dropped {resumed.torn_lines} cut-off line")
                if resumed.dropped_turn_lines:
                    notes.append(
                        f"dropped {resumed.dropped_turn_lines} turn-log lines of unfinished "
                        "episodes"
                    )
                print(f"resuming {folder}: {', '.join(notes)}", file=sys.stderr)
        else:
            folder = start_output_dir(args.out, settings)
    except OutputExistsError as error:
        hint = "; add --resume to finish the run it holds" if error.taken else ""
        raise UsageError(f"--out {error}{hint}") from error
    except SettingsMismatchError as error:
        command = [d for d in error.differences if d[0] == ("command",)]
        raise UsageError(
            f"--resume: {args.out} holds a run with other settings: "
            f"{'; '.join(_difference(*d) for d in command or error.differences)}; give the "
            "same settings as that run, or a new --out"
        ) from error
    except ResumeError as error:
        raise UsageError(f"--resume: {error}") from error
    return folder, TurnLog(folder / TURN_LOG), EpisodeRows(folder / EPISODES), done


_LABELS = {
    ("command",): "the command",
    ("suite_fingerprint",): "the suite's fingerprint",
}


def _difference(path: tuple[str, ...], before: Any, now: Any) -> str:
    """``--hops 2 (now 3)``: a setting as its option, the folder's value and this command's."""
    if path in _LABELS:
        label = _LABELS[path]
    elif path[0] == "variants" and len(path) > 1:
        label = f"--variant {path[1]}"
    else:
        label = "--" + path[-1].replace("_", "-")

    def shown(value: Any) -> str:
        return "unset" if value is UNSET else clip(json.dumps(value), 80)

    return f"{label} {shown(before)} (now {shown(now)})"


def _env_settings(args: argparse.Namespace, overrides: Mapping[str, Any]) -> Any:
    """The env's settings as the run will build them, every one (defaults included, so that
    spelling a default out or leaving it implicit is the same run)."""
    kwargs = settings_from_args(args, args.env_settings)
    kwargs.update(overrides)
    if "dataset" not in kwargs:
        kwargs = {**RUN_DEFAULTS, **kwargs}
    config = config_class(args.env)
    if config is not None:
        try:
            return config.from_kwargs(**kwargs).to_dict()
        except (ValueError, TypeError):  # reported when the env is built
            pass
    return kwargs


def _run_settings(args: argparse.Namespace, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What ``settings.json`` records: everything that decides which episodes run and how, not
    how fast (``--concurrency``) or where the endpoint is (``--base-url``)."""
    settings: dict[str, Any] = {
        "command": args.command,
        "env": args.env,
        "planner": args.planner,
        "episodes": args.episodes,
        "seed": args.seed,
        "no_budget_curve": args.no_budget_curve,
    }
    if args.planner == "openai":
        settings["model"] = (
            args.model
            or os.environ.get("AGENTFLOW_PLANNER_MODEL")
            or os.environ.get("AGENTFLOW_LLM_MODEL")
        )
        settings["temperature"] = args.temperature
    if args.planner.startswith("hf:"):
        settings["sample"] = args.sample
    settings["env_settings"] = _env_settings(args, overrides)
    return settings


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
    settings = _run_settings(args, suite_run.env_kwargs if suite_run is not None else {})
    if suite_run is not None:
        settings["suite"] = suite_run.suite.name
        settings["suite_fingerprint"] = suite_run.suite.fingerprint
    folder, log, rows, done = _outputs(args, settings)
    try:
        if suite_run is None:
            result = _run(args, {}, None, log, rows, {}, done=done)
        else:
            note = suite_note(suite_run)
            if note:
                print(note, file=sys.stderr)
            result = _run(
                args, suite_run.env_kwargs, None, log, rows, {}, suite_run.seeds, done=done
            )
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
    recorded = {**_run_settings(args, {}), "variants": variants}
    folder, log, rows, done = _outputs(args, recorded)
    summaries: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] = {}
    try:
        for name, settings in variants.items():
            summaries[name] = _run(args, settings, name, log, rows, shared, done=done).summary
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
