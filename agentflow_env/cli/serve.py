"""``agentflow-env serve``: any registered variant as an OpenEnv server (``agentflow_env.service``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
from typing import Any

from agentflow_env.base.settings import read_env_var
from agentflow_env.cli.common import HelpFormatter, UsageError
from agentflow_env.envs.config.cli_options import add_config_arguments, settings_from_args
from agentflow_env.envs.registration import ENV_CONFIGS, REGISTERED, run_settings


def add_serve_command(commands: Any) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve an env variant over OpenEnv's protocol (WebSocket sessions)",
        description=(
            "Serve a registered env variant with its settings as an OpenEnv server: one "
            "WebSocket session per client, /health, /metadata, /schema, and /agentflow (the "
            "variant, its settings, its tokenizer). Clients: RemoteEnv, `agentflow-env eval "
            "--env-url`, the adapters' AGENTFLOW_ENV_URL, any OpenEnv client. The served env "
            "takes `run`'s and `eval`'s defaults (held-out tasks); a trainer's labels set their "
            "own split. The env runs planner-chosen tools: it binds to loopback unless given a "
            "token."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--env-id", "--env", dest="env", default="AgentFlow-Search-v0", help="registered env id"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    parser.add_argument(
        "--max-sessions", type=int, default=64, help="WebSocket sessions at once; more are refused"
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=600.0,
        help="seconds a session may stay idle before the server frees its env",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="bearer token every request must carry (default: $AGENTFLOW_SERVE_TOKEN); "
        "required to bind other than loopback",
    )
    parser.add_argument(
        "--ray",
        action="store_true",
        help="start the servers as Ray actors (on the cluster `ray start` made, else a local one)",
    )
    parser.add_argument("--replicas", type=int, default=1, help="env servers to start with --ray")
    parser.add_argument(
        "--replica-cpus",
        type=float,
        default=1.0,
        help="CPUs each --ray replica reserves (fractions share a CPU)",
    )
    parser.add_argument(
        "--ray-address", default=None, help="the Ray cluster to join (default: auto, else local)"
    )
    parser.add_argument("--log-level", default="info", help="uvicorn's and the service's log level")
    parser.set_defaults(
        handler=_serve_command,
        env_settings=add_config_arguments(parser, ENV_CONFIGS),
    )


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    if args.env not in REGISTERED:
        raise UsageError(
            f"unknown --env-id {args.env!r}: choose one of {', '.join(sorted(REGISTERED))}"
        )
    return run_settings(args.env, settings_from_args(args, args.env_settings))


def _serve_command(args: argparse.Namespace) -> int:
    settings = _settings(args)
    token = args.token or read_env_var("AGENTFLOW_SERVE_TOKEN")
    if args.max_sessions < 1 or args.replicas < 1:
        raise UsageError("--max-sessions and --replicas must be >= 1")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    options = {
        "max_sessions": args.max_sessions,
        "session_timeout_s": args.session_timeout,
        "token": token,
    }
    if args.ray:
        from agentflow_env.service.ray_workers import start_env_servers

        servers = start_env_servers(
            args.env,
            settings,
            args.replicas,
            bind=args.host,
            address=args.ray_address,
            num_cpus=args.replica_cpus,
            **options,
        )
        print(",".join(servers.urls), flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
        servers.stop()
        return 0
    try:
        from agentflow_env.service.app import serve
        from agentflow_env.service.host import EnvHost
    except ImportError as error:
        raise UsageError(f"{error}: pip install 'agentflow-env[serve]'") from error
    try:
        host = EnvHost(args.env, settings)
    except (ValueError, TypeError, OSError, KeyError) as error:
        raise UsageError(f"invalid settings for {args.env}: {error}") from error
    try:
        serve(host, bind=args.host, port=args.port, log_level=args.log_level, **options)
    except ValueError as error:
        raise UsageError(str(error)) from error
    return 0
