"""The trajectory log: written per turn as it happens, never overwritten, readable after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner
from agentflow_env.workflow.turn_log import TurnLog, read_turn_log

REPO = Path(__file__).resolve().parents[2]


def play(env: gym.Env, planner, seed: int) -> tuple[dict, list[dict]]:
    observation, info = env.reset(seed=seed)
    infos = []
    while True:
        observation, _, terminated, truncated, info = env.step(planner.act(observation, info))
        infos.append(info)
        if terminated or truncated:
            return info, infos


def test_the_env_logs_every_turn_and_the_end_with_its_diagnostics(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    env = gym.make("AgentFlow-Search-v0", hops=2, log_path=str(path))
    finals = [play(env, ExpertPlanner(env), seed=s)[0] for s in (0, 1)]
    final_random, _ = play(env, RandomPlanner(env, seed=3), seed=2)
    env.close()
    log = read_turn_log(path)
    assert log.bad_lines == 0 and len(log.episodes) == 3 and not log.partial
    for episode, final in zip(log.episodes, [*finals, final_random], strict=True):
        assert episode.start["env_id"] == "AgentFlow-Search-v0"
        assert episode.start["task"]["task_id"] == final["task_id"]
        assert episode.start["analysis"]["objective"].startswith("Answer the question")
        assert [t["turn"] for t in episode.turns] == list(range(1, final["turn"] + 1))
        assert [t["memory_entry"] for t in episode.turns] == final["memory"]
        assert episode.end["diagnostics"] == json.loads(json.dumps(final["diagnostics"]))
        assert episode.end["reward"] == final["reward"] and episode.end["turns"] == final["turn"]
    expert_turn = log.episodes[0].turns[0]
    assert expert_turn["expected_tool"] == expert_turn["tool"] == "Search"
    assert expert_turn["chose_expected_tool"] is True
    random_choices = [t["chose_expected_tool"] for t in log.episodes[2].turns]
    assert sum(random_choices) == log.episodes[2].end["diagnostics"]["tool_choices_right"]
    assert expert_turn["plan"]["tool_name"] == "Search" and expert_turn["action"]["token_ids"]
    assert set(expert_turn["latency_s"]) == {"executor", "tool", "verifier"}
    assert expert_turn["prompt_tokens"] > 0 and expert_turn["redundant"] is False


def test_the_log_appends_and_never_truncates(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text('{"event": "turn", "episode_id": "earlier", "turn": 1}\n')
    env = gym.make("AgentFlow-Search-v0", log_path=str(path))
    play(env, ExpertPlanner(env), seed=0)
    env.close()
    log = read_turn_log(path)
    assert log.episodes[0].episode_id == "earlier" and not log.episodes[0].complete
    assert len(log.complete) == 1


def test_bad_log_paths_are_refused_when_the_env_is_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a directory"):
        gym.make("AgentFlow-Search-v0", log_path=str(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        gym.make("AgentFlow-Search-v0", log_path=str(tmp_path / "missing" / "log.jsonl"))


def test_a_torn_last_line_and_junk_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    log = TurnLog(path)
    log.write("episode_start", "e1", task={"task_id": "t"})
    log.write("turn", "e1", turn=1, result="line one\nline two \ud800 </script>")
    log.close()
    with open(path, "ab") as file:
        file.write(b'[1, 2]\n{"event": "bogus", "episode_id": "e1"}\n{"event": "turn", "episo')
    contents = read_turn_log(path)
    assert contents.bad_lines == 3
    (episode,) = contents.episodes
    assert not episode.complete and episode.turns[0]["result"].startswith("line one\nline two")
    assert path.read_bytes().count(b"\n") == 4  # untrusted newlines stayed inside their line


def test_many_writers_share_one_file_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    big = "x" * 100_000  # far above a pipe's atomic size: lines must still not interleave

    def writer(name: str) -> None:
        log = TurnLog(path)
        for turn in range(1, 51):
            log.write("turn", name, turn=turn, result=big)
        log.close()

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    contents = read_turn_log(path)
    assert contents.bad_lines == 0
    assert sorted(len(e.turns) for e in contents.episodes) == [50, 50, 50, 50]


KILLED_RUN = textwrap.dedent(
    """
    import sys
    import gymnasium as gym
    import agentflow_env
    from agentflow_env.rollout.agents.planners import RandomPlanner

    env = gym.make("AgentFlow-Search-v0", log_path=sys.argv[1])
    planner = RandomPlanner(env, seed=0)
    seed = 0
    while True:  # runs until it is killed
        observation, info = env.reset(seed=seed)
        seed += 1
        done = False
        while not done:
            observation, _, terminated, truncated, info = env.step(planner.act(observation, info))
            done = terminated or truncated
            print(env.unwrapped.session.logger.episode_id, info["turn"], flush=True)
    """
)


def test_a_run_killed_with_sigkill_keeps_every_finished_turn(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN)
    process = subprocess.Popen(
        [sys.executable, str(script), str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    finished: list[tuple[str, int]] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:  # wait until it is mid-way through its third episode
            episode_id, turn = line.split()
            finished.append((episode_id, int(turn)))
            if len({e for e, _ in finished}) >= 3 and int(turn) >= 4:
                break
        time.sleep(0.2)  # let it run on: the kill lands wherever it is
        process.send_signal(signal.SIGKILL)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    finished += [(e, int(t)) for e, t in (line.split() for line in rest.splitlines())]
    contents = read_turn_log(path)
    assert contents.bad_lines == 0  # every line parses
    logged = {(e.episode_id, t["turn"]) for e in contents.episodes for t in e.turns}
    assert set(finished) <= logged  # every turn the run finished is on disk
    assert len(contents.complete) >= 2 and len(contents.episodes) >= 3
    for episode in contents.partial:  # the episode in flight, if the kill landed inside one
        assert episode.start is not None and episode.end is None


def test_a_log_that_cannot_be_written_warns_once_and_the_episode_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if not Path("/dev/full").exists():  # a device every Linux has: each write fails (ENOSPC)
        pytest.fail("this test needs /dev/full")
    env = gym.make("AgentFlow-Search-v0", log_path="/dev/full")
    with caplog.at_level("WARNING", logger="agentflow_env.turn_log"):
        final, infos = play(env, ExpertPlanner(env), seed=0)
    env.close()
    assert final["success"] and len(infos) == final["turn"]
    warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) == 1
