"""Fingerprint what the env gives a scripted planner, to show a refactor changed no behaviour.

Runs the expert and a seeded random planner over every registered variant under several
settings (observation modes, prompt styles, presets, termination, shaping), forks an episode
half way, and hashes every observation (text and token ids), reward, end flag and info dict
(timings dropped). One more case serves the parts a deployment reaches over HTTP: LLM-backed
modules on the test suite's scripted OpenAI-compatible server and Search on a retriever server,
both on 127.0.0.1. Write the hashes before a change and compare after::

    python scripts/expert_fingerprint.py --out before.json
    python scripts/expert_fingerprint.py --compare before.json   # exit 1 on any difference
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.envs.registration import ENV_CONFIGS
from agentflow_env.llm import LLMEndpoint
from agentflow_env.modules import build_modules
from agentflow_env.retrieval.server_app import start_retriever_server
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner

TESTS = Path(__file__).resolve().parent.parent / "tests"
SERVED = "AgentFlow-Search-v0 served"

_TIMING_KEY = re.compile(r"(seconds|_s$|_ms$|time|latency|elapsed|duration)", re.IGNORECASE)
_SEARCH_SETTINGS: tuple[dict[str, Any], ...] = (
    {},
    {"observation_mode": "flat"},
    {"prompt_style": "compact", "hops": 2},
    {"preset": "agentflow_eval", "modules": "rule", "reward": "exact_match"},
    {
        "preset": "agentflow_train",
        "modules": "rule",
        "reward": "exact_match",
        "observation_mode": "flat",
    },
    {"termination": "both", "reward_shaping": "progress", "lambda_calls": 0.01},
    {"reward": "f1", "show_sub_questions": False, "max_turns": 4},
)
_CODE_SETTINGS: tuple[dict[str, Any], ...] = (
    {},
    {"observation_mode": "flat"},
    {"preset": "agentflow_eval", "modules": "rule", "reward": "exact_match"},
)
_EPISODES = 4


def _cases() -> list[tuple[str, dict[str, Any]]]:
    cases: list[tuple[str, dict[str, Any]]] = []
    for env_id in ENV_CONFIGS:
        if env_id == "AgentFlow-Search-v0":
            cases += [(env_id, settings) for settings in _SEARCH_SETTINGS]
        elif env_id == "AgentFlow-Code-v0":
            cases += [(env_id, settings) for settings in _CODE_SETTINGS]
        else:
            cases += [(env_id, {}), (env_id, {"observation_mode": "flat"})]
    return cases


def _plain(value: Any) -> Any:
    """``value`` as JSON-able data with timing keys dropped."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if not _TIMING_KEY.search(str(k))}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


def _run(env: gym.Env, planner: Any, seed: int, digest: Any, fork_at: int | None) -> int:
    observation, info = env.reset(seed=seed)
    digest.update(json.dumps(_plain([observation, info]), sort_keys=True).encode())
    steps = 0
    while True:
        if fork_at is not None and steps == fork_at:
            fork = env.unwrapped.fork()
            forked_action = ExpertPlanner(env).act(observation, info)
            result = fork.step(forked_action)
            digest.update(json.dumps(_plain(result), sort_keys=True).encode())
            fork.close()
        action = planner.act(observation, info)
        observation, reward, terminated, truncated, info = env.step(action)
        steps += 1
        digest.update(
            json.dumps(
                _plain([observation, reward, terminated, truncated, info]), sort_keys=True
            ).encode()
        )
        if terminated or truncated:
            return steps


def _episodes(env: gym.Env) -> dict[str, Any]:
    digest = hashlib.sha256()
    steps = 0
    try:
        for seed in range(_EPISODES):
            steps += _run(env, ExpertPlanner(env), seed, digest, fork_at=1 if seed == 0 else None)
            steps += _run(env, RandomPlanner(env, seed=seed), seed, digest, fork_at=None)
    finally:
        env.close()
    return {"sha256": digest.hexdigest(), "steps": steps}


@contextmanager
def _served_env() -> Iterator[gym.Env]:
    """Search with every module LLM-backed (the scripted server's generic replies) and the
    world's corpus behind a retriever server."""
    sys.path.insert(0, str(TESTS))
    from fake_openai_server import FakeOpenAIServer, generic_responder

    corpus = gym.make("AgentFlow-Search-v0").unwrapped.task_source.world.corpus  # type: ignore[attr-defined]
    with (
        FakeOpenAIServer(generic_responder(2)) as llm,
        start_retriever_server(corpus) as retriever,
    ):
        modules = build_modules("llm", endpoint=LLMEndpoint(llm.base_url, "fake", max_retries=0))
        yield gym.make("AgentFlow-Search-v0", modules=modules, retriever_url=retriever.url)


def fingerprint() -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for env_id, settings in _cases():
        key = f"{env_id} {json.dumps(settings, sort_keys=True)}"
        results[key] = _episodes(gym.make(env_id, **settings))
    with _served_env() as env:
        results[SERVED] = _episodes(env)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the fingerprints to this JSON file")
    parser.add_argument("--compare", help="compare with fingerprints written before")
    args = parser.parse_args(argv)
    results = fingerprint()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1, sort_keys=True)
    print(f"{len(results)} cases, {sum(r['steps'] for r in results.values())} steps")
    if not args.compare:
        return 0
    with open(args.compare, encoding="utf-8") as handle:
        before = json.load(handle)
    differ = [key for key in before.keys() | results.keys() if before.get(key) != results.get(key)]
    for key in sorted(differ):
        print(f"DIFFERS: {key}")
    print("identical" if not differ else f"{len(differ)} of {len(results)} cases differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
