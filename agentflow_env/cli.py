"""The ``agentflow-env`` command."""

from __future__ import annotations

import argparse
import importlib
import os
import socket
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import gymnasium as gym
from tqdm import tqdm

from agentflow_env.base.jsonl import jsonl_line
from agentflow_env.envs.config import add_config_arguments, settings_from_args
from agentflow_env.envs.registration import ENV_CONFIGS, ENV_ENTRY_POINTS
from agentflow_env.envs.render import render_turn
from agentflow_env.llm import LLMEndpoint, LLMError, require_aiohttp
from agentflow_env.retrieval.index_store import build_index_command
from agentflow_env.retrieval.server import serve_corpus_file
from agentflow_env.rollout.episodes import EpisodeRecord, run_episode, summarize
from agentflow_env.rollout.llm_planners import HFPlanner, OpenAIPlanner
from agentflow_env.rollout.planners import ExpertPlanner, RandomPlanner


class UsageError(Exception):
    """A mistake on the command line: reported as one line on stderr, without a traceback."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except empty ones (``None``, ``False``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line (what is wrong, and where the usage is), exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


PLANNERS = "expert | random | openai | hf:PATH"

RUN_DEFAULTS: dict[str, Any] = {"split": "test"}
"""Where ``run`` departs from the envs' defaults: it evaluates on held-out questions (a
``--dataset`` brings its own split)."""
SHOWN_DEFAULTS = {"tokenizer": "bundled, or hf:PATH's"}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentflow-env", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="run planner episodes and print a summary", description="Run planner episodes."
    )
    run.add_argument("--env", default="AgentFlow-Search-v0", help="registered environment id")
    run.add_argument("--planner", default="expert", help=PLANNERS)
    run.add_argument("--episodes", type=_positive_int, default=3, help="episodes to run")
    run.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    # One option per setting of the registered envs' configs (``agentflow_env.envs.config``).
    env_settings = add_config_arguments(
        run,
        ENV_CONFIGS,
        shown_defaults={**{k: str(v) for k, v in RUN_DEFAULTS.items()}, **SHOWN_DEFAULTS},
    )
    served = run.add_argument_group("served planner (--planner openai)")
    served.add_argument(
        "--base-url",
        default=None,
        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
        "(default: $AGENTFLOW_PLANNER_BASE_URL or $AGENTFLOW_LLM_BASE_URL)",
    )
    served.add_argument(
        "--model",
        default=None,
        help="served model name (default: $AGENTFLOW_PLANNER_MODEL or $AGENTFLOW_LLM_MODEL)",
    )
    served.add_argument(
        "--api-key",
        default=None,
        help="bearer token (default: $AGENTFLOW_PLANNER_API_KEY or $AGENTFLOW_LLM_API_KEY)",
    )
    served.add_argument(
        "--temperature", type=float, default=None, help="sampling temperature (default: 0)"
    )
    local = run.add_argument_group("local planner (--planner hf:PATH)")
    local.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    local.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    run.add_argument("--out", default=None, help="write one JSON line per episode to this file")
    verbosity = run.add_mutually_exclusive_group()
    verbosity.add_argument("--verbose", action="store_true", help="print every turn")
    verbosity.add_argument(
        "--quiet",
        action="store_true",
        help="print only the summary (default: turns of <= 5 episodes, else a progress bar)",
    )
    run.set_defaults(handler=_run_command, env_settings=env_settings)
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
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument("--topk", type=int, default=3, help="when a request gives none")
    serve.add_argument("--cache-dir", default=None, help="index cache dir (as build-index --out)")
    serve.add_argument("--no-cache", action="store_true", help="build in memory, skip the disk")
    serve.add_argument(
        "--batch-window-ms",
        type=float,
        default=2.0,
        help="how long a request waits for others to share one batched search",
    )
    serve.set_defaults(handler=_serve_retriever_command)


def _build_index_command(args: argparse.Namespace) -> int:
    return build_index_command(args.corpus, args.out, force=args.force)


def _serve_retriever_command(args: argparse.Namespace) -> int:
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
    try:
        return int(args.handler(args) or 0)
    except UsageError as error:
        message = " ".join(str(error).split())  # one line, whatever the cause's text holds
        print(f"agentflow-env {args.command}: error: {message}", file=sys.stderr)
        return 2


def _run_command(args: argparse.Namespace) -> int:
    # The env ids are registered by ``agentflow_env/__init__.py``, run before this module.
    _check_out_path(args.out)
    endpoint = _planner_endpoint(args) if args.planner == "openai" else None
    early_planner = _local_planner(args) if args.planner.startswith("hf:") else None
    if endpoint is None and early_planner is None and args.planner not in ("expert", "random"):
        raise UsageError(
            f"unknown --planner {args.planner!r}: choose expert, random, openai or hf:PATH "
            "(a local model directory)"
        )
    env = _make_env(args)
    planner = early_planner or _env_planner(args, env, endpoint)
    planner_errors = _planner_errors(args.planner)
    show_turns = args.verbose or (not args.quiet and args.episodes <= 5)
    records: list[EpisodeRecord] = []
    try:
        out = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115
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
            except planner_errors as error:
                raise UsageError(f"the planner's endpoint failed: {_clip(str(error))}") from error
            records.append(record)
            if show_turns:
                _print_episode(record)
            if out is not None:
                out.write(jsonl_line(record.as_dict()))
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
        first = _clip(" ".join(str(summary["first_module_error"]).split()))
        if failed == summary["episodes"]:
            print(f"all {failed} episodes ended on a module error: {first}")
            return 1
        print(f"{failed} of {summary['episodes']} episodes ended on a module error; first: {first}")
    return 0


def _clip(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_out_path(out: str | None) -> None:
    if out is None:
        return
    path = Path(out)
    if path.is_dir():
        raise UsageError(
            f"--out {out} is a directory: give a file path, e.g. {path / 'runs.jsonl'}"
        )
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(
            f"--out {out}: the directory {folder} does not exist; create it first or write "
            "somewhere else"
        )


def _agentflow_env_ids() -> list[str]:
    return sorted(ENV_ENTRY_POINTS)


def _make_env(args: argparse.Namespace) -> gym.Env:
    env_id = name = args.env
    if ":" in env_id:  # "module:EnvId", as gym.make accepts it
        module, name = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UsageError(f"--env {env_id}: cannot import {module!r} ({error})") from error
    try:
        gym.spec(name)
    except gym.error.Error as error:
        raise UsageError(
            f"unknown --env {env_id!r}: choose one of {', '.join(_agentflow_env_ids())}"
        ) from error
    kwargs = settings_from_args(args, args.env_settings)  # only the settings given
    if "dataset" not in kwargs:
        kwargs = {**RUN_DEFAULTS, **kwargs}
    tokenizer = kwargs.get("tokenizer") or _planner_tokenizer(args.planner)
    if tokenizer is not None:
        kwargs["tokenizer"] = tokenizer
    try:
        return gym.make(env_id, **kwargs)
    except (ValueError, OSError, KeyError) as error:  # the envs check their settings with
        # ValueError; OSError: a file they name (e.g. --tokenizer) cannot be read; KeyError: an
        # unknown tool name
        message = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        prefix = "" if env_id in message else f"invalid settings for {env_id}: "
        raise UsageError(prefix + message) from error


def _planner_endpoint(args: argparse.Namespace) -> Any:
    """The served planner's endpoint, checked: configured and reachable."""
    try:
        require_aiohttp()
    except ImportError as error:
        raise UsageError(f"--planner openai: {error}") from error

    def configured(flag: str, variable: str) -> bool:
        return bool(
            getattr(args, flag)
            or os.environ.get(f"AGENTFLOW_PLANNER_{variable}")
            or os.environ.get(f"AGENTFLOW_LLM_{variable}")
        )

    missing = [
        (flag, variable)
        for flag, variable in (("model", "MODEL"), ("base_url", "BASE_URL"))
        if not configured(flag, variable)
    ]
    if missing:
        flags = " and ".join(f"--{flag.replace('_', '-')}" for flag, _ in missing)
        variables = " and ".join(f"AGENTFLOW_LLM_{variable}" for _, variable in missing)
        raise UsageError(f"--planner openai needs {flags} (or set {variables})")
    overrides = {"base_url": args.base_url, "model": args.model, "api_key": args.api_key}
    try:
        endpoint = LLMEndpoint.from_env(
            "planner", **{k: v for k, v in overrides.items() if v is not None}
        )
    except ValueError as error:
        raise UsageError(f"--planner openai: {error}") from error
    where = "--base-url" if args.base_url else "AGENTFLOW_PLANNER_BASE_URL / AGENTFLOW_LLM_BASE_URL"
    _check_reachable(endpoint.base_url, where)
    return endpoint


