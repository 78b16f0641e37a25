"""``AgentFlowEnv``: the Gymnasium facade over one ``Session`` per episode.

One ``step`` is one planner turn. The observation is the planner's next prompt, chat-rendered and
ending with the assistant header, as ``{"text": str, "token_ids": int64 array}``; the action is the
planner's reply as a ``str`` or as token ids. The reward is terminal by default.
"""

from __future__ import annotations

import copy
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, SupportsFloat, TypeVar

import gymnasium as gym

from agentflow_env.base.hf_tokens import resolve_tokenizer
from agentflow_env.base.loop_runner import LoopRunner
from agentflow_env.base.spaces import PlannerActionSpace
from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.envs.config import DEFAULT_TOOLS as DEFAULT_TOOLS
from agentflow_env.envs.config import EnvConfig, SearchEnvConfig, build_tool, modules_spec
from agentflow_env.envs.config import check_dataset_corpus as check_dataset_corpus
from agentflow_env.envs.render import render_episode
from agentflow_env.llm import LLMEndpoint, LLMJudge
from agentflow_env.modules import build_modules
from agentflow_env.tasks.base import Task, TaskSource
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.action_input import MAX_TOKEN_ID
from agentflow_env.workflow.config import SessionConfig
from agentflow_env.workflow.observations import (
    ObservationStrategy,
    PromptEncoder,
    make_observations,
)
from agentflow_env.workflow.prompt_pack import PromptPack, source_label
from agentflow_env.workflow.session import EpisodeOverError, Session
from agentflow_env.workflow.trajectory import Trajectory
from agentflow_env.workflow.turn_log import TurnLog

T = TypeVar("T")


def unwrap_agentflow(env: gym.Env) -> AgentFlowEnv:
    """The ``AgentFlowEnv`` under ``env``'s wrappers; ``TypeError`` for any other env."""
    base = env.unwrapped
    if not isinstance(base, AgentFlowEnv):
        raise TypeError(f"expected an AgentFlowEnv (possibly wrapped), got {type(base).__name__}")
    return base


def build_config(
    config: EnvConfig | None, config_class: type[EnvConfig] | None, settings: Mapping[str, Any]
) -> EnvConfig:
    """``config`` with ``settings`` changed, else ``config_class`` built from ``settings``
    (``SearchEnvConfig`` when no class is named). A config of another class than the one named
    raises ``TypeError``."""
    wanted = config_class or SearchEnvConfig
    if config is None:
        return wanted.from_kwargs(**settings)
    if not isinstance(config, config_class or EnvConfig):
        raise TypeError(
            f"{wanted.variant()} takes a {wanted.__name__}, got {type(config).__name__}"
            if config_class
            else f"config must be an EnvConfig, got {type(config).__name__}"
        )
    return config.updated(**settings)


PlannerInput = str | Sequence[int] | Mapping[str, Any]
"""What ``step`` accepts: the planner's text, its token ids, or ``{"token_ids", "logprobs"}``."""


