"""``agentflow-env run``: planner episodes one after another, with their turns printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

from agentflow_env.base.jsonl import jsonl_line
from agentflow_env.cli.common import UsageError, check_out_path, clip, positive_int
from agentflow_env.cli.planners import (
    add_env_and_planner_arguments,
    env_planner,
    local_planner,
    make_env,
    planner_endpoint,
    planner_errors,
)
from agentflow_env.envs.env import unwrap_agentflow
from agentflow_env.envs.render import render_turn
from agentflow_env.llm.client import ContextLengthError
from agentflow_env.rollout.agents.episodes import EpisodeRecord, run_episode, summarize
from agentflow_env.workflow.outcome import EndReason


def add_run_command(commands: Any) -> None:
    run = commands.add_parser(
        "run", help="run planner episodes and print a summary", description="Run planner episodes."
    )
    run.add_argument("--episodes", type=positive_int, default=3, help="episodes to run")
    run.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    env_settings = add_env_and_planner_arguments(run)
    run.add_argument(
        "--out", default=None, help="append one JSON line per episode to this file, as each ends"
    )
    verbosity = run.add_mutually_exclusive_group()
    verbosity.add_argument("--verbose", action="store_true", help="print every turn")
    verbosity.add_argument(
        "--quiet",
        action="store_true",
        help="print only the summary (default: turns of <= 5 episodes, else a progress bar)",
    )
    run.set_defaults(handler=_run_command, env_settings=env_settings)


def _run_command(args: argparse.Namespace) -> int:
    # The env ids are registered by ``agentflow_env/__init__.py``, run before this module.
    check_out_path(args.out)
    endpoint = planner_endpoint(args) if args.planner == "openai" else None
    early_planner = local_planner(args) if args.planner.startswith("hf:") else None
    if endpoint is None and early_planner is None and args.planner not in ("expert", "random"):
        raise UsageError(
            f"unknown --planner {args.planner!r}: choose expert, random, openai or hf:PATH "
            "(a local model directory)"
        )
    env = make_env(args)
    planner = early_planner or env_planner(args, env, endpoint)
    endpoint_errors = planner_errors(args.planner)
    show_turns = args.verbose or (not args.quiet and args.episodes <= 5)
    records: list[EpisodeRecord] = []
    try:
        out = open(args.out, "a", encoding="utf-8") if args.out else None  # noqa: SIM115
    except OSError as error:
        env.close()
        raise UsageError(f"--out {args.out}: cannot write it ({error.strerror})") from error
    try:
        bar = tqdm(
            range(args.episodes),
            desc=f"{args.planner} planner",
            disable=show_turns or args.quiet,
            file=sys.stderr,
        )
        for index in bar:
            try:
                record = run_episode(env, planner, seed=args.seed + index)
            except ContextLengthError as error:  # this episode's prompt: the run goes on
                record = _ended_on_context(env, args.seed + index, error)
            except endpoint_errors as error:
                raise UsageError(f"the planner's endpoint failed: {clip(str(error))}") from error
            records.append(record)
            if show_turns:
                _print_episode(record)
            if out is not None:
                out.write(jsonl_line(record.as_dict()))
                out.flush()  # a killed run keeps every finished episode
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
    failed = summary["module_error_episodes"]
    if failed:
        first = clip(" ".join(str(summary["first_module_error"]).split()))
        if failed == summary["episodes"]:
            print(f"all {failed} episodes ended on a module error: {first}")
            return 1
        print(f"{failed} of {summary['episodes']} episodes ended on a module error; first: {first}")
    return 0


def _ended_on_context(env: Any, seed: int, error: ContextLengthError) -> EpisodeRecord:
    """The record of the episode whose prompt the planner's model refused as longer than its
    context: the episode ends there (``prompt_budget``), the reason in its event log."""
    base = unwrap_agentflow(env)
    session = base.session
    assert session is not None  # run_episode reset the env
    why = f"the prompt is longer than the planner's model takes: {error}"
    outcome = base.run_async(session.end(EndReason.PROMPT_BUDGET, why))
    turns = session.turn_records
    return EpisodeRecord(
        task_id=session.task.task_id,
        question=session.task.question,
        gold_answers=outcome.gold_answers,
        answer=outcome.answer,
        success=outcome.success,
        reward=sum(turn.reward for turn in turns) + outcome.reward,
        seed=seed,
        actions=[turn.action_text for turn in turns],
        metrics=dict(outcome.metrics),
        memory=session.memory.as_dicts(),
        end_reason=outcome.end_reason.value,
        module_errors=list(outcome.module_errors),
    )


def _print_episode(record: EpisodeRecord) -> None:
    print(f"\n=== {record.task_id}: {record.question}")
    for entry in record.memory_entries():
        print(render_turn(entry))
    mark = "SUCCESS" if record.success else "FAILURE"
    print(f"Answer: {record.answer!r}  gold: {list(record.gold_answers)}  [{mark}]")
