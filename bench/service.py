"""Figures of the env as a service: ``agentflow-env serve`` in subprocesses, clients here, on
loopback.

- ``service.step_overhead_<mode>``: ``RemoteEnv.step`` against the same ``gym.make`` env in this
  process (the server's own settings), same seeds and expert actions, step by step: the p50 of
  the paired per-step difference (remote minus local) against 1 ms plus one tokenization of the
  observation (``env.unwrapped.tokenizer.encode``, its median), target 1 (<= 1 ms + one
  tokenization). The observations and rewards are checked equal.
- ``service.token_ids_json_vs_binary``: ``json.dumps`` + ``json.loads`` of a typical flat
  observation's token ids against base64 of their int32 bytes + ``np.frombuffer``, in µs, with
  what the rest of one step's answer costs on each side (``message_us``: the OpenEnv models,
  JSON, the WebSocket's permessage-deflate, the client's parsing), measured in process on the
  real classes.
- ``service.scale_out_2_vs_1``: episodes/s of a CPU-bound variant (a freshly generated
  default-size world with near-miss twins per episode: ``--fresh-world --world-size default
  --distractors 1.0``) with two server processes against one, the client driving concurrent
  ``RemoteSession``s on one event loop, the expert action from each served session's state;
  target >= 1.7. Client and servers share this machine's cores: their CPU seconds, the other
  jobs' (``/proc/stat``) and the machine's own ceiling (two pure-Python processes against one)
  ride along.
- ``service.sessions_curve``: episodes/s and p50/p99 step latency of one server process
  (``--max-sessions 512``, flat Search) at 1, 2, 4, ... concurrent sessions, the expert actions
  computed in process beforehand; the ratio is the top level's episodes/s against one session.

Every server start imports OpenEnv (gradio with it: seconds of CPU), so ``--quick`` starts two
servers only, the flat and the structured one, and uses them as its scale-out pair.

Run alone: ``python -m bench.service [--quick] [--out bench/results/service/DATE.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import numpy as np

import agentflow_env  # noqa: F401 - registers the environments
from agentflow_env.remote import EnvServers, RemoteEnv, RemoteSession
from agentflow_env.rollout.agents.planners import ExpertPlanner

from .report import Record, machine, not_available, print_table, ratio, write_json

ENV_ID = "AgentFlow-Search-v0"
FLAT = ("--observation-mode", "flat")
STRUCTURED = ("--observation-mode", "structured")
HEAVY = (*FLAT, "--fresh-world", "--world-size", "default", "--distractors", "1.0")
MAX_SESSIONS = 512


@dataclass(frozen=True)
class ServiceSizes:
    overhead_episodes: int
    """Expert episodes per observation mode (about 3.5 steps each), after one warm-up."""
    codec_repeats: int
    scale_episodes: int
    """Timed episodes of each scale-out run (distinct seeds)."""
    scale_concurrency: int
    scale_settings: tuple[str, ...]
    levels: tuple[int, ...]
    level_episodes: int
    """Episodes per level: at least this many, and at least 3 per concurrent session."""
    plans: int
    """Seeds whose expert actions are computed beforehand (the curve cycles through them)."""
    spin_loops: int
    """Iterations of the pure Python loop that measures the machine's two-process ceiling."""


FULL = ServiceSizes(60, 500, 96, 16, HEAVY, tuple(2**i for i in range(9)), 64, 256, 10_000_000)
QUICK = ServiceSizes(2, 20, 4, 2, FLAT, (1, 4), 4, 8, 200_000)
"""Smoke sizes: two servers, a few episodes each; the ratios mean nothing."""


# -- servers -----------------------------------------------------------------------------------
class ServerStartError(RuntimeError):
    """An ``agentflow-env serve`` process exited or did not become healthy."""


