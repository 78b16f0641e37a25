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
  AGENTFLOW_MAX_TURN_TOKENS  cap on the tokens of one planner turn (default 1024). It is also the
                             env's ``max_action_tokens``: the engine stops a turn exactly where the
                             env would cut it. ``max_action_tokens`` in AGENTFLOW_ENV_KWARGS may
                             set the cap instead; both set and different is a start-up error. A
                             label's own ``max_action_tokens`` caps that trajectory's turns.
  AGENTFLOW_LLM_BASE_URL, AGENTFLOW_LLM_MODEL (and AGENTFLOW_<ROLE>_*): the frozen modules'
                             OpenAI-compatible endpoint, used when env kwargs say "modules": "llm".
  AGENTFLOW_RETRIEVER_URL    retriever server for the Search tool (default: local BM25).

Each dataset ``label`` is a ``TaskSpec`` JSON string (``adapters/openrlhf/prepare_data.py``
writes them). The env runs in flat observation mode: the next prompt is exactly the previous
ids + the action ids + the feedback ids, and the feedback text carries the chat glue.

Token-in-token-out: OpenRLHF's ``step`` states carry only ``action_text``, not the ids vLLM
sampled. Text is lossy (vLLM drops the end-of-turn token from the text; re-encoding may split
words differently; ids at or above ``len(tokenizer)`` have no text), so ``AgentExecutor.execute``
wraps the engine, keeps each turn's output ids (and log-probs) and hands them to the env, which
records them verbatim: the env's trajectory holds exactly the tokens OpenRLHF trains on. Before
every turn the wrapper checks that OpenRLHF's prompt ids equal the env's; a difference raises
``TokenMismatchError`` saying where the sequences part and what the evidence points to.

