"""The Agent Lightning adapter, run by Agent Lightning 1.0.2's own rollout path on CPU.

Agent Lightning 1.0 requires Python >= 3.12, so it lives in a venv of its own (``.venv-agl``,
built by ``scripts/install_agent_lightning_env.sh``, which ``scripts/install_test_env.sh`` runs).
Each test module run starts ``tests/agent_lightning_scenario.py`` with that venv's python: Agent
Lightning's gateway, its local controller running ``adapters/agent_lightning``'s agent in a
subprocess per rollout, its trainer-side rollout manager, and a fake vLLM server on 127.0.0.1
that plays a scripted planner on mirror envs of the same tasks. Two tasks, two rollouts each:
the expert solves the first (reward 1), a stubborn planner fails the second (reward 0).

What is checked: every call Agent Lightning records (its triplets: prompt ids, response ids,
log-probs) is one turn of the env, as the mirror env and the agent's own env (its
``AGENTFLOW_DUMP_SAMPLES`` file) recorded it; the rollout's reward is the env's; the requests
reached the server through the gateway. With ``AGENTFLOW_SAMPLES=turns`` (the adapter's
default) the prompts are AgentFlow's structured ones, rebuilt each turn; with ``flat`` each
prompt extends the last, so Agent Lightning's trajectory aggregator merges the calls into the
env's own flat sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "agent_lightning_scenario.py"
AGL_PYTHON = ROOT / os.environ.get("AGL_VENV", ".venv-agl") / "bin" / "python"
MODEL = "agentflow-planner"  # the scenario's names and settings
TRAIN_TEMPERATURE = 0.7
ROLLOUTS_PER_LABEL = 2


def ids(value: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in value)


def scenario(folder: Path, *args: str) -> tuple[dict, str]:
    """The scenario's result and its log (stderr: the gateway's, the controller's, the agents')."""
    assert AGL_PYTHON.exists(), (
        f"{AGL_PYTHON} is missing: run `bash scripts/install_agent_lightning_env.sh` "
        "(scripts/install_test_env.sh runs it)"
    )
    out = folder / "result.json"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLOW_")}
    environ["AGENTFLOW_DUMP_SAMPLES"] = str(folder / "dump.jsonl")
    done = subprocess.run(
        [str(AGL_PYTHON), str(SCENARIO), "--out", str(out), *args],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    return json.loads(out.read_text()), done.stderr


@pytest.fixture(scope="module", params=["turns", "flat"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The scenario's result for one sample shape, with the agents' dumped samples."""
    folder = tmp_path_factory.mktemp(f"agl-{request.param}")
    result, log = scenario(folder, "--samples", request.param)
    dump = folder / "dump.jsonl"
    lines = dump.read_text().splitlines() if dump.exists() else []  # none dumped: checked below
    result.update(samples=request.param, log=log, dump=[json.loads(line) for line in lines])
    return result


def triplets(rollout: dict) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]]:
    """Agent Lightning's record of one rollout: (prompt ids, response ids, log-probs) per call."""
    return [
        (
            ids(t["prompt"]["token_ids"]),
            ids(t["response"]["token_ids"]),
            tuple(t["response"]["log_probs"]),
        )
        for t in rollout["triplets"]
    ]


def mirror_turns(mirror: dict) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]]:
    return [(ids(p), ids(a), tuple(lp)) for p, a, lp in mirror["turns"]]


def merged(calls: list) -> tuple[list[int], list[int]]:
    """Calls whose prompts extend the last call, merged as Agent Lightning's trajectory
    aggregator merges them: the first prompt, then each response, with the part of the next
    prompt after the previous prompt and response (the env's feedback) masked out."""
    ids_, mask = list(calls[0][0]), [0] * len(calls[0][0])
    for prompt, response, _ in calls:
        feedback = list(prompt[len(ids_) :])
        ids_ += [*feedback, *response]
        mask += [0] * len(feedback) + [1] * len(response)
    return ids_, mask


def test_every_rollout_succeeds_once_per_group_member(run: dict) -> None:
    by_label = Counter(r["input"]["label"] for r in run["rollouts"])
    assert by_label == dict.fromkeys(run["mirrors"], ROLLOUTS_PER_LABEL)
    assert [r["rollout_state"] for r in run["rollouts"]] == ["succeeded"] * len(run["rollouts"])
    assert len({r["data_id"] for r in run["rollouts"]}) == len(run["mirrors"])  # one group each


