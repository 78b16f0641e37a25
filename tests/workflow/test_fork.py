"""Forkable episodes: ``Session.fork()`` and ``AgentFlowEnv.fork()``.

A fork given the same actions continues exactly as the original (token ids, rewards, memory,
outcome), in both observation modes, with the sandboxed Python tool and with a flaky tool whose
draws depend on per-episode random state; forks given other actions diverge without touching
each other; a fork copies none of the history (it shares it), whatever its length.
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import FakeOpenAIServer, task_responder  # noqa: E402

import agentflow_env  # noqa: E402,F401 - registers the environments
from agentflow_env.envs.env import AgentFlowEnv, unwrap_agentflow  # noqa: E402
from agentflow_env.llm import LLMEndpoint  # noqa: E402
from agentflow_env.llm.client import get_client  # noqa: E402
from agentflow_env.modules import build_modules  # noqa: E402
from agentflow_env.workflow.actions import format_planner_action  # noqa: E402
from agentflow_env.workflow.session import Session  # noqa: E402
from agentflow_env.workflow.turn_log import read_turn_log  # noqa: E402

FINAL_KEYS = ("answer", "final_text", "success", "score", "reward", "end_reason")


def search(query: str) -> str:
    return format_planner_action("Look it up.", query, "Find evidence.", "Search")


def python(code: str) -> str:
    return format_planner_action("Compute it.", code, "Print the value.", "Python")


def plan_actions(env: gym.Env, noise: Callable[[int], str]) -> list[str]:
    """The task's gold plan with two useless actions before each step (a longer episode)."""
    actions = []
    for index, step in enumerate(unwrap_agentflow(env).task.gold_plan):
        actions.extend((noise(2 * index), noise(2 * index + 1)))
        actions.append(
            format_planner_action("Follow the plan.", step.context, step.sub_goal, step.tool)
        )
    limit = unwrap_agentflow(env).session_config.max_turns
    return actions + [noise(100 + turn) for turn in range(limit)]  # ends it if the plan did not


@dataclass
class Continuation:
    """What an env did from some turn on: every step's return, then the whole episode's record."""

    steps: list[tuple[float, bool, bool]]
    final: dict[str, Any]
    records: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
    memory: list[dict[str, Any]]


def play(env: AgentFlowEnv, actions: Sequence[str]) -> Continuation:
    """Step ``env`` with ``actions`` until the episode ends (or they run out)."""
    steps: list[tuple[float, bool, bool]] = []
    info: dict[str, Any] = {}
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        steps.append((float(reward), terminated, truncated))
        if terminated or truncated:
            break
    return record_of(env, steps, info)


def session_of(env: AgentFlowEnv) -> Session:
    assert env.session is not None
    return env.session


def record_of(env: AgentFlowEnv, steps: list[tuple[float, bool, bool]], info: dict) -> Continuation:
    return Continuation(
        steps=steps,
        final={key: info.get(key) for key in FINAL_KEYS},
        records=[(r.prompt_ids, r.action_ids, r.feedback_ids) for r in env.trajectory().turns],
        memory=session_of(env).memory.as_dicts(),
    )


def search_env(**settings: Any) -> gym.Env:
    return gym.make("AgentFlow-Search-v0", **{"hops": 2, "max_turns": 8, **settings})


VARIANTS: dict[str, tuple[Callable[[], gym.Env], int | None, Callable[[int], str]]] = {
    "structured": (search_env, 3, lambda i: search(f"unrelated words {i}")),
    "flat": (lambda: search_env(observation_mode="flat"), 3, lambda i: search(f"nothing {i}")),
    "code": (
        lambda: gym.make("AgentFlow-Code-v0", max_turns=6),
        2,  # a task the Python tool answers
        lambda i: python(f"print('warming up', {i})"),
    ),
    # No seed: whether a call fails is drawn from the episode's own random key, so the fork
    # repeats the original's failures only if it carries that state.
    "flaky_tool": (
        lambda: search_env(tools=[{"name": "Search", "failure_rate": 0.5}, "Calculator"]),
        None,
        lambda i: search(f"distinct query {i}"),
    ),
}


