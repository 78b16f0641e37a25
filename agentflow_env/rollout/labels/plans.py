"""Trainer labels and adapter settings: which env, with which kwargs, runs which task.

A trainer hands the rollout one label per episode: a ``TaskSpec`` (``agentflow_env.rollout.labels.spec``),
its JSON string, the parsed object, or a chat conversation whose last message holds one of
these (``read_task_spec``). ``plan_episode`` turns a label into an ``EpisodePlan``: the env id,
the env kwargs (layered beneath the label's own) and a key naming that env, which is how the
``EnvPool`` shares envs. ``AdapterConfig`` reads the ``AGENTFLOW_*`` environment variables an
adapter built without arguments (OpenRLHF's ``AgentExecutor()``) is configured by, among them
the per-action token cap ``max_action_tokens`` (``AGENTFLOW_MAX_ACTION_TOKENS``); every variable
is declared in ``agentflow_env.base.settings``.

Every adapter runs envs with the policy's tokenizer, in the observation mode its sample shape
trains on (``samples``: ``flat`` needs flat observations; ``turns`` takes structured ones, the
default, or flat; ``agentflow_env.rollout.training.samples``), so a label or a setting may not change
``tokenizer`` nor pick an observation mode the shape cannot train (``check_adapter_kwargs``).
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.base.settings import read_env_var
from agentflow_env.rollout.checks.fail_fast import DEFAULT_FAIL_FAST, fail_fast_limit
from agentflow_env.rollout.labels.shapes import (
    SampleShape,
    check_sample_shape,
    shape_observation_mode,
)
from agentflow_env.rollout.labels.spec import (
    DEFAULT_ENV_ID,
    TaskSpec,
    TaskSpecError,
    env_kwargs_from_json,
)

ADAPTER_MAX_ACTION_TOKENS = 1024
"""The per-action token cap an adapter gives every env (its ``max_action_tokens``, where the
trainer's engine stops a planner turn) when ``AGENTFLOW_MAX_ACTION_TOKENS`` and the env kwargs
name none; below the env's own default (the session's ``DEFAULT_MAX_ACTION_TOKENS``)."""
CAP_VARIABLE = "AGENTFLOW_MAX_ACTION_TOKENS"
"""The environment variable naming the per-action token cap."""
ADAPTER_KWARGS: Mapping[str, Any] = {"observation_mode": "flat", "tokenizer": None}
"""Env kwargs an adapter sets itself: the tokenizer always, the observation mode from its sample
shape (these are the flat shape's values); a label or a setting may only repeat them."""
SAMPLES_VARIABLE = "AGENTFLOW_SAMPLES"
"""The environment variable naming an adapter's sample shape (``flat`` or ``turns``)."""
KWARGS_VARIABLE = "AGENTFLOW_ENV_KWARGS"
"""The environment variable holding the env kwargs beneath every label's (a JSON object)."""


# -- labels ------------------------------------------------------------------------------------
def task_prompt(seed: int, **env_kwargs: Any) -> str:
    """A dataset prompt naming one task: a ``TaskSpec`` with no env id (the reader's default
    env and kwargs apply beneath ``env_kwargs``) and the episode seed."""
    return TaskSpec(env_id=None, env_kwargs=env_kwargs, seed=int(seed)).to_json()


def read_task_spec(label: Any) -> TaskSpec:
    """The ``TaskSpec`` a label names.

    Accepts a ``TaskSpec``, its JSON string (or bytes), the parsed JSON object, or a chat
    conversation (a list of ``{"role", "content"}`` messages) whose last message's content is one
    of those. Raises ``TaskSpecError`` for anything else.
    """
    if isinstance(label, TaskSpec):
        return label
    if isinstance(label, list) and label and isinstance(label[-1], Mapping):
        label = _message_text(label[-1].get("content"))
    return TaskSpec.from_json(label)


def _message_text(content: Any) -> Any:
    if isinstance(content, list):  # typed content blocks
        return "".join(
            str(block.get("text", "")) for block in content if isinstance(block, Mapping)
        )
    return content


def parse_task_prompt(label: Any) -> tuple[int, dict[str, Any]]:
    """``(seed, env kwargs as objects)`` from a ``task_prompt`` string (or any label naming a seed)."""
    spec = read_task_spec(label)
    if spec.seed is None:
        raise TaskSpecError(f"a task prompt names an episode seed, got {label!r:.120}")
    return spec.seed, env_kwargs_from_json(spec.env_kwargs)


ADAPTER_OWNED_SETTINGS = ("tokenizer", "observation_mode")
"""The env settings an adapter sets itself (the policy's tokenizer; the observation mode its
sample shape trains), which ``check_adapter_kwargs`` guards: a served env's label carries neither
(its server's apply)."""


def check_adapter_kwargs(
    kwargs: Mapping[str, Any],
    where: str,
    error: type[ValueError] = ValueError,
    samples: SampleShape = "flat",
) -> str:
    """Raise ``error`` if ``kwargs`` change a setting the adapter sets itself: the tokenizer (the
    policy's: ``AGENTFLOW_TOKENIZER`` or the trainer's), or an observation mode the sample shape
    cannot train. Returns the observation mode the envs run in."""
    if kwargs.get("tokenizer") is not None:
        raise error(
            f"{where} sets tokenizer={kwargs['tokenizer']!r:.60}, which the adapter sets itself "
            "(the policy's: AGENTFLOW_TOKENIZER or the trainer's)"
        )
    try:
        return shape_observation_mode(samples, kwargs)
    except ValueError as exc:
        raise error(
            f"{where} sets observation_mode={kwargs['observation_mode']!r:.40}, which the adapter "
            f"sets itself from its sample shape: {exc}"
        ) from None


def positive_int(value: Any, what: str) -> int:
    """``value`` as an integer >= 1 (digit strings too), else ``ValueError`` naming ``what``."""
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {value!r:.40}")
    return value


# -- which env runs which task -----------------------------------------------------------------
@dataclass(frozen=True)
class EpisodePlan:
    """Which env runs which task: the env id, env kwargs beneath the label's (objects), the
    label's own env kwargs (JSON forms unless ``label_kwargs_are_json`` is false), a key naming
    the env, and the spec naming the task."""

    env_id: str
    base_kwargs: Mapping[str, Any]
    label_kwargs: Mapping[str, Any]
    label_kwargs_are_json: bool
    env_key: str
    spec: TaskSpec
    observation_mode: str = "flat"
    """The mode the env runs in: the one the sample shape trains on (``check_adapter_kwargs``)."""

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """The env's kwargs as objects (JSON forms of tools and modules built here); the env is
        built with ``observation_mode`` besides (``build_env``)."""
        own = self.label_kwargs
        if self.label_kwargs_are_json:
            own = env_kwargs_from_json(own)
        return {**self.base_kwargs, **own}

    @property
    def task_key(self) -> str:
        """The task-naming part of the spec (seed, task id or record) as JSON."""
        data = {k: getattr(self.spec, k) for k in ("seed", "task_id", "record")}
        return json.dumps(data, sort_keys=True, default=str)


def plan_episode(
    label: Any,
    *,
    env_id: str = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    default_env_kwargs: Mapping[str, Any] | None = None,
    json_env_kwargs: Mapping[str, Any] | None = None,
    samples: SampleShape = "flat",
) -> EpisodePlan:
    """The env and task one episode runs.

    ``label`` is anything ``read_task_spec`` reads, or a ``(seed, env kwargs)`` pair whose
    kwargs are objects (``AgentFlowEnv``'s own arguments); a label naming no env id runs
    ``env_id``. Env kwargs, lowest first: ``default_env_kwargs`` (objects, only for labels that
    name no env id), ``env_kwargs`` (objects), ``json_env_kwargs`` (JSON forms), the label's.
    ``samples``: the shape the episode is trained as, which picks the observation mode.
    Raises ``TaskSpecError`` for a label that names no task or sets what the adapter sets.
    """
    is_pair = _is_seed_pair(label)
    if is_pair:
        spec = TaskSpec(env_id=None, seed=int(label[0]))
        own = {**env_kwargs_from_json(json_env_kwargs or {}), **label[1]}
    else:
        spec = read_task_spec(label)
        own = {**(json_env_kwargs or {}), **spec.env_kwargs}
    base = dict(default_env_kwargs or {}) if spec.env_id is None else {}
    base.update(env_kwargs or {})
    mode = check_adapter_kwargs({**base, **own}, "the label's env kwargs", TaskSpecError, samples)
    chosen = spec.env_id or env_id
    merged = {**base, **own, "observation_mode": mode}
    env_key = json.dumps([chosen, merged], sort_keys=True, default=str)
    return EpisodePlan(chosen, base, own, not is_pair, env_key, spec, mode)


def _is_seed_pair(label: Any) -> bool:
    return (
        isinstance(label, tuple)
        and len(label) == 2
        and isinstance(label[1], Mapping)
        and isinstance(label[0], numbers.Integral)
        and not isinstance(label[0], bool)
    )


# -- settings from the environment -------------------------------------------------------------
@dataclass(frozen=True, init=False)
class AdapterConfig:
    """An adapter's settings: the env id for labels that name none, JSON env kwargs beneath
    every label's, the policy's tokenizer (a path or cached hub name; ``None``: the bundled one)
    and the per-action token cap, which is also every env's ``max_action_tokens``."""

    env_id: str = DEFAULT_ENV_ID
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    max_action_tokens: int = ADAPTER_MAX_ACTION_TOKENS
    fail_fast: int = DEFAULT_FAIL_FAST
    """How many trajectories in a row failing the same way at a process's start stop the run
    (``agentflow_env.rollout.checks.fail_fast``; 0: never)."""
    samples: SampleShape = "flat"
    """The sample shape trained (``agentflow_env.rollout.training.samples``): one flat sample per
    trajectory, or one per planner turn (``AGENTFLOW_SAMPLES``)."""
    env_url: str | None = None
    """Served envs (``agentflow-env serve``) to play the episodes on, comma-separated
    (``AGENTFLOW_ENV_URL``); ``None``: the envs run in this process."""
    env_token: str | None = None
    """The served envs' bearer token (``AGENTFLOW_SERVE_TOKEN``)."""

    def __init__(
        self,
        env_id: str = DEFAULT_ENV_ID,
        env_kwargs: Mapping[str, Any] | None = None,
        tokenizer: str | None = None,
        max_action_tokens: int | None = None,
        fail_fast: int = DEFAULT_FAIL_FAST,
        *,
        samples: str = "flat",
        env_url: str | None = None,
        env_token: str | None = None,
    ) -> None:
        if max_action_tokens is None:
            max_action_tokens = ADAPTER_MAX_ACTION_TOKENS
        object.__setattr__(self, "env_id", env_id)
        object.__setattr__(self, "env_kwargs", {} if env_kwargs is None else env_kwargs)
        object.__setattr__(self, "tokenizer", tokenizer)
        object.__setattr__(self, "max_action_tokens", max_action_tokens)
        object.__setattr__(self, "fail_fast", fail_fast)
        object.__setattr__(self, "samples", check_sample_shape(samples))
        object.__setattr__(self, "env_url", env_url or None)
        object.__setattr__(self, "env_token", env_token or None)
        check_adapter_kwargs(self.env_kwargs, "the adapter's env kwargs", samples=self.samples)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> AdapterConfig:
        """Read and check ``AGENTFLOW_ENV_ID``, ``AGENTFLOW_ENV_KWARGS``, ``AGENTFLOW_TOKENIZER``,
        ``AGENTFLOW_MAX_ACTION_TOKENS``, ``AGENTFLOW_FAIL_FAST``, ``AGENTFLOW_SAMPLES``,
        ``AGENTFLOW_ENV_URL`` and ``AGENTFLOW_SERVE_TOKEN`` (from
        ``environ``, default ``os.environ``). ``env_kwargs`` always holds ``max_action_tokens``,
        equal to the config's; a cap set in two places must agree."""
        kwargs = read_env_var(KWARGS_VARIABLE, environ) or {}
        samples = read_env_var(SAMPLES_VARIABLE, environ)
        check_adapter_kwargs(kwargs, KWARGS_VARIABLE, samples=samples)
        cap = read_env_var(CAP_VARIABLE, environ)
        if "max_action_tokens" in kwargs:
            env_cap = positive_int(
                kwargs["max_action_tokens"], "max_action_tokens in AGENTFLOW_ENV_KWARGS"
            )
            if cap is not None and cap != env_cap:
                raise ValueError(
                    f"{CAP_VARIABLE}={cap} but AGENTFLOW_ENV_KWARGS sets "
                    f"max_action_tokens={env_cap}: the env must cut an action exactly where the "
                    "engine stops it, or the two token sequences part. Set one of them (or both "
                    "to the same value)."
                )
            cap = env_cap
        cap = cap or ADAPTER_MAX_ACTION_TOKENS
        return cls(
            env_id=read_env_var("AGENTFLOW_ENV_ID", environ) or DEFAULT_ENV_ID,
            env_kwargs={**kwargs, "max_action_tokens": cap},
            tokenizer=read_env_var("AGENTFLOW_TOKENIZER", environ),
            max_action_tokens=cap,
            fail_fast=fail_fast_limit(environ),
            samples=samples,
            env_url=read_env_var("AGENTFLOW_ENV_URL", environ),
            env_token=read_env_var("AGENTFLOW_SERVE_TOKEN", environ),
        )

    def plan(self, label: Any) -> EpisodePlan:
        """The episode a label names under these settings (the label's env kwargs win; its own
        ``max_action_tokens`` caps that episode's turns and must be an integer >= 1)."""
        plan = plan_episode(
            label, env_id=self.env_id, json_env_kwargs=self.env_kwargs, samples=self.samples
        )
        if "max_action_tokens" in plan.spec.env_kwargs:
            positive_int(plan.spec.env_kwargs["max_action_tokens"], "the label's max_action_tokens")
        return plan


__all__ = [
    "ADAPTER_KWARGS",
    "ADAPTER_MAX_ACTION_TOKENS",
    "CAP_VARIABLE",
    "SAMPLES_VARIABLE",
    "AdapterConfig",
    "EpisodePlan",
    "check_adapter_kwargs",
    "parse_task_prompt",
    "plan_episode",
    "positive_int",
    "read_task_spec",
    "task_prompt",
]
