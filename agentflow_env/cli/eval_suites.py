"""``agentflow-env eval --suite NAME`` and ``--list-suites``: running a published evaluation
suite (``agentflow_env.evaluation.suites``) with its env, settings and seeds."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.cli.common import UsageError
from agentflow_env.envs.config import settings_from_args
from agentflow_env.envs.registration import ENV_CONFIGS
from agentflow_env.evaluation.eval_suite import EvalSuite, SuiteChangedError, seed_ranges
from agentflow_env.evaluation.suites import SUITES, UnknownSuiteError, get_suite
from agentflow_env.rollout.labels.spec import DEFAULT_ENV_ID, env_kwargs_from_json


def add_suite_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("evaluation suites (docs/benchmark.md)")
    group.add_argument(
        "--suite",
        default=None,
        metavar="NAME",
        help="run a published suite: its env, settings and episode seeds (--episodes N runs "
        "its first N; env settings it does not fix, e.g. --modules, are recorded in summary.json)",
    )
    group.add_argument(
        "--list-suites", action="store_true", help="list the published suites and exit"
    )


def suite_listing() -> str:
    """One block per published suite: name, env, episodes, seeds, fingerprint and settings."""
    lines = []
    for suite in SUITES.values():
        lines += [
            f"{suite.name}  ({suite.description})",
            f"    env {suite.env_id}, {suite.episodes} episodes, seeds "
            f"{seed_ranges(suite.seeds)}, fingerprint {suite.fingerprint}",
            f"    settings {_settings_text(suite.settings())}",
        ]
    return "\n".join(lines)


def _settings_text(settings: dict[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in settings.items())


@dataclass(frozen=True)
class SuiteRun:
    """What ``eval --suite`` runs: the suite, its first ``len(seeds)`` seeds, the env kwargs
    (suite's, as objects) and the command line's settings beyond the suite's."""

    suite: EvalSuite
    seeds: tuple[int, ...]
    env_kwargs: dict[str, Any]
    extra_settings: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """What ``summary.json`` records about the suite."""
        return {
            "suite": self.suite.name,
            "suite_fingerprint": self.suite.fingerprint,
            "suite_episodes": self.suite.episodes,
            "suite_complete": len(self.seeds) == self.suite.episodes,
            "settings_beyond_suite": {k: _jsonable(v) for k, v in self.extra_settings.items()},
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str | dict):
        return value
    return str(value)


def plan_suite_run(args: argparse.Namespace) -> SuiteRun:
    """Check the command line against ``args.suite`` and the suite's fingerprint; set
    ``args.env`` and ``args.seed`` (the random planner's seed: the suite's first)."""
    try:
        suite = get_suite(args.suite)
    except UnknownSuiteError as error:
        raise UsageError(f"--suite: {error}") from error
    if args.seed is not None:
        raise UsageError(f"--suite {suite.name} fixes the episode seeds: drop --seed")
    if args.env not in (DEFAULT_ENV_ID, suite.env_id):  # --env's default, or the suite's
        raise UsageError(f"--suite {suite.name} runs {suite.env_id}: drop --env {args.env}")
    given = settings_from_args(args, args.env_settings)
    task_settings = {name for config in ENV_CONFIGS.values() for name in config.task_settings()}
    fixed = [name for name in given if name in suite.env_kwargs or name in task_settings]
    if fixed:
        flags = ", ".join("--" + name.replace("_", "-") for name in fixed)
        settings = _settings_text(suite.settings())
        raise UsageError(
            f"--suite {suite.name} fixes its tasks and settings ({settings}): drop {flags}, or "
            "run without --suite"
        )
    count = args.episodes or suite.episodes
    if count > suite.episodes:
        raise UsageError(
            f"--suite {suite.name} has {suite.episodes} episodes: --episodes must be at most that"
        )
    try:
        suite.check_fingerprint()
    except SuiteChangedError as error:
        raise UsageError(str(error)) from error
    args.env = suite.env_id
    args.seed = suite.seeds[0]
    args.episodes = count
    kwargs = env_kwargs_from_json(suite.settings())
    return SuiteRun(suite, suite.seeds[:count], kwargs, given)


def suite_note(run: SuiteRun) -> str | None:
    """A line for settings beyond the suite's (their results are not the published setup's)."""
    if not run.extra_settings:
        return None
    return (
        f"note: settings beyond suite {run.suite.name}'s: {_settings_text(run.extra_settings)} "
        "(the published numbers use the suite's settings alone)"
    )
