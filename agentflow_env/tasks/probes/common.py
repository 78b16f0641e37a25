"""What the probe tasks share: one seeded draw per task in its split, four-digit codes, and the
cabinet of drawers that three of them are about."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tasks.base import AnswerSolver, PlanStep, Task

SPLITS: tuple[str, ...] = ("train", "test")
GENERATED_TASKS = 2**31 - 1
_CODE = re.compile(r"\bcode (\d{4})\b")


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")


def task_draw(rng: np.random.Generator, split: str) -> tuple[int, random.Random]:
    """A task's own seed and a ``random.Random`` on it. Train tasks get even seeds and test
    tasks odd ones, so the two splits never hold the same draw."""
    seed = 2 * int(rng.integers(2**62)) + SPLITS.index(split)
    return seed, random.Random(seed)


def draw_code(rng: random.Random) -> str:
    return str(rng.randrange(1000, 10000))


def read_code(text: str) -> str | None:
    """The four-digit code a text states (``... code 4821 ...``), else ``None``."""
    match = _CODE.search(text)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Drawer:
    """A drawer as a task sees it: its colour, capitalised as the question writes it ("the Green
    drawer": the colour's first token is the tool name's), and the name of the tool that opens
    it (``agentflow_env.tools.drawer``: a drawer tool shows the corpus documents titled with its
    own name)."""

    colour: str
    tool: str


def cabinet(drawers: Sequence[Drawer], codes: Mapping[str, str]) -> Corpus:
    """One document per drawer: the code it holds (``codes``: tool name -> code), or that it
    holds none."""
    documents = []
    for index, drawer in enumerate(drawers):
        code = codes.get(drawer.tool)
        text = (
            f"The {drawer.colour} drawer holds code {code}."
            if code
            else f"The {drawer.colour} drawer holds no code."
        )
        documents.append(Document(f"d{index}", drawer.tool, text))
    return Corpus.from_documents(documents)


def probe_task(
    probe: str,
    seed: int,
    split: str,
    question: str,
    code: str,
    corpus: Corpus,
    *,
    plan: Sequence[PlanStep],
    solver: AnswerSolver,
    metadata: Mapping[str, Any],
) -> Task:
    """A probe task: kind ``probe_<probe>``, one gold answer (the code), no sub-questions (the
    prompts stay short); ``metadata`` holds what the probe's demonstrators need."""
    return Task(
        task_id=f"probe-{probe}-{seed:x}",
        question=question,
        gold_answers=(code,),
        corpus=corpus,
        kind=f"probe_{probe}",
        hops=1,
        split=split,
        gold_plan=tuple(plan),
        solver=solver,
        metadata={"probe": probe, **metadata},
    )
