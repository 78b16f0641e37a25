"""Figures of one env: step vs its tokenization floor, flat-mode growth, memory of many envs,
memory of one episode as its turns accumulate.

Each drives the embedded default (``AgentFlow-Search-v0``: synthetic world, BM25 search, rule
modules) through the Gymnasium API. The memory figures run in a child process
(``python -m bench.env_figures memory N...``, ``... episode-memory TURN...``) so its resident
set is the envs' alone.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import gymnasium as gym

import agentflow_env  # noqa: F401 - registers the environments
from agentflow_env.workflow.actions import format_planner_action

from .report import Record, not_available, ratio

ENV_ID = "AgentFlow-Search-v0"


def _gold_action(env: Any, turn: int) -> str:
    plan = env.unwrapped.task.gold_plan
    step = plan[min(turn, len(plan) - 1)]
    return format_planner_action("Follow the plan.", step.context, step.sub_goal, step.tool)


def step_vs_tokenize(mode: str, episodes: int) -> Record:
    """Time of ``env.step`` against tokenizing the observation it returns, once, summed."""
    env = gym.make(ENV_ID, observation_mode=mode)
    encode = env.unwrapped.tokenizer.encode
    step_s = encode_s = 0.0
    steps = tokens = 0
    for episode in range(episodes + 1):  # episode 0 warms up (index, caches)
        env.reset(seed=episode)
        for turn in range(env.unwrapped.config.max_turns):
            action = _gold_action(env, turn)
            started = time.perf_counter()
            obs, _, terminated, truncated, _ = env.step(action)
            elapsed = time.perf_counter() - started
            started = time.perf_counter()
            encode(obs["text"])
            encoded = time.perf_counter() - started
            if episode:
                step_s, encode_s = step_s + elapsed, encode_s + encoded
                steps, tokens = steps + 1, tokens + len(obs["token_ids"])
            if terminated or truncated:
                break
    env.close()
    return ratio(
        step_s / steps * 1000,
        encode_s / steps * 1000,
        what=f"env.step ms ({mode})",
        against="tokenizing its observation once (ms)",
        target=1.2,
        steps=steps,
        mean_observation_tokens=tokens / steps,
    )


def turn_costs(mode: str, episodes: int, turns: int) -> tuple[list[float], list[float]]:
    """Median ms of ``env.step`` and mean observation tokens at each turn 1..``turns``.

    The planner searches words that never answer; the limit is one turn beyond ``turns``, so
    the last timed turn is not the one that ends the episode (generalist, reward).
    """
    env = gym.make(ENV_ID, observation_mode=mode, max_turns=turns + 1, hops=3)
    times: list[list[float]] = [[] for _ in range(turns)]
    lengths: list[list[int]] = [[] for _ in range(turns)]
    for episode in range(episodes + 1):
        env.reset(seed=episode)
        for turn in range(turns):
            action = format_planner_action(
                "Look for more evidence.",
                f"unrelated words {episode} {turn}",
                "Gather evidence.",
                "Search",
            )
            started = time.perf_counter()
            obs, _, terminated, truncated, _ = env.step(action)
            if episode:  # episode 0 warms up
                times[turn].append(time.perf_counter() - started)
                lengths[turn].append(len(obs["token_ids"]))
            if terminated or truncated:
                break
    env.close()
    kept = [i for i in range(turns) if times[i]]
    return (
        [1000 * statistics.median(times[i]) for i in kept],
        [statistics.mean(lengths[i]) for i in kept],
    )


def growth_figures(episodes: int, turns: int) -> dict[str, Record]:
    """Flat-mode turn 10 and 30 vs turn 1, and the per-turn curve of both modes."""
    figures: dict[str, Record] = {}
    curves: dict[str, Any] = {}
    for mode in ("flat", "structured"):
        ms, tokens = turn_costs(mode, episodes, turns)
        curves[mode] = {"step_ms": ms, "observation_tokens": tokens}
        if mode == "flat":
            for turn, target in ((10, None), (30, 1.5)):
                key = f"flat_growth.turn{turn}_vs_turn1"
                if len(ms) >= turn:
                    figures[key] = ratio(
                        ms[turn - 1],
                        ms[0],
                        what=f"flat step ms at turn {turn}",
                        against="turn 1",
                        target=target,
                        prompt_tokens_ratio=tokens[turn - 1] / tokens[0],
                    )
                else:
                    figures[key] = not_available(f"this run's episodes have {len(ms)} turns")
    for mode, curve in curves.items():
        ms = curve["step_ms"]
        figures[f"step_cost.turns_{mode}"] = ratio(
            ms[-1],
            ms[0],
            what=f"{mode} step ms at turn {len(ms)}",
            against="turn 1",
            target=1.5,
            curve_step_ms=ms,
            curve_ratio=[m / ms[0] for m in ms],
            curve_observation_tokens=curve["observation_tokens"],
        )
    return figures


# -- memory ------------------------------------------------------------------------------------
def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory_child(counts: list[int]) -> dict[int, float]:
    """Resident MB of this process holding 1..max(counts) envs, each reset and stepped once."""
    envs, rss = [], {}
    for n in range(1, max(counts) + 1):
        env = gym.make(ENV_ID)
        env.reset(seed=n)
        env.step(_gold_action(env, 0))
        envs.append(env)
        if n in counts:
            gc.collect()
            rss[n] = _rss_mb()
    return rss


def memory_figures(counts: list[int]) -> dict[str, Record]:
    command = [sys.executable, "-m", "bench.env_figures", "memory", *map(str, counts)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rss = {int(k): v for k, v in json.loads(output.splitlines()[-1]).items()}
    return {
        f"memory.envs_{n}_vs_1": ratio(
            rss[n],
            rss[1],
            what=f"process RSS MB with {n} envs",
            against="with 1 env",
            target=2.0 if n >= 256 else None,
            per_extra_env_mb=(rss[n] - rss[1]) / (n - 1),
        )
        for n in counts
        if n > 1
    }


def _search_action(turn: int) -> str:
    """A Search for words that never answer (the episode runs to its turn limit)."""
    return format_planner_action(
        "Look for more evidence.", f"unrelated words {turn}", "Gather evidence.", "Search"
    )


def episode_memory_child(turns: list[int]) -> dict[str, dict[str, list[float]]]:
    """Per observation mode: the bytes one episode holds after each of ``turns`` (tracemalloc:
    what was allocated since its ``reset`` and is still alive, after a garbage collection),
    and the process's resident MB then. A first episode, untraced, warms the caches."""
    last = max(turns)
    curves: dict[str, dict[str, list[float]]] = {}
    for mode in ("structured", "flat"):
        env = gym.make(ENV_ID, observation_mode=mode, max_turns=last + 1, hops=3)
        for traced in (False, True):
            gc.collect()
            if traced:
                tracemalloc.start()
            env.reset(seed=0)
            held: list[float] = []
            rss: list[float] = []
            for turn in range(1, last + 1):
                _, _, terminated, truncated, _ = env.step(_search_action(turn))
                if traced and turn in turns:
                    gc.collect()
                    held.append(float(tracemalloc.get_traced_memory()[0]))
                    rss.append(_rss_mb())
                if terminated or truncated:
                    raise RuntimeError(f"the {mode} episode ended at turn {turn}")
            if traced:
                tracemalloc.stop()
                curves[mode] = {"bytes": held, "rss_mb": rss}
        env.close()
    return curves


