"""``agentflow-env serve``: real servers on 127.0.0.1, real clients (``RemoteEnv``, OpenEnv's own
client, a raw WebSocket), nothing mocked.

- A served episode is the in-process episode: the same observations, ids, rewards, end flags and
  info keys for the same seeds and actions, and the same exact turn records.
- Bad input gets an error answer and the session lives on.
- The session cap refuses the next session clearly; a client that vanishes frees its env.
- A token guards every request but /health; off loopback a token is required.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import gymnasium as gym
import httpx
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from served import serve_process, server_thread, wait_until
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from agentflow_env.remote import RemoteEnv, ServiceUnavailable
from agentflow_env.rollout.agents.planners import ExpertPlanner

CASES = [
    ("AgentFlow-Search-v0", {"hops": 2}),
    ("AgentFlow-Search-v0", {"hops": 2, "observation_mode": "flat"}),
]


def test_a_served_code_episode_runs_the_sandbox_in_the_server() -> None:
    """The server process runs the Python sandbox (as a user's server does, alone)."""
    with serve_process("--env-id", "AgentFlow-Code-v0") as url:
        remote, local = RemoteEnv(url), gym.make("AgentFlow-Code-v0", split="test")
        for seed in range(2):
            obs, info = local.reset(seed=seed)
            remote_obs, _ = remote.reset(seed=seed)
            assert remote_obs["text"] == obs["text"]
            expert, ended = ExpertPlanner(local), False
            while not ended:
                action = expert.act(obs, info)
                got = remote.step(action)
                obs, reward, terminated, truncated, info = local.step(action)
                assert "sandbox unavailable" not in got[0]["text"]
                assert got[0]["text"] == obs["text"] and got[1:4] == (reward, terminated, truncated)
                ended = terminated or truncated
            assert got[4]["success"] is True
        remote.close()


@pytest.mark.parametrize(("env_id", "settings"), CASES)
def test_a_served_episode_is_the_in_process_episode(env_id: str, settings: dict) -> None:
    with server_thread(env_id, settings) as (url, host):
        remote = RemoteEnv(url, tokenizer=None)
        local = gym.make(env_id, **settings)
        for seed in range(3):
            remote_obs, remote_info = remote.reset(seed=seed)
            obs, info = local.reset(seed=seed)
            assert remote_obs["text"] == obs["text"]
            assert remote_obs["token_ids"].dtype == obs["token_ids"].dtype
            np.testing.assert_array_equal(remote_obs["token_ids"], obs["token_ids"])
            assert set(remote_info) == set(info)
            expert, ended = ExpertPlanner(local), False
            while not ended:
                action = expert.act(obs, info)
                obs, reward, terminated, truncated, info = local.step(action)
                got = remote.step(action)
                assert got[0]["text"] == obs["text"]
                np.testing.assert_array_equal(got[0]["token_ids"], obs["token_ids"])
                assert (got[1], got[2], got[3]) == (reward, terminated, truncated)
                assert set(got[4]) == set(info)
                assert got[4].get("end_reason") == info.get("end_reason")
                ended = terminated or truncated
            mine, theirs = remote.trajectory().as_dict(), local.unwrapped.trajectory().as_dict()
            mine["metrics"].pop("tool_latency_s"), theirs["metrics"].pop("tool_latency_s")
            assert mine == theirs
        remote.close()
        assert host.describe()["episodes_started"] == 3
        assert wait_until(lambda: host.active_sessions == 0)


def test_gymnasiums_checker_passes_a_remote_env() -> None:
    with server_thread("AgentFlow-Search-v0", {"hops": 1}) as (url, _):
        env = RemoteEnv(url)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env, skip_render_check=True)
        env.close()
    assert [str(w.message) for w in caught] == []


def test_token_id_actions_with_logprobs_are_kept_verbatim() -> None:
    with server_thread("AgentFlow-Search-v0", {"observation_mode": "flat"}) as (url, _):
        remote = RemoteEnv(url)
        local = gym.make("AgentFlow-Search-v0", observation_mode="flat")
        remote.reset(seed=5)
        local.reset(seed=5)
        ids = local.unwrapped.tokenizer.encode("no idea what to do") + [7, 7, 511]
        action = {"token_ids": ids, "logprobs": [-0.25] * len(ids)}
        remote.step(action)
        local.step(action)
        (mine,), (theirs,) = remote.trajectory().turns, local.unwrapped.trajectory().turns
        assert mine == theirs and list(mine.action_ids) == ids
        assert mine.logprobs == tuple([-0.25] * len(ids))
        assert remote.trajectory().flat_sample() == local.unwrapped.trajectory().flat_sample()


