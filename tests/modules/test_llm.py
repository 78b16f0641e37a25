"""LLM-backed modules, judge and planners against a real local server with scripted replies."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import gymnasium as gym
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import FakeOpenAIServer, Reply, bounded, generic_responder, task_responder  # noqa: E402

from agentflow_env.envs.env import AgentFlowEnv  # noqa: E402
from agentflow_env.llm import LLMEndpoint, LLMJudge  # noqa: E402
from agentflow_env.llm.prompts import parse_judgement  # noqa: E402
from agentflow_env.modules import Modules, build_modules  # noqa: E402
from agentflow_env.modules.llm import (  # noqa: E402
    NO_VERDICT_NOTE,
    LLMExecutor,
    LLMInitializer,
    LLMVerifier,
)
from agentflow_env.modules.prompts import (  # noqa: E402
    extract_short_answer,
    parse_json_objects,
    parse_query_analysis,
)
from agentflow_env.retrieval.corpus import Corpus, Document  # noqa: E402
from agentflow_env.rollout.agents.episodes import run_episode  # noqa: E402
from agentflow_env.rollout.agents.planners import ExpertPlanner  # noqa: E402
from agentflow_env.tasks.base import PlanStep, Task  # noqa: E402
from agentflow_env.tools.registry import ToolSet, make_tool  # noqa: E402
from agentflow_env.workflow.actions import PlannerAction, format_planner_action  # noqa: E402
from agentflow_env.workflow.config import RewardConfig  # noqa: E402
from agentflow_env.workflow.memory import Memory  # noqa: E402
from agentflow_env.workflow.session import Session, SessionConfig  # noqa: E402

T = TypeVar("T")

CORPUS = Corpus.from_documents(
    [
        Document(
            "d1", "Blue Harbor", "Blue Harbor is a film directed by Ana Lim, released in 1998."
        ),
        Document("d2", "Ana Lim", "Ana Lim is a film director born in Port Ellis."),
        Document("d3", "Port Ellis", "Port Ellis is a city in Veldara with 41000 inhabitants."),
        Document("d4", "Red Meadow", "Red Meadow is a novel written by Tomas Evander."),
    ]
)
ONE_HOP = Task(
    "one-hop",
    "Who directed Blue Harbor?",
    ("Ana Lim",),
    corpus=CORPUS,
    sub_questions=("Who directed Blue Harbor?",),
    gold_plan=(PlanStep("Search", "Find the director of Blue Harbor.", "Blue Harbor"),),
)
TWO_HOP = Task(
    "two-hop",
    "Where was the director of Blue Harbor born?",
    ("Port Ellis",),
    corpus=CORPUS,
    hops=2,
    sub_questions=("Who directed Blue Harbor?", "Where was that person born?"),
    gold_plan=(
        PlanStep("Search", "Find the director of Blue Harbor.", "Blue Harbor"),
        PlanStep("Search", "Find where Ana Lim was born.", "Ana Lim"),
    ),
)
TASKS = (ONE_HOP, TWO_HOP)


def within(timeout_s: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a synchronous call (a whole episode) in a worker thread; fail instead of hanging."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args, **kwargs).result(timeout=timeout_s)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(task_responder(TASKS)) as srv:
        yield srv


def endpoint_for(server: FakeOpenAIServer, **options: Any) -> LLMEndpoint:
    defaults: dict[str, Any] = dict(timeout_s=0.5, max_retries=1, backoff_s=0.01)
    return LLMEndpoint(server.base_url, "fake", **{**defaults, **options})


def expert_action(task: Task, turn: int) -> str:
    step = task.gold_plan[min(turn, len(task.gold_plan) - 1)]
    return format_planner_action(
        justification="Follow the plan.",
        context=step.context,
        sub_goal=step.sub_goal,
        tool_name=step.tool,
    )


def new_session(modules: Modules, task: Task, **config: Any) -> Session:
    env = AgentFlowEnv(tasks=TASKS, modules=modules)
    return Session(
        task,
        tools=env.tools,
        modules=env.modules,
        tokenizer=env.tokenizer,
        config=SessionConfig(**config),
    )


async def play(session: Session) -> dict[str, Any]:
    """The expert plan through the async session API; returns the final info."""
    await session.start()
    while True:
        outcome = await session.step(expert_action(session.task, session.turn))
        if outcome.terminated or outcome.truncated:
            return outcome.info


def events(session: Session, kind: str) -> list[dict[str, Any]]:
    return [dict(e.payload) for e in session.memory.events if e.kind == kind]


# -- outcomes match the rule modules ------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.task_id)
def test_llm_modules_reach_the_rule_modules_outcome(server, task):
    rule = bounded(play(new_session(build_modules("rule"), task)))
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), task)
    llm = bounded(play(session))
    keys = ("answer", "success", "end_reason", "reward", "turn")
    assert {k: llm[k] for k in keys} == {k: rule[k] for k in keys}
    assert llm["success"] and llm["end_reason"] == "verifier_stop"
    assert [e["module"] for e in events(session, "module_output")] == (
        ["executor"] * task.hops + ["generalist"]
    )
    analysis = events(session, "analysis")[0]["analysis"]
    assert analysis["raw"] and analysis["meta"]["attempts"] == 1
    assert all(v["raw"].endswith(("STOP", "CONTINUE")) for v in events(session, "verification"))


@pytest.mark.parametrize(
    ("hops", "kind"), [(1, "bridge"), (2, "comparison"), (2, "arithmetic"), (3, "bridge")]
)
def test_synthetic_world_outcomes_match_the_rule_modules(server, hops, kind):
    settings: dict[str, Any] = {"hops": hops, "kinds": kind, "split": "test"}
    rule_env = gym.make("AgentFlow-Search-v0", **settings)
    llm_env = gym.make(
        "AgentFlow-Search-v0",
        modules=build_modules("llm", endpoint=endpoint_for(server)),
        **settings,
    )
    current = llm_env.unwrapped
    server.responder = task_responder(
        lambda q: current.task if current.task.question == q else None
    )
    keys = ("task_id", "answer", "success", "reward", "end_reason", "actions")
    for seed in range(5):
        rule = within(20, run_episode, rule_env, ExpertPlanner(rule_env), seed=seed)
        llm = within(20, run_episode, llm_env, ExpertPlanner(llm_env), seed=seed)
        assert {k: getattr(llm, k) for k in keys} == {k: getattr(rule, k) for k in keys}
        assert [e["tool_arguments"] for e in llm.memory] == [
            e["tool_arguments"] for e in rule.memory
        ]
        assert llm.success and llm.end_reason == "verifier_stop"
    rule_env.close()
    llm_env.close()


def test_sync_env_with_mixed_backends(server):
    modules = build_modules(
        {"verifier": endpoint_for(server), "generalist": "llm"}, endpoint=endpoint_for(server)
    )
    assert type(modules.executor).__name__ == "RuleExecutor"
    env = AgentFlowEnv(tasks=[TWO_HOP], modules=modules)
    record = within(20, run_episode, env, ExpertPlanner(env), seed=0)
    env.close()
    assert record.success and record.end_reason == "verifier_stop" and record.answer == "Port Ellis"
    assert server.roles().count("verifier") == 2 and server.roles().count("generalist") == 1


def test_modules_llm_reads_the_endpoint_from_environment_variables(server, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", "http://127.0.0.1:9/v1")  # unreachable
    monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "shared-model")
    monkeypatch.setenv("AGENTFLOW_LLM_TIMEOUT_S", "2")
    for role in ("INITIALIZER", "EXECUTOR", "VERIFIER", "GENERALIST"):
        monkeypatch.setenv(f"AGENTFLOW_{role}_BASE_URL", server.base_url)
    env = gym.make("AgentFlow-Search-v0", tasks=[ONE_HOP], modules="llm")
    record = within(20, run_episode, env, ExpertPlanner(env), seed=0)
    env.close()
    assert record.success and len(server.requests) == 4
    assert {r["model"] for r in server.requests} == {"shared-model"}


def test_many_sessions_share_one_client_on_one_loop(server):
    server.delay_s = 0.05
    modules = build_modules("llm", endpoint=endpoint_for(server, timeout_s=5.0))

    async def all_of_them() -> list[dict[str, Any]]:
        sessions = [new_session(modules, TASKS[i % 2]) for i in range(16)]
        return await asyncio.gather(*(play(s) for s in sessions))

    infos = bounded(all_of_them())
    assert all(info["success"] for info in infos)


# -- every fault ends cleanly or is retried -------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [Reply.error(500), Reply.malformed(), Reply.slow(2.0)],
    ids=["http500", "malformed", "slow"],
)
def test_one_fault_per_role_is_retried(server, fault):
    for role in ("initializer", "executor", "verifier", "generalist"):
        server.push(fault, role=role)
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), ONE_HOP)
    info = bounded(play(session))
    assert info["success"] and not info["module_errors"]
    assert events(session, "analysis")[0]["analysis"]["meta"]["attempts"] == 2
    assert all(e["attempts"] == 2 for e in events(session, "module_output"))


@pytest.mark.parametrize("role", ["executor", "verifier", "generalist"])
def test_a_module_failing_every_retry_ends_the_episode_cleanly(server, role):
    server.push(Reply.error(500), Reply.malformed(), role=role)
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), TWO_HOP)
    info = bounded(play(session))
    assert session.done and not info["success"] and info["answer"] is None
    if role == "generalist":  # the answer is written after the verifier's STOP on turn 2
        assert (info["turn"], info["end_reason"]) == (2, "verifier_stop")
    else:
        assert (info["turn"], info["end_reason"]) == (1, "module_error")
    errors = events(session, "module_error")
    assert [e["module"] for e in errors] == [role]
    assert "HTTP 500" in errors[0]["error"] and "malformed JSON" in errors[0]["error"]
    assert info["module_errors"] == [e["error"] for e in errors]


@pytest.mark.parametrize("role", ["executor", "verifier", "generalist"])
def test_an_empty_module_reply_is_its_recorded_failure_at_once(server, role):
    """A reply with no text is not asked for again (the same request would get it again)."""
    server.push(Reply(text="\n \n", finish_reason="length"), role=role)
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), TWO_HOP)
    info = bounded(play(session))
    if role == "generalist":
        assert (info["turn"], info["end_reason"]) == (2, "verifier_stop")
        assert info["answer"] is None
    else:
        assert (info["turn"], info["end_reason"]) == (1, "module_error")
    errors = events(session, "module_error")
    assert [e["module"] for e in errors] == [role]
    assert "empty or whitespace only" in errors[0]["error"]
    assert "finish_reason='length', 1 attempt(s)" in errors[0]["error"]


def test_initializer_failure_falls_back_to_the_bare_query(server):
    server.push(Reply.error(500), Reply.error(500), role="initializer")
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), ONE_HOP)
    info = bounded(play(session))
    assert info["success"]
    assert events(session, "module_error")[0]["module"] == "initializer"
    assert session.memory.analysis.objective == f"Answer the question: {ONE_HOP.question}"


def test_verdict_hidden_in_prose_is_found(server):
    server.push(
        Reply("Looking at step 1, the director is known, so my **conclusion: STOP** - done."),
        role="verifier",
    )
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), TWO_HOP)
    info = bounded(play(session))
    assert info["end_reason"] == "verifier_stop" and info["turn"] == 1


def test_bare_verdict_word_in_prose_is_found_and_noted(server):
    server.push(Reply("Everything needed is there, so the agent should STOP now."), role="verifier")
    verification = bounded(_verify_once(server))
    assert verification.stop and "read from prose" in verification.meta["note"]


def test_no_verdict_means_continue_with_a_note(server):
    server.push(Reply("I am not sure what to make of this."), role="verifier")
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), TWO_HOP)
    info = bounded(play(session))
    assert info["success"] and info["turn"] == 2  # turn 1 continued; turn 2 stopped
    first = events(session, "verification")[0]
    assert first["stop"] is False and NO_VERDICT_NOTE in first["rationale"]
    assert first["raw"] == "I am not sure what to make of this."


def test_cut_off_verifier_reply_continues_and_is_flagged(server):
    server.push(Reply.cut("Analysis: the memory shows the dire"), role="verifier")
    verification = bounded(_verify_once(server))
    assert not verification.stop and verification.meta["truncated"] is True
    assert verification.meta["note"] == NO_VERDICT_NOTE


async def _verify_once(server: FakeOpenAIServer) -> Any:
    memory = Memory(ONE_HOP.question)
    return await LLMVerifier(endpoint_for(server)).verify(ONE_HOP, memory)


def test_cut_off_generalist_reply_is_used_and_flagged(server):
    server.push(Reply.cut("The film was directed by Ana Lim, who"), role="generalist")
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), ONE_HOP)
    info = bounded(play(session))
    assert info["final_text"].startswith("The film was directed by Ana Lim")
    output = events(session, "module_output")[-1]
    assert output["module"] == "generalist" and output["truncated"] is True
    assert "no 'Answer:' line" in output["note"]


@pytest.mark.parametrize(
    "reply", ["I would search for the film.", '```json\n{"q": "Blue Harbor"}\n```', "{broken"]
)
def test_unusable_executor_output_falls_back_to_the_context(server, reply):
    server.push(Reply(reply), role="executor")
    session = new_session(build_modules("llm", endpoint=endpoint_for(server)), ONE_HOP)
    info = bounded(play(session))
    assert info["success"]
    output = events(session, "module_output")[0]
    assert (
        output["arguments"] == {"query": "Blue Harbor"}
        and "used the planner's Context" in output["note"]
    )
    assert output["raw"] == reply


def test_executor_reads_wrapped_json_and_fixes_types(server):
    server.push(
        Reply('Call: {"tool": "Search", "arguments": {"query": "Ana Lim", "top_k": "2"}}'),
        role="executor",
    )
    tool = make_tool("Search")
    action = PlannerAction("j", "Blue Harbor", "find it", "Search")
    memory = Memory(ONE_HOP.question)
    arguments = bounded(LLMExecutor(endpoint_for(server)).command(action, tool, ONE_HOP, memory))
    assert arguments == {"query": "Ana Lim", "top_k": 2}
    assert memory.events[-1].kind == "module_output" and memory.events[-1].payload["note"] is None


def test_initializer_reads_markdown_and_falls_back_on_prose(server):
    tools = ToolSet([make_tool("Search"), make_tool("Calculator")])
    server.push(
        Reply(
            "## Analysis\n**Objective:** find the birthplace.\n**Constraints:** none\n"
            "**Sub-questions:**\n1. Who directed Blue Harbor?\n2) Where was he born?\n"
            "**Relevant tools:** `Search` and search_tool\n"
        ),
        Reply("Let me think about it."),
        role="initializer",
    )
    initializer = LLMInitializer(endpoint_for(server))
    good = bounded(initializer.analyze(TWO_HOP, tools))
    assert good.objective == "find the birthplace." and good.constraints == ()
    assert good.sub_questions == ("Who directed Blue Harbor?", "Where was he born?")
    assert good.tools == ("Search",) and good.note is None
    bare = bounded(initializer.analyze(TWO_HOP, tools))
    assert bare.objective == f"Answer the question: {TWO_HOP.question}"
    assert bare.tools == ("Search", "Calculator") and "bare query" in bare.note


# -- the judge ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "reward"),
    [
        ("Analysis: same person.\nVerdict: True", 1.0),
        ("<analysis>different city</analysis>\n<true_false>False</true_false>", 0.0),
        ("The response names the same entity.\n\n**True**", 1.0),
    ],
)
def test_llm_judge_reward(server, reply, reward):
    server.push(Reply(reply), role="judge")
    config = {"reward": RewardConfig("llm_judge"), "judge": LLMJudge(endpoint_for(server))}
    session = new_session(build_modules("rule"), ONE_HOP, **config)
    info = bounded(play(session))
    assert info["score"] == reward and info["reward"] == reward
    assert events(session, "judge") == [{"score": reward}]


def test_judge_without_verdict_scores_zero_and_records_the_error(server):
    server.push(Reply("Hmm."), Reply("Still thinking."), role="judge")
    config = {"reward": RewardConfig("llm_judge"), "judge": LLMJudge(endpoint_for(server))}
    session = new_session(build_modules("rule"), ONE_HOP, **config)
    info = bounded(play(session))
    assert info["reward"] == 0.0 and "no True/False verdict" in info["module_errors"][0]


def test_judge_skips_the_call_without_an_answer(server):
    assert bounded(LLMJudge(endpoint_for(server)).judge("q", None, ["a"])) == 0.0
    assert server.requests == []


# -- readers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Reasoning.\nAnswer: Port Ellis.", "Port Ellis"),
        ("**Final Answer:** *1998*", "1998"),
        ("So it is \\boxed{42}.", "42"),
        ("Answer: unknown", None),
        ("Answer: Paris\nthen a note", "Paris"),
        ("Ana Lim", "Ana Lim"),
    ],
)
def test_short_answer_extraction(text, answer):
    assert extract_short_answer(text)[0] == answer


def test_readers_are_tolerant():
    assert parse_json_objects('x {"a": 1} y ```json\n{"b": 2}\n```')[0] == {"b": 2}
    assert parse_judgement("Verdict: incorrect") is False
    assert parse_judgement("I cannot tell.") is None
    analysis, note = parse_query_analysis("Objective: x", "q?", ["Search"])
    assert analysis.tools == ("Search",) and "sub_questions" in note


# -- planners -----------------------------------------------------------------------------------


def test_openai_planner_plays_an_episode(server):
    from agentflow_env.rollout.agents.llm_planners import OpenAIPlanner, messages_from_observation

    plan = iter([expert_action(TWO_HOP, 0), expert_action(TWO_HOP, 1)])
    server.responder = lambda role, request: next(plan) if role == "planner" else "?"
    env = AgentFlowEnv(tasks=[TWO_HOP])
    planner = OpenAIPlanner(endpoint_for(server), env)
    record = within(20, run_episode, env, planner, seed=0)
    planner.close()
    env.close()
    assert record.success and record.metrics["turns"] == 2
    first = server.requests[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"] and TWO_HOP.question in first[1][
        "content"
    ]
    assert messages_from_observation({"text": "plain prompt"}) == [
        {"role": "user", "content": "plain prompt"}
    ]


def test_hf_planner_returns_token_ids_the_env_keeps(tiny_llama_dir):
    from agentflow_env.rollout.agents.llm_planners import HFPlanner

    planner = HFPlanner(str(tiny_llama_dir), max_new_tokens=8, device="cpu", do_sample=True, seed=0)
    env = gym.make("AgentFlow-Search-v0", tasks=[ONE_HOP], max_turns=1)
    observation, info = env.reset(seed=0)
    action = planner.act(observation, info)
    assert 1 <= len(action["token_ids"]) <= 8 and len(action["logprobs"]) == len(
        action["token_ids"]
    )
    assert all(lp <= 0.0 for lp in action["logprobs"])
    env.step(action)
    turn = env.unwrapped.trajectory().turns[0]
    assert list(turn.action_ids) == action["token_ids"] and turn.action_given_as_ids
    env.close()


def test_generic_responder_speaks_every_role():
    respond = generic_responder(stop_after=1)
    assert "Conclusion: STOP" in respond(
        "verifier", {"messages": [{"role": "user", "content": "Step 1:"}]}
    )