def _check_reachable(url: str, where: str = "--base-url") -> None:
    """Fail fast, with the reason, when nothing accepts connections at ``url`` (from ``where``)."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise UsageError(
            f"{where} {url!r} is not an http(s) URL: give one like http://127.0.0.1:8000/v1"
        )
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=5.0):
            pass
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise UsageError(
            f"cannot reach the planner endpoint {url} ({reason}): start the server there or "
            f"fix {where}"
        ) from error


def _local_planner(args: argparse.Namespace) -> Any:
    path = args.planner[3:]
    if not path:
        raise UsageError("--planner hf:PATH needs a model directory (or cached hub id) after hf:")
    try:
        return HFPlanner(path, do_sample=args.sample, seed=args.seed, device=args.device)
    except (ImportError, OSError) as error:
        raise UsageError(f"--planner {args.planner}: {error}") from error


def _env_planner(args: argparse.Namespace, env: gym.Env, endpoint: Any) -> Any:
    if endpoint is not None:
        return OpenAIPlanner(endpoint, env, temperature=args.temperature)
    if args.planner == "random":
        return RandomPlanner(env, seed=args.seed)
    return ExpertPlanner(env)


def _planner_errors(planner: str) -> tuple[type[BaseException], ...]:
    """What a planner raises when its model cannot answer (a setup problem, not a bug)."""
    if planner != "openai":
        return ()
    return (LLMError,)


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
