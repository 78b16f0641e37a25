"""OpenRLHF agent for AgentFlow: the planner is the trained policy, the env runs everything else.

Use with ``--train.agent_func_path adapters/openrlhf/agent_func.py`` (OpenRLHF 0.11.x). OpenRLHF
loads this file by path in every vLLM Ray actor and builds ``AgentExecutor()`` with no
arguments, so configuration comes from environment variables (hand them to the Ray actors with
``ray job submit --runtime-env-json '{"env_vars": {...}}'``):

  AGENTFLOW_ENV_ID           env id for labels that name none (default: AgentFlow-Search-v0).
  AGENTFLOW_ENV_KWARGS       JSON object of env kwargs for every env, e.g.
                             '{"modules": "llm", "max_turns": 10}'. A label's own env_kwargs win
                             on a clash (they define which task the label means). JSON forms of
                             tools and per-role module endpoints: agentflow_env.tasks.spec.
  AGENTFLOW_TOKENIZER        the trained model's tokenizer: a local directory or a hub name in
                             the local cache (default: the package's bundled tokenizer). It MUST
                             be the policy's tokenizer: OpenRLHF tokenizes the prompt and every
                             feedback text with its own tokenizer, so the env renders its chat
                             glue with the same one.
  AGENTFLOW_MAX_TURN_TOKENS  cap on the tokens of one planner turn (default 1024).
  AGENTFLOW_LLM_BASE_URL, AGENTFLOW_LLM_MODEL (and AGENTFLOW_<ROLE>_*): the frozen modules'
                             OpenAI-compatible endpoint, used when env kwargs say "modules": "llm".
  AGENTFLOW_RETRIEVER_URL    retriever server for the Search tool (default: local BM25).

Each dataset ``label`` is a ``TaskSpec`` JSON string (``adapters/openrlhf/prepare_data.py``
writes them). The env runs in flat observation mode: the next prompt is exactly the previous
ids + the action ids + the feedback ids, and the feedback text carries the chat glue.

Token-in-token-out: OpenRLHF's ``step`` states carry only ``action_text``, not the ids vLLM
sampled. Text is lossy (vLLM drops the end-of-turn token from the text; re-encoding may split
words differently), so ``AgentExecutor.execute`` wraps the engine, keeps each turn's output ids
(and log-probs) and hands them to the env, which records them verbatim: the env's trajectory
holds exactly the tokens OpenRLHF trains on. The wrapper also caps each turn and checks, before
every turn, that OpenRLHF's prompt ids equal the env's (a tokenizer mismatch fails loudly).
"""

# No ``from __future__ import annotations``: OpenRLHF executes this file without registering it in
# ``sys.modules``, and ``dataclasses`` then fails on string annotations.
import asyncio
import contextvars
import copy
import dataclasses
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from agentflow_env.env import AgentFlowEnv
from agentflow_env.hf_tokens import resolve_tokenizer
from agentflow_env.session import Session
from agentflow_env.tasks.spec import DEFAULT_ENV_ID, TaskSpec
from agentflow_env.tokens import ChatTokenizer

DEFAULT_MAX_TURN_TOKENS = 1024
LOG_KEYS = (
    "turns",
    "tool_calls",
    "tool_errors",
    "invalid_actions",
    "action_tokens",
    "success",
    "budget_exhausted",
)


class TokenMismatchError(RuntimeError):
    """OpenRLHF's prompt ids differ from the env's: the two tokenizers disagree."""


