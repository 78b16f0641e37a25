"""The ``agentflow-env`` command: one module per subcommand, ``main`` here."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from agentflow_env.cli.agentflow_pack import add_agentflow_pack_command
from agentflow_env.cli.check import add_check_command
from agentflow_env.cli.check_logprobs import add_check_logprobs_command
from agentflow_env.cli.common import Parser, UsageError
from agentflow_env.cli.evaluate import add_eval_commands
from agentflow_env.cli.labels import add_labels_command
from agentflow_env.cli.retrieval import add_retrieval_commands
from agentflow_env.cli.run import add_run_command
from agentflow_env.cli.serve import add_serve_command
from agentflow_env.cli.view import add_view_command

__all__ = ["UsageError", "build_parser", "main"]


def build_parser() -> Parser:
    parser = Parser(prog="agentflow-env", description="AgentFlow as a Gymnasium environment.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_run_command(commands)
    add_eval_commands(commands)
    add_retrieval_commands(commands)
    add_check_command(commands)
    add_check_logprobs_command(commands)
    add_labels_command(commands)
    add_view_command(commands)
    add_agentflow_pack_command(commands)
    add_serve_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # the reader of stdout went away (e.g. ``| head``): not a failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except UsageError as error:
        message = " ".join(str(error).split())  # one line, whatever the cause's text holds
        print(f"agentflow-env {args.command}: error: {message}", file=sys.stderr)
        return 2