class AgentFlowEnv(gym.Env[dict[str, Any], PlannerInput]):
    """AgentFlow's workflow with the planner as the agent.

    Args:
        config: the variant's settings, an ``EnvConfig`` of any variant (``SearchEnvConfig``,
            ``CodeEnvConfig``, a probe's or one registered elsewhere). Their fields
            (``agentflow_env.envs.config``) are every setting with its type, default and help:
            where tasks come from, tools, frozen modules, reward, limits, tokenizer and
            observation mode.
        config_class: the variant's config class, which keyword settings build (default
            ``SearchEnvConfig``) and ``config`` must be an instance of: the one builder of every
            registered id passes its row's (``agentflow_env.envs.registration``).
        render_mode: ``"ansi"`` (``render()`` returns the episode as text) or ``"human"``
            (printed after each step).
        **settings: the config's fields as keywords, the sugar ``gym.make(id, **settings)``
            uses: ``AgentFlowEnv(hops=2)`` is ``AgentFlowEnv(SearchEnvConfig(hops=2))``; beside
            ``config`` they override its fields.

    A setting the variant lacks, an invalid value, or a setting the chosen task source would
    ignore raises ``ValueError`` naming what is allowed; ``dataset=`` needs ``corpus=`` unless
    a retriever server (``retriever_url=``) serves the Search tool.

    ``fork()`` (``env.unwrapped.fork()`` through wrappers) copies the env at the current turn of
    its episode, so that several continuations branch from one state.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        config: EnvConfig | None = None,
        *,
        config_class: type[EnvConfig] | None = None,
        render_mode: str | None = None,
        **settings: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        config = build_config(config, config_class, settings)
        self.config: EnvConfig = config
        self.agentflow_wording: PromptPack | None = config.agentflow_wording()
        """AgentFlow's own words, read from the user's checkout (``agentflow_source``); ``None``:
        this project's own wording."""
        self.task_source: TaskSource = config.make_task_source()
        self.tools = ToolSet(
            [
                build_tool(
                    t,
                    config.retriever_url,
                    retriever=config.retriever,
                    dense_model=config.dense_model,
                )
                for t in config.tools
            ]
        )
        self.modules = build_modules(
            modules_spec(config.modules),
            endpoint=config.llm_endpoint,
            prompt_style=config.prompt_style,
            wording=self.agentflow_wording,
            agentflow_script=config.agentflow_script,
        )
        judge = config.judge
        if config.reward == "llm_judge" and judge is None:
            judge = LLMJudge(LLMEndpoint.from_env("judge"), choice_fallback=config.choice_fallback)
        self.tokenizer: ChatTokenizer = resolve_tokenizer(config.tokenizer)
        self.prompt_encoder = PromptEncoder(self.tokenizer)
        self.session_config = SessionConfig.from_settings(
            config, judge=judge, agentflow_wording=self.agentflow_wording
        )
        self.observation_space = self.observations.observation_space(self.tokenizer.vocab_size)
        self.action_space = self.planner_action_space()
        self.turn_log = TurnLog(config.log_path) if config.log_path else None
        """The trajectory log every session of this env appends to (``log_path``)."""
        self.session: Session | None = None
        self._runner = LoopRunner()

    @property
    def wording_label(self) -> str:
        """Which wording the prompts use: ``own``, or ``AgentFlow's, from PATH at COMMIT``."""
        wording = self.agentflow_wording
        return source_label(None) if wording is None else wording.label

    # -- Gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode. ``options={"task": Task}`` runs that task instead of sampling one."""
        super().reset(seed=seed)
        options = options or {}
        task = options.get("task")
        if task is None:
            task = self.task_source.sample(self.np_random)
        elif not isinstance(task, Task):
            raise TypeError(f"options['task'] must be a Task, got {type(task).__name__}")
        self.session = self.new_session(task, seed=seed)
        observation, info = self._runner.run(self.session.start())
        return observation.as_gym(), info

    def step(
        self, action: PlannerInput
    ) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """One planner turn.

        ``action`` is the planner's text, its token ids (kept verbatim, decoded only to parse), or
        a mapping ``{"token_ids": [...], "logprobs": [...]}`` carrying the sampling log-probs.
        Nothing the planner sends makes it raise: an unusable action is a recorded invalid turn.
        """
        if self.session is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self.session.done:
            raise gym.error.ResetNeeded("the episode is over: call reset() before step()")
        try:
            outcome = self._runner.run(self.session.step(action))
        except EpisodeOverError as exc:  # pragma: no cover - guarded above
            raise gym.error.ResetNeeded(str(exc)) from exc
        if self.render_mode == "human":
            print(self.render_text(), flush=True)
        return outcome.as_gym()

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.render_text()
        if self.render_mode == "human":
            print(self.render_text(), flush=True)
        return None

    def close(self) -> None:
        if not self._shares_resources:  # a fork's loop runner and log are its origin's
            self._runner.close()
            if self.turn_log is not None:
                self.turn_log.close()
        super().close()

    # -- helpers -----------------------------------------------------------------------------
    def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` to completion on the env's own event loop thread, where its
        sessions and LLM clients live (e.g. many sessions driven together by an evaluation)."""
        return self._runner.run(coroutine)

    def new_session(
        self,
        task: Task,
        seed: int | None = None,
        *,
        config: SessionConfig | None = None,
        log: TurnLog | None = None,
        run: str | None = None,
    ) -> Session:
        """A fresh session for ``task`` sharing this env's tools, modules and tokenizer.

        Async callers (many episodes in one event loop) drive sessions directly. ``config``
        replaces the env's session settings, ``log`` its trajectory log (``log_path``), and
        ``run`` names the evaluation run in the log.
        """
        env_id = self.spec.id if self.spec else self.config.variant()
        return Session(
            task,
            tools=self.tools,
            modules=self.modules,
            tokenizer=self.tokenizer,
            config=config or self.session_config,
            seed=seed,
            prompt_encoder=self.prompt_encoder,
            observations=self.observations,
            log=log or self.turn_log,
            log_context={"run": run, "env_id": env_id},
        )

    @property
    def observations(self) -> ObservationStrategy:
        """How this env's prompts evolve: the strategy its ``observation_mode`` names."""
        return make_observations(self.session_config.observation_mode, self.prompt_encoder)

    def planner_action_space(self) -> PlannerActionSpace:
        """The actions ``step`` accepts: text, token ids (verbatim, up to any id a model may
        sample) or ``{"token_ids", "logprobs"}``; its samples are text."""
        return PlannerActionSpace(self.tokenizer.vocab_size, id_limit=MAX_TOKEN_ID + 1)

    @property
    def task(self) -> Task:
        if self.session is None:
            raise gym.error.ResetNeeded("no episode yet: call reset()")
        return self.session.task

    def trajectory(self) -> Trajectory:
        """The current episode's exact turn records (see ``agentflow_env.workflow.trajectory``)."""
        if self.session is None:
            raise gym.error.ResetNeeded("no episode yet: call reset()")
        return self.session.trajectory()

    # -- forks -------------------------------------------------------------------------------
    _shares_resources = False
    """Set on a fork: its loop runner and trajectory log belong to the env it was forked from,
    and its ``close`` leaves them open."""

    def fork(self, *, log: bool = False) -> AgentFlowEnv:
        """An independent copy of this env at the current turn of its episode.

        It shares this env's config, task source, tools, modules, tokenizer, prompt encoder,
        event-loop runner and trajectory log; its ``session`` is ``self.session.fork(log=log)``
        (see ``Session.fork``: the same actions give the same continuation, other actions
        diverge without touching this env) and its ``np_random`` an independent copy of this
        env's generator. ``step``, ``trajectory`` and ``render`` work on it, ``reset`` starts a
        new episode on it, and ``close`` leaves the shared runner and log open; closing this env
        closes them for its forks too. Through Gymnasium wrappers: ``env.unwrapped.fork()``.
        """
        if self.session is None:
            raise gym.error.ResetNeeded("no episode to fork: call reset() first")
        child = copy.copy(self)
        child.session = self.session.fork(log=log)
        child._np_random = copy.deepcopy(self.np_random)  # keeps ``np_random_seed`` too
        child._shares_resources = True
        return child

    def render_text(self) -> str:
        if self.session is None:
            return "(no episode yet)"
        return render_episode(self.session)