@dataclass
class Server:
    """One ``agentflow-env serve`` subprocess on a free loopback port."""

    args: tuple[str, ...]
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log: Any) -> None:
        """Start it, its output going to ``log`` (a binary file)."""
        self.port = _free_port()
        self.log = log
        command = [sys.executable, "-m", "agentflow_env.cli", "serve", "--env-id", ENV_ID]
        command += ["--port", str(self.port), "--max-sessions", str(MAX_SESSIONS)]
        command += ["--log-level", "warning", *self.args]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout_s: float = 180.0) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(f"agentflow-env serve {' '.join(self.args)}: {self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=1, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise ServerStartError(f"agentflow-env serve {' '.join(self.args)} did not become healthy")

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process so far (all its threads)."""
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving(specs: Sequence[tuple[str, ...]]) -> Iterator[list[Server]]:
    """One server per entry of ``specs`` (its settings), all started at once; stopped after."""
    servers = [Server(tuple(args)) for args in specs]
    with contextlib.ExitStack() as stack:
        for server in servers:
            server.start(stack.enter_context(tempfile.TemporaryFile()))
            stack.callback(server.stop)
        yield servers


# -- helpers -----------------------------------------------------------------------------------
def _ms(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q) * 1000)


def _us(call: Callable[[], Any], repeats: int) -> float:
    """Median µs of ``call`` over ``repeats`` timed batches of 10 (after one untimed call)."""
    call()
    times = []
    for _ in range(max(repeats // 10, 3)):
        started = time.perf_counter()
        for _ in range(10):
            call()
        times.append((time.perf_counter() - started) / 10)
    return float(np.median(times) * 1e6)


def expert_plans(settings: dict[str, Any], seeds: Sequence[int]) -> dict[int, list[str]]:
    """Each seed's expert actions, played in process with the server's settings."""
    env = gym.make(ENV_ID, **settings)
    planner = ExpertPlanner(env)
    plans: dict[int, list[str]] = {}
    for seed in seeds:
        observation, info = env.reset(seed=seed)
        actions: list[str] = []
        done = False
        while not done:
            actions.append(planner.act(observation, info))
            observation, _, terminated, truncated, info = env.step(actions[-1])
            done = terminated or truncated
        plans[seed] = actions
    env.close()
    return plans


# -- a. remote against in-process step -----------------------------------------------------------
@dataclass
class Overhead:
    record: Record
    typical_ids: list[int] = field(default_factory=list)


def step_overhead(url: str, mode: str, episodes: int) -> Overhead:
    """``service.step_overhead_<mode>``: paired remote and local steps of expert episodes."""
    remote = RemoteEnv(url)
    local = gym.make(ENV_ID, **remote.server_info["settings"])
    planner = ExpertPlanner(local)
    encode = local.unwrapped.tokenizer.encode
    local_s: list[float] = []
    remote_s: list[float] = []
    encode_s: list[float] = []
    observations: list[list[int]] = []
    mismatches = 0
    deflate = None
    reset_s: list[tuple[float, float]] = []
    for episode in range(episodes + 1):  # episode 0 warms up
        started = time.perf_counter()
        observation, info = local.reset(seed=episode)
        local_elapsed = time.perf_counter() - started
        started = time.perf_counter()
        answered, _ = remote.reset(seed=episode)  # a new WebSocket session per episode
        reset_s.append((local_elapsed, time.perf_counter() - started))
        mismatches += not np.array_equal(observation["token_ids"], answered["token_ids"])
        if deflate is None:
            socket_ = remote.session._connection.client._ws  # type: ignore[union-attr]
            deflate = any(
                type(e).__name__ == "PerMessageDeflate" for e in socket_.protocol.extensions
            )
        done = False
        while not done:
            action = planner.act(observation, info)
            started = time.perf_counter()
            observation, reward, terminated, truncated, info = local.step(action)
            local_elapsed = time.perf_counter() - started
            started = time.perf_counter()
            answered, remote_reward, *_ = remote.step(action)
            remote_elapsed = time.perf_counter() - started
            started = time.perf_counter()
            encode(observation["text"])
            encoded = time.perf_counter() - started
            mismatches += not np.array_equal(observation["token_ids"], answered["token_ids"])
            mismatches += reward != remote_reward
            if episode:
                local_s.append(local_elapsed)
                remote_s.append(remote_elapsed)
                encode_s.append(encoded)
                observations.append([int(i) for i in observation["token_ids"]])
            done = terminated or truncated
    remote.close()
    local.close()
    overhead = [r - lo for r, lo in zip(remote_s, local_s, strict=True)]
    tokenize_ms = _ms(encode_s, 50)
    observations.sort(key=len)
    record = ratio(
        _ms(overhead, 50),
        1.0 + tokenize_ms,
        what=f"p50 remote minus in-process env.step ms ({mode}, loopback)",
        against="1 ms + tokenizing its observation once (ms)",
        target=1.0,
        p99_overhead_ms=_ms(overhead, 99),
        remote_p50_ms=_ms(remote_s, 50),
        remote_p99_ms=_ms(remote_s, 99),
        local_p50_ms=_ms(local_s, 50),
        local_p99_ms=_ms(local_s, 99),
        p50_difference_of_distributions_ms=_ms(remote_s, 50) - _ms(local_s, 50),
        tokenize_ms=tokenize_ms,
        reset_local_p50_ms=_ms([lo for lo, _ in reset_s[1:]], 50),
        reset_remote_p50_ms=_ms([r for _, r in reset_s[1:]], 50),
        steps=len(overhead),
        mean_observation_tokens=float(np.mean([len(ids) for ids in observations])),
        mismatches=mismatches,
        permessage_deflate=deflate,
        method="per step: the in-process env.step, then RemoteEnv.step with the same action "
        "(agentflow-env serve in its own process), then encode(observation text); expert "
        "actions (ExpertPlanner on the local env); episode 0 untimed",
    )
    return Overhead(record, observations[len(observations) // 2] if observations else [])


def token_ids_codec(ids: list[int], repeats: int, overhead_p50_ms: float | None) -> Record:
    """``service.token_ids_json_vs_binary``: JSON against base64 int32 for ``ids``."""
    text = json.dumps(ids)
    packed = base64.b64encode(np.asarray(ids, dtype=np.int32).tobytes()).decode("ascii")
    json_dumps = _us(lambda: json.dumps(ids), repeats)
    json_loads = _us(lambda: json.loads(text), repeats)
    b64_encode = _us(
        lambda: base64.b64encode(np.asarray(ids, dtype=np.int32).tobytes()).decode("ascii"),
        repeats,
    )
    b64_decode = _us(lambda: np.frombuffer(base64.b64decode(packed), dtype=np.int32), repeats)
    b64_decode_list = _us(
        lambda: np.frombuffer(base64.b64decode(packed), dtype=np.int32).tolist(), repeats
    )
    json_us = json_dumps + json_loads
    extra: dict[str, Any] = {}
    if overhead_p50_ms:
        extra["json_share_of_flat_p50_overhead"] = json_us / 1000 / overhead_p50_ms
    try:
        extra["message_us"] = message_costs(repeats)
    except Exception as error:  # the breakdown is a reading aid: never lose the figure for it
        extra["message_us"] = {"error": repr(error)[:300]}
    return ratio(
        json_us,
        b64_encode + b64_decode,
        what="json.dumps + json.loads of a flat observation's token ids (µs)",
        against="base64 of int32 bytes + np.frombuffer (µs)",
        tokens=len(ids),
        json_bytes=len(text),
        base64_bytes=len(packed),
        json_dumps_us=json_dumps,
        json_loads_us=json_loads,
        base64_encode_us=b64_encode,
        base64_decode_us=b64_decode,
        base64_decode_to_list_us=b64_decode_list,
        **extra,
    )


def message_costs(repeats: int) -> dict[str, float]:
    """µs of each stage one flat step's answer goes through, on the real classes in process:
    the served env's OpenEnv models and JSON, permessage-deflate as uvicorn negotiates it
    (window 2**12, memLevel 5), and the client's inflate, JSON and ``RemoteSession`` parsing."""
    from openenv.core.env_server.serialization import serialize_observation
    from openenv.core.env_server.types import WSObservationResponse

    from agentflow_env.remote import session as remote_session
    from agentflow_env.remote.wire import turn_from_wire
    from agentflow_env.rollout.agents.planners import expert_session_action
    from agentflow_env.service.host import EnvHost
    from agentflow_env.service.models import AgentFlowAction, AgentFlowObservation
    from agentflow_env.service.served_env import ServedAgentFlowEnv

    served = ServedAgentFlowEnv(EnvHost(ENV_ID, {"observation_mode": "flat", "split": "test"}))

    async def one_step() -> tuple[list[int], AgentFlowObservation]:
        first = await served.reset_async(seed=3)
        assert served.session is not None
        action = expert_session_action(served.session)
        return first.token_ids, await served.step_async(AgentFlowAction(text=action))

    prompt_ids, observation = asyncio.run(one_step())
    fields = observation.model_dump()
    data = serialize_observation(observation)
    response = WSObservationResponse(data=data)
    raw = response.model_dump_json().encode()

    def deflate() -> bytes:
        compressor = zlib.compressobj(wbits=-12, memLevel=5)
        return compressor.compress(raw) + compressor.flush(zlib.Z_SYNC_FLUSH)

    deflated = deflate()
    message = json.loads(raw)
    answer = message["data"]["observation"]
    ids = answer["token_ids"]
    costs = {
        "server_observation_model": _us(lambda: AgentFlowObservation(**fields), repeats),
        "server_model_dump": _us(lambda: serialize_observation(observation), repeats),
        "server_model_dump_json": _us(response.model_dump_json, repeats),
        "server_deflate": _us(deflate, repeats),
        "client_inflate": _us(lambda: zlib.decompressobj(wbits=-12).decompress(deflated), repeats),
        "client_json_loads": _us(lambda: json.loads(raw), repeats),
        "client_observation": _us(lambda: remote_session._observation(answer), repeats),
        "client_turn_record": _us(lambda: turn_from_wire(answer["turn"], prompt_ids), repeats),
        "client_as_gym": _us(lambda: np.asarray(answer["token_ids"], dtype=np.int64), repeats),
    }
    costs["server_total"] = sum(v for k, v in costs.items() if k.startswith("server_"))
    costs["client_total"] = sum(
        v for k, v in costs.items() if k.startswith("client_") and k != "client_total"
    )
    costs["message_bytes"] = float(len(raw))
    costs["deflated_bytes"] = float(len(deflated))
    costs["tokens"] = float(len(ids))
    return costs


# -- b. and c.: concurrent remote episodes ---------------------------------------------------------
Action = Callable[[RemoteSession, int], Awaitable[str]]


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (every process, ``/proc/stat``)."""
    with open("/proc/stat", encoding="ascii") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (
            int(v) for v in stat.readline().split()[1:9]
        )
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    episodes: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: list[float]
    """Each server's CPU seconds during the run."""
    other_cpu_s: float
    """CPU seconds of everything else on the machine during the run (other users' jobs)."""
    step_s: list[float]
    rewards: list[float]

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.wall_s


async def _episodes(
    servers: EnvServers, seeds: Sequence[int], concurrency: int, act: Action
) -> tuple[list[float], list[float]]:
    pending = iter(seeds)
    step_s: list[float] = []
    rewards: list[float] = []

    async def worker() -> None:
        for seed in pending:
            session = RemoteSession(servers, seed, timeout_s=300)
            try:
                await session.start()
                while not session.done:
                    action = await act(session, seed)
                    started = time.perf_counter()
                    await session.step(action)
                    step_s.append(time.perf_counter() - started)
                assert session.outcome is not None
                rewards.append(float(session.outcome.reward))
            finally:
                await session.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return step_s, rewards


def play(servers: Sequence[Server], seeds: Sequence[int], concurrency: int, act: Action) -> Run:
    """Episodes of ``seeds`` on ``servers``, ``concurrency`` at a time on one event loop."""
    cpu = [s.cpu_s() for s in servers]
    busy = _machine_busy_s()
    client = time.process_time()
    started = time.perf_counter()
    step_s, rewards = asyncio.run(
        _episodes(EnvServers([s.url for s in servers]), seeds, concurrency, act)
    )
    wall = time.perf_counter() - started
    client = time.process_time() - client
    server_cpu = [s.cpu_s() - before for s, before in zip(servers, cpu, strict=True)]
    other = max(0.0, _machine_busy_s() - busy - client - sum(server_cpu))
    return Run(len(seeds), wall, client, server_cpu, other, step_s, rewards)


async def _expert_from_state(session: RemoteSession, seed: int) -> str:
    state = await session.state()
    action = state.get("expert_action")
    if not action:
        raise RuntimeError(f"the served session of seed {seed} has no expert action")
    return str(action)


def _from_plans(plans: dict[int, list[str]]) -> Action:
    async def act(session: RemoteSession, seed: int) -> str:
        return plans[seed][session.turn]

    return act


def _run_fields(run: Run) -> dict[str, Any]:
    return {
        "episodes": run.episodes,
        "wall_s": run.wall_s,
        "episodes_per_s": run.episodes_per_s,
        "client_cpu_s": run.client_cpu_s,
        "server_cpu_s": run.server_cpu_s,
        "server_cpu_ms_per_episode": 1000 * sum(run.server_cpu_s) / run.episodes,
        "client_cpu_ms_per_episode": 1000 * run.client_cpu_s / run.episodes,
        "cores_busy_client": run.client_cpu_s / run.wall_s,
        "cores_busy_servers": sum(run.server_cpu_s) / run.wall_s,
        "cores_busy_other": run.other_cpu_s / run.wall_s,
        "step_p50_ms": _ms(run.step_s, 50),
        "step_p99_ms": _ms(run.step_s, 99),
        "mean_reward": float(np.mean(run.rewards)),
    }


def two_process_speedup(loops: int) -> float:
    """The machine's own ceiling: two processes of a pure Python loop at once against one
    (wall time of 2 x the work against 1 x)."""
    command = [sys.executable, "-c", f"s = 0\nfor i in range({loops}): s += i * i"]

    def wall(processes: int) -> float:
        started = time.perf_counter()
        running = [subprocess.Popen(command) for _ in range(processes)]
        for process in running:
            process.wait()
        return time.perf_counter() - started

    return 2 * wall(1) / wall(2)


def scale_out(pair: Sequence[Server], sizes: ServiceSizes) -> Record:
    """``service.scale_out_2_vs_1``: the same number of episodes on one server, then two."""
    n, concurrency = sizes.scale_episodes, sizes.scale_concurrency
    ceiling = two_process_speedup(sizes.spin_loops)
    for i, server in enumerate(pair):  # warm-up: imports, first index, code paths
        play([server], [900_000 + 10 * i + k for k in range(2)], 1, _expert_from_state)
    one = play(pair[:1], range(100_000, 100_000 + n), concurrency, _expert_from_state)
    two = play(pair, range(200_000, 200_000 + n), concurrency, _expert_from_state)
    return ratio(
        two.episodes_per_s,
        one.episodes_per_s,
        what="episodes/s with 2 server processes (CPU-bound variant)",
        against="1 server process",
        target=1.7,
        higher_is_better=True,
        settings=" | ".join(dict.fromkeys(" ".join(s.args) for s in pair)),
        concurrency=concurrency,
        one_server=_run_fields(one),
        two_servers=_run_fields(two),
        cores=os.cpu_count(),
        machine_two_process_speedup=ceiling,
        method="one client process: RemoteSessions on one asyncio loop, the expert action from "
        "each served session's state (one extra round trip per turn), distinct seeds per run; "
        "client and servers share the machine's cores",
    )


def sessions_curve(server: Server, levels: Sequence[int], sizes: ServiceSizes) -> Record:
    """``service.sessions_curve``: one server at each level of concurrent sessions."""
    info = httpx.get(server.url + "/agentflow", timeout=10, trust_env=False).json()
    plans = expert_plans(info["settings"], range(sizes.plans))
    seeds = list(plans)
    act = _from_plans(plans)
    play([server], seeds[:4], 2, act)  # warm-up
    runs: list[Run] = []
    for level in levels:
        count = max(sizes.level_episodes, 3 * level)
        runs.append(play([server], [seeds[i % len(seeds)] for i in range(count)], level, act))
    best = max(runs, key=lambda run: run.episodes_per_s)
    steps = sum(len(plans[s]) for s in seeds) / len(seeds)
    return ratio(
        runs[-1].episodes_per_s,
        runs[0].episodes_per_s,
        what=f"episodes/s of one server with {levels[-1]} concurrent sessions",
        against=f"{levels[0]} session",
        settings=" ".join(server.args),
        max_sessions=MAX_SESSIONS,
        curve_levels=list(levels),
        curve_episodes=[run.episodes for run in runs],
        curve_episodes_per_s=[run.episodes_per_s for run in runs],
        curve_step_p50_ms=[_ms(run.step_s, 50) for run in runs],
        curve_step_p99_ms=[_ms(run.step_s, 99) for run in runs],
        curve_server_cpu_ms_per_episode=[1000 * sum(r.server_cpu_s) / r.episodes for r in runs],
        curve_client_cpu_ms_per_episode=[1000 * r.client_cpu_s / r.episodes for r in runs],
        curve_cores_busy_server=[sum(r.server_cpu_s) / r.wall_s for r in runs],
        curve_cores_busy_client=[r.client_cpu_s / r.wall_s for r in runs],
        curve_cores_busy_other=[r.other_cpu_s / r.wall_s for r in runs],
        peak_episodes_per_s=best.episodes_per_s,
        peak_turns_per_s=best.episodes_per_s * steps,
        peak_level=levels[runs.index(best)],
        steps_per_episode=steps,
        method="one client process: RemoteSessions on one asyncio loop replaying expert actions "
        "computed in process beforehand (seeds cycled); step latency as the client awaits it",
    )


# -- the stage ---------------------------------------------------------------------------------
KEYS = (
    "service.step_overhead_flat",
    "service.step_overhead_structured",
    "service.token_ids_json_vs_binary",
    "service.scale_out_2_vs_1",
    "service.sessions_curve",
)


def service_figures(quick: bool = False) -> dict[str, Record]:
    """Every figure of the env as a service (``KEYS``)."""
    sizes = QUICK if quick else FULL
    # --quick starts two servers only (each start imports OpenEnv: seconds of CPU), and its
    # scale-out pair is the flat and the structured server (the state's expert acts in both)
    specs = [FLAT, STRUCTURED] + ([] if quick else [sizes.scale_settings] * 2)
    figures: dict[str, Record] = {}
    try:
        with serving(specs) as servers:
            import openenv.core.env_client  # noqa: F401 - the client's import, while they start

            for server in servers:
                server.wait_healthy()
            flat, structured = servers[0], servers[1]
            pair = servers[:2] if quick else servers[2:4]
            overheads = {
                mode: step_overhead(server.url, mode, sizes.overhead_episodes)
                for mode, server in (("flat", flat), ("structured", structured))
            }
            for mode, result in overheads.items():
                figures[f"service.step_overhead_{mode}"] = result.record
            figures["service.token_ids_json_vs_binary"] = token_ids_codec(
                overheads["flat"].typical_ids,
                sizes.codec_repeats,
                overheads["flat"].record["measured"],
            )
            figures["service.scale_out_2_vs_1"] = scale_out(pair, sizes)
            figures["service.sessions_curve"] = sessions_curve(flat, sizes.levels, sizes)
    except ServerStartError as error:
        reason = f"a server did not start: {str(error)[-500:]}"
        return {key: figures.get(key, not_available(reason)) for key in KEYS}
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.service", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke sizes: ratios mean nothing")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    figures = service_figures(args.quick)
    print_table(figures)
    elapsed = time.perf_counter() - started
    if args.out is not None:
        write_json(
            args.out,
            {
                "command": " ".join(["python -m bench.service", *(argv or sys.argv[1:])]),
                "quick": args.quick,
                "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "elapsed_s": elapsed,
                "machine": machine(),
                "sizes": (QUICK if args.quick else FULL).__dict__,
                "figures": figures,
            },
        )
    print(
        f"\n{len(figures)} figures in {elapsed:.0f} s"
        + (f", written to {args.out}" if args.out else "")
    )


if __name__ == "__main__":
    main()
