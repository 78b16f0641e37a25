"""The one planner protocol (``next_action(session)``), its one adapter and the one episode loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import gymnasium as gym
import pytest

from agentflow_env import Curriculum
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.evaluation.runner import evaluate
from agentflow_env.llm.client import ChatResult
from agentflow_env.rollout.agents.episodes import (
    ObservationPlanner,
    as_planner,
    play_episode,
    play_episode_sync,
    run_episode,
    session_step,
)
from agentflow_env.rollout.agents.llm_planners import OpenAIPlanner, Sampling
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.session import Session

SEARCH = "AgentFlow-Search-v0"
USELESS = format_planner_action("Again.", "zzqx", "nothing", "Search")
"""A valid action that finds nothing: the verifier never stops on it."""


def started(env: AgentFlowEnv, seed: int = 0) -> Session:
    """A started session of ``env``'s task for ``seed``."""
    env.reset(seed=seed)
    assert env.session is not None
    session = env.new_session(env.session.task, seed=seed)
    env.run_async(session.start())
    return session


def test_the_scripted_planners_act_alike_in_both_calling_styles() -> None:
    env = gym.make(SEARCH, hops=2)
    base = env.unwrapped
    assert isinstance(base, AgentFlowEnv)
    observation, info = env.reset(seed=1)
    session = base.session
    assert session is not None
    gym_style = ExpertPlanner(env).act(observation, info)
    assert env.unwrapped.run_async(ExpertPlanner().next_action(session)) == gym_style
    by_env = RandomPlanner(env, seed=5)
    by_session = RandomPlanner(seed=5)
    for _ in range(5):
        assert by_env.act(observation, info) == base.run_async(by_session.next_action(session))
    env.close()


def test_a_planner_built_without_an_env_refuses_the_gymnasium_style() -> None:
    with pytest.raises(TypeError, match="without an env"):
        ExpertPlanner().act()
    with pytest.raises(TypeError, match="without an env"):
        RandomPlanner(seed=0).act()


def test_play_episode_on_a_session_matches_run_episode_on_the_env() -> None:
    env = AgentFlowEnv(hops=2)
    record = run_episode(env, ExpertPlanner(env), seed=4)
    session = started(env, seed=4)
    actions: list[Any] = []
    steps = env.run_async(
        play_episode(session, ExpertPlanner(), on_step=lambda a, _: actions.append(a))
    )
    assert session.done and session.outcome is not None
    assert steps == len(actions) == record.metrics["turns"]
    assert actions == record.actions
    assert session.outcome.answer == record.answer and session.outcome.success == record.success
    env.close()


def test_max_steps_stops_the_loop_before_the_episode_ends() -> None:
    env = AgentFlowEnv(hops=2, max_turns=6)
    session = started(env)
    repeat = ObservationPlanner(_Fixed(USELESS))
    assert env.run_async(play_episode(session, repeat, max_steps=2)) == 2
    assert session.turn == 2 and not session.done
    env.close()


def test_play_episode_sync_refuses_a_planner_that_waits() -> None:
    env = AgentFlowEnv(hops=1)
    session = started(env)

    class Waiting:
        async def next_action(self, session: Session) -> str:
            await asyncio.sleep(0)
            return "Tool Name: Search\nContext: x"

    with pytest.raises(RuntimeError, match="waited on an event loop"):
        play_episode_sync(session, Waiting(), session_step(session))
    env.close()


def test_run_episode_steps_through_the_wrappers() -> None:
    """The Curriculum wrapper counts the episode: every step went through ``env.step``."""
    env = Curriculum(gym.make(SEARCH, fresh_world=True, max_turns=4), [{"hops": 1}, {"hops": 2}])
    seen: list[dict[str, Any]] = []

    class Watching:
        def __init__(self) -> None:
            self.expert = ExpertPlanner(env)

        def act(self, observation: Any, info: dict[str, Any]) -> str:
            seen.append(info)
            return self.expert.act(observation, info)

    record = run_episode(env, Watching(), seed=0)
    assert record.success and env.episodes == 1
    assert all("curriculum" in info for info in seen)  # the wrapper's info reached the planner
    env.close()


def test_the_adapter_runs_a_blocking_planner_off_the_loop_one_call_at_a_time() -> None:
    env = AgentFlowEnv(hops=2, max_turns=2)
    loop_thread: list[int] = []
    inside = threading.Lock()

    class Blocking:
        def __init__(self) -> None:
            self.threads: set[int] = set()

        def act(self, observation: Any, info: dict[str, Any]) -> str:
            assert inside.acquire(blocking=False), "two calls at once"
            try:
                self.threads.add(threading.get_ident())
                assert isinstance(observation["text"], str) and info == {}
                return USELESS
            finally:
                inside.release()

    blocking = Blocking()
    shared = ObservationPlanner(blocking, in_thread=True)

    async def note_loop() -> None:
        loop_thread.append(threading.get_ident())

    env.run_async(note_loop())
    result = evaluate(env, lambda index: shared, episodes=3, concurrency=3, budget_curve=False)
    assert len(result.rows) == 3
    assert blocking.threads and loop_thread[0] not in blocking.threads
    env.close()


def test_evaluate_still_takes_a_planner_with_an_async_act_of_the_session() -> None:
    class SessionActing:
        async def act(self, session: Session) -> str:
            return await ExpertPlanner().next_action(session)

    env = AgentFlowEnv(hops=2)
    old = evaluate(env, lambda index: SessionActing(), episodes=2, budget_curve=False)
    new = evaluate(env, lambda index: ExpertPlanner(), episodes=2, budget_curve=False)
    assert [r["answer"] for r in old.rows] == [r["answer"] for r in new.rows]
    assert all(r["diagnostics"]["success"] for r in new.rows)
    env.close()


def test_as_planner_keeps_a_protocol_planner_and_adapts_the_others() -> None:
    expert = ExpertPlanner()
    assert as_planner(expert) is expert
    adapted = as_planner(_Fixed("x"))
    assert isinstance(adapted, ObservationPlanner) and isinstance(adapted.planner, _Fixed)


def test_the_served_planner_asks_with_the_session_messages_cap_and_sampling() -> None:
    env = AgentFlowEnv(hops=1, max_action_tokens=77)
    session = started(env)
    backend = _Backend()
    planner = OpenAIPlanner(backend, max_tokens=None, sampling=Sampling(0.7, top_p=0.9))
    text = env.run_async(planner.next_action(session))
    assert text == "reply"
    messages, options = backend.calls[0]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert session.task.question in messages[1]["content"]
    assert options == {"temperature": 0.7, "max_tokens": 77, "top_p": 0.9}
    planner.temperature = 0.2
    assert planner.sampling == Sampling(0.2, top_p=0.9)
    gym_style = OpenAIPlanner(backend, temperature=0.5)
    gym_style.act({"text": "plain prompt"}, {})
    gym_style.close()
    assert backend.calls[1] == (
        [{"role": "user", "content": "plain prompt"}],
        {"temperature": 0.5, "max_tokens": 512},
    )
    with pytest.raises(ValueError, match="not both"):
        OpenAIPlanner(backend, temperature=0.1, sampling=Sampling(0.2))
    env.close()


class _Fixed:
    """A Gymnasium-style planner that always gives ``action``."""

    def __init__(self, action: str) -> None:
        self.action = action

    def act(self, observation: Any, info: dict[str, Any]) -> str:
        return self.action


class _Backend:
    """A chat backend that records each request."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    async def chat(self, messages: Any, **options: Any) -> ChatResult:
        self.calls.append((list(messages), options))
        return ChatResult("reply", "stop", 0.0, 1)
