"""A token-exact SkyRL generator for AgentFlow: the trained ids are the ids the env recorded.

Checked against skyrl 0.3.0 (``skyrl.train.generators.GeneratorInterface``). Built with the
arguments SkyRL gives ``SkyRLGymGenerator`` (``main_agentflow.py`` overrides
``BasePPOExp.get_generator``). Each row's ``label`` extra (a ``TaskSpec`` JSON string) names the
task, else the prompt's last message does; env settings and the tokenizer come from the
``AGENTFLOW_*`` variables (``AGENTFLOW_TOKENIZER``: the policy's).

Token-in-token-out: the env renders every prompt with the policy's tokenizer, SkyRL's inference
client samples each action from exactly those ids, the ids go back to the env verbatim and the
sample is the env's own flat record (``agentflow_env.rollout.token_episode``): the first prompt,
then actions and feedback, the loss mask 1 exactly on sampled ids, the sampling log-probs on them.
Each turn is capped at ``sampling_params.max_generate_length`` and the env's
``max_action_tokens``; with ``generator.max_input_length`` set, a trajectory ends with reward 0
when ``max_input_length + max_generate_length`` tokens are used up. A failed trajectory is a
reward-0 sample; only the inference client's own errors propagate.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import skyrl_compat  # noqa: F401  (first: skyrl.train imports on Python 3.11)
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput

from agentflow_env.rollout import failures, trainer_samples
from agentflow_env.rollout.logprob_check import dump_samples
from agentflow_env.rollout.pool import LazySharedEnvs
from agentflow_env.rollout.token_episode import (
    DONE,
    ERROR,
    TokenBudget,
    TokenEpisode,
    run_token_episode,
)
from agentflow_env.workflow.session import Session

logger = logging.getLogger("agentflow_env.adapters.skyrl")
shared_envs = LazySharedEnvs()  # this process's envs and settings, read on first use
STOP_REASONS = {DONE: "stop", ERROR: "error"}
"""SkyRL's stop reason per episode end; a budget that ran out is ``"length"``."""


def rollout_metrics(
    logs: list[dict[str, float]], episodes: Sequence[TokenEpisode], trajectory_ids: Any
) -> dict[str, float]:
    """The batch's mean episode logs (``error``: the failure rate) and, where SkyRL names each
    row's group (``trajectory_ids``, as its trainer does), the group signal: the fractions of
    groups whose rewards are all equal (no gradient) and all 0, and the mean |advantage|."""
    metrics = {
        f"environment/agentflow/{key}": sum(log[key] for log in logs) / len(logs)
        for key in failures.EPISODE_LOG_KEYS
    }
    if trajectory_ids is not None:
        signal = trainer_samples.skyrl_group_signal([e.reward for e in episodes], trajectory_ids)
        for key in ("equal_reward_groups", "all_zero_groups", "mean_abs_advantage"):
            metrics[f"environment/agentflow/{key}"] = signal[key]
    return metrics


class AgentFlowGenerator(GeneratorInterface):
    """One AgentFlow episode per input row, all rows concurrently."""

    def __init__(
        self,
        generator_cfg: Any,
        skyrl_gym_cfg: Any,
        inference_engine_client: Any,
        tokenizer: Any,
        policy_model_name: str | None = None,
    ) -> None:
        self.cfg, self.client, self.model = (
            generator_cfg,
            inference_engine_client,
            policy_model_name,
        )
        self.filler = failures.filler_token_id(tokenizer)
        backend = generator_cfg.inference_engine.backend
        self.default_params = get_sampling_params_for_backend(
            backend, generator_cfg.sampling_params
        )
        per_turn = generator_cfg.sampling_params.max_generate_length
        longest = generator_cfg.max_input_length
        self.budget = TokenBudget(total=longest + per_turn if longest else None, turn=per_turn)

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        params = dict(input_batch.get("sampling_params") or self.default_params)
        prompts = input_batch["prompts"]
        extras = input_batch.get("env_extras") or [{} for _ in prompts]
        episodes = await asyncio.gather(
            *(
                self.episode(prompt, extra, params)
                for prompt, extra in zip(prompts, extras, strict=True)
            )
        )
        logprobs = [e.response_logprobs for e in episodes]
        wanted = params.get("logprobs") is not None and all(lp is not None for lp in logprobs)
        logs = [e.logs for e in episodes]
        output: GeneratorOutput = {
            "prompt_token_ids": [e.prompt_ids for e in episodes],
            "response_ids": [e.response_ids for e in episodes],
            "rewards": [e.reward for e in episodes],
            "loss_masks": [e.response_mask for e in episodes],
            "stop_reasons": [STOP_REASONS.get(e.end, "length") for e in episodes],
            "rollout_metrics": rollout_metrics(logs, episodes, input_batch.get("trajectory_ids")),
            "rollout_logprobs": logprobs if wanted else None,
            "trajectory_ids": None,
            "trajectory_generation_times": None,
            "rollout_expert_indices": None,
            "is_last_step": None,
            "env_metrics": logs,
        }
        metadata = input_batch.get("batch_metadata")
        if wanted and getattr(metadata, "training_phase", "train") == "train":
            temperature = params.get("temperature")
            dump_samples(lambda: trainer_samples.skyrl_samples(output, temperature), logger)
        return output

    async def episode(
        self, prompt: list[dict[str, str]], extras: dict[str, Any], params: dict[str, Any]
    ) -> TokenEpisode:
        """One row's episode, sampled through the inference client as one session."""
        label = extras.get("label", prompt)
        session_id = uuid.uuid4().hex
        shared = shared_envs()

        async def generate(
            prompt_ids: list[int], max_tokens: int
        ) -> tuple[Sequence[int], Sequence[float] | None]:
            request = {
                "prompt_token_ids": [prompt_ids],
                "session_ids": [session_id],
                "sampling_params": {**params, "max_tokens": max_tokens},
            }
            output = await self.client.generate(request, model=self.model)
            logprobs = output.get("response_logprobs")
            return output["response_ids"][0], logprobs[0] if logprobs else None

        def new_session() -> Session:
            return shared.new_session(label)

        try:
            return await run_token_episode(
                new_session, generate, self.budget, filler=self.filler, log=logger, label=label
            )
        finally:
            await self.client.finish_session(session_id)
