"""``agentflow-env eval`` and ``agentflow-env ablate``: concurrent episodes, diagnostics with 95%
confidence intervals, a trajectory log and summary files in a fresh output folder (or, with
``--resume``, the folder of an interrupted run, which gets only its missing episodes)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agentflow_env.base.settings import llm_env_var, read_env_var
from agentflow_env.cli.common import UsageError, clip, positive_int
from agentflow_env.cli.eval_suites import (
    add_suite_arguments,
    plan_suite_run,
    suite_listing,
    suite_note,
)
from agentflow_env.cli.planners import (
    add_env_and_planner_arguments,
    make_env,
    planner_errors,
    planner_factory,
)
from agentflow_env.envs.config import settings_from_args
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import config_class, run_settings
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
from agentflow_env.evaluation.remote_runner import RemoteExpert, evaluate_remote
from agentflow_env.evaluation.runner import EvalResult, evaluate
from agentflow_env.evaluation.session_planners import SAMPLINGS
from agentflow_env.remote import ServiceError, shared_servers
from agentflow_env.remote.env import check_servers
from agentflow_env.tasks.base import ListTaskSource
from agentflow_env.workflow.turn_log import TurnLog

DEFAULT_EPISODES = 100
"""Episodes of a run whose tasks are drawn by seed (no ``--dataset``) when ``--episodes`` is not
given; a dataset runs each of its records once."""


def _add_common(parser: argparse.ArgumentParser, episodes_help: str = "") -> tuple[str, ...]:
    parser.add_argument(
        "--episodes",
        type=positive_int,
        default=None,
        help=f"episodes per run (default: {DEFAULT_EPISODES}; with --dataset, one per record, "
        f"and N takes the first N records{episodes_help})",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=None,
        metavar="K",
        help="with --dataset: run each record K times (K passes over the file; --episodes "
        "then takes the first episodes of those passes)",
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
    settings = add_env_and_planner_arguments(parser)
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        default=None,
        help="--planner openai or hf:PATH: the longest reply per turn (default: the env's "
        "--max-action-tokens, 2048 unless set)",
    )
    parser.add_argument(
        "--sampling",
        choices=sorted(SAMPLINGS),
        default=None,
        help="--planner openai: a named sampling in place of --temperature; agentflow: "
        "temperature 0.7, top_p 0.99, frequency penalty 1.2, as AgentFlow's published runs "
        "sample their planner",
    )
    return settings


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
    evaluation.add_argument(
        "--env-url",
        default=None,
        help="play the episodes on served envs (agentflow-env serve; comma-separated for several, "
        "each episode on the one with the fewest sessions; token: $AGENTFLOW_SERVE_TOKEN): the "
        "same rows as in process for the same seeds and planner (expert, openai, hf:PATH)",
    )
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
    """One evaluation: episodes ``args.seed + i`` (a dataset's ``i``-th record), or one per seed
    of ``seeds``; the episodes of ``run`` among ``done`` (a resumed folder's rows) are kept, not
    run again."""
    env = make_env(args, dict(overrides)).unwrapped
    if not isinstance(env, AgentFlowEnv):
        env.close()
        raise UsageError(f"--env {args.env} is not an AgentFlow environment")
    try:
        total = len(seeds) if seeds is not None else _episode_count(args, env)
    except UsageError:
        env.close()
        raise
    kept = {row["index"]: row for row in done if row.get("run") == run and row["index"] < total}
    missing = [index for index in range(total) if index not in kept]
    if not missing:
        env.close()
        return _combined(kept.values(), [])
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

    if getattr(args, "env_url", None):
        try:
            remote = _run_remote(args, env, seeds, total, progress, missing if kept else None)
        finally:
            bar.close()
            env.close()
        return _combined(kept.values(), remote.rows) if kept else remote
    try:
        result = evaluate(
            env,
            planner_factory(args, env, shared),
            episodes=None if seeds is not None else total,
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


def episode_count(requested: int | None, repeat: int | None, records: int | None) -> int:
    """How many episodes a run has: ``requested`` (``--episodes``), else ``DEFAULT_EPISODES``
    where tasks are drawn by seed (``records`` is ``None``); over a fixed list of ``records`` (a
    dataset), each record once, or ``repeat`` times, and ``requested`` takes the first of those.

    Asking a dataset for more episodes than that is refused: cycling a file silently would weigh
    some records more than others and make the number incomparable with one run per record.
    """
    if records is None:
        if repeat is not None:
            raise UsageError(
                "--repeat runs a --dataset's records several times; without a dataset each "
                "episode draws its own task: drop --repeat and give --episodes"
            )
        return requested or DEFAULT_EPISODES
    available = records * (repeat or 1)
    if requested is None or requested <= available:
        return available if requested is None else requested
    if repeat is None:
        raise UsageError(
            f"--episodes {requested}: the dataset holds {records} records; give at most "
            f"{records}, or --repeat K to run each record K times"
        )
    raise UsageError(
        f"--episodes {requested}: --repeat {repeat} over the dataset's {records} records makes "
        f"{available} episodes; give at most that, or a larger --repeat"
    )


def _episode_count(args: argparse.Namespace, env: AgentFlowEnv) -> int:
    source = env.task_source
    records = len(source) if isinstance(source, ListTaskSource) else None
    return episode_count(args.episodes, args.repeat, records)


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
    kwargs = run_settings(args.env, kwargs)
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
    env_settings = _env_settings(args, overrides)
    settings: dict[str, Any] = {
        "command": args.command,
        "env": args.env,
        "planner": args.planner,
        "episodes": _recorded_episodes(args, [env_settings]),
        "seed": args.seed,
        "no_budget_curve": args.no_budget_curve,
    }
    if args.repeat is not None:  # recorded only when given: runs without it compare as before
        settings["repeat"] = args.repeat
    if args.planner == "openai":
        settings["model"] = (
            args.model
            or read_env_var(llm_env_var("planner", "model"))
            or read_env_var(llm_env_var("llm", "model"))
        )
        settings["temperature"] = args.temperature
        if args.sampling is not None:
            settings["sampling"] = args.sampling
    if args.planner == "openai" or args.planner.startswith("hf:"):
        settings["max_tokens"] = args.max_tokens  # None: the env's max_action_tokens
    if args.planner.startswith("hf:"):
        settings["sample"] = args.sample
    settings["env_settings"] = env_settings
    return settings


def _recorded_episodes(args: argparse.Namespace, env_settings: Iterable[Mapping[str, Any]]) -> Any:
    """``--episodes`` as the run will use it: given, else ``None`` (every record) where any of
    ``env_settings`` reads a dataset, else ``DEFAULT_EPISODES`` (so spelling that default out
    is the same run)."""
    if args.episodes is not None or any(s.get("dataset") is not None for s in env_settings):
        return args.episodes
    return DEFAULT_EPISODES


def _check_planner_options(args: argparse.Namespace) -> None:
    """Planner options that do not apply to the planner given, refused before any work."""
    if args.sampling is not None and args.planner != "openai":
        raise UsageError(f"--sampling applies to --planner openai, not {args.planner}")
    if args.sampling is not None and args.temperature is not None:
        raise UsageError(
            f"--sampling {args.sampling} fixes the temperature: drop --temperature "
            f"{args.temperature:g}"
        )


def _with_defaults(args: argparse.Namespace) -> None:
    """``--seed`` as given, else 0 (runs without a suite); ``--episodes`` is settled per run,
    once its task source is known (``episode_count``)."""
    args.seed = 0 if args.seed is None else args.seed


def _run_remote(
    args: argparse.Namespace,
    env: AgentFlowEnv,
    seeds: Sequence[int] | None,
    total: int,
    progress: Any,
    indices: Sequence[int] | None,
) -> EvalResult:
    """``_run``'s episodes on the served envs of ``--env-url``."""
    if args.planner == "random":
        raise UsageError("--env-url: the random planner draws from the env's corpus in process")
    try:
        servers = shared_servers(args.env_url, read_env_var("AGENTFLOW_SERVE_TOKEN"))
        check_servers(servers, env.tokenizer, env_id=args.env)
    except (ValueError, ServiceError) as error:
        raise UsageError(f"--env-url: {error}") from error
    local = planner_factory(args, env, {})
    factory = (lambda index: RemoteExpert()) if args.planner == "expert" else local
    try:
        return evaluate_remote(
            servers,
            factory,
            seeds=list(seeds) if seeds is not None else [args.seed + i for i in range(total)],
            concurrency=args.concurrency,
            budget_curve=not args.no_budget_curve,
            progress=progress,
            indices=indices,
            messages=args.planner == "openai",
        )
    except ServiceError as error:
        raise UsageError(
            f"--env-url: {clip(str(error))} (the finished episodes are kept: --resume)"
        ) from error
    except planner_errors(args.planner) as error:
        raise UsageError(f"the planner's endpoint failed: {clip(str(error))}") from error


def _eval_command(args: argparse.Namespace) -> int:
    if args.list_suites:
        print(suite_listing())
        return 0
    if not args.out:
        raise UsageError("--out is required: a new folder for the results")
    _check_planner_options(args)
    if args.suite and args.repeat is not None:
        raise UsageError(f"--suite {args.suite} fixes its episodes: drop --repeat")
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
    wording = _wording(args, suite_run.env_kwargs if suite_run is not None else {})
    summary = {
        "planner": args.planner,
        "env": args.env,
        "wording": wording,
        **about,
        **result.summary,
    }
    write_json(folder / SUMMARY, summary)
    print(format_table({args.planner: result.summary}))
    print(f"\nwording: {wording}")
    print(f"per-turn log: {folder / TURN_LOG}\nsummary: {folder / SUMMARY}")
    return _all_module_failures(result.rows)


def _all_module_failures(rows: Sequence[Mapping[str, Any]]) -> int:
    """1, with the first error printed, when a frozen module failed in every episode (a setup
    problem, e.g. a wrong module model name: the run says nothing of the planner), else 0."""
    failed = [
        row
        for row in rows
        if row.get("module_errors") or row["diagnostics"].get("end_reason") == "module_error"
    ]
    if not rows or len(failed) < len(rows):
        return 0
    first = next((error for row in failed for error in row.get("module_errors") or ()), "")
    print(
        f"all {len(rows)} episodes ended on a module error: {clip(' '.join(str(first).split()))}",
        file=sys.stderr,
    )
    return 1


def _wording(args: argparse.Namespace, overrides: Mapping[str, Any]) -> str:
    """Which words the run's prompts were in: ``own``, or ``AgentFlow's, from PATH at COMMIT``
    (read from the user's checkout, ``--agentflow-source`` or ``$AGENTFLOW_SOURCE``)."""
    config = config_class(args.env)
    if config is None:
        return "own"
    try:
        return config.from_kwargs(**_env_settings(args, overrides)).wording_label()
    except (ValueError, TypeError):  # settings the env reported when it was built
        return "own"


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
    _check_planner_options(args)
    _with_defaults(args)
    variants = _variants(args)
    recorded = {**_run_settings(args, {}), "variants": variants}
    if any("dataset" in settings for settings in variants.values()):
        recorded["episodes"] = args.episodes  # a variant's dataset: one episode per record
    folder, log, rows, done = _outputs(args, recorded)
    summaries: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] = {}
    try:
        for name, settings in variants.items():
            summary = _run(args, settings, name, log, rows, shared, done=done).summary
            summaries[name] = {**summary, "wording": _wording(args, settings)}
    finally:
        log.close()
        rows.close()
    written = write_ablation_results(
        folder, summaries, variants, planner=args.planner, env_id=args.env
    )
    print(format_table(summaries))
    print("\n" + "\n".join(f"wording of {name}: {s['wording']}" for name, s in summaries.items()))
    print("\n" + "\n".join(f"{label}: {path}" for label, path in written.items()))
    if "plot" not in written:
        print(f"no plot: {INSTALL_HINT}")
    return 0
