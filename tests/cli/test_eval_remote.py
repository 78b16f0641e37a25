"""``eval --env-url`` writes the rows an in-process run writes (answers, rewards, turn counts),
also when servers die: a dead server's episodes are played again on another, and a run whose
every server died keeps its finished episodes and resumes (``--resume``) to the same rows."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import httpx
import pytest
from served import kill_serve_process, serve_process

from agentflow_env.cli import evaluate as cli_evaluate
from agentflow_env.cli import main
from agentflow_env.evaluation.remote_runner import RemoteExpert
from agentflow_env.remote import RemoteSession

COMMON = ["eval", "--planner", "expert", "--hops", "1", "--quiet"]


def rows(folder: Path) -> list[tuple]:
    path = folder / "episodes.jsonl"
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(
        (
            r["index"],
            r["task_id"],
            r["answer"],
            r["diagnostics"]["reward"],
            r["diagnostics"]["turns"],
        )
        for r in found
    )


def test_eval_env_url_writes_the_in_process_rows(tmp_path: Path) -> None:
    with serve_process("--env-id", "AgentFlow-Search-v0", "--hops", "2") as url:
        common = ["eval", "--planner", "expert", "--episodes", "6", "--hops", "2", "--quiet"]
        assert main([*common, "--out", str(tmp_path / "local")]) == 0
        assert main([*common, "--out", str(tmp_path / "remote"), "--env-url", url]) == 0
    assert rows(tmp_path / "local") == rows(tmp_path / "remote")
    assert len(rows(tmp_path / "remote")) == 6


class KillingExpert(RemoteExpert):
    """The remote expert, which kills the server ``doomed`` (and waits until it is gone) when
    asked for the first action of an episode from ``from_index`` on that runs there: a server
    dying mid-episode, at a known place."""

    def __init__(self, doomed: str, from_index: int, killed: list[int]) -> None:
        self.doomed, self.from_index, self.killed = doomed, from_index, killed

    async def next_action(self, session: RemoteSession) -> str:
        index = session.options["episode_index"]
        if not self.killed and session.url == self.doomed and index >= self.from_index:
            kill_serve_process(self.doomed)
            while _answers(self.doomed):
                await asyncio.sleep(0.02)
            self.killed.append(index)
        return await super().next_action(session)


def _answers(url: str) -> bool:
    try:
        httpx.get(url + "/health", timeout=0.5, trust_env=False)
    except httpx.HTTPError:
        return False
    return True


def test_a_dead_servers_episodes_are_played_again_and_a_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    episodes = ["--episodes", "12"]
    common = [*COMMON, *episodes, "--concurrency", "1"]  # one episode at a time, in order
    assert main([*common, "--out", str(tmp_path / "local")]) == 0
    expected = rows(tmp_path / "local")
    assert len(expected) == 12
    killed: list[int] = []

    # Two servers, one dies mid-episode: that episode is played again on the other.
    with serve_process("--hops", "1") as doomed, serve_process("--hops", "1") as alive:
        expert = functools.partial(KillingExpert, doomed, 4, killed)
        monkeypatch.setattr(cli_evaluate, "RemoteExpert", expert)
        out = ["--out", str(tmp_path / "two"), "--env-url", f"{doomed},{alive}"]
        assert main([*common, *out]) == 0
    assert rows(tmp_path / "two") == expected
    lines = (tmp_path / "two" / "episodes.jsonl").read_text().splitlines()
    served = {row["index"]: row["server"] for row in map(json.loads, lines)}
    (at,) = killed
    assert at >= 4 and all(served[i] == alive for i in range(at, 12))
    assert doomed in {served[i] for i in range(at)}  # placement used both before

    # The only server dies mid-episode: the run stops, keeping the episodes before it, and
    # resumes on another server to the same rows.
    killed.clear()
    with serve_process("--hops", "1") as only:
        monkeypatch.setattr(
            cli_evaluate, "RemoteExpert", functools.partial(KillingExpert, only, 4, killed)
        )
        out = ["--out", str(tmp_path / "resumed")]
        assert main([*common, *out, "--env-url", only]) == 2
    assert killed == [4] and rows(tmp_path / "resumed") == expected[:4]
    monkeypatch.undo()
    with serve_process("--hops", "1") as fresh:
        assert main([*common, *out, "--env-url", fresh, "--resume"]) == 0
    assert rows(tmp_path / "resumed") == expected
