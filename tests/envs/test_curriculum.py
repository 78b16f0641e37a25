"""The ``Curriculum`` wrapper and the synthetic world's near-miss density (``distractors``)."""

from __future__ import annotations

import collections
import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.envs import DEFAULT_LEVELS, Curriculum
from agentflow_env.envs.config import CodeEnvConfig, SearchEnvConfig, UnknownSettingError
from agentflow_env.retrieval.corpus import Document, format_documents
from agentflow_env.retrieval.hybrid import get_searcher
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.tasks.base import Evidence, Task
from agentflow_env.tasks.synthetic import SyntheticSolver, WorldConfig, extract_facts
from agentflow_env.tasks.synthetic.documents import TITLE_NOUNS
from agentflow_env.tasks.synthetic.phrasing import search_query
from agentflow_env.tasks.synthetic.program import Chain, EntityRef, Program
from agentflow_env.tasks.synthetic.reader import split_title
from agentflow_env.tasks.synthetic.world import generate_world
from agentflow_env.workflow.actions import format_planner_action

SEARCH = "AgentFlow-Search-v0"
WRONG_ACTION = format_planner_action(
    justification="Guess.", context="nothing relevant", sub_goal="Guess.", tool_name="Calculator"
)
"""A turn that never gathers evidence: an episode of them fails."""


def small(distractors: float) -> WorldConfig:
    return dataclasses.replace(WorldConfig.small(), distractors=distractors)


def make(levels: Any = None, **settings: Any) -> Curriculum:
    """A curriculum over fresh small worlds; ``settings`` go to the wrapper."""
    return Curriculum(gym.make(SEARCH, fresh_world=True, max_turns=4), levels, **settings)


def play(env: gym.Env, action: Any = None, seed: int | None = None) -> tuple[Task, dict, list]:
    """One episode: the expert's actions, or ``action`` every turn. Returns the task, the final
    info and every info's curriculum report (reset first)."""
    _, info = env.reset(seed=seed)
    reports = [info.get("curriculum")]
    expert = ExpertPlanner(env)
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(action or expert.act())
        reports.append(info.get("curriculum"))
        done = terminated or truncated
    return env.unwrapped.task, info, reports


# -- the distractor knob ----------------------------------------------------------------------
def test_default_worlds_are_unchanged_by_the_knob() -> None:
    # Corpus fingerprints measured before the setting existed.
    assert generate_world(0).corpus.corpus_id == "d996935b3016d0fc"
    assert generate_world(0, WorldConfig.small()).corpus.corpus_id == "b5195d6719e33570"
    for seed in range(3):
        before = generate_world(seed, WorldConfig.small())
        after = generate_world(seed, small(0.0))
        assert after.corpus.documents == before.corpus.documents
        assert after.entities == before.entities and not after.near_misses
    assert SearchEnvConfig(distractors=0).make_task_source() is SearchEnvConfig().make_task_source()


def test_more_distractors_add_near_miss_twins_around_an_unchanged_world() -> None:
    base = generate_world(4, WorldConfig.small())
    worlds = [generate_world(4, small(d)) for d in (0.25, 0.5, 1.0)]
    counts = [len(w.near_misses) for w in worlds]
    assert 0 < counts[0] < counts[1] < counts[2]
    originals = [set(w.near_misses.values()) for w in worlds]
    assert originals[0] <= originals[1] <= originals[2]
    for world in worlds:
        n = len(base.corpus.documents)
        assert world.corpus.documents[:n] == base.corpus.documents  # twins come after
        assert len(world.corpus.documents) == n + len(world.near_misses)
        for twin_key, original_key in world.near_misses.items():
            twin, original = world.entity(twin_key), world.entity(original_key)
            assert twin.type == original.type and twin.name != original.name
            assert set(twin.name.split()) & set(original.name.split()) - {"The", "of"}
            assert original_key in world.confusables[twin_key]
    names = collections.Counter(e.name for e in worlds[2].entities)
    assert all(names[worlds[2].entity(key).name] == 1 for key in worlds[2].near_misses)


