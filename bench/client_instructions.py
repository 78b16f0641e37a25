"""Instructions the client executes per LLM-module episode: a CPU figure that does not move with
the machine's load.

CPU time per episode on a shared machine varies by 15-30 % between runs; the number of
instructions the process executes for the same episodes varies by well under 1 %. This runs the
concurrency figures' episodes (``bench/concurrency.py``: four LLM-backed modules on the scripted
server in its own process, two search hops, the expert's actions) under valgrind's callgrind,
with counting switched on only for one round of ``N`` concurrent episodes after warm-up rounds,
and prints instructions per episode. Instructions are not time (the interpreter's work runs at
a lower rate per instruction than tokenization's tight loops, and the kernel's work is not
counted), so read it beside the CPU figures, not instead of them.

    python bench/client_instructions.py 32                  # this checkout
    python bench/client_instructions.py 32 --root OTHER     # another checkout, same harness

Needs valgrind (``apt-get install valgrind``); under it the run takes about 20 s at 32 episodes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REFERENCE_INSTRUCTIONS = 24.0e6
"""Instructions per episode (32 concurrent) at the second performance pass's starting commit,
measured with this script; unlike CPU time, it repeats across days and machines."""


def _episodes(n: int, warm: int) -> None:
    """The measured process: ``warm`` rounds, then one counted round of ``n`` episodes."""
    from bench_llm_concurrency import play
    from fake_server import llm_module_env, sample_tasks

    from agentflow_env.llm import close_clients

    def counting(on: bool) -> None:
        switch = ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())]
        subprocess.run(switch, check=True, capture_output=True)

    with llm_module_env(0.1, 2, 64, timeout_s=60.0) as base:
        tasks = iter(sample_tasks(base, 1 + (warm + 1) * n))

        async def round_of(count: int) -> None:
            await asyncio.gather(*(play(base.new_session(next(tasks))) for _ in range(count)))

        async def main() -> None:
            await round_of(1)  # connections, the search index
            for _ in range(warm):
                await round_of(n)
            gc.collect()
            gc.freeze()
            counting(True)
            await round_of(n)
            counting(False)
            await close_clients()

        asyncio.run(main())


def measure(n: int, warm: int, root: Path) -> float:
    """Instructions per episode of ``n`` concurrent episodes, the package taken from ``root``."""
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as scratch:
        run = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={scratch}/callgrind.out",
                sys.executable,
                str(Path(__file__).resolve()),
                str(n),
                "--warm",
                str(warm),
                "--counted",
            ],
            cwd=root,
            env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{HERE}", "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=False,
        )
    found = re.search(r"Collected\s*:\s*(\d+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"the counted run failed:\n{run.stderr[-3000:]}")
    return int(found.group(1)) / n


def instruction_figures(n: int = 32) -> dict[str, Any]:
    """``concurrency.client_instructions_per_episode`` against ``REFERENCE_INSTRUCTIONS`` (no
    target: the issue's target is CPU time), or why it could not be measured."""
    from bench.report import not_available, ratio

    key = "concurrency.client_instructions_per_episode"
    if shutil.which("valgrind") is None:
        return {key: not_available("needs valgrind (apt-get install valgrind)")}
    return {
        key: ratio(
            measure(n, 3, HERE.parent),
            REFERENCE_INSTRUCTIONS,
            what=f"instructions the client executes per LLM-module episode ({n} concurrent)",
            against="the same before the second performance pass",
        )
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("episodes", type=int, nargs="?", default=32, help="concurrent episodes")
    parser.add_argument("--warm", type=int, default=3, help="uncounted rounds first")
    parser.add_argument("--root", type=Path, default=HERE.parent, help="checkout to measure")
    parser.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.counted:
        _episodes(args.episodes, args.warm)
        return
    per_episode = measure(args.episodes, args.warm, args.root.resolve())
    print(f"{per_episode / 1e6:.2f} M instructions per episode ({args.episodes} concurrent)")


if __name__ == "__main__":
    main()
