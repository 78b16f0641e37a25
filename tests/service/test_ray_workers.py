"""Env servers as Ray actors (``agentflow_env.service.ray_workers``) on a real local cluster of
two Ray nodes (``ray.cluster_utils.Cluster``), played by ``RemoteEnv`` and the batched driver:
the servers spread over the nodes and share the episodes; a server killed mid-episode fails that
episode at once (no hang) and the next episodes go to the other server; Ray brings a killed
actor (or one whose server stopped) back on a new port (``refresh``), and one killed for good is
left out; the driver records a killed server's episodes as failed zero-reward results."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("openenv")
pytest.importorskip("uvicorn")

from ray.cluster_utils import Cluster  # noqa: E402

from agentflow_env.remote import RemoteEnv, ServiceUnavailable, fetch_server_info  # noqa: E402
from agentflow_env.service.ray_workers import (  # noqa: E402
    EnvServerGroup,
    bind_address,
    start_env_servers,
)

ENV_ID = "AgentFlow-Search-v0"


def ray_test(test: Any) -> Any:
    """A test on the Ray cluster: slow (seconds), and quiet about Ray's GPU env var tip."""
    quiet = pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning")
    return pytest.mark.slow(quiet(test))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head and one more node, one CPU each; the driver (this process) joins it."""
    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def group(cluster: Cluster) -> Iterator[EnvServerGroup]:
    """Two servers, half a CPU each (room for one more actor on the cluster)."""
    servers = start_env_servers(ENV_ID, {}, 2, address=cluster.address, num_cpus=0.5)
    try:
        yield servers
    finally:
        servers.stop()


def play(env: RemoteEnv, seed: int) -> tuple[str, float]:
    """Play one episode with the server's expert actions: the server that played it, the
    reward."""
    env.reset(seed=seed)
    assert env.session is not None and env.session.url is not None
    url = env.session.url
    for _ in range(20):
        _, reward, terminated, truncated, _ = env.step(env.state()["expert_action"])
        if terminated or truncated:
            return url, float(reward)
    raise AssertionError("the expert did not finish in 20 turns")


def wait_down(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/health", timeout=1, trust_env=False)
        except httpx.HTTPError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} still answers")


def serving(group: EnvServerGroup, count: int = 2, timeout_s: float = 60.0) -> list[str]:
    """The group's URLs once ``count`` actors answer (Ray may still be restarting one)."""
    deadline = time.monotonic() + timeout_s
    while len(group.refresh(timeout_s=30)) < count:
        assert time.monotonic() < deadline, f"the servers did not come back: {group.actor_urls}"
        time.sleep(0.5)
    return group.urls


@ray_test
def test_servers_spread_over_the_nodes_and_share_the_episodes(group: EnvServerGroup) -> None:
    urls = serving(group)
    placed = ray.get([actor.describe.remote() for actor in group.actors])
    assert len({p["node_id"] for p in placed}) == 2, placed
    for url in urls:
        info = fetch_server_info(url)
        assert info["env_id"] == ENV_ID and info["episodes_started"] == 0

    env = RemoteEnv(urls, timeout_s=10)
    try:
        played = [play(env, seed) for seed in range(4)]
    finally:
        env.close()
    assert {url for url, _ in played} == set(urls)
    assert all(reward == 1.0 for _, reward in played)
    for url in urls:
        assert fetch_server_info(url)["episodes_started"] >= 1


