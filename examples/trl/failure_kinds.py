"""Where a planner's held-out failures come from: each failed episode's searches against the
task's gold evidence chain.

For every failed episode of a frozen suite (greedy), each gold step is classified by the action
whose ``Context`` should have done it (the first action for the first step, the second for the
second, ...). A failure is put down to its first step that is not ``exact``. The kinds, tried
in this order (the first that fits is the kind):

``missing``
    no action reached that step (the episode ended before it);
``exact``
    the gold context;
``garbled``
    a near copy of the gold context: a character similarity of at least 0.75;
``repeat``
    the Context of an earlier action of the same episode, exactly or at least 0.75 similar;
``page_name``
    a name from the text the planner saw before this action (the retrieved documents and
    feedback of the earlier turns, not the prompt): a wrong name read from the page;
``question_name``
    a name or phrase from the question;
``made_up``
    anything else, in neither the question nor what was retrieved (an action without a
    ``Context`` counts here too).

"A name from" a text means that the query's words are, word for word (ignoring case and
punctuation), a run of that text's words. A near copy is not enough: names in these worlds are
built from the same few syllables and type words, so a 0.75 likeness to something on the page
is common by chance (a made-up ``Styband Pictures`` is 0.85 like the page's ``Staefend
Pictures``).
Where the text holds the gold name (or a near copy), those words do not count: a piece of the
gold name (``Staeser`` for ``Staeser Pictures``) is no other name. The order settles overlaps:
a query repeated from an earlier turn is a ``repeat`` even when it is also on the page or in
the question, and a name both retrieved and in the question is a ``page_name``. Before the
split, ``repeat``, ``page_name``, ``question_name`` and ``made_up`` were one kind, ``other``.

The report counts failed episodes per number of hops as ``step<N>_<kind>`` (plus ``success``,
``episodes`` and ``all_steps_exact``: failed with every gold search made) and keeps a few
examples of each kind.

    python examples/trl/failure_kinds.py --start sft1200 \
        --out examples/trl/results/recipe/failure_kinds_sft.json
    python examples/trl/failure_kinds.py --weights runs/recipe/sft_model.pt --out report.json
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
SIMILAR = 0.75
"""Character similarity (``difflib`` ratio) from which two strings count as copies."""
KINDS = ("missing", "exact", "garbled", "repeat", "page_name", "question_name", "made_up")
"""Every kind, in the order they are tried."""
EXAMPLES = 3
"""Examples kept per hop count and ``step<N>_<kind>``."""
_WORD = re.compile(r"\w+(?:['’-]\w+)*")


class Action(NamedTuple):
    """One planner action of an episode: its ``Context`` and the (decoded) text the planner
    saw before it, beyond the prompt."""

    context: str
    seen: str


def similar(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are at least ``SIMILAR`` alike, character by character."""
    return difflib.SequenceMatcher(None, a, b).ratio() >= SIMILAR


def _runs(words: list[str], target: str, sizes: set[int]) -> list[range]:
    """The runs of ``words`` (of the given sizes) at least ``SIMILAR`` alike to ``target``, as
    ranges of word positions."""
    matcher = difflib.SequenceMatcher(None, "", target)
    found = []
    for size in sorted(sizes - {0}):
        for start in range(len(words) - size + 1):
            matcher.set_seq1(" ".join(words[start : start + size]))
            if (
                matcher.real_quick_ratio() >= SIMILAR
                and matcher.quick_ratio() >= SIMILAR
                and matcher.ratio() >= SIMILAR
            ):
                found.append(range(start, start + size))
    return found


def in_text(query: str, text: str, *, besides: str = "") -> bool:
    """Whether ``query``'s words are a run of ``text``'s words (ignoring case and punctuation)
    that does not overlap a near copy of ``besides`` (the gold context) in the text."""
    wanted = _WORD.findall(query.casefold())
    words = _WORD.findall(text.casefold())
    if not wanted:
        return False
    gold = _WORD.findall(besides.casefold())
    taken = set()
    if gold:
        for run in _runs(words, " ".join(gold), {len(gold) - 1, len(gold)}):
            taken.update(run)
    size = len(wanted)
    return any(
        words[start : start + size] == wanted and taken.isdisjoint(range(start, start + size))
        for start in range(len(words) - size + 1)
    )


def classify(
    said: str | None,
    gold: str,
    *,
    question: str = "",
    seen: str = "",
    earlier: Sequence[str] = (),
) -> str:
    """The kind of one search (``said``, ``None`` when no action reached the step) against its
    gold context: ``question`` is the task's question, ``seen`` the text the planner saw before
    the action, ``earlier`` the contexts of the episode's earlier actions. See the module
    docstring for the kinds and their order."""
    if said is None:
        return "missing"
    if said == gold:
        return "exact"
    if similar(said, gold):
        return "garbled"
    if not said.strip():
        return "made_up"
    if any(said == before or similar(said, before) for before in earlier):
        return "repeat"
    if in_text(said, seen, besides=gold):
        return "page_name"
    if in_text(said, question, besides=gold):
        return "question_name"
    return "made_up"