def test_twins_read_back_exactly_and_never_answer_for_their_original() -> None:
    world = generate_world(1, small(1.0))
    checked = collections.Counter()
    for twin_key, original_key in world.near_misses.items():
        twin, original = world.entity(twin_key), world.entity(original_key)
        doc = world.document(twin_key)
        expected = {(twin.name, "type", twin.type)}
        expected |= {(twin.name, r, world.value_text(twin, r)) for r in twin.attributes}
        assert set(extract_facts(doc.title, doc.text)) == expected
        for relation in original.attributes:
            chain = Chain(EntityRef(original.name, original.type), (relation,))
            solver = SyntheticSolver(Program("bridge", "lookup", (chain,)))
            evidence = _search_evidence(doc.title, doc.text)
            assert solver.solve([evidence]) is None
        checked[twin.type] += 1
    assert {"person", "organisation"} <= set(checked) and len(checked) >= 4


def _search_evidence(title: str, text: str) -> Evidence:
    output = format_documents([Document("d", title, text)])
    return Evidence("Search", {"query": title}, output, True)


def test_twins_crowd_the_search_results_while_the_gold_document_stays_first() -> None:
    rates = {}
    for density in (0.0, 1.0):
        first = with_twin = searched = 0
        for seed in range(6):
            world = generate_world(seed, small(density))
            twins_of: dict[str, set[str]] = collections.defaultdict(set)
            for twin, original in world.near_misses.items():
                twins_of[original].add(twin)
            for entity in world.entities:
                if entity.key in world.near_misses or entity.type in ("city", "country"):
                    continue
                searcher = get_searcher(world.corpus, "bm25")
                hits = searcher.search(search_query(entity.type, entity.name), 3)
                ids = [doc.doc_id for doc, _ in hits]
                searched += 1
                first += ids[0] == entity.key
                with_twin += bool(twins_of[entity.key] & set(ids))
        rates[density] = (first / searched, with_twin / searched)
    assert rates[0.0][1] == 0.0
    assert rates[1.0][1] >= 0.4  # measured 0.57 over 20 worlds
    assert rates[1.0][0] >= 0.97  # measured 0.99


@pytest.mark.parametrize("fresh_world", [True, False])
def test_the_expert_and_the_rule_modules_still_solve_distractor_tasks(fresh_world: bool) -> None:
    env = gym.make(SEARCH, fresh_world=fresh_world, distractors=1.0, hops=[2, 3, 4])
    outcomes = [play(env, seed=seed)[1]["success"] for seed in range(50)]
    assert sum(outcomes) >= 45  # measured 50 of 50
    env.close()


def test_the_setting_is_checked_and_only_goes_with_the_synthetic_world(tmp_path: Path) -> None:
    config = SearchEnvConfig(distractors=0.5, fresh_world=True)
    assert SearchEnvConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    for bad in (1.5, -0.1, True, "half"):
        with pytest.raises(ValueError, match=r"^distractors .*must be a number in \[0, 1\]"):
            SearchEnvConfig(distractors=bad)
    with pytest.raises(ValueError, match=r"distractors must be in \[0, 1\]"):
        WorldConfig(distractors=2.0)
    with pytest.raises(ValueError, match="^distractors= only apply to the synthetic world"):
        SearchEnvConfig(distractors=0.5, tasks=[Task("t", "q?", ("a",))])
    with pytest.raises(UnknownSettingError, match="^AgentFlow-Code-v0 does not use distractors="):
        CodeEnvConfig.from_kwargs(distractors=0.5)