@pytest.mark.parametrize("fork_at", [0, 2])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_fork_given_the_same_actions_continues_exactly_as_the_original(
    variant: str, fork_at: int
) -> None:
    make, seed, noise = VARIANTS[variant]
    env = make()
    env.reset(seed=seed)
    original = unwrap_agentflow(env)
    actions = plan_actions(env, noise)
    before = play(original, actions[:fork_at])
    assert len(before.records) == fork_at and not session_of(original).done

    fork = original.fork()
    assert fork.session is not original.session
    assert (
        session_of(fork).tool_context.episode_key == session_of(original).tool_context.episode_key
    )
    forked = play(fork, actions[fork_at:])
    # the original is where it was while the fork played on
    assert session_of(original).turn == fork_at
    assert session_of(original).memory.as_dicts() == before.memory
    assert session_of(fork).done and len(forked.memory) > fork_at

    continued = play(original, actions[fork_at:])
    assert forked.steps == continued.steps
    assert forked.final == continued.final
    assert forked.records == continued.records
    assert forked.memory == continued.memory
    assert forked.records[:fork_at] == before.records  # the history is the original's
    env.close()


def test_forks_stepped_with_different_actions_diverge_independently() -> None:
    env = search_env()
    env.reset(seed=1)
    original = unwrap_agentflow(env)
    env.step(search("first look"))
    forks = [original.fork() for _ in range(3)]
    for index, fork in enumerate(forks):
        for turn in range(index + 1):
            fork.step(search(f"branch {index} step {turn}"))
    assert session_of(original).turn == 1
    for index, fork in enumerate(forks):
        memory = session_of(fork).memory.as_dicts()
        assert [entry["tool_arguments"]["query"] for entry in memory] == [
            "first look",
            *(f"branch {index} step {turn}" for turn in range(index + 1)),
        ]
        assert session_of(fork).metrics.turns == index + 2
        assert session_of(fork).turn_records[0] is session_of(original).turn_records[0]
    # and the original, stepped last, sees none of its forks' turns
    env.step(search("original goes on"))
    queries = [e["tool_arguments"]["query"] for e in session_of(original).memory.as_dicts()]
    assert queries == ["first look", "original goes on"]
    assert [session_of(fork).turn for fork in forks] == [2, 3, 4]
    env.close()


# -- memory ------------------------------------------------------------------------------------
def fork_bytes(session: Session) -> int:
    """Bytes allocated by ``session.fork()`` and still held by the fork (least of 3 tries)."""
    session.fork()  # warm any lazily built state
    sizes = []
    for _ in range(3):
        tracemalloc.start()
        try:
            fork = session.fork()
            sizes.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
        del fork
    return min(sizes)


def session_after(turns: int, mode: str) -> Session:
    env = search_env(max_turns=40, observation_mode=mode)
    env.reset(seed=0)
    for turn in range(turns):
        env.step(search(f"more unrelated words {turn}"))
    session = unwrap_agentflow(env).session
    assert session is not None and not session.done
    return session


@pytest.mark.parametrize("mode", ["structured", "flat"])
def test_forking_does_not_grow_memory_with_history_length(mode: str) -> None:
    short, long = session_after(2, mode), session_after(20, mode)
    assert long.observation is not None and short.observation is not None
    assert len(long.observation.token_ids) > len(short.observation.token_ids) + 500
    small, large = fork_bytes(short), fork_bytes(long)
    # A fork holds one pointer per turn record, memory entry and event (about 8 per turn) and
    # shares every object they point to; copying any of the history (the entries, the events'
    # payloads, a flat prompt's ids) costs kilobytes per turn.
    assert large - small < 18 * 128, (small, large)
    assert large < 2.5 * small, (small, large)


def test_a_fork_shares_the_history_and_the_world() -> None:
    session = session_after(3, "flat")
    fork = session.fork()
    assert fork.observation is session.observation  # a grown flat prompt: not copied
    assert fork.turn_records == session.turn_records
    assert all(a is b for a, b in zip(fork.turn_records, session.turn_records, strict=True))
    assert all(a is b for a, b in zip(fork.memory.entries, session.memory.entries, strict=True))
    assert all(a is b for a, b in zip(fork.memory.events, session.memory.events, strict=True))
    for name in (
        "task",
        "tools",
        "modules",
        "tokenizer",
        "prompt_encoder",
        "observations",
        "config",
    ):
        assert getattr(fork, name) is getattr(session, name), name
    assert fork.tool_context.corpus is session.tool_context.corpus
    assert fork.tool_context is not session.tool_context
    for name in ("memory", "metrics", "logger"):
        assert getattr(fork, name) is not getattr(session, name), name


