"""verl agent loop for AgentFlow: the planner is the trained policy, the env runs everything else.

Checked against verl 0.9.1 (``verl.experimental.agent_loop``). Register it with the agent-loop
YAML beside this file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``, this folder
on ``PYTHONPATH``) and select it per dataset row with ``agent_name: agentflow``; importing this
module also registers it (``@register``). Each row names its task in a ``label`` column (a
``TaskSpec`` JSON string, as ``agentflow-env labels --format verl`` writes it), else in the last
message of its prompt. Env settings come from the ``AGENTFLOW_*`` variables
(``agentflow_env.rollout.labels.plans.AdapterConfig``); the tokenizer is verl's, the policy's.

Token-in-token-out: the env renders every prompt with the policy's tokenizer, verl's server
samples each action from exactly those ids, the ids go back to the env verbatim, and the output
is the env's own flat sample (``agentflow_env.rollout.training.token_episode``). verl pads prompts and
responses to ``prompt_length`` / ``response_length`` and never shortens them, so each turn is
capped at the room left; an episode that runs out of room ends there with reward 0.

verl stacks every row of a batch alike: row 0 decides whether ``rollout_log_probs`` exist, so
with ``calculate_log_probs`` every row carries log-probs of its own response length (0.0 where
the server scored nothing); a turn the server aborts (weight sync) is re-issued, never stepped
empty. After each trajectory the process's ``FailFast`` guard counts it: a setup that fails the
first ``AGENTFLOW_FAIL_FAST`` trajectories the same way raises ``SystemicFailure`` out of the loop.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)
from verl_row_format import AGENT_NAME  # the agent_name of the dataset rows this loop runs

from agentflow_env.rollout import (
    LazySharedEnvs,
    Session,
    TokenBudget,
    TrainerEpisode,
    dump_samples,
    filler_token_id,
    run_trainer_episode,
)

logger = logging.getLogger("agentflow_env.adapters.verl")
# This process's envs and settings, read on first use; verl's agent loop trains flat samples.
shared_envs = LazySharedEnvs(
    flat_only="verl's agent loop returns one AgentLoopOutput per rollout; per-turn samples on "
    "verl go through Agent Lightning (adapters/agent_lightning, docs/credit.md)"
)
LOGPROB_FILL = 0.0
"""The rollout log-prob of a response token the server did not score (env feedback, a failure
sample's filler, a turn returned without log-probs): verl's own padding value."""
ABORTED_RETRIES = 2
"""How many times a turn the server aborted is re-issued before the trajectory ends."""
RETRY_DELAY_S = 1.0
"""Seconds before the first re-issue (then twice that): a paused server parks or re-routes it."""
trajectory_numbers = itertools.count()  # only for rows without verl's ``priority``
_unscored_warned = [False]


def task_label(fields: dict[str, Any]) -> Any:
    """The task a dataset row names: its ``label`` column, else its prompt's last message."""
    label = fields.get("label")
    return label if label is not None else list(fields.get("raw_prompt") or [])


def request_id(fields: dict[str, Any], label: Any) -> str:
    """One id per trajectory (verl routes its turns to one server by it, and under
    ``full_determinism`` hands it to vLLM), derived from the row so a rerun uses the same ids.

    verl's manager numbers the rows of a batch (``priority``), n rollouts included, so with the
    row's ``index`` and label it is unique per trajectory; a row without it gets this process's
    trajectory number instead."""
    priority = fields.get("priority")
    key = [_plain(fields.get("index")), _plain(label)]
    key.append(_plain(priority) if priority is not None else f"n{next(trajectory_numbers)}")
    digest = hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()[:32]
    return f"agentflow-{digest}"


def _plain(value: Any) -> Any:
    """A numpy scalar or array (how verl hands row fields over) as plain Python."""
    return value.tolist() if hasattr(value, "tolist") else value


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
            turn=shared.config.max_action_tokens,
        )
        trajectory = request_id(kwargs, label)
        seconds = [0.0]

        async def generate(
            prompt_ids: list[int], max_tokens: int
        ) -> tuple[Sequence[int], Sequence[float] | None, str | None]:
            started = time.perf_counter()
            output = await self.server_manager.generate(
                request_id=trajectory,
                prompt_ids=prompt_ids,
                sampling_params={**sampling_params, "max_tokens": max_tokens},
            )
            seconds[0] += time.perf_counter() - started
            return output.token_ids, output.log_probs, getattr(output, "stop_reason", None)

        def new_session() -> Session:
            return shared.pool.new_session(shared.config.plan(label), self.tokenizer)

        logprobs = bool(sampling_params.get("logprobs"))
        run = await run_trainer_episode(  # a SystemicFailure stops the job
            new_session,
            generate,
            budget,
            shared.fail_fast,
            filler=filler_token_id(self.tokenizer),
            log=logger,
            label=label,
            aborted_retries=ABORTED_RETRIES,
            retry_delay=RETRY_DELAY_S,
            logprob_fill=LOGPROB_FILL if logprobs else None,
        )
        episode = run.episode
        if episode.unscored and not _unscored_warned[0]:
            _unscored_warned[0] = True
            logger.warning(
                "verl's server returned sampled tokens without log-probs (%d in one trajectory); "
                "they carry %s in rollout_log_probs (counted in reward extra info "
                "'unscored_tokens'; this warning is logged once per process)",
                episode.unscored,
                LOGPROB_FILL,
            )
        if logprobs:  # for AGENTFLOW_DUMP_SAMPLES (agentflow-env check-logprobs)
            temperature = sampling_params.get("temperature")
            dump_samples(lambda: run.logprob_samples(temperature, rollout.temperature), logger)
        return to_output(run, seconds[0], logprobs)


def to_output(run: TrainerEpisode, generate_seconds: float, logprobs: bool) -> AgentLoopOutput:
    """verl's output for one episode: the reward on the last response token (``reward_score``),
    the row's numeric logs (``TrainerEpisode.logs``, with ``failed``: the ``env/failed`` rate)
    as reward extra info, which verl averages in validation and writes with each sample to
    ``trainer.rollout_data_dir``. The env's time also goes where verl 0.9.1 times the work
    between generations (``tool_calls``), so it is logged as ``agent_loop/tool_calls/*`` beside
    ``agent_loop/generate_sequences/*``."""
    episode = run.episode
    response_logprobs = None
    if logprobs:  # every row: verl builds rollout_log_probs only if row 0 has them
        response_logprobs = run.logprobs(len(episode.response_ids), LOGPROB_FILL)
    extra = run.logs
    return AgentLoopOutput(
        prompt_ids=episode.prompt_ids,
        response_ids=episode.response_ids,
        response_mask=episode.response_mask,
        response_logprobs=response_logprobs,
        reward_score=episode.reward,
        num_turns=2 * episode.turns,  # actions and the feedback between them, as verl counts
        metrics=AgentLoopMetrics(
            generate_sequences=generate_seconds, tool_calls=episode.env_seconds
        ),
        extra_fields={"turn_scores": [], "tool_rewards": [], "reward_extra_info": extra},
    )
