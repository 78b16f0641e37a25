"""Building what ``run`` and ``eval`` drive: the env from its options, and the planners, all of
the one family of ``agentflow_env.rollout`` (``run`` calls them in the Gymnasium style, ``eval``
through the planner protocol, one per episode)."""

from __future__ import annotations

import argparse
import importlib
import socket
import urllib.parse
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentflow_env.base.settings import llm_env_var, read_env_var
from agentflow_env.cli.common import UsageError
from agentflow_env.envs.config import add_config_arguments, settings_from_args
from agentflow_env.envs.registration import ENV_CONFIGS, REGISTERED, run_settings
from agentflow_env.evaluation.session_planners import SAMPLINGS, PlannerFactory
from agentflow_env.llm import LLMEndpoint, LLMError, require_aiohttp
from agentflow_env.rollout.agents.episodes import ObservationPlanner
from agentflow_env.rollout.agents.llm_planners import HFPlanner, OpenAIPlanner
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner

PLANNERS = "expert | random | openai | hf:PATH"

SHOWN_DEFAULTS = {"tokenizer": "bundled, or hf:PATH's"}


def shown_run_defaults() -> dict[str, str]:
    """The defaults the help of ``run``, ``eval`` and ``check`` shows: each variant's run
    defaults (``Variant.run_defaults``: held-out tasks where a variant has a split)."""
    shown: dict[str, dict[str, list[str]]] = {}
    for env_id, variant in REGISTERED.items():
        for name, value in variant.run_defaults.items():
            shown.setdefault(name, {}).setdefault(str(value), []).append(env_id)
    return {
        name: "; ".join(
            value if len(ids) == len(REGISTERED) else f"{value} on {', '.join(ids)}"
            for value, ids in values.items()
        )
        for name, values in shown.items()
    }


def add_env_and_planner_arguments(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    """``--env``, ``--planner``, one option per env setting and the planners' own options;
    returns the env settings' options (for ``settings_from_args``)."""
    parser.add_argument("--env", default="AgentFlow-Search-v0", help="registered environment id")
    parser.add_argument("--planner", default="expert", help=PLANNERS)
    # One option per setting of the registered envs' configs (``agentflow_env.envs.config``).
    env_settings = add_config_arguments(
        parser,
        ENV_CONFIGS,
        shown_defaults={**shown_run_defaults(), **SHOWN_DEFAULTS},
    )
    served = parser.add_argument_group("served planner (--planner openai)")
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
    local = parser.add_argument_group("local planner (--planner hf:PATH)")
    local.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    local.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    return env_settings


def _agentflow_env_ids() -> list[str]:
    return sorted(REGISTERED)


def make_env(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> gym.Env:
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
    kwargs.update(overrides or {})
    kwargs = run_settings(env_id, kwargs)  # the variant's own (held-out tasks)
    tokenizer = kwargs.get("tokenizer") or planner_tokenizer(args.planner)
    if tokenizer is not None:
        kwargs["tokenizer"] = tokenizer
    try:
        return gym.make(env_id, **kwargs)
    except TypeError as error:  # an env that takes no such settings (not an AgentFlow env)
        raise UsageError(f"--env {env_id}: {error}") from error
    except (ValueError, OSError, KeyError) as error:  # the envs check their settings with
        # ValueError; OSError: a file they name (e.g. --tokenizer) cannot be read; KeyError: an
        # unknown tool name
        message = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        prefix = "" if env_id in message else f"invalid settings for {env_id}: "
        raise UsageError(prefix + message) from error


def planner_endpoint(args: argparse.Namespace) -> Any:
    """The served planner's endpoint, checked: configured and reachable."""
    try:
        require_aiohttp()
    except ImportError as error:
        raise UsageError(f"--planner openai: {error}") from error

    def configured(flag: str, variable: str) -> bool:
        return bool(
            getattr(args, flag)
            or read_env_var(llm_env_var("planner", variable))
            or read_env_var(llm_env_var("llm", variable))
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


def local_planner(args: argparse.Namespace) -> Any:
    path = args.planner[3:]
    if not path:
        raise UsageError("--planner hf:PATH needs a model directory (or cached hub id) after hf:")
    try:
        return HFPlanner(path, do_sample=args.sample, seed=args.seed, device=args.device)
    except (ImportError, OSError) as error:
        raise UsageError(f"--planner {args.planner}: {error}") from error


def env_planner(args: argparse.Namespace, env: gym.Env, endpoint: Any) -> Any:
    """``run``'s planner, acting in ``env``'s episodes (``act(observation, info)``)."""
    if endpoint is not None:
        return OpenAIPlanner(endpoint, env, temperature=args.temperature)
    if args.planner == "random":
        return RandomPlanner(env, seed=args.seed)
    return ExpertPlanner(env)


def planner_factory(args: argparse.Namespace, env: Any, shared: dict[str, Any]) -> PlannerFactory:
    """``eval``'s planners, one per episode (``next_action(session)``); a served or local model
    is built once and kept in ``shared``."""
    if args.planner == "expert":
        return lambda index: ExpertPlanner()
    if args.planner == "random":
        return lambda index: RandomPlanner(seed=[args.seed, index])
    if args.planner == "openai":
        if "chat" not in shared:
            sampling = SAMPLINGS[args.sampling] if args.sampling else None
            shared["chat"] = OpenAIPlanner(
                planner_endpoint(args),
                temperature=args.temperature,
                max_tokens=args.max_tokens,  # None: each session's max_action_tokens
                sampling=sampling,
            )
        return lambda index: shared["chat"]
    if args.planner.startswith("hf:"):
        if "local" not in shared:  # a blocking model: off the event loop, one call at a time
            shared["local"] = ObservationPlanner(local_planner(args), in_thread=True)
        cap = args.max_tokens or env.session_config.max_action_tokens
        if cap is not None:  # this env's (an ablation's variants may differ; they run in turn)
            shared["local"].planner.max_new_tokens = cap
        return lambda index: shared["local"]
    raise UsageError(
        f"unknown --planner {args.planner!r}: choose expert, random, openai or hf:PATH"
    )


def planner_errors(planner: str) -> tuple[type[BaseException], ...]:
    """What a planner raises when its model cannot answer (a setup problem, not a bug)."""
    if planner != "openai":
        return ()
    return (LLMError,)


def planner_tokenizer(planner: str) -> str | None:
    """A local model's own tokenizer, when its directory has one (its ids must match the env's)."""
    if not planner.startswith("hf:"):
        return None
    path = Path(planner[3:])
    has_tokenizer = (path / "tokenizer.json").is_file() or (
        path / "tokenizer_config.json"
    ).is_file()
    return str(path) if has_tokenizer else None