def raw_session(url: str, *messages: dict | str) -> list[dict]:
    """Answers to ``messages`` sent in turn on one WebSocket session."""
    answers = []
    with connect(url.replace("http://", "ws://") + "/ws", proxy=None) as ws:
        for message in messages:
            ws.send(message if isinstance(message, str) else json.dumps(message))
            answers.append(json.loads(ws.recv(timeout=30)))
    return answers


def test_bad_input_gets_an_error_answer_and_the_session_lives_on() -> None:
    with server_thread("AgentFlow-Search-v0", {"hops": 1}) as (url, _):
        answers = raw_session(
            url,
            "{not json",
            {"type": "dance"},
            {"type": "step", "data": {"text": "before any reset"}},
            {"type": "reset", "data": {"options": {"colour": "red"}}},
            {"type": "reset", "data": {"seed": "three"}},
            {
                "type": "reset",
                "data": {"options": {"label": {"env_id": "AgentFlow-Code-v0", "seed": 1}}},
            },
            {"type": "reset", "data": {"options": {"label": "not a label"}}},
            {"type": "reset", "data": {"seed": 3}},
            {"type": "step", "data": {"text": "x", "token_ids": [1]}},
            {"type": "step", "data": {"words": "hello"}},
            {"type": "step", "data": {"token_ids": [-5, 10**12]}},
            {"type": "step", "data": {"text": "\x00<|im_end|>" * 1000}},
            {"type": "state"},
        )
    codes = [a["data"].get("code") if a["type"] == "error" else a["type"] for a in answers]
    assert codes[:7] == [
        "INVALID_JSON",
        "UNKNOWN_TYPE",
        "EXECUTION_ERROR",
        "EXECUTION_ERROR",
        "EXECUTION_ERROR",
        "EXECUTION_ERROR",
        "EXECUTION_ERROR",
    ]
    assert "unknown reset options ['colour']" in answers[3]["data"]["message"]
    assert "serves AgentFlow-Search-v0" in answers[5]["data"]["message"]
    assert codes[7] == "observation" and answers[7]["data"]["observation"]["task"]
    assert codes[8:10] == ["VALIDATION_ERROR", "VALIDATION_ERROR"]
    # Unusable actions are recorded invalid turns, as in process: the env never dies on them.
    assert codes[10:12] == ["observation", "observation"]
    assert answers[10]["data"]["observation"]["metrics"]["invalid_actions"] == 1
    assert answers[12]["data"]["step_count"] == 2


def test_an_action_after_the_end_is_refused_and_a_reset_starts_again() -> None:
    with server_thread("AgentFlow-Search-v0", {"hops": 1, "max_turns": 1}) as (url, _):
        answers = raw_session(
            url,
            {"type": "reset", "data": {"seed": 1}},
            {"type": "step", "data": {"text": "nonsense"}},
            {"type": "step", "data": {"text": "nonsense"}},
            {"type": "reset", "data": {"seed": 2}},
        )
    assert answers[1]["data"]["done"] is True and answers[1]["data"]["observation"]["end"]
    assert answers[2]["type"] == "error" and "episode is over" in answers[2]["data"]["message"]
    assert answers[3]["type"] == "observation"


def test_past_the_cap_a_session_is_refused_and_freed_slots_serve_again() -> None:
    with server_thread("AgentFlow-Search-v0", {"hops": 1}, max_sessions=2) as (url, host):
        first, second, third = RemoteEnv(url), RemoteEnv(url), RemoteEnv(url)
        first.reset(seed=1)
        second.reset(seed=2)
        with pytest.raises(ServiceUnavailable, match="CAPACITY_REACHED"):
            third.reset(seed=3)
        assert httpx.get(url + "/agentflow", trust_env=False).json()["active_sessions"] == 2
        first.close()
        assert wait_until(lambda: host.active_sessions == 1)
        third.servers._servers[0].down_until = 0.0  # skip the rest after the refusal
        obs, _ = third.reset(seed=3)
        assert len(obs["token_ids"]) > 0
        second.close()
        third.close()


