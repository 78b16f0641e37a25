"""Flat-mode cost per turn: does a step cost the new tokens, or the whole history?

Runs episodes of ``--turns`` planner turns in flat observation mode (searches that never answer
the question, so every episode runs to the limit), times each ``env.step``, and reports the mean
time of turn 10 over turn 1 and the prompt length at each turn. Usage:

    python bench/bench_flat_turn_cost.py --episodes 50 --turns 10
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym

import agentflow_env  # noqa: F401
from agentflow_env.workflow.actions import format_planner_action


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--mode", default="flat", choices=["flat", "structured"])
    args = parser.parse_args()

    env = gym.make("AgentFlow-Search-v0", observation_mode=args.mode, max_turns=args.turns, hops=3)
    times: list[list[float]] = [[] for _ in range(args.turns)]
    lengths: list[list[int]] = [[] for _ in range(args.turns)]
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=episode)
        for turn in range(args.turns):
            action = format_planner_action(
                justification="Look for more evidence.",
                context=f"unrelated words {episode} {turn}",
                sub_goal="Gather evidence.",
                tool_name="Search",
            )
            started = time.perf_counter()
            obs, _, terminated, truncated, _ = env.step(action)
            times[turn].append(time.perf_counter() - started)
            lengths[turn].append(len(obs["token_ids"]))
            if terminated or truncated:
                break
    env.close()
    print(f"mode={args.mode} episodes={args.episodes}")
    print("turn  mean_ms  prompt_tokens_after")
    for turn in range(args.turns):
        if times[turn]:
            print(
                f"{turn + 1:>4}  {1000 * statistics.mean(times[turn]):7.2f}  {statistics.mean(lengths[turn]):9.0f}"
            )
    last = min(args.turns, 10) - 1
    ratio = statistics.mean(times[last]) / statistics.mean(times[0])
    growth = statistics.mean(lengths[last]) / statistics.mean(lengths[0])
    print(f"turn-{last + 1}/turn-1 time ratio: {ratio:.2f} (prompt length ratio {growth:.2f})")


if __name__ == "__main__":
    main()