# -- process-wide state ------------------------------------------------------------------------
@dataclass(frozen=True)
class AdapterConfig:
    env_id: str = DEFAULT_ENV_ID
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    max_turn_tokens: int = DEFAULT_MAX_TURN_TOKENS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> "AdapterConfig":
        raw = environ.get("AGENTFLOW_ENV_KWARGS", "").strip() or "{}"
        try:
            kwargs = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"AGENTFLOW_ENV_KWARGS is not JSON ({exc.msg}): {raw!r:.120}"
            ) from None
        if not isinstance(kwargs, dict):
            raise ValueError(f"AGENTFLOW_ENV_KWARGS must be a JSON object, got {raw!r:.120}")
        cap = int(environ.get("AGENTFLOW_MAX_TURN_TOKENS", "") or DEFAULT_MAX_TURN_TOKENS)
        if cap < 1:
            raise ValueError(f"AGENTFLOW_MAX_TURN_TOKENS must be >= 1, got {cap}")
        return cls(
            env_id=environ.get("AGENTFLOW_ENV_ID", "").strip() or DEFAULT_ENV_ID,
            env_kwargs=kwargs,
            tokenizer=environ.get("AGENTFLOW_TOKENIZER", "").strip() or None,
            max_turn_tokens=cap,
        )


