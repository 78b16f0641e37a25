"""``AgentFlowEnv``: the Gymnasium facade over one ``Session`` per episode.

One ``step`` is one planner turn. The observation is the planner's next prompt, chat-rendered and
ending with the assistant header, as ``{"text": str, "token_ids": int64 array}``; the action is the
planner's reply as a ``str`` or as token ids. The reward is terminal by default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

from agentflow_env.base.hf_tokens import resolve_tokenizer
from agentflow_env.base.loop_runner import LoopRunner
from agentflow_env.base.spaces import AnyText, TokenIds
from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.envs.render import render_episode
from agentflow_env.llm import LLMEndpoint, LLMJudge
from agentflow_env.modules import build_modules
from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.tasks.base import ListTaskSource, Task, TaskSource
from agentflow_env.tasks.sources import check_source_settings, dataset_source, synthetic_source
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import ToolSet, canonical_tool_name, make_tool
from agentflow_env.tools.search import RETRIEVER_URL_ENV_VAR, SearchTool
from agentflow_env.workflow.action_input import MAX_TOKEN_ID
from agentflow_env.workflow.frozen_modules import Modules
from agentflow_env.workflow.observations import PromptEncoder
from agentflow_env.workflow.rewards import RewardConfig
from agentflow_env.workflow.session import (
    DEFAULT_MAX_ACTION_TOKENS,
    DEFAULT_MAX_PROMPT_TOKENS,
    AnswerJudge,
    EpisodeOverError,
    Session,
    SessionConfig,
)
from agentflow_env.workflow.trajectory import Trajectory

DEFAULT_TOOLS = ("Search", "Calculator")


def _tool(spec: str | Tool, retriever_url: str | None) -> Tool:
    if not isinstance(spec, str):
        return spec
    if retriever_url is not None and canonical_tool_name(spec) == "search":
        return make_tool(spec, retriever_url=retriever_url)
    return make_tool(spec)


def check_dataset_corpus(
    corpus: object, tools: Sequence[object], retriever_url: str | None
) -> None:
    """``dataset=`` without ``corpus=`` leaves a local Search tool nothing to search: refuse it.

    Fine when a retriever server answers searches (``retriever_url=`` or the
    ``AGENTFLOW_RETRIEVER_URL`` variable) or when no tool searches locally.
    """
    if corpus is not None:
        return
    remote = bool((retriever_url or os.environ.get(RETRIEVER_URL_ENV_VAR, "")).strip())
    for tool in tools:
        if isinstance(tool, str):
            local = canonical_tool_name(tool) == "search" and not remote
        else:
            local = isinstance(tool, SearchTool) and tool.remote is None
        if local:
            raise ValueError(
                "dataset= without corpus= leaves the Search tool nothing to search: pass "
                "corpus= (a corpus JSONL), or retriever_url= (a retriever server, see "
                "`agentflow-env serve-retriever`), or tools= without Search"
            )


class AgentFlowEnv(gym.Env[dict[str, Any], str]):
    """AgentFlow's workflow with the planner as the agent.

    Args:
        task_source: where tasks come from; default: the embedded synthetic world.
        tasks: a fixed list of ``Task`` objects instead of a source.
        hops, kinds, split, world_seed, world_size, fresh_world: synthetic-world settings
            (``hops`` = documents a question needs; ``fresh_world`` builds a new small world each
            episode, which is what a small planner needs to learn to search rather than memorise).
        dataset, corpus: a QA file (FlashRAG/Search-R1 JSONL, AgentFlow JSON, Parquet) and the
            corpus JSONL its Search tool retrieves from (indexed once, cached on disk under
            ``index_cache_dir``); ``dataset_split`` / ``dataset_limit`` filter it.
        retriever_url: a Search-R1 ``/retrieve`` server for the Search tool instead of a local
            index (``agentflow-env serve-retriever``), shared by many rollout workers.
        tools: tool names (from the registry) or ``Tool`` objects.
        modules: ``"rule"`` (offline default), ``"llm"``, a per-role mapping (e.g.
            ``{"verifier": "llm"}``), or a ``Modules`` bundle; ``llm_endpoint`` serves the LLM
            roles (an ``LLMEndpoint``, or a mapping role -> endpoint; default: the
            ``AGENTFLOW_LLM_*`` / ``AGENTFLOW_<ROLE>_*`` environment variables).
        max_turns: planner turns before the episode is truncated (AgentFlow evaluates with 10).
        reward: ``"exact_match"`` (default), ``"f1"`` or ``"llm_judge"`` (``judge``, default an
            ``LLMJudge`` on ``AGENTFLOW_JUDGE_*`` / ``AGENTFLOW_LLM_*``); ``lambda_*`` subtract
            costs per tool call, per action token and per invalid action.
        tokenizer: the package's bundled byte-level BPE (default), a ``ChatTokenizer``, a Hugging
            Face tokenizer, a local path, or a hub name already in the local cache.
        prompt_style: ``"full"`` (AgentFlow-like prompt with tool cards) or ``"compact"``.
        observation_mode: ``"structured"`` (each prompt rendered afresh from memory, AgentFlow)
            or ``"flat"`` (the prompt grows: previous ids + action ids + feedback ids, exactly).
        max_action_tokens: longer actions are cut to this many tokens and flagged (default
            2048; ``None`` for no cap).
        max_prompt_tokens, max_total_tokens: a prompt (any mode) or a flat sequence longer than
            this ends the episode as truncated, with the reason in ``info["end_reason"]``
            (defaults 32768 and none; ``None`` for no cap).

    Settings the chosen task source would ignore raise ``ValueError``; ``dataset=`` needs
    ``corpus=`` unless a retriever server (``retriever_url=``) serves the Search tool.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        *,
        task_source: TaskSource | None = None,
        tasks: Sequence[Task] | None = None,
        hops: int | Sequence[int] | None = None,
        kinds: str | Sequence[str] | None = None,
        split: str = "train",
        world_seed: int = 0,
        world_size: str | None = None,
        fresh_world: bool = False,
        dataset: str | os.PathLike[str] | None = None,
        corpus: str | os.PathLike[str] | Corpus | None = None,
        dataset_split: str | None = None,
        dataset_limit: int | None = None,
        retriever_url: str | None = None,
        index_cache_dir: str | os.PathLike[str] | None = None,
        tools: Sequence[str | Tool] = DEFAULT_TOOLS,
        modules: str | Mapping[str, object] | Modules = "rule",
        llm_endpoint: Any = None,
        judge: AnswerJudge | None = None,
        max_turns: int = 10,
        reward: str = "exact_match",
        lambda_calls: float = 0.0,
        lambda_tokens: float = 0.0,
        lambda_errors: float = 0.0,
        tokenizer: Any = None,
        prompt_style: str = "full",
        observation_mode: str = "structured",
        max_action_tokens: int | None = DEFAULT_MAX_ACTION_TOKENS,
        max_prompt_tokens: int | None = DEFAULT_MAX_PROMPT_TOKENS,
        max_total_tokens: int | None = None,
        tool_timeout_s: float = 10.0,
        max_tool_output_chars: int = 8000,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        if sum(x is not None for x in (task_source, tasks, dataset)) > 1:
            raise ValueError("give at most one of task_source, tasks and dataset")
        if corpus is not None and dataset is None:
            raise ValueError("corpus= goes with dataset= (synthetic worlds bring their own)")
        origins = {"dataset=": dataset, "tasks=": tasks, "task_source=": task_source}
        check_source_settings(
            origin=next((name for name, given in origins.items() if given is not None), None),
            synthetic={
                "hops": hops,
                "kinds": kinds,
                "split": split,
                "world_seed": world_seed,
                "world_size": world_size,
                "fresh_world": fresh_world,
            },
            dataset_settings={
                "dataset_split": dataset_split,
                "dataset_limit": dataset_limit,
                "index_cache_dir": index_cache_dir,
            },
        )
        if tasks is not None:
            task_source = ListTaskSource(tasks)
        if dataset is not None:
            check_dataset_corpus(corpus, tools, retriever_url)
            task_source = dataset_source(
                dataset,
                corpus,
                split=dataset_split,
                limit=dataset_limit,
                index_cache_dir=index_cache_dir,
                warm_index=not retriever_url,
            )
        self.task_source: TaskSource = task_source or synthetic_source(
            world_seed=world_seed,
            world_size=world_size,
            hops=hops,
            kinds=kinds,
            split=split,
            fresh_world=fresh_world,
        )
        self.tools = ToolSet([_tool(t, retriever_url) for t in tools])
        self.modules = build_modules(modules, endpoint=llm_endpoint)
        if reward == "llm_judge" and judge is None:
            judge = LLMJudge(LLMEndpoint.from_env("judge"))
        self.tokenizer: ChatTokenizer = resolve_tokenizer(tokenizer)
        self.prompt_encoder = PromptEncoder(self.tokenizer)
        self.session_config = SessionConfig(
            max_turns=max_turns,
            reward=RewardConfig(reward, lambda_calls, lambda_tokens, lambda_errors),
            tool_timeout_s=tool_timeout_s,
            max_tool_output_chars=max_tool_output_chars,
            prompt_style=prompt_style,
            observation_mode=observation_mode,
            max_action_tokens=max_action_tokens,
            max_prompt_tokens=max_prompt_tokens,
            max_total_tokens=max_total_tokens,
            judge=judge,
        )
        # Flat observations hold the policy's ids verbatim, even ids past the vocabulary.
        id_limit = MAX_TOKEN_ID + 1 if observation_mode == "flat" else None
        self.observation_space = spaces.Dict(
            {
                "text": AnyText(),
                "token_ids": TokenIds(self.tokenizer.vocab_size, id_limit=id_limit),
            }
        )
        self.action_space = AnyText()
        self.session: Session | None = None
        self._runner = LoopRunner()

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
        self, action: str | Sequence[int] | Mapping[str, Any]
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
        return (
            outcome.observation.as_gym(),
            outcome.reward,
            outcome.terminated,
            outcome.truncated,
            outcome.info,
        )

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.render_text()
        if self.render_mode == "human":
            print(self.render_text(), flush=True)
        return None

    def close(self) -> None:
        self._runner.close()
        super().close()

    # -- helpers -----------------------------------------------------------------------------
    def new_session(self, task: Task, seed: int | None = None) -> Session:
        """A fresh session for ``task`` sharing this env's tools, modules and tokenizer.

        Async callers (many episodes in one event loop) drive sessions directly.
        """
        return Session(
            task,
            tools=self.tools,
            modules=self.modules,
            tokenizer=self.tokenizer,
            config=self.session_config,
            seed=seed,
            prompt_encoder=self.prompt_encoder,
        )

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

    def render_text(self) -> str:
        if self.session is None:
            return "(no episode yet)"
        return render_episode(self.session)
