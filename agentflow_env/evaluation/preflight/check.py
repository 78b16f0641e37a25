"""The pre-flight check: one configuration's rollout inspected item by item before training.

``run_preflight("AgentFlow-Search-v0", seed=0, **env_kwargs)`` (or ``run_preflight(env=env)``)
runs a few short episodes with the expert planner and with probes, and reports, in order:

1. ``memory initialized``: the query and the initializer's full analysis after reset.
2. ``planner action valid``: the expert's first action is accepted.
3. ``expected tool invoked``: the tool it named was called and returned ok.
4. ``tool error recorded``: an unknown tool and a failing call are recorded turns.
5. ``turn limit holds``: a planner that never finishes ends at exactly ``max_turns``.
6. ``verifier stops``: the expert's episode ends on the verifier's STOP.
7. ``ends only on STOP or limit``: terminated iff STOP, truncated iff a limit or budget (an
   end on a module error is neither).
8. ``answer and reward emitted``: the final info's answer, reward, success, score, end reason.
9. ``policy tokens masked``: in flat mode the sample masks exactly the action ids and the chat
   template renders the grown conversation to the same ids.

A module or tool that raises inside a check fails that item, with the exception as evidence.
``agentflow-env check`` is the command-line form.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentflow_env.envs.env import AgentFlowEnv, unwrap_agentflow
from agentflow_env.evaluation.preflight.episodes import StepLog, run_expert
from agentflow_env.evaluation.preflight.expert import (
    ACTION,
    ANSWER,
    MEMORY,
    TOOL,
    VERIFIER,
    check_action,
    check_answer,
    check_memory,
    check_tool,
    check_verifier_stop,
)
from agentflow_env.evaluation.preflight.limits import (
    ENDS,
    TOOL_ERRORS,
    TURN_LIMIT,
    check_ends,
    check_tool_errors,
    check_turn_limit,
)
from agentflow_env.evaluation.preflight.report import CheckItem, PreflightReport, guarded
from agentflow_env.evaluation.preflight.tokens import TOKENS, check_flat_tokens, env_facts

DEFAULT_ENV_ID = "AgentFlow-Search-v0"
ITEMS: tuple[str, ...] = (
    MEMORY,
    ACTION,
    TOOL,
    TOOL_ERRORS,
    TURN_LIMIT,
    VERIFIER,
    ENDS,
    ANSWER,
    TOKENS,
)
"""The items of a report, in their order."""


def run_preflight(
    env_id: str = DEFAULT_ENV_ID,
    *,
    seed: int = 0,
    env: gym.Env | None = None,
    **env_kwargs: Any,
) -> PreflightReport:
    """Check the rollout of one configuration: ``gym.make(env_id, **env_kwargs)``, or ``env``
    (an ``AgentFlowEnv``, possibly wrapped; it is stepped, left needing a reset, not closed). Every episode is reset
    with ``seed``. Raises only when the env cannot be built (``ValueError``, ``TypeError``, ...
    from its settings)."""
    if env is not None and env_kwargs:
        raise ValueError("give env= or env settings, not both")
    own = env is None
    if env is None:
        env = gym.make(env_id, **env_kwargs)
    elif env.spec is not None:
        env_id = env.spec.id
    base = unwrap_agentflow(env)  # once: the items read ``base`` and reset and step ``env``
    try:
        return _check(env, base, seed, env_id)
    finally:
        if own:
            env.close()
        base.session = None  # the probes' last episode is not one to continue


def _check(env: gym.Env, base: AgentFlowEnv, seed: int, env_id: str) -> PreflightReport:
    max_turns = base.session_config.max_turns
    termination = base.session_config.termination
    log = StepLog()
    run = run_expert(env, base, seed, log, "expert")
    found: dict[str, CheckItem] = {
        MEMORY: guarded(MEMORY, lambda: check_memory(run, base)),
        ACTION: guarded(ACTION, lambda: check_action(run)),
        TOOL: guarded(TOOL, lambda: check_tool(run, base)),
        VERIFIER: guarded(VERIFIER, lambda: check_verifier_stop(run, max_turns, termination)),
        ANSWER: guarded(ANSWER, lambda: check_answer(run)),
    }
    found[TOOL_ERRORS] = guarded(TOOL_ERRORS, lambda: check_tool_errors(env, base, seed, log))
    found[TURN_LIMIT] = guarded(TURN_LIMIT, lambda: check_turn_limit(env, base, seed, log))
    found[TOKENS] = guarded(TOKENS, lambda: check_flat_tokens(base, seed, log))
    found[ENDS] = guarded(ENDS, lambda: check_ends(log, max_turns, termination))
    observation = run.reset_observation
    first_prompt = None if observation is None else len(observation["token_ids"])
    return PreflightReport(
        env_id=env_id,
        seed=seed,
        items=[found[name] for name in ITEMS],
        facts=env_facts(base, first_prompt),
    )


__all__ = ["DEFAULT_ENV_ID", "ITEMS", "CheckItem", "PreflightReport", "run_preflight"]
