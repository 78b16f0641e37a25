"""The embedded synthetic world: determinism, reader, solver, BM25 reachability and splits."""

from __future__ import annotations

import collections
import pickle
import re
from collections.abc import Sequence

import bm25s
import numpy as np
import pytest

from agentflow_env.retrieval.corpus import Corpus, Document, format_documents
from agentflow_env.tasks.base import Evidence, Task
from agentflow_env.tasks.synthetic import (
    Chain,
    EntityRef,
    Program,
    SyntheticSolver,
    SyntheticTaskSource,
    World,
    WorldConfig,
    extract_facts,
    generate_tasks,
    generate_world,
    read_evidence,
    training_text,
)
from agentflow_env.tasks.synthetic.phrasing import search_query
from agentflow_env.tasks.synthetic.sampling import walk

N_SMALL_WORLDS = 50
SMALL_TASKS_PER_BUCKET = 10


def tokenize(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class TopThree:
    """A plain bm25s index over ``title + text``: the search the plan queries must succeed on."""

    def __init__(self, corpus: Corpus) -> None:
        self.documents = corpus.documents
        self.retriever = bm25s.BM25()
        self.retriever.index([tokenize(d.contents) for d in self.documents], show_progress=False)
        self._cache: dict[str, list[Document]] = {}

    def search(self, query: str) -> list[Document]:
        if query not in self._cache:
            tokens = [t for t in tokenize(query) if t in self.retriever.vocab_dict]
            ids, _ = self.retriever.retrieve([tokens], k=3, show_progress=False)
            self._cache[query] = [self.documents[int(i)] for i in ids[0]]
        return self._cache[query]


def search_evidence(documents: Sequence[Document], query: str = "q") -> Evidence:
    return Evidence("Search", {"query": query}, format_documents(documents), True)


def calculator_evidence(task: Task) -> Evidence:
    expression = task.gold_plan[-1].context
    assert re.fullmatch(r"[\d +\-*/()]+", expression)
    value = eval(expression)  # plain digits and + - only, checked above
    return Evidence("Calculator", {"expression": expression}, str(value), True)


def needed_entities(world: World, task: Task) -> list[str]:
    """Keys of the documents a task needs, in gold-plan order, from its program."""
    keys: list[str] = []
    assert isinstance(task.solver, SyntheticSolver)
    for chain in task.solver.program.chains:
        start = world.find(chain.start.name, chain.start.type)
        for entity in walk(world, start, chain.relations):
            if entity.key not in keys:
                keys.append(entity.key)
    return keys


@pytest.fixture(scope="module")
def default_world() -> World:
    return generate_world(0)


@pytest.fixture(scope="module")
def default_tasks(default_world: World) -> list[Task]:
    return generate_tasks(default_world)


@pytest.fixture(scope="module")
def small_worlds() -> list[tuple[World, list[Task]]]:
    worlds = [generate_world(seed, WorldConfig.small()) for seed in range(N_SMALL_WORLDS)]
    return [(w, generate_tasks(w, per_bucket=SMALL_TASKS_PER_BUCKET)) for w in worlds]


# -- world --------------------------------------------------------------------------------------
def test_same_seed_same_world_and_corpus() -> None:
    a, b = generate_world(7, WorldConfig.small()), generate_world(7, WorldConfig.small())
    assert a.corpus.corpus_id == b.corpus.corpus_id
    assert a.corpus.documents == b.corpus.documents
    assert [t.question for t in generate_tasks(a, 5)] == [t.question for t in generate_tasks(b, 5)]


def test_different_seeds_differ(default_world: World) -> None:
    other = generate_world(1)
    assert other.corpus.corpus_id != default_world.corpus.corpus_id
    assert {e.name for e in other.entities} != {e.name for e in default_world.entities}


def test_default_world_has_every_type_and_confusable_distractors(default_world: World) -> None:
    counts = collections.Counter(e.type for e in default_world.entities)
    assert set(counts) == {"person", "city", "country", "organisation", "film", "novel", "album"}
    assert 200 <= sum(counts.values()) <= 600
    titles = [d.title for d in default_world.corpus.documents]
    assert len(set(titles)) == len(titles)
    assert any(re.search(r" \((film|novel|album)\)$", t) for t in titles)  # disambiguated names
    surnames = collections.Counter(e.name.split()[1] for e in default_world.of_type("person"))
    assert max(surnames.values()) >= 2  # families share a surname
    cities = {e.name for e in default_world.of_type("city")}
    orgs = default_world.of_type("organisation")
    assert any(o.name.split()[0] in cities for o in orgs)  # organisations named after cities


def test_reader_is_the_inverse_of_the_documents(
    default_world: World, small_worlds: list[tuple[World, list[Task]]]
) -> None:
    for world in [default_world, *(w for w, _ in small_worlds[:10])]:
        for entity in world.entities:
            doc = world.document(entity.key)
            expected = {(entity.name, "type", entity.type)}
            expected |= {(entity.name, r, world.value_text(entity, r)) for r in entity.attributes}
            assert set(extract_facts(doc.title, doc.text)) == expected, doc.contents


def test_paraphrases_vary_across_documents(default_world: World) -> None:
    born = [d.text for d in default_world.corpus.documents if d.doc_id.startswith("person")]
    assert any("was born in the year" in t for t in born)
    assert any("The birth year of" in t for t in born)


def test_reader_reads_complete_sentences_of_truncated_text(default_world: World) -> None:
    for entity in default_world.entities[::37]:
        doc = default_world.document(entity.key)
        full = set(extract_facts(doc.title, doc.text))
        for cut in range(0, len(doc.text), 3):
            for marker in ("", "...", " [truncated]", "…"):
                shortened = doc.text[:cut] + marker
                facts = set(extract_facts(doc.title, shortened))
                assert facts <= full
                whole = doc.text[: doc.text.rfind(". ", 0, cut + 1) + 1]
                assert (
                    set(extract_facts(doc.title, whole)) - {f for f in full if f[1] == "type"}
                    <= facts
                )


# -- tasks --------------------------------------------------------------------------------------
def test_every_kind_and_hop_count_exists(default_tasks: list[Task]) -> None:
    buckets = collections.Counter((t.kind, t.hops) for t in default_tasks)
    expected = {("bridge", h) for h in (1, 2, 3, 4)}
    expected |= {(k, h) for k in ("comparison", "arithmetic") for h in (2, 3, 4)}
    assert set(buckets) == expected
    for task in default_tasks:
        searches = [s for s in task.gold_plan if s.tool == "Search"]
        assert len(searches) == task.hops
        assert {s.tool for s in task.gold_plan} <= {"Search", "Calculator"}
        assert (task.gold_plan[-1].tool == "Calculator") == (task.kind == "arithmetic")
        assert task.corpus is not None and task.solver is not None and task.sub_questions
        assert task.constraints and task.metadata["answer_type"]
        if task.metadata["answer_type"] in ("year", "number"):
            assert all(re.fullmatch(r"\d+", a) for a in task.gold_answers)


def test_several_phrasings_per_question_type(default_tasks: list[Task]) -> None:
    phrasings = collections.defaultdict(set)
    for task in default_tasks:
        phrasings[task.kind].add(task.metadata["phrasing"])
    assert all(len(p) >= 2 for p in phrasings.values())


def test_sub_questions_do_not_leak_intermediate_answers(
    default_world: World, default_tasks: list[Task]
) -> None:
    for task in default_tasks:
        for key in needed_entities(default_world, task):
            name = default_world.entity(key).name
            if name not in task.question:
                assert not any(name in q for q in task.sub_questions), task.sub_questions
        answer = task.gold_answers[0]
        if task.kind == "bridge" and answer not in task.question:
            assert not any(answer in q for q in task.sub_questions)


def test_gold_answers_follow_from_the_gold_plan_top3(
    default_world: World,
    default_tasks: list[Task],
    small_worlds: list[tuple[World, list[Task]]],
) -> None:
    for world, tasks in [(default_world, default_tasks), *small_worlds]:
        index = TopThree(world.corpus)
        queries = {search_query(e.type, e.name): e.key for e in world.entities}
        assert len(queries) == len(world.entities)  # a plan query names one entity
        for task in tasks:
            evidence = []
            for step in task.gold_plan:
                if step.tool == "Search":
                    hits = index.search(step.context)
                    assert queries[step.context] in [d.doc_id for d in hits], step.context
                    evidence.append(search_evidence(hits, step.context))
            if task.kind == "arithmetic":
                evidence.append(calculator_evidence(task))
            assert task.solver is not None
            assert task.solver.solve(evidence) in task.gold_answers, task.question


def test_solver_needs_every_document_and_the_calculator(
    default_world: World, default_tasks: list[Task]
) -> None:
    for task in default_tasks[::7]:
        assert task.solver is not None
        docs = [default_world.document(k) for k in needed_entities(default_world, task)]
        extra = [calculator_evidence(task)] if task.kind == "arithmetic" else []
        evidence = [search_evidence([d]) for d in docs] + extra
        assert task.solver.solve(evidence) in task.gold_answers
        for missing in range(len(docs)):
            partial = evidence[:missing] + evidence[missing + 1 :]
            assert task.solver.solve(partial) is None
        if task.kind == "arithmetic":
            assert task.solver.solve(evidence[:-1]) is None
            wrong = Evidence("Calculator", {"expression": "1 + 1"}, "123456789", True)
            assert task.solver.solve([*evidence[:-1], wrong]) is None
            failed = Evidence("Calculator", {}, evidence[-1].output, False)
            assert task.solver.solve([*evidence[:-1], failed]) is None


def test_solver_does_not_use_a_distractor(default_world: World) -> None:
    checked: collections.Counter[tuple[str, bool]] = collections.Counter()
    for key, others in default_world.confusables.items():
        target = default_world.entity(key)
        relations = [r for r in target.attributes if r not in ("occupation", "org_kind")]
        for relation in relations:
            solver = SyntheticSolver(
                Program(
                    "bridge", "lookup", (Chain(EntityRef(target.name, target.type), (relation,)),)
                )
            )
            own = search_evidence([default_world.document(key)])
            assert solver.solve([own]) == default_world.value_text(target, relation)
            distractors = [default_world.document(k) for k in others]
            assert solver.solve([search_evidence(distractors)]) is None
            checked[(target.type, target.name == default_world.entity(others[0]).name)] += 1
    assert checked[("city", False)] and checked[("person", False)]  # shared tokens
    assert checked[("film", True)] or checked[("novel", True)] or checked[("album", True)]


def test_solver_ignores_failed_and_non_search_evidence(default_tasks: list[Task]) -> None:
    task = next(t for t in default_tasks if t.hops == 1)
    assert task.corpus is not None and task.solver is not None
    documents = task.corpus.documents
    output = format_documents(documents)
    assert task.solver.solve([Evidence("Search", {}, output, False)]) is None
    assert task.solver.solve([Evidence("Other", {}, output, True)]) is None
    assert task.solver.solve([Evidence("Search", {}, output, True)]) in task.gold_answers


def test_read_evidence_gives_a_fresh_table_each_time(default_tasks: list[Task]) -> None:
    """Each output's facts are read once and cached; the tables built from them are new per
    call, so a caller changing one changes no other read."""
    task = next(t for t in default_tasks if t.hops == 2)
    assert task.corpus is not None
    evidence = [Evidence("Search", {}, format_documents(task.corpus.documents[:3]), True)]
    first = read_evidence(evidence)
    assert first
    for facts in first.values():
        facts.clear()
    second = read_evidence(evidence)
    assert second != first and all(second.values())
    assert read_evidence(evidence * 2) == second


def test_solver_is_small_and_picklable(default_tasks: list[Task]) -> None:
    task = default_tasks[-1]
    blob = pickle.dumps(task.solver)
    assert len(blob) < 2000
    assert pickle.loads(blob) == task.solver


def test_splits_are_disjoint(default_tasks: list[Task]) -> None:
    by_split: dict[str, list[Task]] = collections.defaultdict(list)
    for task in default_tasks:
        by_split[task.split].append(task)
    train, test = by_split["train"], by_split["test"]
    assert len(test) > 0.1 * len(default_tasks) and len(train) > 0.6 * len(default_tasks)
    keys = {s: {t.metadata["program_key"] for t in ts} for s, ts in by_split.items()}
    assert not keys["train"] & keys["test"]
    assert not {t.question for t in train} & {t.question for t in test}


# -- source -------------------------------------------------------------------------------------
def test_source_filters_shares_the_corpus_and_samples_reproducibly() -> None:
    source = SyntheticTaskSource(hops=[3, 4], kinds=["bridge"])
    assert len(source) > 50
    drawn = [source.sample(np.random.default_rng(5)) for _ in range(3)]
    assert len({t.task_id for t in drawn}) == 1
    tasks = [source.sample(np.random.default_rng(i)) for i in range(30)]
    assert all(t.kind == "bridge" and t.hops in (3, 4) and t.split == "train" for t in tasks)
    assert len({id(t.corpus) for t in tasks}) == 1
    test_source = SyntheticTaskSource(hops=[3, 4], kinds=["bridge"], split="test")
    assert test_source.tasks[0].corpus is source.tasks[0].corpus
    assert not {t.task_id for t in source.tasks} & {t.task_id for t in test_source.tasks}


def test_source_rejects_impossible_filters() -> None:
    with pytest.raises(ValueError, match="no synthetic questions"):
        SyntheticTaskSource(hops=1, kinds=["comparison"])
    with pytest.raises(ValueError, match="split"):
        SyntheticTaskSource(split="validation")
    with pytest.raises(ValueError, match="unknown kinds"):
        SyntheticTaskSource(kinds=["trivia"])


def test_fresh_worlds_are_new_reproducible_and_split_by_seed() -> None:
    train = SyntheticTaskSource(fresh_world=True, hops=2)
    a = [train.sample(np.random.default_rng(3)) for _ in range(2)]
    assert a[0].question == a[1].question and a[0].corpus == a[1].corpus
    rng = np.random.default_rng(0)
    tasks = [train.sample(rng) for _ in range(8)]
    assert len({t.corpus.corpus_id for t in tasks if t.corpus}) == len(tasks)
    assert all(t.hops == 2 and t.split == "train" for t in tasks)
    assert all(t.metadata["world_seed"] % 2 == 0 for t in tasks)
    test = SyntheticTaskSource(fresh_world=True, split="test")
    assert all(test.sample(rng).metadata["world_seed"] % 2 == 1 for _ in range(5))
    for task in tasks:  # a fresh world's gold plan still answers its question
        assert task.corpus is not None and task.solver is not None
        index = TopThree(task.corpus)
        evidence = [
            search_evidence(index.search(s.context))
            if s.tool == "Search"
            else calculator_evidence(task)
            for s in task.gold_plan
        ]
        assert task.solver.solve(evidence) in task.gold_answers


def test_training_text_has_documents_and_questions() -> None:
    texts = list(training_text(2))
    assert len(texts) > 500
    assert any(t.endswith("?") for t in texts)
    assert any("\n" in t for t in texts)


def test_arithmetic_stops_at_the_first_calculation_over_the_facts_right_or_wrong() -> None:
    """The verifier never tells a wrong Calculator result from a right one: one scored answer."""
    import gymnasium as gym

    from agentflow_env.workflow.actions import format_planner_action

    env = gym.make("AgentFlow-Search-v0", kinds="arithmetic", hops=2)
    env.reset(seed=3)
    task = env.unwrapped.task
    for step in task.gold_plan[:-1]:
        _, _, terminated, _, _ = env.step(format_planner_action("", step.context, "s", step.tool))
        assert not terminated
    gold_expression = task.gold_plan[-1].context
    # A bare guess that does not write the retrieved numbers is not a calculation over them.
    _, _, terminated, _, _ = env.step(format_planner_action("", "1 + 1", "guess", "Calculator"))
    assert not terminated
    wrong = f"{gold_expression} + 1"  # writes every operand, gives a wrong number
    _, reward, terminated, _, info = env.step(format_planner_action("", wrong, "s", "Calculator"))
    assert terminated and reward == 0.0 and not info["success"]
    env.close()
