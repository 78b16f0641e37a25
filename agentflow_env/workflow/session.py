"""One episode of the workflow, async inside: initializer, then planner turns until STOP or the limit.

The session owns everything but the planner. Its ``step`` takes the planner's action (text or
token ids) and runs executor, tool, verifier and, at the end, generalist and reward. Nothing the
planner sends can make it raise: malformed actions, unknown tools, bad arguments, crashing or
hanging tools and failing modules all become recorded observations.

``Session`` wires the phases together; each is a function of the episode's state
(``EpisodeState``) and what it runs with (``EpisodeDeps``): one planner turn (``turn``), the end
(``ending``) and what the episode reports (``telemetry``); when it ends is an ``EndPolicy``, the
extra reward a ``Shaping`` policy.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.base.loop_runner import yield_to_loop
from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.tasks.base import Task
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.action_input import DEFAULT_MAX_ACTION_TOKENS, ActionInput, read_action
from agentflow_env.workflow.config import (
    DEFAULT_MAX_PROMPT_TOKENS,
    AnswerJudge,
    RewardConfig,
    SessionConfig,
)
from agentflow_env.workflow.end_policy import EndPolicy
from agentflow_env.workflow.ending import finish, success_by_budget
from agentflow_env.workflow.episode_state import EpisodeDeps, EpisodeState
from agentflow_env.workflow.frozen_modules import Modules
from agentflow_env.workflow.memory import Memory, MemoryEntry, VerificationStatus
from agentflow_env.workflow.observations import (
    Observation,
    ObservationStrategy,
    PromptEncoder,
    PromptView,
    make_observations,
)
from agentflow_env.workflow.outcome import EndReason, EpisodeMetrics, EpisodeOutcome
from agentflow_env.workflow.prompts import Message
from agentflow_env.workflow.rewards import check_scorer_for
from agentflow_env.workflow.telemetry import log_start, log_turn, step_info, turn_record
from agentflow_env.workflow.trajectory import Trajectory, TurnRecord
from agentflow_env.workflow.turn import analyze_query, begin_turn, run_turn
from agentflow_env.workflow.turn_log import EpisodeLogger, TurnLog

__all__ = [
    "DEFAULT_MAX_ACTION_TOKENS",
    "DEFAULT_MAX_PROMPT_TOKENS",
    "AnswerJudge",
    "EndReason",
    "EpisodeMetrics",
    "EpisodeOutcome",
    "EpisodeOverError",
    "RewardConfig",
    "Session",
    "SessionConfig",
    "StepOutcome",
    "VerificationStatus",
]


class EpisodeOverError(RuntimeError):
    """``step`` was called after the episode ended."""


@dataclass
class StepOutcome:
    """What one planner turn gave: Gymnasium's step tuple, plus the feedback appended (flat
    observations) to the prompt to get ``observation`` (empty when structured)."""

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    feedback: Observation = field(default_factory=lambda: Observation("", []))

    def as_gym(self) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Gymnasium's ``(observation, reward, terminated, truncated, info)``."""
        return self.observation.as_gym(), self.reward, self.terminated, self.truncated, self.info


