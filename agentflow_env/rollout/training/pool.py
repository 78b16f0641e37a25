"""The env pool every adapter shares: flat-mode envs per (env id, env kwargs, tokenizer), and the
tasks their labels name.

Building an env is the expensive part of a rollout (task source, tools, modules, tokenizer
wrapper); the pool builds each once per process and hands it out again. The synthetic worlds and
BM25 indexes behind the envs are cached process-wide by their own modules
(``tasks/sources.py``, ``retrieval/bm25.py``), so envs of one key share them; the pool resolves
each tokenizer once and gives every env the same ``ChatTokenizer``. Two ways to use it:

- one env per live episode (``envs``, stepped through the Gymnasium API; the batched driver
  ``agentflow_env.rollout.training.driver.run_episodes``), discarding an env that raised;
- one env per key serving many concurrent ``Session``s (``new_session``; OpenRLHF's agent,
  where every trajectory is an asyncio task).

An entry exists only for env kwargs the env's config accepted (the build validates them), keyed
by the env id and those kwargs as canonical JSON (``EpisodePlan.env_key``). The copies of one
label (a GRPO group) share one resolved ``Task``: the same world and question.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

import gymnasium as gym

from agentflow_env.base.hf_tokens import resolve_tokenizer
from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.remote import RemoteSession
from agentflow_env.rollout.checks.fail_fast import FailFast
from agentflow_env.rollout.checks.failures import AdapterError, trajectory_failure
from agentflow_env.rollout.labels.plans import SAMPLES_VARIABLE, AdapterConfig, EpisodePlan
from agentflow_env.rollout.labels.spec import TaskSpec, TaskSpecError
from agentflow_env.rollout.training.remote_envs import RemoteEnvPool
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.session import Session

logger = logging.getLogger("agentflow_env.rollout")

_DEFAULT = "default"


def build_env(plan: EpisodePlan, tokenizer: Any) -> AgentFlowEnv:
    """A new env for ``plan`` in the plan's observation mode (by its registered id, so
    ``AgentFlow-Code-v0`` and envs registered elsewhere work too) with ``tokenizer`` (any form
    ``resolve_tokenizer`` reads)."""
    kwargs = {**plan.env_kwargs, "observation_mode": plan.observation_mode, "tokenizer": tokenizer}
    # The env ids are registered by ``agentflow_env/__init__.py``, run before any submodule.
    env = gym.make(plan.env_id, **kwargs).unwrapped
    if not isinstance(env, AgentFlowEnv):
        raise TaskSpecError(f"{plan.env_id!r} is not an AgentFlowEnv")
    return env


class EnvPool:
    """Reusable flat-mode envs per (env key, tokenizer) and a bounded cache of tasks per label.

    ``tokenizer`` is the default for calls that pass none (a path, a hub name in the local cache,
    a tokenizer object, or ``None`` for the bundled one); it is resolved on first use. Safe to use
    from several threads.
    """

    def __init__(self, tokenizer: Any = None, max_cached_tasks: int = 8192) -> None:
        self.default_tokenizer = tokenizer
        self._lock = threading.RLock()
        self._envs: dict[tuple[str, int | str], list[AgentFlowEnv]] = {}
        self._tokenizers: dict[int | str, tuple[Any, ChatTokenizer]] = {}
        self._tasks: OrderedDict[tuple[str, str], Task] = OrderedDict()
        self._max_cached_tasks = max_cached_tasks

    # -- tokenizers --------------------------------------------------------------------------
    def tokenizer(self, source: Any = None) -> ChatTokenizer:
        """``source`` resolved once and shared (``None``: the pool's default tokenizer)."""
        key = _tokenizer_key(source)
        with self._lock:
            if key not in self._tokenizers:
                given = self.default_tokenizer if source is None else source
                # Keep ``source`` alive with its wrapper, so its id names it for the pool's life.
                self._tokenizers[key] = (source, resolve_tokenizer(given))
            return self._tokenizers[key][1]

    # -- envs --------------------------------------------------------------------------------
    def envs(self, plan: EpisodePlan, tokenizer: Any = None, count: int = 1) -> list[AgentFlowEnv]:
        """``count`` envs for ``plan`` (built as needed), one per episode run at the same time."""
        chat_tokenizer = self.tokenizer(tokenizer)
        key = (plan.env_key, _tokenizer_key(tokenizer))
        with self._lock:
            envs = self._envs.get(key, [])
            built = [build_env(plan, chat_tokenizer) for _ in range(count - len(envs))]
            if built:  # stored only once built: kwargs no env accepted leave no entry
                self._envs[key] = envs = envs + built
            return envs[:count]

    def env(self, plan: EpisodePlan, tokenizer: Any = None) -> AgentFlowEnv:
        """The env for ``plan`` that serves many sessions at once (``new_session``)."""
        return self.envs(plan, tokenizer, 1)[0]

    def discard(self, env: AgentFlowEnv) -> None:
        """Drop an env that raised (its state is unknown); later episodes get a fresh one."""
        with self._lock:
            for pool in self._envs.values():
                if any(e is env for e in pool):
                    pool[:] = [e for e in pool if e is not env]
        try:
            env.close()
        except Exception:  # closing a broken env must not fail the batch
            logger.debug("closing a discarded env failed", exc_info=True)

    # -- tasks and episodes ------------------------------------------------------------------
    def task(self, plan: EpisodePlan, env: AgentFlowEnv) -> Task:
        """The task ``plan`` names, resolved once per (env key, task) and then shared."""
        key = (plan.env_key, plan.task_key)
        with self._lock:
            task = self._tasks.get(key)
            if task is not None:
                self._tasks.move_to_end(key)
                return task
        task = plan.spec.resolve(env.task_source)  # outside the lock: may build a world
        with self._lock:
            self._tasks[key] = task
            if len(self._tasks) > self._max_cached_tasks:
                self._tasks.popitem(last=False)
        return task

    def reset(self, env: AgentFlowEnv, plan: EpisodePlan) -> dict[str, Any]:
        """Start ``plan``'s episode on ``env`` (Gymnasium API); returns the first observation."""
        observation, _ = env.reset(seed=plan.spec.seed, options={"task": self.task(plan, env)})
        return observation

    def new_session(self, plan: EpisodePlan, tokenizer: Any = None) -> Session:
        """A ``Session`` for ``plan``'s task on the shared env (blocking: builds envs and worlds)."""
        env = self.env(plan, tokenizer)
        return env.new_session(self.task(plan, env), seed=plan.spec.seed)


def _tokenizer_key(source: Any) -> int | str:
    return _DEFAULT if source is None else id(source)


class SharedEnvs:
    """An ``EnvPool`` read through an ``AdapterConfig``: labels in, envs and sessions out, with
    the configured tokenizer. What an adapter built without arguments keeps per process."""

    def __init__(self, config: AdapterConfig, pool: EnvPool | None = None) -> None:
        self.config = config
        self.pool = pool or EnvPool(tokenizer=config.tokenizer)
        self.remote: RemoteEnvPool | None = None
        """With ``config.env_url``: the served envs the sessions play on."""
        if config.env_url:
            self.remote = RemoteEnvPool(
                config.env_url, token=config.env_token, samples=config.samples
            )
        self.fail_fast = FailFast(config.fail_fast)
        """This process's guard against a setup that fails every trajectory (``record`` it
        after each one)."""

    def tokenizer(self) -> ChatTokenizer:
        """The policy's tokenizer (loads it on the first call: call it early to fail early)."""
        return self.pool.tokenizer()

    def tokenizer_name(self) -> str:
        return self.config.tokenizer or "the bundled tokenizer (AGENTFLOW_TOKENIZER unset)"

    def env(self, label: TaskSpec | Any) -> AgentFlowEnv:
        """The shared env for a label's env id and kwargs."""
        return self.pool.env(self.config.plan(label))

    def new_session(self, label: TaskSpec | Any) -> Session | RemoteSession:
        """A session for the task a label names (blocking: builds envs and worlds); with
        ``env_url`` a ``RemoteSession`` on the served envs (started by its ``start``, closed by
        ``end_session``)."""
        plan = self.config.plan(label)
        if self.remote is not None:
            return self.remote.new_session(plan, self.tokenizer())
        return self.pool.new_session(plan)

    def judge(
        self, session: Session | RemoteSession | None, error: BaseException | str | None = None
    ) -> str | None:
        """Why a finished trajectory counts as failed (``trajectory_failure``), else ``None``,
        recorded with ``fail_fast`` (``SystemicFailure`` when the setup fails every one)."""
        failure = trajectory_failure(session, error)
        self.fail_fast.record(failure)
        return failure


class LazySharedEnvs:
    """Calling it returns one ``SharedEnvs`` configured from the ``AGENTFLOW_*`` environment
    variables on the first call (thread-safe): what an adapter built without arguments keeps.

    ``flat_only``: for a trainer that trains one sample per trajectory, why it cannot take turn
    samples; ``AGENTFLOW_SAMPLES=turns`` then stops the run with that reason (``AdapterError``)
    instead of training another shape than the one asked for."""

    def __init__(self, flat_only: str | None = None) -> None:
        self._lock = threading.Lock()
        self._shared: SharedEnvs | None = None
        self.flat_only = flat_only

    def __call__(self) -> SharedEnvs:
        with self._lock:
            if self._shared is None:
                config = AdapterConfig.from_environ()
                if self.flat_only is not None and config.samples != "flat":
                    raise AdapterError(
                        f"{SAMPLES_VARIABLE}={config.samples}: this trainer trains flat samples "
                        f"only: {self.flat_only}"
                    )
                self._shared = SharedEnvs(config)
            return self._shared


__all__ = ["EnvPool", "LazySharedEnvs", "SharedEnvs", "build_env"]
