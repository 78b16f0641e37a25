"""``agentflow-env check``: the pre-flight check of one env configuration, item by item."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentflow_env.cli.common import UsageError
from agentflow_env.cli.planners import make_env, shown_run_defaults
from agentflow_env.envs.config import add_config_arguments
from agentflow_env.envs.registration import ENV_CONFIGS
from agentflow_env.evaluation.preflight import DEFAULT_ENV_ID, run_preflight


def add_check_command(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="pre-flight check of one env configuration before training",
        description=(
            "Run a few short episodes (the expert planner, probes that fail on purpose, a planner "
            "that never finishes, flat observation mode) and report, item by item with evidence, "
            "whether the configuration's rollout is sound. Exit status 1 when an item fails."
        ),
    )
    check.add_argument(
        "--env",
        default=DEFAULT_ENV_ID,
        help="registered environment id, or module:EnvId to import the module that registers it",
    )
    check.add_argument("--seed", type=int, default=0, help="every check episode is reset with it")
    check.add_argument("--json", action="store_true", help="print the report as one JSON object")
    # The same options as ``run``: one per setting of the registered envs' configs.
    env_settings = add_config_arguments(check, ENV_CONFIGS, shown_defaults=shown_run_defaults())
    # ``make_env`` reads the planner to pick a local model's tokenizer; the check drives the
    # expert planner itself.
    check.set_defaults(handler=_check_command, env_settings=env_settings, planner="expert")


def _check_command(args: argparse.Namespace) -> int:
    env = make_env(args)
    try:
        report = run_preflight(env=env, seed=args.seed)
    except TypeError as error:  # an env that is not an AgentFlowEnv
        raise UsageError(f"--env {args.env}: {error}") from error
    finally:
        env.close()
    # Which words the prompts were in: this project's, or AgentFlow's from the user's checkout.
    report.facts["wording"] = getattr(env.unwrapped, "wording_label", "own")
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    return 0 if report.ok else 1
