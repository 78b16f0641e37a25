"""Agent Lightning agent for AgentFlow: one env episode per rollout, one training row per turn.

Checked against agentlightning 1.0.2, whose agents are plain classes run by its controller: for
each rollout it imports ``agentlightning.local.agent_class`` (``agentflow_agl_agent.AgentFlowAgent``,
this folder on ``PYTHONPATH``) in a fresh process, awaits ``AgentFlowAgent().run()`` and sets
``AGL_OPENAI_BASE_URL`` (the gateway's OpenAI-compatible route for this rollout),
``AGL_EVENT_URL``, ``AGL_KEY`` and, through ``agentlightning.local.env_map``, the row's task label
in ``AGENTFLOW_LABEL`` (a ``TaskSpec`` JSON string, ``agentflow-env labels``). Env settings come
from the ``AGENTFLOW_*`` variables (``AdapterConfig``), with ``AGENTFLOW_SAMPLES=turns`` unless
set otherwise: AgentFlow's structured prompt, rebuilt from memory each turn.

Token-in-token-out: each planner turn is one ``/v1/completions`` request whose ``prompt`` is the
env's observation ids; vLLM answers with ``prompt_token_ids`` and the sampled ``token_ids``
(``return_token_ids``, which the gateway also forces), the gateway records both, and the env is
stepped with the sampled ids and their log-probs verbatim. So every call Agent Lightning records
is one env turn, and with ``trace_aggregator.level=transition`` one training row carrying the
reward this agent reports: AgentFlow's per-turn Flow-GRPO shape.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import httpx
from httpx_retries import Retry, RetryTransport

from agentflow_env.rollout import (
    AdapterConfig,
    AdapterError,
    LogprobSample,
    SeamError,
    SharedEnvs,
    TokenBudget,
    TokenEpisode,
    dump_samples,
    filler_token_id,
    read_env_var,
    run_token_episode,
)

logger = logging.getLogger("agentflow_env.adapters.agent_lightning")
LABEL_VARIABLE = "AGENTFLOW_LABEL"
"""The task label of this rollout (``env_map: {AGENTFLOW_LABEL: input.label}``)."""
PROMPT_VARIABLE = "AGENTFLOW_MAX_PROMPT_TOKENS"
"""verl's ``data.max_prompt_length``: a turn whose prompt is longer ends the episode, reward 0."""
EPISODE_EVENT = "agentflow_episode"
"""The event holding the episode's numeric logs beside the reward (how it ended, turns, ...)."""
RETRY = Retry(
    total=20,
    allowed_methods=["POST"],
    status_forcelist=[429, 502, 503, 504],  # 429: the gateway pauses to sync weights
    backoff_factor=0.5,
    max_backoff_wait=30.0,
)


class AgentFlowAgent:
    """Runs the rollout's episode with the policy behind the gateway; posts the env's reward."""

    async def run(self) -> None:
        environ = {"AGENTFLOW_SAMPLES": "turns", **os.environ}
        shared = SharedEnvs(AdapterConfig.from_environ(environ))
        label = read_env_var(LABEL_VARIABLE, environ)
        if not label:
            raise AdapterError(f"{LABEL_VARIABLE} is unset: map it from the row (env_map)")
        budget = TokenBudget(
            prompt=read_env_var(PROMPT_VARIABLE, environ), turn=shared.config.max_action_tokens
        )
        key = environ.get("AGL_KEY", "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = environ["AGL_OPENAI_BASE_URL"].rstrip("/") + "/completions"
        async with httpx.AsyncClient(
            headers=headers, timeout=600.0, transport=RetryTransport(retry=RETRY)
        ) as client:

            async def generate(
                prompt_ids: list[int], max_tokens: int
            ) -> tuple[Sequence[int], Sequence[float] | None, str | None]:
                body = {"model": "policy", "prompt": prompt_ids, "max_tokens": max_tokens}
                response = await client.post(url, json={**body, "return_token_ids": True})
                response.raise_for_status()
                return sampled(response.json(), prompt_ids)

            episode = await run_token_episode(
                lambda: shared.new_session(label),
                generate,
                budget,
                filler=filler_token_id(shared.tokenizer()),
                log=logger,
                label=label,
                samples=shared.config.samples,
            )
            for event_type, data in (
                (EPISODE_EVENT, {**episode.logs, "end": episode.end, "error": episode.error}),
                ("reward", {"value": episode.reward}),  # the last reward event is the rollout's
            ):
                posted = await client.post(
                    environ["AGL_EVENT_URL"], json={"event_type": event_type, "data": data}
                )
                posted.raise_for_status()
        dump_samples(lambda: check_samples(episode), logger)


def sampled(reply: dict[str, Any], prompt_ids: list[int]) -> tuple[list[int], Any, str | None]:
    """The sampled ids, their log-probs (``None`` unless asked for: the gateway asks in training)
    and the finish reason of a vLLM completion; ``SeamError`` if the reply lacks the ids or was
    sampled from another prompt than the env's."""
    choice = reply["choices"][0]
    if choice.get("token_ids") is None:
        raise SeamError("the completion has no token_ids: serve the policy with vLLM >= 0.10.2")
    if choice.get("prompt_token_ids") not in (None, prompt_ids):
        raise SeamError("the completion was sampled from other prompt ids than the env's")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    return list(choice["token_ids"]), logprobs, choice.get("finish_reason")


def check_samples(episode: TokenEpisode) -> list[LogprobSample]:
    """Each scored turn as ``agentflow-env check-logprobs`` reads it (``AGENTFLOW_DUMP_SAMPLES``)."""
    return [
        LogprobSample.build(s.prompt_ids, s.response_ids, s.response_mask, s.logprobs)
        for s in episode.trainer_samples()
        if s.logprobs is not None and s.response_ids
    ]