# -- the env -----------------------------------------------------------------------------------
def test_env_fork_through_gymnasium_wrappers() -> None:
    env = gym.make("AgentFlow-Search-v0", hops=2)
    assert isinstance(env, gym.Wrapper)
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.fork()  # type: ignore[attr-defined]
    env.reset(seed=4)
    env.step(search("a first look"))
    base = unwrap_agentflow(env)
    state = base.np_random.bit_generator.state
    fork = env.unwrapped.fork()  # type: ignore[attr-defined]
    assert isinstance(fork, AgentFlowEnv) and fork is not base
    for name in ("config", "task_source", "tools", "modules", "tokenizer", "prompt_encoder"):
        assert getattr(fork, name) is getattr(base, name), name
    assert fork.np_random is not base.np_random
    assert fork.np_random.bit_generator.state == state
    assert fork.np_random_seed == base.np_random_seed == 4
    fork.np_random.random()
    assert base.np_random.bit_generator.state == state
    assert fork.trajectory().turns == base.trajectory().turns
    fork.step(search("the fork's own look"))
    assert "the fork's own look" in fork.render_text()
    assert "the fork's own look" not in base.render_text()
    fork.close()
    # closing a fork leaves the shared loop runner open: the original goes on
    *_, info = env.step(search("still running"))
    assert info["turn"] == 2 and len(base.trajectory().turns) == 2
    assert len(fork.trajectory().turns) == 2
    env.close()


def test_a_fork_of_a_finished_episode_is_finished() -> None:
    env = search_env(max_turns=2)
    env.reset(seed=5)
    base = unwrap_agentflow(env)
    env.step(search("one"))
    *_, info = env.step(search("two"))
    assert session_of(base).done
    fork = base.fork()
    assert session_of(fork).done and session_of(fork).outcome == session_of(base).outcome
    assert fork.trajectory().reward == base.trajectory().reward
    with pytest.raises(gym.error.ResetNeeded):
        fork.step(search("three"))
    assert info["end_reason"] == "max_turns"
    env.close()


def test_a_session_forks_only_once_started() -> None:
    base = unwrap_agentflow(search_env())
    env_session = base.new_session(base.task_source.sample(base.np_random), seed=0)
    with pytest.raises(RuntimeError, match="start"):
        env_session.fork()
    base.close()


# -- the trajectory log ------------------------------------------------------------------------
def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_fork_writes_to_the_log_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    env = search_env(log_path=str(path))
    env.reset(seed=6)
    base = unwrap_agentflow(env)
    env.step(search("before the fork"))
    parent_id = session_of(base).logger.episode_id
    written = len(log_lines(path))

    silent = base.fork()
    silent.step(search("unlogged"))
    assert len(log_lines(path)) == written

    logged = base.fork(log=True)
    logged.step(search("logged"))
    own = [line for line in log_lines(path) if line.get("fork_of") == parent_id]
    assert [line["event"] for line in own] == ["episode_start", "turn"]
    assert {line["episode_id"] for line in own} == {session_of(logged).logger.episode_id}
    assert own[0]["episode_id"] != parent_id and own[0]["forked_at_turn"] == 1
    assert own[1]["turn"] == 2 and own[1]["arguments"] == {"query": "logged"}
    env.step(search("the parent's turn"))
    parent = [line for line in log_lines(path) if line["episode_id"] == parent_id]
    assert [line["event"] for line in parent] == ["episode_start", "turn", "turn"]
    assert all("fork_of" not in line for line in parent)
    episodes = read_turn_log(path).episodes
    assert [len(episode.turns) for episode in episodes] == [2, 1]
    env.close()


def test_fork_log_needs_a_log() -> None:
    env = search_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="trajectory log"):
        unwrap_agentflow(env).fork(log=True)
    env.close()


# -- LLM modules -------------------------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def test_a_fork_with_llm_modules_shares_their_clients_and_continues(
    server: FakeOpenAIServer,
) -> None:
    endpoint = LLMEndpoint(server.base_url, "fake", timeout_s=5, max_retries=1, backoff_s=0.01)
    env = gym.make(
        "AgentFlow-Search-v0", hops=2, max_turns=10, modules=build_modules("llm", endpoint=endpoint)
    )
    base = unwrap_agentflow(env)
    server.responder = task_responder(lambda q: base.task if base.task.question == q else None)
    env.reset(seed=7)
    actions = plan_actions(env, lambda i: search(f"unrelated words {i}"))
    env.step(actions[0])
    fork = base.fork()
    client = get_client(endpoint)
    for role in ("initializer", "executor", "verifier", "generalist"):
        module = getattr(session_of(fork).modules, role)
        assert module is getattr(session_of(base).modules, role)
        assert module.backend is client
    assert fork._runner is base._runner  # one event loop, so one connection pool of that client
    requests = len(server.requests)
    forked = play(fork, actions[1:])
    assert len(server.requests) > requests  # the fork's modules did call the endpoint
    assert session_of(base).turn == 1
    continued = play(base, actions[1:])
    assert forked.final == continued.final and forked.final["success"]
    assert forked.records == continued.records and forked.memory == continued.memory
    env.close()