CLIENT = textwrap.dedent(
    """
    import sys, time
    from agentflow_env.remote import RemoteEnv
    env = RemoteEnv(sys.argv[1])
    env.reset(seed=1)
    print("started", flush=True)
    time.sleep(600)
    """
)


def test_a_client_that_vanishes_mid_episode_frees_its_env() -> None:
    with server_thread("AgentFlow-Search-v0", {"hops": 1}, ping_s=1.0) as (url, host):
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, url], stdout=subprocess.PIPE, text=True
        )
        assert client.stdout is not None and client.stdout.readline().strip() == "started"
        assert host.active_sessions == 1
        os.kill(client.pid, signal.SIGKILL)
        client.wait()
        assert wait_until(lambda: host.active_sessions == 0)
        assert host.sessions_ended == 1


def test_an_idle_session_outlives_the_servers_ping_timeout() -> None:
    """The client's loop runs between calls and answers the pings: a trainer may take longer
    to generate a turn than the server waits for a pong."""
    with server_thread("AgentFlow-Search-v0", {"hops": 1}, ping_s=0.5) as (url, host):
        env = RemoteEnv(url)
        env.reset(seed=1)
        time.sleep(3)  # six ping intervals
        assert host.active_sessions == 1
        env.step("I do not know.")
        env.end_episode()
        assert wait_until(lambda: host.active_sessions == 0)
        env.close()


def test_a_token_guards_everything_but_health() -> None:
    with server_thread("AgentFlow-Search-v0", {"hops": 1}, token="s3cret") as (url, _):
        assert httpx.get(url + "/health", trust_env=False).status_code == 200
        assert httpx.get(url + "/agentflow", trust_env=False).status_code == 403
        with pytest.raises(ServiceUnavailable):
            RemoteEnv(url)
        with pytest.raises(InvalidStatus):  # the WebSocket handshake is refused
            raw_session(url, {"type": "reset", "data": {}})
        env = RemoteEnv(url, token="s3cret")
        obs, _ = env.reset(seed=0)
        assert obs["text"]
        env.close()


def test_the_stateless_http_step_is_refused_with_the_reason() -> None:
    with server_thread("AgentFlow-Search-v0", {"hops": 1}) as (url, _):
        reset = httpx.post(url + "/reset", json={"seed": 1}, trust_env=False)
        assert reset.status_code == 200 and reset.json()["observation"]["token_ids"]
        step = httpx.post(url + "/step", json={"action": {"text": "hi"}}, trust_env=False)
        assert step.status_code == 409 and "WebSocket sessions" in step.json()["detail"]
        bad = httpx.post(url + "/step", json={"action": {"words": "hi"}}, trust_env=False)
        assert bad.status_code == 422


def test_serve_refuses_other_hosts_without_a_token_and_unknown_settings() -> None:
    from agentflow_env.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    with pytest.raises(SystemExit):
        main(["serve", "--colour", "red"])
    assert main(["serve", "--env-id", "AgentFlow-Nope-v0"]) == 2


def test_the_serve_command_serves_and_openenvs_own_client_plays() -> None:
    from openenv.core.generic_client import GenericEnvClient

    with serve_process("--env-id", "AgentFlow-Search-v0", "--hops", "1") as url:
        info = httpx.get(url + "/agentflow", trust_env=False).json()
        assert info["env_id"] == "AgentFlow-Search-v0" and info["settings"]["hops"] == [1]
        assert httpx.get(url + "/metadata", trust_env=False).json()["name"] == "AgentFlow-Search-v0"
        schema = httpx.get(url + "/schema", trust_env=False).json()
        assert {"text", "token_ids", "logprobs"} <= set(schema["action"]["properties"])
        with GenericEnvClient(base_url=url).sync() as client:
            result = client.reset(seed=4)
            assert result.observation["token_ids"] and result.done is False
            result = client.step({"text": "I give up."})
            assert "turn" in result.observation and isinstance(result.reward, float)
