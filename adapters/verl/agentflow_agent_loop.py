"""verl agent loop for AgentFlow: the planner is the trained policy, the env runs everything else.

Checked against verl 0.9.1 (``verl.experimental.agent_loop``). Register it with the agent-loop
YAML beside this file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``, this folder
on ``PYTHONPATH``) and select it per dataset row with ``agent_name: agentflow``; importing this
module also registers it (``@register``). Each row names its task in a ``label`` column (a
``TaskSpec`` JSON string, as ``adapters/openrlhf/prepare_data.py`` writes it), else in the last
message of its prompt. Env settings come from the ``AGENTFLOW_*`` variables
(``agentflow_env.rollout.labels.AdapterConfig``); the tokenizer is verl's, the policy's.

Token-in-token-out: the env renders every prompt with the policy's tokenizer, verl's server
samples each action from exactly those ids, the ids go back to the env verbatim, and the output
is the env's own flat sample (``agentflow_env.rollout.token_episode``). verl pads prompts and
responses to ``prompt_length`` / ``response_length`` and never shortens them, so each turn is
capped at the room left; an episode that runs out of room ends there with reward 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from agentflow_env.rollout import failures
from agentflow_env.rollout.logprob_check import LogprobSample, dump_samples
from agentflow_env.rollout.pool import LazySharedEnvs
from agentflow_env.rollout.token_episode import TokenBudget, TokenEpisode, run_token_episode
from agentflow_env.workflow.session import Session

AGENT_NAME = "agentflow"
"""The ``agent_name`` of the dataset rows this loop runs."""
logger = logging.getLogger("agentflow_env.adapters.verl")
shared_envs = LazySharedEnvs()  # this process's envs and settings, read on first use


def task_label(fields: dict[str, Any]) -> Any:
    """The task a dataset row names: its ``label`` column, else its prompt's last message."""
    label = fields.get("label")
    return label if label is not None else list(fields.get("raw_prompt") or [])


@register(AGENT_NAME)
class AgentFlowAgentLoop(AgentLoopBase):
    """One AgentFlow episode per dataset row, sampled through verl's server manager."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        shared = shared_envs()
        label = task_label(kwargs)
        rollout = self.rollout_config
        budget = TokenBudget(
            response=rollout.response_length,
            prompt=rollout.prompt_length,
            turn=shared.config.max_turn_tokens,
        )
        request_id = uuid4().hex  # one per trajectory: verl routes its turns to one server
        seconds = [0.0]

        async def generate(
            prompt_ids: list[int], max_tokens: int
        ) -> tuple[Sequence[int], Sequence[float] | None]:
            started = time.perf_counter()
            output = await self.server_manager.generate(
                request_id=request_id,
                prompt_ids=prompt_ids,
                sampling_params={**sampling_params, "max_tokens": max_tokens},
            )
            seconds[0] += time.perf_counter() - started
            return output.token_ids, output.log_probs

        def new_session() -> Session:
            return shared.pool.new_session(shared.config.plan(label), self.tokenizer)

        filler = failures.filler_token_id(self.tokenizer)
        episode = await run_token_episode(
            new_session, generate, budget, filler=filler, log=logger, label=label
        )
        logprobs = bool(sampling_params.get("logprobs"))
        if logprobs:
            temperature = sampling_params.get("temperature")
            dump_samples(lambda: check_samples(episode, temperature, rollout.temperature), logger)
        return to_output(episode, seconds[0], logprobs)


def check_samples(episode: TokenEpisode, temperature: Any, training: Any) -> list[LogprobSample]:
    """The episode as ``agentflow-env check-logprobs`` reads it (``AGENTFLOW_DUMP_SAMPLES``);
    none when it was sampled at another temperature than training's (greedy validation)."""
    if temperature != training:
        return []
    if episode.response_logprobs is None:
        raise ValueError("the server returned no log-probs for some turn")
    return [
        LogprobSample.build(
            episode.prompt_ids,
            episode.response_ids,
            episode.response_mask,
            episode.response_logprobs,
            temperature,
        )
    ]


def to_output(episode: TokenEpisode, generate_seconds: float, logprobs: bool) -> AgentLoopOutput:
    """verl's output for one episode: the reward on the last response token (``reward_score``),
    the episode's numeric logs as reward extra info (same keys on every row)."""
    return AgentLoopOutput(
        prompt_ids=episode.prompt_ids,
        response_ids=episode.response_ids,
        response_mask=episode.response_mask,
        response_logprobs=episode.response_logprobs if logprobs else None,
        reward_score=episode.reward,
        num_turns=2 * episode.turns,  # actions and the feedback between them, as verl counts
        metrics=AgentLoopMetrics(generate_sequences=generate_seconds),
        extra_fields={
            "turn_scores": [],
            "tool_rewards": [],
            "reward_extra_info": dict(episode.logs),
        },
    )