def failure_step(
    question: str, gold: Sequence[str], actions: Sequence[Action]
) -> tuple[int, str] | None:
    """The first gold step (0-based) whose action is not ``exact``, with its kind; ``None``
    when every step's action is exact. ``gold`` holds the gold contexts in order, ``actions``
    the episode's actions in order."""
    for index, context in enumerate(gold):
        if index >= len(actions):
            return index, "missing"
        action = actions[index]
        earlier = [a.context for a in actions[:index]]
        kind = classify(
            action.context, context, question=question, seen=action.seen, earlier=earlier
        )
        if kind != "exact":
            return index, kind
    return None


def episode_actions(result: Any, tokenizer: Any) -> list[Action]:
    """Every planner action of a flat sample (runs of ``env_mask`` 1 in the completion) with
    its ``Context:`` value and the decoded feedback tokens (``env_mask`` 0) before it."""
    runs: list[tuple[list[int], int]] = []  # (action ids, feedback tokens before it)
    feedback: list[int] = []
    current: list[int] = []
    for token, planner in zip(result.completion_ids, result.env_mask, strict=True):
        if planner:
            if not current:
                runs.append((current, len(feedback)))
            current.append(token)
        else:
            current = []
            feedback.append(token)
    actions = []
    for ids, before in runs:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        line = next((x for x in text.splitlines() if x.startswith("Context:")), "")
        seen = tokenizer.decode(feedback[:before], skip_special_tokens=True)
        actions.append(Action(line.removeprefix("Context:").strip(), seen))
    return actions


def tally(tasks: Sequence[Any], episodes: Sequence[tuple[bool, list[Action]]]) -> dict[str, Any]:
    """The report's sections, each per hop count: ``by_hops``, the outcome counts
    (``step<N>_<kind>`` for failed episodes), and ``examples``, a few episodes of each failure
    kind. ``episodes``: per task, whether it succeeded and its actions."""
    by_hops: dict[int, Counter] = {}
    examples: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for task, (success, actions) in zip(tasks, episodes, strict=True):
        counts = by_hops.setdefault(task.hops, Counter())
        counts["episodes"] += 1
        if success:
            counts["success"] += 1
            continue
        gold = [step.context for step in task.gold_plan]
        found = failure_step(task.question, gold, actions)
        if found is None:
            counts["all_steps_exact"] += 1
            continue
        index, kind = found
        key = f"step{index + 1}_{kind}"
        counts[key] += 1
        kept = examples.setdefault(task.hops, {}).setdefault(key, [])
        if len(kept) < EXAMPLES:
            kept.append(
                {"question": task.question, "gold": gold, "said": [a.context for a in actions]}
            )
    return {
        name: {str(h): dict(sorted(section[h].items())) for h in sorted(section)}
        for name, section in (("by_hops", by_hops), ("examples", examples))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    weights = parser.add_mutually_exclusive_group(required=True)
    weights.add_argument("--weights", help="a weights file (.pt state_dict or .safetensors)")
    weights.add_argument(
        "--start", choices=("sft800", "sft1200"), help="a committed SFT start, by name"
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--suite", default="tiny-bridge-v1")
    parser.add_argument("--episodes", type=int, help="the suite's first N episodes (all if unset)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(HERE.parents[1] / "adapters" / "trl"))
    sys.path.insert(0, str(HERE))
    from recipe_common import committed_start, load_start
    from rollout import HFGenerator, run_episodes
    from train_tiny_cpu import build_model

    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
    from agentflow_env.evaluation.suites import get_suite

    start = time.time()
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    load_start(model, args.start or args.weights)
    suite = get_suite(args.suite)
    tasks, specs = suite.tasks(args.episodes), suite.seed_pairs(args.episodes)
    generate = HFGenerator(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], greedy=True)
    results = run_episodes(specs, generate, tokenizer, max_action_tokens=32)
    episodes = [(r.success, episode_actions(r, tokenizer)) for r in results]
    report = {
        "weights": args.weights or str(committed_start(args.start).relative_to(HERE.parents[1])),
        "start": args.start,
        "suite": args.suite,
        "episodes": len(specs),
        "kinds": list(KINDS),
        **tally(tasks, episodes),
        "run_s": round(time.time() - start, 1),
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "examples"}, indent=1))


if __name__ == "__main__":
    main()
