"""``agentflow-env agentflow-pack``: AgentFlow's wording, read once from a checkout into a pack
file, so a trainer's workers take ``agentflow_source=pack.json`` and need no checkout."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentflow_env.cli.common import UsageError
from agentflow_env.workflow.agentflow_source import AgentFlowSourceError, read_agentflow_source
from agentflow_env.workflow.prompt_pack import PromptPackError, write_pack


def add_agentflow_pack_command(commands: Any) -> None:
    pack = commands.add_parser(
        "agentflow-pack",
        help="write the prompt pack of your AgentFlow checkout to a JSON file",
        description=(
            "Read every sentence AgentFlow puts in front of its models from your checkout "
            "(parsed, never run) and write them as a prompt pack: give the file as "
            "agentflow_source= (or $AGENTFLOW_SOURCE) wherever the checkout would go. The pack "
            "records the checkout's path and commit."
        ),
    )
    pack.add_argument("--from", dest="source", required=True, help="your AgentFlow checkout")
    pack.add_argument("--out", required=True, help="the pack file to write (JSON)")
    pack.set_defaults(handler=_agentflow_pack_command)


def _agentflow_pack_command(args: argparse.Namespace) -> int:
    try:
        pack = read_agentflow_source(args.source)
    except (AgentFlowSourceError, PromptPackError) as error:
        raise UsageError(str(error)) from error
    path = write_pack(pack, args.out)
    summary = {"out": str(path), "wording": pack.label, "tools": len(pack.tools)}
    print(json.dumps(summary))
    return 0