def test_each_recorded_call_is_one_env_turn(run: dict) -> None:
    for rollout in run["rollouts"]:
        group = run["mirrors"][rollout["input"]["label"]]
        expected = mirror_turns(group[0])
        assert all(mirror_turns(m) == expected for m in group)  # one task, one scripted play
        assert len(expected) >= 2
        assert triplets(rollout) == expected


def test_recorded_calls_are_the_agents_own_env_turns(run: dict) -> None:
    """The agents' envs dumped their turn samples (``check-logprobs`` samples) themselves."""
    if run["samples"] == "turns":
        dumped = Counter(
            (ids(s["prompt_ids"]), ids(s["completion_ids"]), tuple(s["logprobs"]))
            for s in run["dump"]
        )
        recorded = Counter(t for rollout in run["rollouts"] for t in triplets(rollout))
    else:  # one flat sample per trajectory: the calls merged
        dumped = Counter(
            (ids(s["prompt_ids"] + s["completion_ids"]), ids(s["mask"])) for s in run["dump"]
        )
        recorded = Counter(
            (ids(full), ids(mask[len(rollout["triplets"][0]["prompt"]["token_ids"]) :]))
            for rollout in run["rollouts"]
            for full, mask in [merged(triplets(rollout))]
        )
    assert len(run["dump"]) == sum(recorded.values()), run["log"][-6000:]
    assert dumped == recorded


def test_reward_is_the_envs(run: dict) -> None:
    rewards = {}
    for rollout in run["rollouts"]:
        group = run["mirrors"][rollout["input"]["label"]]
        assert rollout["final_reward"] == group[0]["reward"]
        assert rollout["triplets"][-1]["reward"] == rollout["final_reward"]
        episode = [e["data"] for e in rollout["events"] if e["event_type"] == "agentflow_episode"]
        assert len(episode) == 1
        assert episode[0]["end"] == "done"
        assert episode[0]["turns"] == len(rollout["triplets"])
        assert episode[0]["success"] == rollout["final_reward"]
        rewards[rollout["input"]["label"]] = rollout["final_reward"]
    assert sorted(rewards.values()) == [0.0, 1.0]  # a constant reward would fail one task


def test_calls_went_through_the_gateway(run: dict) -> None:
    requests = run["requests"]
    assert len(requests) == sum(len(r["triplets"]) for r in run["rollouts"])
    for body in requests:
        assert body["model"] == MODEL  # the gateway's model name, not the agent's
        assert body["temperature"] == TRAIN_TEMPERATURE  # the gateway's training temperature
        assert body["return_token_ids"] is True
        assert body["logprobs"] is True
        assert all(isinstance(token, int) for token in body["prompt"])


def test_prompt_shape(run: dict) -> None:
    """Structured prompts are rebuilt each turn (Agent Lightning keeps one row per call); flat
    ones extend the last call, and Agent Lightning's merge (the next prompt starts with the
    previous prompt and response: the rest is env feedback, masked) is the env's flat sample."""
    for rollout in run["rollouts"]:
        calls = triplets(rollout)
        extends = [
            later[0][: len(earlier[0]) + len(earlier[1])] == earlier[0] + earlier[1]
            for earlier, later in zip(calls, calls[1:], strict=False)
        ]
        if run["samples"] == "turns":
            assert not any(extends)
            continue
        assert all(extends)
        flat_ids, flat_mask = run["mirrors"][rollout["input"]["label"]][0]["flat"]
        assert merged(calls) == (list(flat_ids), list(flat_mask))


def test_a_reply_naming_other_prompt_ids_fails_the_rollout(tmp_path: Path) -> None:
    """A server that sampled from other ids than the env's prompt (here: a BOS put before it)
    stops the agent (``SeamError``) before it steps the env: the rollout fails, no reward."""
    result, log = scenario(tmp_path, "--other-prompt")
    rollouts = result["rollouts"]
    assert [r["rollout_state"] for r in rollouts] == ["failed"] * 2 * ROLLOUTS_PER_LABEL
    assert [r["final_reward"] for r in rollouts] == [None] * len(rollouts)
    assert [len(r["triplets"]) for r in rollouts] == [1] * len(rollouts)  # the first call only
    assert "SeamError: the completion was sampled from other prompt ids" in log


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
