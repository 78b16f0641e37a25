"""Starting the test suite's fake OpenAI-compatible server in its own process, for benchmarks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVER = Path(__file__).resolve().parent.parent / "tests" / "fake_openai_server.py"


def start_fake_server(*options: str) -> tuple[subprocess.Popen[str], int]:
    """Start ``tests/fake_openai_server.py`` with ``options``; return the process and its port."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        raise RuntimeError(f"the fake server did not start: {line!r}")
    return process, int(line.split()[1])