# -- the curriculum ---------------------------------------------------------------------------
def test_promotes_when_the_running_rate_crosses_the_threshold_and_logs_it() -> None:
    levels = [{"hops": 1}, {"hops": 2}, {"hops": 3}]
    env = make(levels, promote_at=0.7, window=4)
    _, info = env.reset(seed=0)
    assert info["curriculum"] == {
        "level": 0,
        "settings": {"hops": 1},
        "running_success": 0.0,
        "episodes_at_level": 0,
        "next_level": 0,
    }
    finals = []
    for seed in range(1, 10):
        _, final, reports = play(env, seed=seed)
        assert all(r["level"] == reports[0]["level"] for r in reports)
        assert all(r["next_level"] == r["level"] for r in reports[:-1])
        finals.append(reports[-1])
    # Each level needs min_episodes (= window) expert successes, then moves up; the top stays.
    assert [r["level"] for r in finals] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert [r["next_level"] for r in finals] == [0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert finals[3]["episodes_at_level"] == 4 and finals[3]["running_success"] == 1.0
    assert env.level == 2 and env.settings == {"hops": 3} and env.episodes == 9
    _, info = env.reset(seed=99)
    assert info["curriculum"]["level"] == 2 and info["curriculum"]["episodes_at_level"] == 1
    env.close()


def test_failures_hold_a_level_and_demote_when_asked() -> None:
    env = make([{"hops": 1}, {"hops": 2}], promote_at=0.75, window=4, demote_at=0.5)
    for seed in range(4):
        play(env, seed=seed)
    assert env.level == 1
    # Two successes and two failures: 0.5 is neither >= 0.75 nor < 0.5, so the level holds.
    outcomes = [play(env, WRONG_ACTION if i % 2 else None, seed=10 + i)[1] for i in range(4)]
    assert [o["success"] for o in outcomes] == [True, False, True, False]
    assert env.level == 1 and env.running_success == 0.5
    # One more failure slides the window to [F, T, F, F]: 0.25 < 0.5, so down a level.
    _, final, reports = play(env, WRONG_ACTION, seed=30)
    assert not final["success"]
    assert reports[-1]["level"] == 1 and reports[-1]["running_success"] == 0.25
    assert reports[-1]["next_level"] == 0
    assert env.level == 0 and env.running_success == 0.0
    env.close()
    never = make([{"hops": 1}, {"hops": 2}], window=2)
    for seed in range(3):
        play(never, WRONG_ACTION, seed=seed)
    assert never.level == 0  # no demote_at: failures never move it, not below level 0 anyway
    never.close()


def near_miss_documents(task: Task) -> int:
    """Documents of the task's corpus that share a name part with a document the gold plan
    searches for, without being it."""
    assert task.corpus is not None
    wanted = set()
    for step in task.gold_plan:
        if step.tool == "Search":
            words = step.context.split()
            wanted.add(" ".join(w for w in words if w not in ("film", "novel", "album")))
    parts = {w for name in wanted for w in name.split()} - {"The", "of", *TITLE_NOUNS}
    names = [split_title(doc.title)[0] for doc in task.corpus.documents]
    return sum(1 for name in names if name not in wanted and set(name.split()) & parts)


def test_a_level_settings_change_the_tasks_it_samples() -> None:
    levels = [{"hops": 1}, {"hops": 3}, {"hops": 3, "distractors": 1.0}]
    env = make(levels, window=8)
    tasks = [[play(env, seed=seed)[0] for seed in range(8)] for _ in levels]
    assert env.level == 2
    searches = [[sum(s.tool == "Search" for s in t.gold_plan) for t in level] for level in tasks]
    assert searches == [[1] * 8, [3] * 8, [3] * 8]
    assert [[t.hops for t in level] for level in tasks] == searches
    sizes = [{len(t.corpus.documents) for t in level if t.corpus is not None} for level in tasks]
    assert sizes[0] == sizes[1] == {53} and min(sizes[2]) > 80
    near = [sum(near_miss_documents(t) for t in level) for level in tasks[1:]]
    assert near[1] > 2 * near[0]  # measured 27 against 11 near-miss documents
    env.close()


def test_an_empty_level_samples_what_the_env_itself_would() -> None:
    plain = gym.make(SEARCH, fresh_world=True, hops=2)
    wrapped = Curriculum(gym.make(SEARCH, fresh_world=True, hops=2), [{}])
    for seed in (0, 5):
        plain.reset(seed=seed)
        wrapped.reset(seed=seed)
        assert wrapped.unwrapped.task.task_id == plain.unwrapped.task.task_id
    plain.close()
    wrapped.close()


def run_script(env: Curriculum, seeds: list[int | None]) -> list[tuple[str, int, bool]]:
    """Episodes with a fixed pattern of actions: expert, except every third fails."""
    out = []
    for i, seed in enumerate(seeds):
        task, final, reports = play(env, WRONG_ACTION if i % 3 == 2 else None, seed=seed)
        out.append((task.task_id, reports[-1]["next_level"], final["success"]))
    return out


def test_same_seeds_and_actions_give_the_same_tasks_and_level_changes() -> None:
    seeds: list[int | None] = [7, *[None] * 11]
    settings: dict[str, Any] = {"window": 3, "promote_at": 0.6, "demote_at": 0.4}
    first = run_script(make(DEFAULT_LEVELS[:3], **settings), seeds)
    second = run_script(make(DEFAULT_LEVELS[:3], **settings), seeds)
    assert first == second
    assert len({task_id for task_id, _, _ in first}) == len(first)
    assert {level for _, level, _ in first} >= {0, 1}  # the levels did move
    other = run_script(make(DEFAULT_LEVELS[:3], **settings), [8, *[None] * 11])
    assert [t for t, _, _ in other] != [t for t, _, _ in first]


def test_state_round_trip_resumes_the_same_curriculum() -> None:
    settings: dict[str, Any] = {"window": 3, "promote_at": 0.6, "demote_at": 0.4}
    original = make(DEFAULT_LEVELS[:3], **settings)
    run_script(original, [3, None, None, None])
    saved = json.loads(json.dumps(original.state_dict()))
    assert saved["level"] == original.level and saved["episodes"] == 4
    resumed = make(DEFAULT_LEVELS[:3], **settings)
    resumed.load_state_dict(saved)
    assert resumed.state_dict() == original.state_dict()
    assert run_script(resumed, [None] * 6) == run_script(original, [None] * 6)
    assert resumed.state_dict() == original.state_dict()
    mismatched = make(DEFAULT_LEVELS[:2], **settings)
    with pytest.raises(ValueError, match="saved with levels"):
        mismatched.load_state_dict(saved)


def test_a_given_task_runs_but_does_not_count() -> None:
    env = make([{"hops": 1}, {"hops": 2}], window=1)
    task = gym.make(SEARCH, hops=2).unwrapped.task_source.sample(np.random.default_rng(0))
    env.reset(seed=0, options={"task": task})
    assert env.unwrapped.task is task
    done = False
    expert = ExpertPlanner(env)
    while not done:
        _, _, terminated, truncated, info = env.step(expert.act())
        done = terminated or truncated
    assert info["success"] and info["curriculum"]["episodes_at_level"] == 0
    assert env.level == 0 and env.episodes == 0
    env.reset(seed=1)  # an episode abandoned by a reset does not count either
    env.step(WRONG_ACTION)
    env.reset(seed=2)
    assert env.episodes == 0


def test_passes_the_gymnasium_checker() -> None:
    env = make(window=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    messages = [str(w.message) for w in caught]
    # The checker always notes that it was given a wrapper; nothing else may come up.
    assert [m for m in messages if "different from the unwrapped version" not in m] == []
    env.close()


def _dataset_env(tmp_path: Path) -> gym.Env:
    qa = tmp_path / "qa.jsonl"
    rows = [
        {"id": f"q{i}", "question": f"Question {i}?", "golden_answers": ["x"]} for i in range(3)
    ]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "contents": "Title\nSome text."}) + "\n")
    return gym.make(SEARCH, dataset=str(qa), corpus=str(corpus), index_cache_dir=str(tmp_path))