class Session:
    """One episode. Build it, ``await start()``, then ``await step(action)`` until it is done.

    ``observations`` is how prompts evolve (default: the strategy ``config.observation_mode``
    names). Read the episode through ``done``, ``observation``, ``outcome`` (``None`` until the
    end), ``metrics``, ``turn``, ``turn_records`` and ``trajectory()``. With ``log``, every turn is
    appended to that trajectory log as it happens (``log_context`` goes into its first line).
    ``fork()`` copies the episode at the current turn, cheaply, so that several continuations
    can branch from one state (Monte Carlo values, tree rollouts).

    Everything the episode changes is its ``state`` (an ``EpisodeState``); the session's other
    attributes are what it runs with, never changed by a step.
    """

    def __init__(
        self,
        task: Task,
        *,
        tools: ToolSet,
        modules: Modules,
        tokenizer: ChatTokenizer,
        config: SessionConfig | None = None,
        seed: int | None = None,
        prompt_encoder: PromptEncoder | None = None,
        observations: ObservationStrategy | None = None,
        log: TurnLog | None = None,
        log_context: Mapping[str, Any] | None = None,
    ) -> None:
        self.task = task
        self.tools = tools
        self.modules = modules
        self.tokenizer = tokenizer
        if prompt_encoder is None:
            prompt_encoder = observations.encoder if observations else PromptEncoder(tokenizer)
        self.prompt_encoder = prompt_encoder
        self.config = config = config or SessionConfig()
        check_scorer_for(config.reward.reward, task)  # a checker decides: a scorer may not
        self.observations = observations or make_observations(
            config.observation_mode, self.prompt_encoder
        )
        end = EndPolicy.from_config(config)
        end.check_tools(tools)
        self.deps = EpisodeDeps(task, tools, modules, config, end)
        self.state = EpisodeState.new(task, tools, config, seed)
        self.seed = seed
        self.logger = EpisodeLogger(log, log_context)

    # -- the episode so far ------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Whether the episode is over (then ``outcome`` is set)."""
        return self.state.done

    @property
    def observation(self) -> Observation | None:
        """The planner's current prompt (``None`` before ``start()``)."""
        return self.state.observation

    @property
    def initial_observation(self) -> Observation | None:
        """The episode's first prompt (``None`` before ``start()``)."""
        return self.state.initial_observation

    @property
    def outcome(self) -> EpisodeOutcome | None:
        """How the episode ended; ``None`` until it has."""
        return self.state.outcome

    @property
    def metrics(self) -> EpisodeMetrics:
        """The running counts (turns, tool calls, errors, invalid actions, action tokens)."""
        return self.state.metrics

    @property
    def memory(self) -> Memory:
        """The episode's memory: its turns' entries and its event log."""
        return self.state.memory

    @property
    def tool_context(self) -> ToolContext:
        """What the tools know of the episode (its corpus, seed and ``episode_key``)."""
        return self.state.tool_context

    @property
    def service_errors(self) -> tuple[str, ...]:
        """The errors of tool calls that failed because the tool's service is broken
        (``ToolResult.service_broken``), in order."""
        return tuple(self.state.service_errors)

    @property
    def turn(self) -> int:
        """Number of planner turns taken so far."""
        return self.state.turn

    @property
    def turn_records(self) -> tuple[TurnRecord, ...]:
        """Every planner turn so far, token-exact."""
        return tuple(self.state.turn_records)

    async def start(self) -> tuple[Observation, dict[str, Any]]:
        """Run the initializer and return the first planner observation. Starting again, even
        while the first start runs, gives the first start's observation and info."""
        state = self.state
        if state.start is not None:
            observation, info = await asyncio.shield(state.start)
            return observation, dict(info)
        state.start = asyncio.get_running_loop().create_future()
        try:
            result = await self._start()
        except BaseException as error:
            state.start.set_exception(error)
            state.start.exception()  # retrieved: a start nobody waits on again logs nothing
            raise
        state.start.set_result(result)
        return result[0], dict(result[1])

    async def _start(self) -> tuple[Observation, dict[str, Any]]:
        state = self.state
        state.started_at = time.monotonic()
        await yield_to_loop()  # each CPU phase takes its turn on a shared loop (yield_to_loop)
        state.memory.set_analysis(await analyze_query(state, self.deps))
        if self.config.agentflow_script == "eval":
            # AgentFlow's evaluation script starts its clock after the query analysis (its
            # training solver, and this project, before it).
            state.started_at = time.monotonic()
        state.shaping.start(self.task, state.memory)
        await yield_to_loop()
        state.observation = state.initial_observation = self.observations.first(self._view())
        self._log_start()
        return state.observation, step_info(state, self.task, self.observations)

    async def step(self, action: Any, logprobs: Sequence[float] | None = None) -> StepOutcome:
        """One planner turn. ``logprobs`` (optional) are the sampling log-probs of the action ids."""
        prompt = self._prompt()
        await yield_to_loop()  # each CPU phase takes its turn on a shared loop (yield_to_loop)
        # Everything about the action is checked here, before any tool runs or memory changes.
        read = read_action(
            action,
            self.tokenizer,
            self.config.max_action_tokens,
            logprobs,
            plain=self.prompt_encoder.plain,
        )
        turn = begin_turn(self.state, read)
        await yield_to_loop()
        entry = await self._run_turn(turn, read.text, read.error)
        self.state.memory.add_entry(entry)
        shaping = self.state.shaping.advance(self.task, self.state.memory)
        await yield_to_loop()  # next: rendering and tokenizing the next prompt
        end_reason, observation, feedback = self._end_reason(entry, turn, prompt, read)
        reward = shaping
        if end_reason is not None:
            await yield_to_loop()
            reward += await self._finish(end_reason)
            await yield_to_loop()
            observation, feedback = self._next_observation(prompt, read)
        record = turn_record(turn, prompt, read, feedback, reward=reward, shaping=shaping)
        info = self._record(record, entry, read, feedback)
        truncated = end_reason is not None and end_reason.truncates
        terminated = end_reason is not None and not truncated
        return StepOutcome(observation, reward, terminated, truncated, info, feedback)

    async def end(self, reason: EndReason, why: str) -> EpisodeOutcome:
        """End the episode before another action, because the planner cannot give one: e.g.
        its prompt is longer than its served model's context (``EndReason.PROMPT_BUDGET``).
        ``why`` is logged (a ``planner_error`` event, and in the trajectory log's episode end).
        As at any end, the answer is written from the memory so far; no turn is recorded."""
        state = self.state
        self._prompt()  # started, and not over
        state.memory.log("planner_error", state.turn, error=why, end_reason=reason.value)
        await self._finish(reason)
        outcome = state.outcome
        assert outcome is not None  # _finish sets it
        self.logger.end(**outcome.as_info(), turns=state.turn, planner_error=why)
        return outcome

    def trajectory(self) -> Trajectory:
        """The episode so far as exact turn records plus its outcome."""
        outcome = self.state.outcome
        return Trajectory(
            task_id=self.task.task_id,
            observation_mode=self.observations.name,
            turns=list(self.state.turn_records),
            reward=float(outcome.reward) if outcome else 0.0,
            success=bool(outcome.success) if outcome else False,
            metrics=self.state.metrics.as_dict(),
        )

    # -- the phases of a step ----------------------------------------------------------------
    def _prompt(self) -> Observation:
        """The prompt the action answers (and why there is none to answer)."""
        if self.state.done:
            raise EpisodeOverError("the episode is over: call reset() before step()")
        if self.state.observation is None:
            raise RuntimeError("call start() before step()")
        return self.state.observation

    async def _run_turn(self, turn: int, action_text: str, error: str | None) -> MemoryEntry:
        return await run_turn(self.state, self.deps, turn, action_text, error)

    def _end_reason(
        self, entry: MemoryEntry, turn: int, prompt: Observation, read: ActionInput
    ) -> tuple[EndReason | None, Observation, Observation]:
        """Why the episode ends with this turn, if it does, the next prompt and the feedback
        appended to get it. A turn that ends it before a next prompt is made keeps ``prompt``
        (the end makes the last one); else the next prompt may be over budget."""
        state, end = self.state, self.deps.end
        finished = state.finish_action is not None
        reason = end.after_turn(entry, turn, finished, state.module_errors, state.started_at)
        if reason is not None:
            return reason, prompt, Observation("", [])
        observation, feedback = self._next_observation(prompt, read)
        return end.budget_reason(observation, self.observations.grows), observation, feedback

    async def _finish(self, end_reason: EndReason) -> float:
        """End the episode (``ending.finish``); its terminal reward."""
        return (await finish(self.state, self.deps, end_reason)).reward

    def _record(
        self, record: TurnRecord, entry: MemoryEntry, read: ActionInput, feedback: Observation
    ) -> dict[str, Any]:
        """Keep and log the turn's record; the step's ``info``."""
        state = self.state
        state.turn_records.append(record)
        log_turn(self.logger, state, self.deps, entry, read, len(record.prompt_ids))
        if state.outcome is not None:
            self.logger.end(**state.outcome.as_info(), turns=record.turn)
        info = step_info(state, self.task, self.observations, read, feedback)
        info.update(state.shaping.info(record.shaping))
        return info

    # -- forks -------------------------------------------------------------------------------
    def fork(self, *, log: bool = False) -> Session:
        """An independent copy of the episode at the current turn, to branch continuations from.

        Stepping the fork never changes this session, nor the reverse, and a fork given the same
        actions continues exactly as this session does: the same token ids, rewards, memory and
        outcome (LLM modules' replies are as repeatable as their endpoint). A fork of a finished
        episode is finished too. It keeps this episode's seed and clock (``time_limit_s`` counts
        from the original start).

        Shared, never copied: the task (its corpus and world), tools, modules (LLM modules'
        endpoint clients included), tokenizer, prompt encoder, observation strategy, config and
        policies; and the history: turn records, memory entries, events, observations (a grown
        flat prompt's ids) and the outcome are never changed in place once made, so the fork
        holds the same objects. Forking allocates a few small objects and one pointer per turn and
        event, never a copy of tokens or text.

        How: the session is copied shallowly and its ``state`` forked (``EpisodeState.fork``:
        every field separated by construction: the memory's own entry and event lists, copies
        of the lists, the running metrics, the shaping potential and the tool context, which
        keeps its ``episode_key`` so tools' per-episode draws repeat). Its ``logger`` writes to
        the trajectory log only with ``log=True``, under its own episode id with ``fork_of`` on
        every line (``EpisodeLogger.fork``; a finished episode's fork writes nothing).
        """
        if self.state.observation is None:
            raise RuntimeError("call start() before fork()")
        child = copy.copy(self)
        child.state = self.state.fork()
        child.logger = self.logger.fork(log=log and not self.done, turn=self.turn)
        if child.logger.log is not None:
            child._log_start()
        return child

    # -- the end -----------------------------------------------------------------------------
    async def success_by_budget(self) -> list[bool]:
        """Whether the episode would have succeeded with a turn budget of 1, 2, ... ``max_turns``.

        For a budget at or past the turn the episode ended on, its own success. For a smaller
        budget ``b``, the generalist answers from the memory of the first ``b`` turns (one call
        per budget: free with rule modules, one LLM request each with LLM modules) and that
        answer is checked. It replays the answer, not the planner: a planner that reads its
        remaining budget from the prompt might have acted differently. Call after the episode.
        """
        return await success_by_budget(self.state, self.deps)

    # -- observations and the log ------------------------------------------------------------
    def messages(self) -> list[Message]:
        """The structured prompt's messages for the next turn."""
        return self._view().messages()

    def _view(self) -> PromptView:
        outcome = self.state.outcome
        return PromptView(
            self.state.memory,
            self.tools,
            self.config.max_turns,
            style=self.config.prompt_style,
            show_sub_questions=self.config.show_sub_questions,
            final_text=outcome.final_text if outcome else None,
            termination=self.config.termination,
            wording=self.config.agentflow_wording,
        )

    def _next_observation(
        self, prompt: Observation, read: ActionInput
    ) -> tuple[Observation, Observation]:
        """The next prompt (now the current one), and the feedback appended to get it (the
        strategy decides)."""
        observation, feedback = self.observations.next(prompt, read.ids, self._view())
        self.state.observation = observation
        return observation, feedback

    def _log_start(self) -> None:
        log_start(self.logger, self.state, self.deps, self.seed, self.observations.name)
