"""The copying probe: the Search query must be the name the question gives, exactly.

Each task is a fresh cabinet of ``entities`` people with made-up one-word names of two or
three syllables (``agentflow_env.tasks.synthetic.names``: "Brifux", "Skoudeineisk"), each
keeping a code in a document of its own. The
question names one of them; the code counts only when it comes back for a Search whose query is
that name character for character (``ExactNameSolver``): a truncated, run-on or garbled name,
the tiny planner's usual failures on the search task, scores 0 even when the search finds the
right document anyway.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentflow_env.retrieval.corpus import Corpus, Document, parse_documents
from agentflow_env.tasks.base import Evidence, PlanStep, Task
from agentflow_env.tasks.probes.common import (
    GENERATED_TASKS,
    check_split,
    draw_code,
    probe_task,
    read_code,
    task_draw,
)
from agentflow_env.tasks.synthetic.names import NameFactory

COPYING = "copying"
SEARCH_TOOL = "Search"
QUESTION = "What code does {name} keep in the cabinet?"
_TEMPLATE_WORDS = ("what", "code", "does", "keep", "keeps", "in", "the", "cabinet")


@dataclass(frozen=True)
class ExactNameSolver:
    """The code of ``name`` from a successful Search whose query is ``name`` exactly (surrounding
    spaces aside)."""

    name: str

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        for item in evidence:
            query = item.arguments.get("query")
            if not item.ok or item.tool != SEARCH_TOOL or not isinstance(query, str):
                continue
            if query.strip() != self.name:
                continue
            for title, text in parse_documents(item.output):
                if title == self.name:
                    return read_code(text)
        return None


class CopyingSource:
    """Tasks asking for the code of one of ``entities`` freshly named people."""

    def __init__(self, entities: int = 4, split: str = "train") -> None:
        check_split(split)
        if entities < 1:
            raise ValueError(f"entities must be >= 1, got {entities}")
        self.entities = entities
        self.split = split

    def __len__(self) -> int:
        return GENERATED_TASKS

    def sample(self, rng: np.random.Generator) -> Task:
        seed, draw = task_draw(rng, self.split)
        names = _names(draw, self.entities)
        codes = [draw_code(draw) for _ in names]
        target = draw.randrange(len(names))
        name, code = names[target], codes[target]
        corpus = Corpus.from_documents(
            Document(f"p{i}", person, f"{person} keeps code {codes[i]}.")
            for i, person in enumerate(names)
        )
        step = PlanStep(
            tool=SEARCH_TOOL,
            sub_goal=f"Find the code of {name}.",
            context=name,
            justification="The question names the person.",
        )
        return probe_task(
            COPYING,
            seed,
            self.split,
            QUESTION.format(name=name),
            code,
            corpus,
            plan=(step,),
            solver=ExactNameSolver(name),
            metadata={"entity": name},
        )


def _names(rng: random.Random, count: int) -> list[str]:
    factory = NameFactory(rng, reserved=_TEMPLATE_WORDS)
    return [factory.word() for _ in range(count)]