class SharedEnvs:
    """The tokenizer and one env per (env id, kwargs), built once per process and shared by
    every trajectory (an env's tools, modules and indexes serve many sessions at once)."""

    def __init__(self, config: AdapterConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._tokenizer: ChatTokenizer | None = None
        self._envs: dict[str, AgentFlowEnv] = {}

    def tokenizer(self) -> ChatTokenizer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = resolve_tokenizer(self.config.tokenizer)
            return self._tokenizer

    def env(self, spec: TaskSpec) -> AgentFlowEnv:
        kwargs = {**self.config.env_kwargs, **spec.env_kwargs}
        for key, needed in (("observation_mode", "flat"), ("tokenizer", None)):
            if kwargs.get(key, needed) != needed:
                raise ValueError(
                    f"env kwarg {key}={kwargs[key]!r} is set by the adapter "
                    "(flat observations; the tokenizer comes from AGENTFLOW_TOKENIZER)"
                )
        spec = dataclasses.replace(
            spec, env_id=spec.env_id or self.config.env_id, env_kwargs=kwargs
        )
        key = json.dumps([spec.env_id, kwargs], sort_keys=True)
        tokenizer = self.tokenizer()
        with self._lock:
            if key not in self._envs:
                self._envs[key] = spec.make_env(tokenizer=tokenizer, observation_mode="flat")
            return self._envs[key]

    def new_session(self, spec: TaskSpec) -> Session:
        """A session for the task ``spec`` names (blocking: builds envs and worlds)."""
        env = self.env(spec)
        return env.new_session(spec.resolve(env.task_source), seed=spec.seed)


_shared: SharedEnvs | None = None
_shared_lock = threading.Lock()


def shared_envs() -> SharedEnvs:
    """This process's ``SharedEnvs``, configured from the environment on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SharedEnvs(AdapterConfig.from_environ())
        return _shared


# -- one trajectory ------------------------------------------------------------------------------
@dataclass
class Rollout:
    """Links one ``execute`` call with its ``AgentInstance`` (both run in the same asyncio task,
    so a context variable finds it; concurrent trajectories are separate tasks)."""

    session: Session | None = None
    action_ids: list[int] | None = None
    action_logprobs: list[float] | None = None


_ROLLOUT: contextvars.ContextVar[Rollout | None] = contextvars.ContextVar(
    "agentflow_rollout", default=None
)


def episode_logs(session: Session | None) -> dict[str, float]:
    """Numeric per-trajectory logs (always the same keys, as OpenRLHF stacks them)."""
    metrics = session.metrics.as_dict() if session is not None else {}
    logs = {key: float(metrics.get(key, 0.0)) for key in LOG_KEYS}
    done = session is not None and session.done
    success = done and session is not None and bool(session.end_info.get("success", False))
    logs["success"] = float(success)
    logs["budget_exhausted"] = float(not done)
    return logs


class TurnEngine:
    """Wraps OpenRLHF's rollout engine for one trajectory: caps each turn's tokens, checks the
    prompt ids against the env's, and keeps the sampled ids for the env."""

    def __init__(self, engine: Any, rollout: Rollout, max_turn_tokens: int) -> None:
        self.engine = engine
        self.rollout = rollout
        self.max_turn_tokens = max_turn_tokens

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> Any:
        self._check_prompt(prompt_token_ids)
        params = copy.deepcopy(sampling_params)  # never change the caller's object
        if params.max_tokens is None or params.max_tokens > self.max_turn_tokens:
            params.max_tokens = self.max_turn_tokens
        output = await self.engine.generate(
            prompt_token_ids, params, multi_modal_data=multi_modal_data
        )
        sampled = output.outputs[0]
        self.rollout.action_ids = [int(i) for i in sampled.token_ids]
        self.rollout.action_logprobs = _sampled_logprobs(sampled)
        return output

    def _check_prompt(self, prompt_ids: list[int]) -> None:
        session = self.rollout.session
        if session is None or session.observation is None:
            return
        expected = session.observation.token_ids
        if list(prompt_ids) == expected:
            return
        at = next(
            (i for i, (a, b) in enumerate(zip(prompt_ids, expected, strict=False)) if a != b),
            min(len(prompt_ids), len(expected)),
        )
        raise TokenMismatchError(
            f"OpenRLHF's prompt ids differ from the env's at token {at} "
            f"({len(prompt_ids)} vs {len(expected)} tokens). Set AGENTFLOW_TOKENIZER to the "
            "trained model's tokenizer, and make --data.max_len hold the first prompt."
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def _sampled_logprobs(sampled: Any) -> list[float] | None:
    per_token = getattr(sampled, "logprobs", None)
    if not per_token:
        return None
    try:
        return [float(d[t].logprob) for d, t in zip(per_token, sampled.token_ids, strict=True)]
    except (KeyError, TypeError, ValueError):
        return None


class AgentInstance(AgentInstanceBase):
    """One trajectory's env session. Cheap to build: envs are shared at module level."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.session: Session | None = None
        self.rollout = _ROLLOUT.get()

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """Start the episode the ``label`` names; returns the first planner prompt (text)."""
        spec = TaskSpec.from_json(states["label"])
        self.session = await asyncio.to_thread(shared_envs().new_session, spec)
        observation, _ = await self.session.start()
        if self.rollout is not None:
            self.rollout.session = self.session
        return {"observation": observation.text}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        """One planner turn; the reward is terminal (0 before the end)."""
        if self.session is None:
            raise RuntimeError("step() before reset()")
        action: Any = states["action_text"]
        logprobs = None
        if self.rollout is not None and self.rollout.action_ids is not None:
            action, logprobs = self.rollout.action_ids, self.rollout.action_logprobs
            self.rollout.action_ids = self.rollout.action_logprobs = None
        outcome = await self.session.step(action, logprobs)
        done = outcome.terminated or outcome.truncated
        return {
            "rewards": torch.tensor(outcome.reward if done else 0.0),
            "scores": float(self.session.end_info.get("score", 0.0)) if done else 0.0,
            # After the end no prompt follows: nothing to append (the sequence ends on the action).
            "environment_feedback": "" if done else outcome.info["feedback_text"],
            "done": done,
            "extra_logs": episode_logs(self.session),
        }


class AgentExecutor(MultiTurnAgentExecutor):
    """OpenRLHF's multi-turn loop, with action ids passed to the env and per-turn caps."""

    def __init__(self) -> None:
        super().__init__(AgentInstance)

    async def execute(
        self,
        prompt: str,
        label: str,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict:
        rollout = Rollout()
        engine = TurnEngine(llm_engine, rollout, shared_envs().config.max_turn_tokens)
        token = _ROLLOUT.set(rollout)
        try:
            # The group shares one sampling_params and the loop writes max_tokens into it.
            result = await super().execute(
                prompt,
                label,
                copy.deepcopy(sampling_params),
                max_length,
                hf_tokenizer,
                engine,
                images=images,
            )
        finally:
            _ROLLOUT.reset(token)
        session = rollout.session
        if session is None or not session.done:
            # The token budget ran out before the episode ended: a failure, whatever happened.
            result["reward"] = 0.0
            result["scores"] = 0.0
        result["extra_logs"] = episode_logs(session)
        return result
