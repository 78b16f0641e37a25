"""One episode of the workflow, async inside: initializer, then planner turns until STOP or the limit.

The session owns everything but the planner. Its ``step`` takes the planner's action (text or
token ids) and runs executor, tool, verifier and, at the end, generalist and reward. Nothing the
planner sends can make it raise: malformed actions, unknown tools, bad arguments, crashing or
hanging tools and failing modules all become recorded observations.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.base.untrusted import shorten
from agentflow_env.tasks.base import Task
from agentflow_env.tasks.oracle import evidence_answers
from agentflow_env.tasks.scoring import answer_options
from agentflow_env.tools.agentflow.names import match_agentflow_tool
from agentflow_env.tools.base import Tool, ToolContext, ToolResult
from agentflow_env.tools.registry import ToolSet
from agentflow_env.tools.runner import run_tool
from agentflow_env.workflow.action_input import ActionInput, read_action
from agentflow_env.workflow.actions import (
    FINISH_TOOL_NAME,
    ActionParseError,
    PlannerAction,
    is_finish,
    parse_planner_action,
)
from agentflow_env.workflow.agentflow_source import AgentFlowWording
from agentflow_env.workflow.diagnostics import (
    chose_tool,
    diagnose_episode,
    expected_tools,
    is_redundant,
)
from agentflow_env.workflow.frozen_modules import FinalAnswer, Modules
from agentflow_env.workflow.memory import Memory, MemoryEntry, QueryAnalysis, VerificationStatus
from agentflow_env.workflow.observations import (
    Observation,
    ObservationMode,
    PromptEncoder,
    PromptView,
    check_observation_mode,
    make_observations,
)
from agentflow_env.workflow.outcome import (
    EndReason,
    EpisodeMetrics,
    EpisodeOutcome,
    Termination,
    check_termination,
    planner_may_finish,
    verifier_may_stop,
)
from agentflow_env.workflow.prompts import Message
from agentflow_env.workflow.rewards import (
    RewardConfig,
    answer_score,
    scored_answer,
    terminal_reward,
)
from agentflow_env.workflow.shaping import progress_potential
from agentflow_env.workflow.trajectory import Trajectory, TurnRecord
from agentflow_env.workflow.turn_log import EpisodeLogger, TurnLog

__all__ = [
    "DEFAULT_MAX_ACTION_TOKENS",
    "DEFAULT_MAX_PROMPT_TOKENS",
    "AnswerJudge",
    "EndReason",
    "EpisodeMetrics",
    "EpisodeOutcome",
    "EpisodeOverError",
    "Session",
    "SessionConfig",
    "StepOutcome",
    "VerificationStatus",
]


class AnswerJudge(Protocol):
    """Scores a final answer in [0, 1] (e.g. an LLM judge); used when ``reward="llm_judge"``.

    ``options`` (a multiple-choice task's listed options, ``answer_options``) is passed only
    for such a task, so a judge without the parameter still scores every other task.
    """

    async def judge(
        self,
        question: str,
        answer: str | None,
        gold_answers: Sequence[str],
        *,
        options: Sequence[str] = (),
    ) -> float: ...


class EpisodeOverError(RuntimeError):
    """``step`` was called after the episode ended."""


DEFAULT_MAX_ACTION_TOKENS = 2048
"""Safe default cap on one planner action (a policy exploring can emit megabytes)."""
PROMPT_STYLES = ("full", "compact", "agentflow")
DEFAULT_MAX_PROMPT_TOKENS = 32768
"""Safe default cap on one observation; a longer one truncates the episode ("prompt_budget")."""


@dataclass(frozen=True)
class SessionConfig:
    max_turns: int = 10
    reward: RewardConfig = field(default_factory=RewardConfig)
    tool_timeout_s: float = 10.0
    max_tool_output_chars: int = 8000
    prompt_style: str = "full"
    observation_mode: str = "structured"
    """Names the session's default observation strategy (``make_observations``)."""
    max_action_tokens: int | None = DEFAULT_MAX_ACTION_TOKENS
    max_prompt_tokens: int | None = DEFAULT_MAX_PROMPT_TOKENS
    max_total_tokens: int | None = None
    judge: AnswerJudge | None = None
    show_sub_questions: bool = True
    """The analysis's sub-questions and the verifier's open questions appear in the planner's
    prompt (with rule modules they come from the task: a hint AgentFlow never gives)."""
    verify_invalid_turns: bool = False
    """The verifier also judges a turn whose action named no usable tool (AgentFlow does)."""
    termination: Termination = "verifier"
    """Who ends the episode before its limits: the verifier's STOP (``"verifier"``), the
    planner's finish action (``"planner"``; the verdict is still shown) or either (``"both"``).
    A finish is recorded as a turn with no tool and the status STOP, ``end_reason
    "planner_stop"``; where the planner may not finish, it names an unknown tool."""
    time_limit_s: float | None = None
    """Wall-clock seconds an episode may run from its start; the turn that ends past it ends the
    episode (``end_reason="time_limit"``), as AgentFlow's evaluation limit does."""
    budget_curve: bool = False
    """Add ``success_by_budget`` to the diagnostics at the end (``Session.success_by_budget``:
    one generalist call per budget shorter than the episode)."""
    agentflow_wording: AgentFlowWording | None = None
    """AgentFlow's own words, read from the user's checkout (``agentflow_source``), for the
    ``"agentflow"`` prompt style; ``None``: this project's own wording."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(
                f"prompt_style must be one of {list(PROMPT_STYLES)}, got {self.prompt_style!r}"
            )
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be positive or None, got {self.time_limit_s}")
        check_observation_mode(self.observation_mode)
        check_termination(self.termination)
        for name in ("max_action_tokens", "max_prompt_tokens", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive or None, got {value}")


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


class Session:
    """One episode. Build it, ``await start()``, then ``await step(action)`` until it is done.

    ``observations`` is how prompts evolve (default: the strategy ``config.observation_mode``
    names). Read the episode through ``done``, ``observation``, ``outcome`` (``None`` until the
    end), ``metrics``, ``turn``, ``turn_records`` and ``trajectory()``. With ``log``, every turn is
    appended to that trajectory log as it happens (``log_context`` goes into its first line).
    ``fork()`` copies the episode at the current turn, cheaply, so that several continuations
    can branch from one state (Monte Carlo values, tree rollouts).
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
        observations: ObservationMode | None = None,
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
        self.config = config or SessionConfig()
        self.observations = observations or make_observations(
            self.config.observation_mode, self.prompt_encoder
        )
        self.memory = Memory(task.question, tools)
        self._may_finish = planner_may_finish(self.config.termination)
        clash = tools.get(FINISH_TOOL_NAME) if self._may_finish else None
        if clash is not None:
            raise ValueError(
                f"the tool {clash.name!r} takes the name of the planner's finish action "
                f"({FINISH_TOOL_NAME}): rename it, or use termination='verifier'"
            )
        self._finish_action: PlannerAction | None = None
        """The planner's finish action, once it gave one (the episode's last turn)."""
        self.tool_context = ToolContext(
            corpus=task.corpus,
            seed=seed,
            agentflow_shapes=self.config.prompt_style == "agentflow",
        )
        self._metrics = EpisodeMetrics()
        self._done = False
        self._outcome: EpisodeOutcome | None = None
        self._observation: Observation | None = None
        self._initial_observation: Observation | None = None
        self._turn_records: list[TurnRecord] = []
        self._module_errors: list[str] = []
        self._service_errors: list[str] = []
        self._initializer_error: str | None = None
        self.seed = seed
        self.logger = EpisodeLogger(log, log_context)
        self._turn_latency: dict[str, float] = {}
        self._started_at = time.monotonic()
        self._potential = 0.0
        """Phi of the current state (``reward_shaping="progress"``; 0 without shaping)."""

    # -- the episode so far ------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Whether the episode is over (then ``outcome`` is set)."""
        return self._done

    @property
    def observation(self) -> Observation | None:
        """The planner's current prompt (``None`` before ``start()``)."""
        return self._observation

    @property
    def initial_observation(self) -> Observation | None:
        """The episode's first prompt (``None`` before ``start()``)."""
        return self._initial_observation

    @property
    def outcome(self) -> EpisodeOutcome | None:
        """How the episode ended; ``None`` until it has."""
        return self._outcome

    @property
    def metrics(self) -> EpisodeMetrics:
        """The running counts (turns, tool calls, errors, invalid actions, action tokens)."""
        return self._metrics

    @property
    def service_errors(self) -> tuple[str, ...]:
        """The errors of tool calls that failed because the tool's service is broken
        (``ToolResult.service_broken``), in order."""
        return tuple(self._service_errors)

    @property
    def turn(self) -> int:
        """Number of planner turns taken so far."""
        return len(self.memory)

    @property
    def turn_records(self) -> tuple[TurnRecord, ...]:
        """Every planner turn so far, token-exact."""
        return tuple(self._turn_records)

    async def start(self) -> tuple[Observation, dict[str, Any]]:
        """Run the initializer and return the first planner observation."""
        self._started_at = time.monotonic()
        try:
            analysis = _expect(
                await self._timed(
                    "initializer", 0, self.modules.initializer.analyze(self.task, self.tools)
                ),
                QueryAnalysis,
            )
        except Exception as exc:  # the episode still starts, from the bare query
            self.memory.log("module_error", 0, module="initializer", error=repr(exc))
            self._initializer_error = f"initializer failed: {type(exc).__name__}: {exc}"
            analysis = QueryAnalysis(
                objective=f"Answer the question: {self.task.question}",
                tools=tuple(self.tools.names),
            )
        self.memory.set_analysis(analysis)
        self._potential = self._progress()
        self._observation = self._initial_observation = self.observations.first(self._view())
        self._log_start()
        return self._observation, self._info()

    async def step(self, action: Any, logprobs: Sequence[float] | None = None) -> StepOutcome:
        """One planner turn. ``logprobs`` (optional) are the sampling log-probs of the action ids."""
        if self._done:
            raise EpisodeOverError("the episode is over: call reset() before step()")
        if self._observation is None:
            raise RuntimeError("call start() before step()")
        prompt = self._observation
        # Everything about the action is checked here, before any tool runs or memory changes.
        read = read_action(
            action,
            self.tokenizer,
            self.config.max_action_tokens,
            logprobs,
            plain=self.prompt_encoder.plain,
        )
        turn = self.turn + 1
        self._turn_latency = {}
        self._metrics.turns = turn
        self._metrics.action_tokens += len(read.ids)
        self.memory.log(
            "action",
            turn,
            text=read.text,
            token_ids=read.ids,
            given_as_ids=read.given_as_ids,
            cut=read.cut,
        )
        entry = await self._run_turn(turn, read.text, read.error)
        self.memory.add_entry(entry)
        shaping = self._shaping()

        end_reason = self._stop_reason(entry)
        terminated = end_reason is not None
        if not terminated and self._module_errors:
            end_reason = EndReason.MODULE_ERROR
        elif not terminated and turn >= self.config.max_turns:
            end_reason = EndReason.MAX_TURNS
        elif not terminated and self._past_time_limit():
            end_reason = EndReason.TIME_LIMIT
        if end_reason is None:
            self._observation, feedback = self._next_observation(prompt, read)
            end_reason = self._budget_exceeded(self._observation)
        reward = shaping
        if end_reason is not None:
            reward += await self._finish(end_reason)
            self._observation, feedback = self._next_observation(prompt, read)
        self._turn_records.append(
            TurnRecord(
                turn=turn,
                prompt_ids=tuple(prompt.token_ids),
                action_ids=tuple(read.ids),
                action_text=read.text,
                action_given_as_ids=read.given_as_ids,
                logprobs=None if read.logprobs is None else tuple(read.logprobs),
                feedback_ids=tuple(feedback.token_ids),
                feedback_text=feedback.text,
                action_cut=read.cut,
                reward=reward,
                shaping=shaping,
            )
        )
        truncated = end_reason is not None and end_reason.truncates
        self._log_turn(entry, read, len(prompt.token_ids))
        if self._outcome is not None:
            self.logger.end(**self._outcome.as_info(), turns=turn)
        info = self._info(read, feedback)
        if self.config.reward.shaping != "none":
            info.update(shaping=shaping, potential=self._potential)
        return StepOutcome(self._observation, reward, terminated, truncated, info, feedback)

    def trajectory(self) -> Trajectory:
        """The episode so far as exact turn records plus its outcome."""
        outcome = self._outcome
        return Trajectory(
            task_id=self.task.task_id,
            observation_mode=self.observations.name,
            turns=list(self._turn_records),
            reward=float(outcome.reward) if outcome else 0.0,
            success=bool(outcome.success) if outcome else False,
            metrics=self._metrics.as_dict(),
        )

    # -- forks -------------------------------------------------------------------------------
    def fork(self, *, log: bool = False) -> Session:
        """An independent copy of the episode at the current turn, to branch continuations from.

        Stepping the fork never changes this session, nor the reverse, and a fork given the same
        actions continues exactly as this session does: the same token ids, rewards, memory and
        outcome (LLM modules' replies are as repeatable as their endpoint). A fork of a finished
        episode is finished too. It keeps this episode's seed and clock (``time_limit_s`` counts
        from the original start).

        Shared, never copied: the task (its corpus and world), tools, modules (LLM modules'
        endpoint clients included), tokenizer, prompt encoder, observation strategy and config;
        and the history: turn records, memory entries, events, observations (a grown flat
        prompt's ids) and the outcome are never changed in place once made, so the fork holds
        the same objects. Forking allocates a few small objects and one pointer per turn and
        event, never a copy of tokens or text.

        How: every attribute is copied shallowly, and every list, dict and set attribute gets a
        shallow copy of its own (so one added later is independent too). Then these are
        replaced: ``memory`` (``Memory.fork``: its own entry and event lists), ``_metrics`` (the
        running counts, changed in place by ``step``), ``tool_context`` (a copy that keeps its
        ``episode_key``, so tools' per-episode draws, e.g. a variant's ``failure_rate``, repeat)
        and ``logger``: a fork writes to the trajectory log only with ``log=True``, under its
        own episode id with ``fork_of`` on every line (``EpisodeLogger.fork``; a finished
        episode's fork writes nothing). An attribute holding any other mutable object must be
        replaced here too.
        """
        if self._observation is None:
            raise RuntimeError("call start() before fork()")
        child = object.__new__(type(self))
        for name, value in vars(self).items():
            setattr(child, name, type(value)(value) if type(value) in (list, dict, set) else value)
        child.memory = self.memory.fork()
        child._metrics = dataclasses.replace(self._metrics)
        child.tool_context = dataclasses.replace(self.tool_context)
        child.logger = self.logger.fork(log=log and not self._done, turn=self.turn)
        if child.logger.log is not None:
            child._log_start()
        return child

    # -- one turn ----------------------------------------------------------------------------
    async def _run_turn(self, turn: int, action_text: str, decode_error: str | None) -> MemoryEntry:
        if decode_error is not None:
            return self._invalid_entry(turn, None, decode_error)
        try:
            action = parse_planner_action(action_text, finish=self._may_finish)
        except ActionParseError as exc:
            return await self._verified_invalid(
                self._invalid_entry(turn, None, f"malformed action: {exc}")
            )
        if self._may_finish and is_finish(action):
            return self._finish_entry(turn, action)
        tool = self._tool_named(action.tool_name)
        if tool is None:
            known = ", ".join(self.tools.names)
            name = shorten(action.tool_name, 80)
            return await self._verified_invalid(
                self._invalid_entry(
                    turn,
                    action,
                    f"unknown tool {name!r}; available tools: {known}",
                    unmatched_tool=action.tool_name,
                )
            )

        try:
            arguments = await self._timed(
                "executor",
                turn,
                self.modules.executor.command(action, tool, self.task, self.memory),
            )
        except Exception as exc:
            self._module_failed(turn, "executor", exc)
            return self._invalid_entry(
                turn, action, f"executor failed: {exc}", status=VerificationStatus.ERROR
            )
        result = await run_tool(
            tool,
            arguments,
            self.tool_context,
            timeout_s=min(tool.timeout_s, self.config.tool_timeout_s),
            max_output_chars=self.config.max_tool_output_chars,
        )
        self.memory.log(
            "tool_call",
            turn,
            tool=tool.name,
            arguments=dict(arguments),
            ok=result.ok,
            error=result.error,
            metadata=_plain(result.metadata),
        )
        self._count_call(result)
        self._turn_latency["tool"] = float(result.metadata.get("latency_s", 0.0))
        errors = (result.error,) if result.error else ()
        # The verifier reads the memory including this turn's result.
        provisional = self._entry(
            turn,
            action,
            tool.name,
            arguments,
            result,
            VerificationStatus.PENDING,
            (),
            errors,
            tool.original_name,
        )
        status, open_questions, verify_errors = await self._verify(turn, provisional)
        return self._entry(
            turn,
            action,
            tool.name,
            arguments,
            result,
            status,
            open_questions,
            errors + verify_errors,
            tool.original_name,
        )

    async def _verify(
        self, turn: int, provisional: MemoryEntry
    ) -> tuple[VerificationStatus, tuple[str, ...], tuple[str, ...]]:
        try:
            verdict = await self._timed(
                "verifier",
                turn,
                self.modules.verifier.verify(self.task, self.memory.preview(provisional)),
            )
            stop, open_questions = _read_verdict(verdict)
            details = {
                "rationale": str(getattr(verdict, "rationale", "")),
                "raw": str(getattr(verdict, "raw", "")),
                "meta": dict(getattr(verdict, "meta", None) or {}),
            }
        except Exception as exc:
            self._module_failed(turn, "verifier", exc)
            error = (f"verifier failed: {exc}",)
            return VerificationStatus.ERROR, self.memory.open_questions(), error
        self.memory.log("verification", turn, stop=stop, **details)
        status = VerificationStatus.STOP if stop else VerificationStatus.CONTINUE
        return status, open_questions, ()

    def _entry(
        self,
        turn: int,
        action: PlannerAction,
        tool: str,
        arguments: Mapping[str, Any],
        result: ToolResult,
        status: VerificationStatus,
        open_questions: tuple[str, ...],
        errors: tuple[str, ...],
        identity: str | None = None,
    ) -> MemoryEntry:
        return MemoryEntry(
            turn=turn,
            justification=action.justification,
            context=action.context,
            sub_goal=action.sub_goal,
            selected_tool=tool,
            tool_arguments=dict(arguments),
            tool_result=result.output,
            tool_ok=result.ok,
            verification_status=status,
            open_questions=open_questions,
            errors=errors,
            tool_identity=identity if identity != tool else None,
            tool_value=result.value,
        )

    def _tool_named(self, name: str) -> Tool | None:
        """The tool the planner named. In AgentFlow's format only as AgentFlow's planner matches
        names (case, spaces and underscores aside, the shown names only), so a short or a
        misspelt name is an unknown tool there as it is in AgentFlow; else any forgiving
        spelling or alias."""
        if self.config.prompt_style != "agentflow":
            return self.tools.get(name)
        matched = match_agentflow_tool(name, self.tools.names)
        return next((tool for tool in self.tools if tool.name == matched), None)

    def _module_failed(self, turn: int, module: str, exc: Exception) -> None:
        """A frozen module failed after its own retries: record it; the episode ends this turn."""
        message = f"{module} failed: {type(exc).__name__}: {exc}"
        self.memory.log("module_error", turn, module=module, error=message)
        self._module_errors.append(message)

    def _invalid_entry(
        self,
        turn: int,
        action: PlannerAction | None,
        error: str,
        status: VerificationStatus = VerificationStatus.INVALID,
        unmatched_tool: str | None = None,
    ) -> MemoryEntry:
        invalid = status == VerificationStatus.INVALID
        if invalid:
            self._metrics.invalid_actions += 1
        self.memory.log("invalid_action" if invalid else "turn_error", turn, error=error)
        return self._toolless_entry(turn, action, status, (error,), unmatched_tool)

    def _toolless_entry(
        self,
        turn: int,
        action: PlannerAction | None,
        status: VerificationStatus,
        errors: tuple[str, ...] = (),
        unmatched_tool: str | None = None,
    ) -> MemoryEntry:
        """A turn in which no tool ran (an unusable action, a failed module, the finish)."""
        return MemoryEntry(
            turn=turn,
            justification=action.justification if action else "",
            context=action.context if action else "",
            sub_goal=action.sub_goal if action else "",
            selected_tool=None,
            tool_arguments={},
            tool_result="",
            tool_ok=False,
            verification_status=status,
            open_questions=self.memory.open_questions(),
            errors=errors,
            unmatched_tool=unmatched_tool,
        )

    async def _verified_invalid(self, entry: MemoryEntry) -> MemoryEntry:
        """With ``verify_invalid_turns``, the verifier judges a turn that named no usable tool
        too (as AgentFlow's does): it may still say STOP on what earlier turns found."""
        if not self.config.verify_invalid_turns:
            return entry
        status, open_questions, errors = await self._verify(entry.turn, entry)
        if status == VerificationStatus.CONTINUE:
            status = VerificationStatus.INVALID
        return dataclasses.replace(
            entry,
            verification_status=status,
            open_questions=open_questions,
            errors=entry.errors + errors,
        )

    def _progress(self) -> float:
        """Phi of the current state, or 0 without shaping (a potential that raises is 0: the
        potential reads task data, never the planner's input, but must not crash a turn)."""
        if self.config.reward.shaping == "none":
            return 0.0
        try:
            return progress_potential(self.task, self.memory)
        except Exception as exc:
            self.memory.log("shaping_error", self.turn, error=repr(exc))
            return 0.0

    def _shaping(self) -> float:
        """This turn's shaping reward ``w * (Phi(s') - Phi(s))``; moves the potential on."""
        before, self._potential = self._potential, self._progress()
        return self.config.reward.shaping_weight * (self._potential - before)

    def _finish_entry(self, turn: int, action: PlannerAction) -> MemoryEntry:
        """The planner's finish: a turn with no tool whose status is STOP (the planner's own;
        no verifier ran), with the answer in the event log (``planner_finish``)."""
        self._finish_action = action
        self.memory.log("planner_finish", turn, answer=action.final_answer)
        return self._toolless_entry(turn, action, VerificationStatus.STOP)

    def _stop_reason(self, entry: MemoryEntry) -> EndReason | None:
        """The stop that ends the episode on this turn, if any (``config.termination``)."""
        if self._finish_action is not None:
            return EndReason.PLANNER_STOP
        stop = entry.verification_status == VerificationStatus.STOP
        if stop and verifier_may_stop(self.config.termination):
            return EndReason.VERIFIER_STOP
        return None

    def _planner_answer(self, end_reason: EndReason) -> FinalAnswer | None:
        """The final answer the planner's finish gave, or None (then the generalist writes one)."""
        action = self._finish_action
        if end_reason is not EndReason.PLANNER_STOP or action is None:
            return None
        answer = (action.final_answer or "").strip()
        if not answer:
            return None
        return FinalAnswer(answer, f"The planner's answer: {answer}", extra={"source": "planner"})

    def _past_time_limit(self) -> bool:
        limit = self.config.time_limit_s
        return limit is not None and time.monotonic() - self._started_at > limit

    def _count_call(self, result: ToolResult) -> None:
        self._metrics.tool_calls += 1
        if not result.ok:
            self._metrics.tool_errors += 1
            if result.service_broken:
                self._service_errors.append(result.error or "no error text")
            if result.metadata.get("kind") == "arguments":
                self._metrics.invalid_actions += 1
        self._metrics.tool_latency_s += float(result.metadata.get("latency_s", 0.0))

    # -- the end -----------------------------------------------------------------------------
    async def _finish(self, end_reason: EndReason) -> float:
        self._done = True
        try:
            # The planner's own answer when its finish gave one; else the generalist writes it.
            final = self._planner_answer(end_reason) or _expect(
                await self._timed(
                    "generalist", self.turn, self.modules.generalist.answer(self.task, self.memory)
                ),
                FinalAnswer,
            )
            if final.answer is not None and not isinstance(final.answer, str):
                raise TypeError(f"answer must be a str or None, got {type(final.answer).__name__}")
        except Exception as exc:
            self._module_failed(self.turn, "generalist", exc)
            final = FinalAnswer(None, f"The final answer could not be written: {exc}")
        score = await self._score(final.answer)
        metrics = self._metrics.as_dict()
        reward = terminal_reward(score, metrics, self.config.reward)
        success = self._is_correct(final.answer)
        self.memory.log(
            "final",
            self.turn,
            answer=final.answer,
            text=final.text,
            raw=final.raw,
            extra=dict(final.extra),
            score=score,
            reward=reward,
        )
        self._outcome = EpisodeOutcome(
            answer=final.answer,
            final_text=final.text,
            gold_answers=tuple(self.task.gold_answers),
            success=success,
            score=score,
            reward=reward,
            end_reason=end_reason,
            module_errors=tuple(self._module_errors),
            metrics=metrics,
            diagnostics=self._diagnose(end_reason, success, score, reward),
        )
        if self.config.budget_curve:
            curve = await self.success_by_budget()
            diagnostics = {**self._outcome.diagnostics, "success_by_budget": curve}
            self._outcome = dataclasses.replace(self._outcome, diagnostics=diagnostics)
        return reward

    def _is_correct(self, answer: str | None) -> bool:
        if self.task.checker is not None:
            try:
                return bool(self.task.checker(answer))
            except Exception as exc:  # a checker that chokes on an odd answer: not correct
                self.memory.log("checker_error", self.turn, error=repr(exc))
                return False
        return answer_score(answer, self.task.gold_answers, "exact_match") == 1.0

    async def _score(self, answer: str | None) -> float:
        reward = self.config.reward.reward
        if self.task.checker is not None and reward != "llm_judge":
            return float(self._is_correct(answer))
        if reward != "llm_judge":
            return answer_score(answer, self.task.gold_answers, reward)
        if self.config.judge is None:
            raise RuntimeError("reward='llm_judge' needs a judge in the session config")
        options = answer_options(self.task.metadata)
        extra = {"options": options} if options else {}
        try:
            verdict = float(
                await self._timed(
                    "judge",
                    self.turn,
                    self.config.judge.judge(
                        self.task.question, scored_answer(answer), self.task.gold_answers, **extra
                    ),
                )
            )
            if not 0.0 <= verdict <= 1.0:
                raise ValueError(f"judge score must lie in [0, 1], got {verdict}")
        except Exception as exc:
            self._module_failed(self.turn, "judge", exc)
            return 0.0
        self.memory.log("judge", self.turn, score=verdict)
        return verdict

    # -- diagnostics and the trajectory log --------------------------------------------------
    async def _timed(self, module: str, turn: int, call: Awaitable[T]) -> T:
        """Await a frozen module's call; log its latency and LLM tokens (``module_call``)."""
        started = time.perf_counter()
        first_event = self.memory.event_count
        result: Any = None
        try:
            result = await call
            return result
        finally:
            latency = time.perf_counter() - started
            self._turn_latency[module] = self._turn_latency.get(module, 0.0) + latency
            usage = _call_usage(result, self.memory.events_since(first_event))
            self.memory.log("module_call", turn, module=module, latency_s=latency, **usage)

    def _diagnose(self, end_reason: EndReason, success: bool, score: float, reward: float) -> dict:
        try:
            answered = evidence_answers(self.task, self.memory.evidence())
        except Exception:  # a reader that chokes on odd evidence: unknowable, not a crash
            answered = None
        return diagnose_episode(
            self.memory.entries,
            end_reason=end_reason.value,
            success=success,
            score=score,
            reward=reward,
            invalid_calls=self._metrics.invalid_actions,
            plan=self.task.gold_plan,
            evidence_answers=answered,
            events=self.memory.events,
        )

    async def success_by_budget(self) -> list[bool]:
        """Whether the episode would have succeeded with a turn budget of 1, 2, ... ``max_turns``.

        For a budget at or past the turn the episode ended on, its own success. For a smaller
        budget ``b``, the generalist answers from the memory of the first ``b`` turns (one call
        per budget: free with rule modules, one LLM request each with LLM modules) and that
        answer is checked. It replays the answer, not the planner: a planner that reads its
        remaining budget from the prompt might have acted differently. Call after the episode.
        """
        if self._outcome is None:
            raise RuntimeError("success_by_budget() needs a finished episode")
        results: list[bool] = []
        for budget in range(1, self.config.max_turns + 1):
            if budget >= self.turn:
                results.append(self._outcome.success)
                continue
            try:
                final = _expect(
                    await self.modules.generalist.answer(self.task, self.memory.prefix(budget)),
                    FinalAnswer,
                )
                answer = final.answer if isinstance(final.answer, str) else None
            except Exception:
                answer = None
            results.append(self._is_correct(answer))
        return results

    def _log_start(self) -> None:
        self.logger.start(
            self.task,
            self.memory.analysis,
            seed=self.seed,
            initializer_error=self._initializer_error,
            max_turns=self.config.max_turns,
            tools=self.tools.names,
            observation_mode=self.observations.name,
        )

    def _log_turn(self, entry: MemoryEntry, read: ActionInput, prompt_tokens: int) -> None:
        if self.logger.log is None:
            return
        entries = self.memory.entries
        finished = self._finish_action is not None  # a finish is no tool choice to judge
        expected = None if finished else expected_tools(self.task.gold_plan, entries)[-1]
        self.logger.turn(
            entry,
            read,
            expected_tool=expected,
            chose_expected_tool=None if expected is None else chose_tool(entry, expected),
            redundant=is_redundant(entry, entries[:-1]),
            latency_s=self._turn_latency,
            prompt_tokens=prompt_tokens,
        )

    # -- observations ------------------------------------------------------------------------
    def messages(self) -> list[Message]:
        """The structured prompt's messages for the next turn."""
        return self._view().messages()

    def _view(self) -> PromptView:
        return PromptView(
            self.memory,
            self.tools,
            self.config.max_turns,
            style=self.config.prompt_style,
            show_sub_questions=self.config.show_sub_questions,
            final_text=self._outcome.final_text if self._outcome else None,
            termination=self.config.termination,
            wording=self.config.agentflow_wording,
        )

    def _next_observation(
        self, prompt: Observation, read: ActionInput
    ) -> tuple[Observation, Observation]:
        """The next prompt, and the feedback appended to get it (the strategy decides)."""
        return self.observations.next(prompt, read.ids, self._view())

    def _budget_exceeded(self, observation: Observation) -> EndReason | None:
        length = len(observation.token_ids)
        if self.config.max_prompt_tokens is not None and length > self.config.max_prompt_tokens:
            return EndReason.PROMPT_BUDGET
        # A prompt that only grows is the whole conversation: its length is the episode's total.
        total_cap = self.config.max_total_tokens
        if self.observations.grows and total_cap is not None and length > total_cap:
            return EndReason.TOTAL_BUDGET
        return None

    def _info(
        self, read: ActionInput | None = None, feedback: Observation | None = None
    ) -> dict[str, Any]:
        """The ``info`` of ``start`` (no arguments) and of ``step``: every key, built here."""
        info: dict[str, Any] = {
            "task_id": self.task.task_id,
            "question": self.task.question,
            "turn": self.turn,
            "memory": self.memory.as_dicts(),
        }
        if self._initializer_error:
            info["initializer_error"] = self._initializer_error
        if self.memory.entries:
            last = self.memory.entries[-1]
            info.update(
                tool=last.selected_tool,
                tool_ok=last.tool_ok,
                verification=last.verification_status.value,
                errors=list(last.errors),
            )
        if self._outcome is not None:
            info.update(self._outcome.as_info())
        if read is not None:
            info["action_cut"] = read.cut
        if feedback is not None:
            info.update(self.observations.feedback_info(feedback))
        return info


T = TypeVar("T")


def _expect(value: Any, kind: type[T]) -> T:
    """A module's reply, checked: a wrong type is that module's failure, not the env's crash."""
    if not isinstance(value, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _read_verdict(verdict: Any) -> tuple[bool, tuple[str, ...]]:
    stop = getattr(verdict, "stop", None)
    if not isinstance(stop, bool):
        raise TypeError(f"a verdict needs a bool 'stop', got {type(verdict).__name__}")
    questions = getattr(verdict, "open_questions", ())
    if isinstance(questions, str) or not isinstance(questions, Sequence):
        raise TypeError("a verdict's open_questions must be a sequence of str")
    return stop, tuple(str(q) for q in questions)


def _call_usage(result: Any, events: Sequence[Any]) -> dict[str, int]:
    """LLM tokens of one module call: from the record it returned (``meta["usage"]``), else from
    the ``module_output`` events it logged. Rule modules report none."""
    meta = getattr(result, "meta", None)
    sources = (
        [meta]
        if isinstance(meta, Mapping) and "usage" in meta
        else [e.payload for e in events if e.kind == "module_output"]
    )
    totals = {"prompt_tokens": 0, "completion_tokens": 0}
    for source in sources:
        usage = source.get("usage")
        if isinstance(usage, Mapping):
            for key in totals:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    totals[key] += value
    return totals


def _plain(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in metadata.items()
        if isinstance(v, str | int | float | bool | list | type(None))
    }