def episode_memory_figures(turns: list[int]) -> dict[str, Record]:
    """``memory.episode_turns_<mode>``: the bytes one episode holds at its last turn of
    ``turns`` against the first (turn 1), with the curve; per observation mode."""
    command = [sys.executable, "-m", "bench.env_figures", "episode-memory", *map(str, turns)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        reason = f"the episode-memory child failed: {done.stderr.strip()[-500:]}"
        return {f"memory.episode_turns_{m}": not_available(reason) for m in ("structured", "flat")}
    curves = json.loads(done.stdout.splitlines()[-1])
    figures: dict[str, Record] = {}
    for mode, curve in curves.items():
        held = curve["bytes"]
        figures[f"memory.episode_turns_{mode}"] = ratio(
            held[-1],
            held[0],
            what=f"bytes one {mode} episode holds at turn {turns[-1]}",
            against=f"at turn {turns[0]}",
            curve_turns=list(turns),
            curve_bytes=held,
            curve_ratio=[b / held[0] for b in held],
            curve_rss_mb=curve["rss_mb"],
            per_turn_bytes=(held[-1] - held[0]) / (turns[-1] - turns[0]),
            method="tracemalloc: allocated since the episode's reset and alive after gc.collect() "
            "(the session, its memory, observations and turn records); Search turns; rss_mb: "
            "the child process's resident set",
        )
    return figures


if __name__ == "__main__":
    if sys.argv[1:2] == ["memory"]:
        print(json.dumps(memory_child([int(n) for n in sys.argv[2:]])))
    elif sys.argv[1:2] == ["episode-memory"]:
        print(json.dumps(episode_memory_child(sorted(int(n) for n in sys.argv[2:]))))
