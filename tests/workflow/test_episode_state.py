"""``EpisodeState.fork``: every field separated by construction, one added later included.

A variant of the state with extra mutable fields (a list, a dict, a set, a plain mutable object,
an object with its own ``fork``) is forked with no edit to ``fork``, and changing any of them on
either side leaves the other as it was; fields declared ``shared()`` are the same object. A fork
of a real session's state diverges from it without touching it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.config import SessionConfig
from agentflow_env.workflow.episode_state import EpisodeState, fork_value, shared
from agentflow_env.workflow.session import Session


class Tally:
    """A mutable object with no ``fork`` or copy method of its own (a fork gets a shallow copy:
    its attributes are its own to rebind)."""

    def __init__(self) -> None:
        self.total = 0


class Forkable:
    """An object that says how it forks."""

    def __init__(self, forked_from: Forkable | None = None) -> None:
        self.forked_from = forked_from

    def fork(self) -> Forkable:
        return Forkable(self)


@dataclass
class NotedState(EpisodeState):
    """The state with fields ``EpisodeState.fork`` was never told about."""

    notes: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    tally: Tally = field(default_factory=Tally)
    forkable: Forkable = field(default_factory=Forkable)
    frozen_record: tuple[int, ...] = ()
    pinned: list[str] | None = shared()


def search(query: str) -> str:
    return format_planner_action("Look it up.", query, "Find evidence.", "Search")


def started_session(**settings: Any) -> Session:
    env = AgentFlowEnv(**{"hops": 2, "max_turns": 6, **settings})
    task = env.task_source.sample(np.random.default_rng(3))
    session = env.new_session(task, seed=3)
    asyncio.run(session.start())
    return session


def noted(session: Session) -> NotedState:
    base = session.state
    values = {item.name: getattr(base, item.name) for item in dataclasses.fields(base)}
    return NotedState(**values, notes=["a"], scores={"a": 1.0}, seen={"a"}, pinned=["p"])


def test_a_field_added_later_is_separated_without_a_hand_edit() -> None:
    state = noted(started_session())
    state.tally.total = 1
    fork = state.fork()
    assert type(fork) is NotedState
    for name in ("notes", "scores", "seen", "tally"):
        assert getattr(fork, name) is not getattr(state, name), name
    fork.notes.append("fork")
    fork.scores["fork"] = 2.0
    fork.seen.add("fork")
    fork.tally.total += 2
    assert (state.notes, state.scores, state.seen) == (["a"], {"a": 1.0}, {"a"})
    assert state.tally.total == 1 and fork.tally.total == 3
    state.notes.append("parent")
    assert fork.notes == ["a", "fork"]
    # an object with its own fork is forked by it; immutable and shared() values are kept
    assert fork.forkable.forked_from is state.forkable
    assert fork.frozen_record is state.frozen_record
    assert fork.pinned is state.pinned


def test_fork_value_separates_containers_and_keeps_immutables() -> None:
    items = [object()]
    copied = fork_value(items)
    assert copied == items and copied is not items and copied[0] is items[0]
    assert fork_value({"k": items})["k"] is items  # shallow: the items are shared
    for value in (None, 3, 2.5, "text", (1, 2)):
        assert fork_value(value) is value


def test_every_state_field_is_separated_or_declared_shared() -> None:
    state = started_session().state
    fork = state.fork()
    for item in dataclasses.fields(state):
        mine, theirs = getattr(state, item.name), getattr(fork, item.name)
        if item.metadata.get("fork_shares"):
            assert theirs is mine, item.name
        elif isinstance(mine, list | dict | set) or dataclasses.is_dataclass(mine):
            assert theirs is not mine and theirs == mine, item.name
    assert fork.memory is not state.memory and fork.memory.entries == state.memory.entries
    assert fork.tool_context.episode_key == state.tool_context.episode_key
    assert fork.shaping.shaping is state.shaping.shaping  # the policy is shared, not its state


def test_a_forked_session_diverges_without_touching_its_parent() -> None:
    session = started_session(reward_shaping="progress", observation_mode="flat")
    asyncio.run(session.step(search("first look")))
    before = dataclasses.replace(session.state.metrics)
    memory, records = session.memory.as_dicts(), session.turn_records
    events = len(session.memory.events)
    potential = session.state.shaping.potential

    fork = session.fork()
    for turn in range(3):
        asyncio.run(fork.step(search(f"the fork's look {turn}")))
    assert fork.turn == 4 and fork.metrics.turns == 4
    assert session.turn == 1 and session.metrics == before
    assert session.memory.as_dicts() == memory and session.turn_records == records
    assert len(session.memory.events) == events
    assert session.state.shaping.potential == potential
    assert session.state.turn_latency is not fork.state.turn_latency

    outcome = asyncio.run(session.step(search("the parent's own look")))
    assert outcome.info["turn"] == 2 and not session.done
    queries = [entry["tool_arguments"]["query"] for entry in fork.memory.as_dicts()]
    assert queries == ["first look", *(f"the fork's look {t}" for t in range(3))]


def test_a_fork_of_a_finished_session_keeps_the_outcome() -> None:
    session = started_session(max_turns=1)
    asyncio.run(session.step(search("the only look")))
    assert session.done and session.outcome is not None
    fork = session.fork()
    assert fork.done and fork.outcome is session.outcome
    assert fork.state.module_errors == session.state.module_errors


def test_the_session_config_takes_the_env_settings_by_name() -> None:
    env = AgentFlowEnv(hops=1, max_turns=3, lambda_calls=0.5, reward_shaping="progress")
    config = env.session_config
    assert isinstance(config, SessionConfig)
    assert (config.max_turns, config.reward.lambda_calls) == (3, 0.5)
    assert config.reward.reward_shaping == "progress"
    for item in dataclasses.fields(config.reward):
        assert getattr(config.reward, item.name) == getattr(env.config, item.name), item.name
    shared_names = set(env.config.settings()) & {f.name for f in dataclasses.fields(config)}
    for name in shared_names - {"reward", "judge"}:
        assert getattr(config, name) == getattr(env.config, name), name
    env.close()