@ray_test
def test_a_killed_server_fails_its_episode_and_ray_restarts_it(group: EnvServerGroup) -> None:
    urls = serving(group)
    env = RemoteEnv(urls, timeout_s=5)
    try:
        for seed in range(100, 120):  # an episode still running after its first turn
            env.reset(seed=seed)
            _, _, terminated, truncated, _ = env.step(env.state()["expert_action"])
            if not (terminated or truncated):
                break
        assert env.session is not None and env.session.url is not None
        dead = env.session.url
        (alive,) = [url for url in urls if url != dead]
        index = group.actor_urls.index(dead)
        action: Any = env.state()["expert_action"]

        group.kill(index)
        wait_down(dead)
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable):  # at once: the connection is gone
            env.step(action)
        assert time.monotonic() - started < 5

        # The next episodes go to the live server; the dead one is marked failed.
        assert [play(env, seed)[0] for seed in range(2)] == [alive, alive]
        assert env.servers._server(dead).failures >= 1
    finally:
        env.close()

    # Ray restarts the actor: a fresh server (on a new port, as a rule).
    urls = serving(group)
    back = group.actor_urls[index]
    assert back is not None and group.actor_urls[1 - index] == alive
    assert fetch_server_info(back)["episodes_started"] == 0
    env = RemoteEnv(urls, timeout_s=10)
    try:
        assert {play(env, seed)[0] for seed in range(2)} == {alive, back}
    finally:
        env.close()


@ray_test
def test_the_driver_fails_a_killed_servers_episodes_alone(
    group: EnvServerGroup, caplog: pytest.LogCaptureFixture
) -> None:
    from test_remote_rollout import LABELS as labels
    from test_remote_rollout import SEARCH as search
    from test_remote_rollout import TOK as tok

    from agentflow_env.rollout.training.driver import run_episodes

    urls = serving(group)
    calls = 0

    def generate(prompts: Any, max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
        nonlocal calls
        calls += 1
        if calls == 2:  # mid-episode: the first server's actor dies for good
            group.kill(0, restart=False)
            wait_down(urls[0])
        ids = [search[:max_new_tokens] for _ in prompts]
        return ids, [[-0.5] * len(row) for row in ids]

    with caplog.at_level(logging.WARNING):
        results = run_episodes(labels, generate, tok, env_url=",".join(urls))
    assert calls >= 2 and len(results) == len(labels)
    failed = [r for r in results if r.error is not None]
    assert failed and len(failed) < len(results), [r.error for r in results]
    for result in failed:
        assert result.reward == 0.0 and result.failure and result.error
        assert "ServiceUnavailable" in result.error
    assert all(r.failure is None for r in results if r.error is None)
    assert "failed and is recorded as a zero-reward sample" in caplog.text
    assert group.refresh(timeout_s=10) == urls[1:]  # left out of the URLs
    assert group.actor_urls[0] is None


@ray_test
def test_an_actor_whose_server_stops_is_restarted(group: EnvServerGroup) -> None:
    (url,) = serving(group, count=1)
    index = group.actor_urls.index(url)
    ray.get(
        group.actors[index].__ray_call__.remote(lambda actor: actor.server.handle_exit(2, None))
    )
    wait_down(url)
    (back,) = serving(group, count=1)
    assert fetch_server_info(back)["episodes_started"] == 0


@ray_test
def test_a_server_that_cannot_start_stops_the_start(cluster: Cluster) -> None:
    with pytest.raises(Exception, match="AgentFlow-Nope"):
        start_env_servers("AgentFlow-Nope-v0", {}, 1, num_cpus=0.5, start_timeout_s=60)


def test_bind_address_keeps_the_env_on_loopback_without_a_token() -> None:
    # An actor on the driver's machine (or a loopback node) binds what was asked.
    assert bind_address("127.0.0.1", "127.0.0.1", None, None) == "127.0.0.1"
    assert bind_address("127.0.0.1", "10.0.0.2", "10.0.0.2", None) == "127.0.0.1"
    # On another node loopback is unreachable: its own IP, only with a token.
    assert bind_address("127.0.0.1", "10.0.0.3", "10.0.0.2", "secret") == "10.0.0.3"
    with pytest.raises(ValueError, match="token"):
        bind_address("127.0.0.1", "10.0.0.3", "10.0.0.2", None)
    # Every interface: always a token.
    with pytest.raises(ValueError, match="token"):
        bind_address("0.0.0.0", "10.0.0.2", "10.0.0.2", None)
    assert bind_address("0.0.0.0", "10.0.0.3", "10.0.0.2", "secret") == "0.0.0.0"
