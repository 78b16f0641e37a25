"""``eval --env-url`` writes the rows an in-process run writes (answers, rewards, turn counts),
also when servers die: a dead server's episodes are played again on another, and a run whose
every server died keeps its finished episodes and resumes (``--resume``) to the same rows."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from served import kill_serve_process, serve_process  # noqa: E402

from agentflow_env.cli import main  # noqa: E402

COMMON = ["eval", "--planner", "expert", "--hops", "1", "--quiet", "--concurrency", "2"]


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


def kill_after(url: str, folder: Path, count: int) -> threading.Thread:
    """A watcher that kills the server at ``url`` once ``count`` episodes are written."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while len(rows(folder)) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        kill_serve_process(url)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_dead_servers_episodes_are_played_again_and_a_run_resumes(tmp_path: Path) -> None:
    episodes = ["--episodes", "16"]
    assert main([*COMMON, *episodes, "--out", str(tmp_path / "local")]) == 0
    expected = rows(tmp_path / "local")
    assert len(expected) == 16

    # Two servers, one dies mid-run: its episodes are played again on the other.
    with serve_process("--hops", "1") as doomed, serve_process("--hops", "1") as alive:
        watcher = kill_after(doomed, tmp_path / "two", 3)
        urls = f"{doomed},{alive}"
        assert main([*COMMON, *episodes, "--out", str(tmp_path / "two"), "--env-url", urls]) == 0
        watcher.join()
    assert rows(tmp_path / "two") == expected
    lines = (tmp_path / "two" / "episodes.jsonl").read_text().splitlines()
    served = [json.loads(line)["server"] for line in lines]
    # Placement used both; once one died, the rest (its unfinished episodes too) ran on the other.
    assert 1 <= served.count(doomed) <= 5 and served.count(alive) >= 11

    # The only server dies mid-run: the run stops, its finished episodes are kept, and it
    # resumes on another server to the same rows.
    with serve_process("--hops", "1") as only:
        watcher = kill_after(only, tmp_path / "resumed", 4)
        out = ["--out", str(tmp_path / "resumed")]
        assert main([*COMMON, *episodes, *out, "--env-url", only]) == 2
        watcher.join()
    kept = rows(tmp_path / "resumed")
    assert 4 <= len(kept) < 16 and set(kept) <= set(expected)
    with serve_process("--hops", "1") as fresh:
        assert main([*COMMON, *episodes, *out, "--env-url", fresh, "--resume"]) == 0
    assert rows(tmp_path / "resumed") == expected