def test_bad_levels_and_settings_are_refused_at_construction(tmp_path: Path) -> None:
    cases: list[tuple[Any, dict[str, Any], str]] = [
        ([{"max_turns": 3}], {}, r"^curriculum level 0 names max_turns=, which is not a task"),
        ([{"hops": 1}, {"hops": 9}], {}, r"^curriculum level 1 .*hops .*must be among"),
        ([{"distractors": 2}], {}, r"^curriculum level 0 .*distractors .*\[0, 1\]"),
        ([{"hops": 1, "kinds": "comparison"}], {}, r"^curriculum level 0 .*no synthetic question"),
        ([], {}, "at least one level"),
        ({"hops": 1}, {}, "levels must be a list"),
        (["hops"], {}, "level 0 must map setting names"),
        (None, {"promote_at": 0}, r"promote_at must be a success rate in \(0, 1\]"),
        (None, {"demote_at": 0.8}, r"demote_at must be None or a success rate"),
        (None, {"window": 0}, "window must be an integer >= 1"),
        (None, {"min_episodes": 1.5}, "min_episodes must be an integer >= 1"),
    ]
    for levels, settings, message in cases:
        with pytest.raises(ValueError, match=message):
            make(levels, **settings)
    code = gym.make("AgentFlow-Code-v0", kinds="compute")
    with pytest.raises(ValueError, match="^curriculum level 0 names hops=, distractors=, which"):
        Curriculum(code)  # the default ladder is for the synthetic world
    assert Curriculum(code, [{"split": "train"}, {"split": "test"}]).level == 0
    dataset = _dataset_env(tmp_path)
    with pytest.raises(ValueError, match=r"^curriculum level 0 .*hops= only apply to the synth"):
        Curriculum(dataset, [{"hops": 1}])
    limited = Curriculum(dataset, [{"dataset_limit": 1}, {"dataset_limit": 3}])
    assert [len(source) for source in limited.sources] == [1, 3]
    with pytest.raises(TypeError, match="expected an AgentFlowEnv"):
        Curriculum(gym.make("CartPole-v1"))
