"""Fuzz ``env.step`` with hostile actions, for as long as wanted.

It runs the Hypothesis properties of tests/workflow/test_properties.py under its "long" profile (random,
thousands of examples each) and prints Hypothesis's statistics.

Actions: random text (any unicode, lone surrogates, control characters, chat-template markers),
four-field actions whose fields hold markers, megabytes or unknown tools, token ids (in and out of
vocabulary, negative, huge, non-finite, fractional, numpy arrays of several dtypes, past the
action cap), mappings with bad log-probs, junk objects (containers that raise), Python code on
AgentFlow-Code-v0 (prints, floods, hangs, markers), mixed with the expert's actions, on both
variants in both observation modes, with resets and forks in any order. Every step must return
with the turn records, memory and flat sequence consistent; the run fails on the first example
that breaks a property, and prints the smallest one Hypothesis finds.

    python scripts/fuzz_actions.py                        # every property, the long profile
    python scripts/fuzz_actions.py --examples 20000       # more examples per property
    python scripts/fuzz_actions.py --seed 7 -- -k flat    # a fixed seed; pytest options after --

The CI run of the same properties is ``python -m pytest tests/workflow/test_properties.py`` (the "ci"
profile: derandomized, a few hundred examples). Exit status: pytest's (0: every property held).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

PROPERTIES = Path(__file__).resolve().parents[1] / "tests" / "test_properties.py"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--examples", type=int, default=None, help="examples per property (default: the profile's)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="Hypothesis's seed (default: random)"
    )
    parser.add_argument("pytest_args", nargs="*", help="further pytest options, after --")
    args = parser.parse_args(argv)
    os.environ["AGENTFLOW_HYPOTHESIS_PROFILE"] = "long"
    if args.examples is not None:
        os.environ["AGENTFLOW_HYPOTHESIS_EXAMPLES"] = str(args.examples)
    options = [str(PROPERTIES), "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics"]
    if args.seed is not None:
        options.append(f"--hypothesis-seed={args.seed}")
    return int(pytest.main([*options, *args.pytest_args]))


if __name__ == "__main__":
    sys.exit(main())