One bad trajectory never kills the batch (OpenRLHF gathers a batch's trajectories without
``return_exceptions``): any exception inside a trajectory (a token mismatch, a bad label, an env
that cannot be built, a bug) ends that trajectory as a reward-0 sample holding the tokens sampled
so far, with ``extra_logs["error"] = 1.0`` and a warning on the ``agentflow_env.adapters.openrlhf``
logger. Three things still stop the run, loudly: a configuration error (raised when OpenRLHF
builds ``AgentExecutor()``), a broken seam (OpenRLHF no longer samples through the engine the
adapter hands it, or its outputs lack ``token_ids``: ``SeamError`` at the first trajectory, and
at once for every later one), and an exception from the rollout engine itself (vLLM failing is
not one trajectory's problem).
"""

# No ``from __future__ import annotations``: OpenRLHF executes this file without registering it in
# ``sys.modules``, and ``dataclasses`` then fails on string annotations.
import asyncio
import contextvars
import copy
import dataclasses
import json
import logging
import os
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from agentflow_env.base.hf_tokens import resolve_tokenizer
from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.rollout.spec import DEFAULT_ENV_ID, TaskSpec
from agentflow_env.workflow.session import Session

DEFAULT_MAX_TURN_TOKENS = 1024
LOG_KEYS = (
    "turns",
    "tool_calls",
    "tool_errors",
    "invalid_actions",
    "action_tokens",
    "success",
    "budget_exhausted",
    "error",
)
"""The ``extra_logs`` keys of every sample, failed or not (OpenRLHF stacks them across samples)."""
ADAPTER_KWARGS = {"observation_mode": "flat", "tokenizer": None}
"""Env kwargs the adapter sets itself; a label or AGENTFLOW_ENV_KWARGS may not change them."""

logger = logging.getLogger("agentflow_env.adapters.openrlhf")


class AdapterError(RuntimeError):
    """Stops the run instead of failing one trajectory: the adapter cannot work as set up."""


class SeamError(AdapterError):
    """OpenRLHF no longer samples through the engine the adapter hands it (or its outputs lack
    ``token_ids``), so the sampled ids cannot reach the env."""


class TokenMismatchError(RuntimeError):
    """OpenRLHF's prompt ids differ from the env's (the message says where, and why if known)."""


# -- process-wide state ------------------------------------------------------------------------
def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {value!r:.40}")
    return value


def _check_adapter_kwargs(kwargs: Mapping[str, Any], where: str) -> None:
    for key, needed in ADAPTER_KWARGS.items():
        if kwargs.get(key, needed) != needed:
            raise ValueError(
                f"{where} sets {key}={kwargs[key]!r}, which the adapter sets itself "
                "(flat observations; the tokenizer comes from AGENTFLOW_TOKENIZER)"
            )


@dataclass(frozen=True)
class AdapterConfig:
    env_id: str = DEFAULT_ENV_ID
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    max_turn_tokens: int = DEFAULT_MAX_TURN_TOKENS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> "AdapterConfig":
        """Read and check the ``AGENTFLOW_*`` variables. ``env_kwargs`` always holds
        ``max_action_tokens`` equal to ``max_turn_tokens``."""
        raw = environ.get("AGENTFLOW_ENV_KWARGS", "").strip() or "{}"
        try:
            kwargs = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"AGENTFLOW_ENV_KWARGS is not JSON ({exc.msg}): {raw!r:.120}"
            ) from None
        if not isinstance(kwargs, dict):
            raise ValueError(f"AGENTFLOW_ENV_KWARGS must be a JSON object, got {raw!r:.120}")
        _check_adapter_kwargs(kwargs, "AGENTFLOW_ENV_KWARGS")
        raw_cap = environ.get("AGENTFLOW_MAX_TURN_TOKENS", "").strip()
        cap = _positive_int(raw_cap, "AGENTFLOW_MAX_TURN_TOKENS") if raw_cap else None
        if "max_action_tokens" in kwargs:
            env_cap = _positive_int(
                kwargs["max_action_tokens"], "max_action_tokens in AGENTFLOW_ENV_KWARGS"
            )
            if cap is not None and cap != env_cap:
                raise ValueError(
                    f"AGENTFLOW_MAX_TURN_TOKENS={cap} but AGENTFLOW_ENV_KWARGS sets "
                    f"max_action_tokens={env_cap}: the env must cut an action exactly where the "
                    "engine stops it, or the two token sequences part. Set one of them (or both "
                    "to the same value)."
                )
            cap = env_cap
        cap = cap or DEFAULT_MAX_TURN_TOKENS
        return cls(
            env_id=environ.get("AGENTFLOW_ENV_ID", "").strip() or DEFAULT_ENV_ID,
            env_kwargs={**kwargs, "max_action_tokens": cap},
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

    def tokenizer_name(self) -> str:
        return self.config.tokenizer or "the bundled tokenizer (AGENTFLOW_TOKENIZER unset)"

    def env(self, spec: TaskSpec) -> AgentFlowEnv:
        _check_adapter_kwargs(spec.env_kwargs, "the label's env_kwargs")
        if "max_action_tokens" in spec.env_kwargs:  # this task's own per-turn cap
            _positive_int(spec.env_kwargs["max_action_tokens"], "the label's max_action_tokens")
        kwargs = {**self.config.env_kwargs, **spec.env_kwargs}
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


_seam_failure: str | None = None


def seam_error(message: str) -> SeamError:
    """A ``SeamError`` to raise; the first one is logged, and every later trajectory of this
    process fails with it at once."""
    global _seam_failure
    if _seam_failure is None:
        _seam_failure = message
        logger.error("AgentFlow's OpenRLHF adapter cannot capture the sampled ids: %s", message)
    return SeamError(message)


# -- one trajectory ------------------------------------------------------------------------------
@dataclass
class Rollout:
    """Links one ``execute`` call with its ``AgentInstance`` (both run in the same asyncio task,
    so a context variable finds it; concurrent trajectories are separate tasks), and keeps
    OpenRLHF's token sequence as it grows, so a failed trajectory can still be returned whole."""

    session: Session | None = None
    first_prompt_text: str | None = None
    tokens: list[int] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    action_ids: list[list[int]] = field(default_factory=list)
    action_logprobs: list[list[float] | None] = field(default_factory=list)
    finish_reason: str | None = None
    pending: tuple[list[int], list[float] | None] | None = None
    engine_error: BaseException | None = None

    def begin_turn(self, prompt_ids: list[int]) -> None:
        self.tokens = list(prompt_ids)

    def end_turn(self, ids: list[int], logprobs: list[float] | None, finish: str | None) -> None:
        start = len(self.tokens)
        self.tokens = self.tokens + ids
        self.ranges.append((start, start + len(ids)))
        self.action_ids.append(ids)
        self.action_logprobs.append(logprobs)
        self.finish_reason = finish
        self.pending = (ids, logprobs)

    def take_action(self) -> tuple[list[int], list[float] | None]:
        """The ids (and log-probs) the engine just sampled, for ``AgentInstance.step``."""
        if self.pending is None:
            raise seam_error(
                "OpenRLHF called AgentInstance.step without sampling the action through the "
                "engine the adapter gave MultiTurnAgentExecutor.execute (TurnEngine.generate), so "
                "the sampled ids are unknown and re-encoding action_text would make the env's "
                "tokens differ from OpenRLHF's. This openrlhf version's executor does not fit "
                "adapters/openrlhf/agent_func.py (checked against 0.11.2)."
            )
        pending, self.pending = self.pending, None
        return pending

    def rollout_log_probs(self) -> list[float]:
        """Per-token sampling log-probs of ``tokens`` as OpenRLHF lays them out (0 off actions)."""
        values = [0.0] * len(self.tokens)
        for (start, end), logprobs in zip(self.ranges, self.action_logprobs, strict=True):
            if logprobs is not None:
                values[start:end] = logprobs
        return values


_ROLLOUT: contextvars.ContextVar[Rollout | None] = contextvars.ContextVar(
    "agentflow_rollout", default=None
)


def episode_logs(session: Session | None, error: bool = False) -> dict[str, float]:
    """Numeric per-trajectory logs, always the keys ``LOG_KEYS``."""
    metrics = session.metrics.as_dict() if session is not None else {}
    logs = {key: float(metrics.get(key, 0.0)) for key in LOG_KEYS}
    done = session is not None and session.done
    success = done and session is not None and bool(session.end_info.get("success", False))
    logs["success"] = float(success and not error)
    logs["budget_exhausted"] = float(not done and not error)
    logs["error"] = float(error)
    return logs


def _encode(hf_tokenizer: Any, text: str) -> list[int] | None:
    """``text`` tokenized as OpenRLHF's executor does it; ``None`` if that fails."""
    try:
        ids = hf_tokenizer(text=text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        return [int(i) for i in ids[0].tolist()]
    except Exception:  # a diagnostic only: no evidence either way
        return None


def describe_mismatch(
    theirs: Sequence[int],
    ours: Sequence[int],
    rollout: Rollout,
    hf_tokenizer: Any,
    tokenizer_name: str,
) -> str:
    """Where OpenRLHF's prompt ids (``theirs``) and the env's (``ours``) part, what each side holds
    there, and the cause the evidence points to (a tokenizer is blamed only when re-encoding the
    env's text with OpenRLHF's tokenizer gives other ids)."""
    theirs, ours = list(theirs), list(ours)
    at = next(
        (i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b),
        min(len(theirs), len(ours)),
    )
    segment = _cause_segment(rollout, at)
    where = segment.name if segment else "past the env's last token"
    show_theirs = theirs[at : at + 6] or "nothing (its sequence ends there)"
    show_ours = ours[at : at + 6] or "nothing (its sequence ends there)"
    message = (
        f"OpenRLHF's prompt ids differ from the env's at token {at} ({len(theirs)} vs "
        f"{len(ours)} tokens), in {where}: OpenRLHF has {show_theirs}, the env has {show_ours}."
    )
    return (
        message + " " + _diagnose(theirs, ours, at, segment, rollout, hf_tokenizer, tokenizer_name)
    )


@dataclass(frozen=True)
class _Segment:
    name: str
    kind: str  # "prompt", "action" or "feedback"
    start: int
    ids: list[int]
    text: str | None = None
    turn: int = 0
    cut: bool = False


def _segments(rollout: Rollout) -> list[_Segment]:
    session = rollout.session
    if session is None:
        return []
    records = session.turn_records
    first = list(records[0].prompt_ids) if records else list(session.observation.token_ids)
    found = [_Segment("the first prompt", "prompt", 0, first, rollout.first_prompt_text)]
    position = len(first)
    for record in records:
        action, feedback = list(record.action_ids), list(record.feedback_ids)
        found.append(
            _Segment(
                f"turn {record.turn}'s action",
                "action",
                position,
                action,
                turn=record.turn,
                cut=record.action_cut,
            )
        )
        position += len(action)
        found.append(
            _Segment(
                f"the feedback after turn {record.turn}",
                "feedback",
                position,
                feedback,
                record.feedback_text,
                turn=record.turn,
            )
        )
        position += len(feedback)
    return found


def _sampled(rollout: Rollout, turn: int) -> list[int] | None:
    return rollout.action_ids[turn - 1] if 0 < turn <= len(rollout.action_ids) else None


def _cause_segment(rollout: Rollout, at: int) -> _Segment | None:
    """The part of the env's sequence that explains a difference starting at token ``at``: an
    earlier action the env did not record as sampled, else the part holding token ``at`` (or the
    text before it, when that part is an action recorded as sampled: the text's length differs)."""
    segments = _segments(rollout)
    for segment in segments:
        if segment.kind == "action" and segment.start <= at:
            sampled = _sampled(rollout, segment.turn)
            if sampled is not None and sampled != segment.ids:
                return segment
    for index, segment in enumerate(segments):
        if segment.start <= at < segment.start + len(segment.ids):
            if segment.kind == "action" and index > 0:
                return segments[index - 1]
            return segment
    return None


def _diagnose(
    theirs: list[int],
    ours: list[int],
    at: int,
    segment: _Segment | None,
    rollout: Rollout,
    hf_tokenizer: Any,
    tokenizer_name: str,
) -> str:
    session = rollout.session
    if segment is None:
        return (
            f"OpenRLHF's sequence has {len(theirs) - len(ours)} more tokens than the env's: it "
            "appended something the env did not record."
        )
    if segment.kind == "action":
        cap = session.config.max_action_tokens if session is not None else None
        sampled = _sampled(rollout, segment.turn)
        if segment.cut:
            return (
                f"The env cut turn {segment.turn}'s action at max_action_tokens={cap}, but "
                f"OpenRLHF kept all {len(sampled) if sampled is not None else '?'} sampled ids: "
                "the engine returned more tokens than the per-turn cap it was given. Not a "
                "tokenizer problem."
            )
        vocab = session.tokenizer.vocab_size if session is not None else None
        if sampled is not None and vocab is not None and any(i >= vocab for i in sampled):
            return (
                f"Turn {segment.turn}'s sampled ids include ids >= the env tokenizer's vocabulary "
                f"size {vocab} (the model's embedding is padded), and the env did not keep them "
                "verbatim. Not a tokenizer problem: the env must record out-of-vocabulary ids as "
                "given."
            )
        return (
            f"The env did not record the ids the engine sampled for turn {segment.turn} "
            "verbatim. Not a tokenizer problem."
        )
    cut_prompt = segment.kind == "prompt" and 0 < len(theirs) < len(segment.ids)
    if cut_prompt and segment.ids[-len(theirs) :] == theirs:
        return (
            f"OpenRLHF kept only the last {len(theirs)} of the first prompt's "
            f"{len(segment.ids)} tokens: raise --data.max_len so that it holds the first "
            "prompt and room to generate."
        )
    if segment.text is None:
        return "The env's text for that part is not known, so the tokenizers could not be compared."
    encoded = _encode(hf_tokenizer, segment.text)
    if encoded is None:
        return "OpenRLHF's tokenizer failed to encode the env's text, so no cause could be checked."
    if encoded != segment.ids:
        return (
            f"OpenRLHF's tokenizer and the env's ({tokenizer_name}) encode the env's text of "
            f"{segment.name} to different ids: set AGENTFLOW_TOKENIZER to the policy model's "
            "tokenizer."
        )
    return (
        f"OpenRLHF's tokenizer encodes the env's text of {segment.name} to the env's ids, so the "
        "tokenizers agree there: OpenRLHF built its sequence from other text, or changed it."
    )


def _read_output(output: Any) -> tuple[list[int], list[float] | None, str | None]:
    """The sampled ids, their log-probs and the finish reason of a vLLM ``RequestOutput``."""
    try:
        sampled = output.outputs[0]
        raw_ids = sampled.token_ids
        ids = [int(i) for i in raw_ids]
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise seam_error(
            "the rollout engine's output has no readable outputs[0].token_ids "
            f"({type(exc).__name__}: {exc}); the adapter needs the sampled ids"
        ) from exc
    return ids, _sampled_logprobs(sampled, ids), getattr(sampled, "finish_reason", None)


def _sampled_logprobs(sampled: Any, ids: list[int]) -> list[float] | None:
    per_token = getattr(sampled, "logprobs", None)
    if not per_token:
        return None
    try:
        return [float(d[t].logprob) for d, t in zip(per_token, ids, strict=True)]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


class TurnEngine:
    """Wraps OpenRLHF's rollout engine for one trajectory: caps each turn at the env's
    ``max_action_tokens``, checks the prompt ids against the env's, keeps the sampled ids."""

    def __init__(
        self,
        engine: Any,
        rollout: Rollout,
        max_turn_tokens: int,
        hf_tokenizer: Any = None,
        tokenizer_name: str = "the env's tokenizer",
    ) -> None:
        self.engine = engine
        self.rollout = rollout
        self.max_turn_tokens = max_turn_tokens
        self.hf_tokenizer = hf_tokenizer
        self.tokenizer_name = tokenizer_name

    def turn_cap(self) -> int:
        """This trajectory's per-turn cap: its env's ``max_action_tokens`` (the adapter sets it
        to AGENTFLOW_MAX_TURN_TOKENS unless the label sets its own)."""
        session = self.rollout.session
        cap = session.config.max_action_tokens if session is not None else None
        return cap or self.max_turn_tokens

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> Any:
        self.rollout.begin_turn([int(i) for i in prompt_token_ids])
        self._check_prompt(self.rollout.tokens)
        params = copy.deepcopy(sampling_params)  # never change the caller's object
        cap = self.turn_cap()
        if params.max_tokens is None or params.max_tokens > cap:
            params.max_tokens = cap
        try:
            output = await self.engine.generate(
                prompt_token_ids, params, multi_modal_data=multi_modal_data
            )
        except Exception as exc:
            self.rollout.engine_error = exc  # the engine's own failure: not this trajectory's
            raise
        ids, logprobs, finish = _read_output(output)
        self.rollout.end_turn(ids, logprobs, finish)
        return output

    def _check_prompt(self, prompt_ids: list[int]) -> None:
        session = self.rollout.session
        if session is None or session.observation is None:
            return
        expected = session.observation.token_ids
        if prompt_ids != list(expected):
            raise TokenMismatchError(
                describe_mismatch(
                    prompt_ids, expected, self.rollout, self.hf_tokenizer, self.tokenizer_name
                )
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


_warned_text_fallback = False


class AgentInstance(AgentInstanceBase):
    """One trajectory's env session. Cheap to build: envs are shared at module level."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.session: Session | None = None
        self.rollout = _ROLLOUT.get()

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """Start the episode the ``label`` names; returns the first planner prompt (text)."""
        spec = TaskSpec.from_json(states["label"])
        self.session = await asyncio.to_thread(shared_envs().new_session, spec)
        if self.rollout is not None:
            self.rollout.session = self.session
        observation, _ = await self.session.start()
        if self.rollout is not None:
            self.rollout.first_prompt_text = observation.text
        return {"observation": observation.text}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        """One planner turn; the reward is terminal (0 before the end)."""
        if self.session is None:
            raise RuntimeError("step() before reset()")
        action, logprobs = self._action(states)
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

    def _action(self, states: dict) -> tuple[Any, list[float] | None]:
        if self.rollout is not None:
            return self.rollout.take_action()
        global _warned_text_fallback
        if not _warned_text_fallback:
            _warned_text_fallback = True
            logger.warning(
                "AgentInstance is driven by an executor other than agent_func.AgentExecutor: "
                "actions are re-encoded from action_text, so the env's tokens may differ from "
                "the ones OpenRLHF trains on"
            )
        return states["action_text"], None


def failure_reason(exc: BaseException) -> str:
    """One line: the exception and the innermost place it was raised."""
    reason = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        path = "/".join(Path(last.filename).parts[-2:])
        reason += f" (at {path}:{last.lineno} in {last.name})"
    return reason[:2000]


def _filler_id(hf_tokenizer: Any) -> int:
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(hf_tokenizer, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


class AgentExecutor(MultiTurnAgentExecutor):
    """OpenRLHF's multi-turn loop, with action ids passed to the env, per-turn caps equal to the
    env's, and every failure of one trajectory returned as a reward-0 sample."""

    def __init__(self) -> None:
        super().__init__(AgentInstance)
        # Configuration errors and an unloadable tokenizer surface here, when OpenRLHF builds
        # the executor in each vLLM actor, not as a failure of every trajectory.
        self.shared = shared_envs()
        self.shared.tokenizer()

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
        if _seam_failure is not None:
            raise SeamError(_seam_failure)
        rollout = Rollout()
        engine = TurnEngine(
            llm_engine,
            rollout,
            self.shared.config.max_turn_tokens,
            hf_tokenizer,
            self.shared.tokenizer_name(),
        )
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
            _check_seam(result, rollout)
            return _finish(result, rollout.session)
        except AdapterError:
            raise
        except Exception as exc:
            if exc is rollout.engine_error:
                raise
            return failed_response(
                exc, prompt, label, sampling_params, hf_tokenizer, rollout, images
            )
        finally:
            _ROLLOUT.reset(token)


def _check_seam(result: Mapping[str, Any], rollout: Rollout) -> None:
    """OpenRLHF's sample holds, at each action range, exactly the ids the engine returned."""
    try:
        tokens = list(result["observation_tokens"])
        ranges = [(int(a), int(b)) for a, b in result["action_ranges"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise seam_error(
            f"OpenRLHF's executor returned no usable observation_tokens / action_ranges ({exc!r})"
        ) from exc
    if len(ranges) != len(rollout.action_ids):
        raise seam_error(
            f"OpenRLHF's executor recorded {len(ranges)} actions, but "
            f"{len(rollout.action_ids)} were sampled through the adapter's engine"
        )
    for turn, ((start, end), ids) in enumerate(zip(ranges, rollout.action_ids, strict=True), 1):
        if tokens[start:end] != ids:
            raise seam_error(
                f"OpenRLHF's sample holds other ids for turn {turn}'s action than the engine "
                "returned: its executor no longer appends outputs[0].token_ids"
            )


def _finish(result: dict, session: Session | None) -> dict:
    if session is None or not session.done:
        # The token budget ran out before the episode ended: a failure, whatever happened.
        result["reward"] = 0.0
        result["scores"] = 0.0
    result["extra_logs"] = episode_logs(session)
    return result


def failed_response(
    exc: BaseException,
    prompt: str,
    label: str,
    sampling_params: Any,
    hf_tokenizer: Any,
    rollout: Rollout,
    images: Any = None,
) -> dict:
    """The reward-0 sample for a trajectory that raised, shaped as ``MultiTurnAgentExecutor``
    returns one. It holds OpenRLHF's tokens up to the failure, with the action ranges and
    log-probs of the turns sampled so far; a trajectory that failed before its first action is
    the prompt text's tokens with no action (it carries no gradient)."""
    reason = failure_reason(exc)
    logger.warning(
        "AgentFlow trajectory failed after %d action(s); it counts as reward 0: %s | label: %.200s",
        len(rollout.ranges),
        reason,
        label,
    )
    tokens, ranges = list(rollout.tokens), list(rollout.ranges)
    if not tokens:
        tokens = _encode(hf_tokenizer, prompt or "") or []
    if len(tokens) < 2:  # OpenRLHF needs at least one position after the first token
        tokens = tokens + [_filler_id(hf_tokenizer)] * (2 - len(tokens))
    log_probs = None
    if getattr(sampling_params, "logprobs", None) is not None:
        log_probs = rollout.rollout_log_probs()
        log_probs = log_probs + [0.0] * (len(tokens) - len(log_probs))
    return {
        "prompt": prompt,
        "label": label,
        "images": images,
        "mm_train_inputs": None,
        "reward": 0.0,
        "scores": 0.0,
        "observation_tokens": tokens,
        "action_ranges": ranges,
        "rollout_log_probs": log_probs,
        "truncated": rollout.finish_reason == "length",
        "extra_logs": episode_logs(rollout.session, error=True),
    }
