"""A token-exact SkyRL generator for AgentFlow: the trained ids are the ids the env recorded.

Checked against skyrl 0.3.0 (``skyrl.train.generators.GeneratorInterface``). Built with the
arguments SkyRL gives ``SkyRLGymGenerator`` (``main_agentflow.py`` overrides
``BasePPOExp.get_generator``). Each row's ``label`` extra (a ``TaskSpec`` JSON string) names the
task, else the prompt's last message does; env settings come from the ``AGENTFLOW_*`` variables.
The env renders with the tokenizer SkyRL hands the generator (the policy's); an
``AGENTFLOW_TOKENIZER`` of another vocabulary is refused at construction.

Token-in-token-out: the env renders every prompt, SkyRL's inference client samples each action
from exactly those ids, the ids go back to the env verbatim and the sample is the env's own flat
record (``agentflow_env.rollout.training.token_episode``): the first prompt, then actions and feedback,
the loss mask 1 exactly on sampled ids. Each turn is capped at
``sampling_params.max_generate_length`` and the env's ``max_action_tokens``; with
``generator.max_input_length`` set, a trajectory ends with reward 0 when
``max_input_length + max_generate_length`` tokens are used up. A failed trajectory is a reward-0
sample; only the inference client's own errors and ``AdapterError``s (a setup that fails every
trajectory: ``SystemicFailure``) propagate.

Log-probs are all or nothing per batch, as SkyRL's trainer needs them with off-policy
correction: when the batch asks for them, every row carries one per response token, the
engine's on the ids it sampled and 0.0 (``LOGPROB_FILL``) on tokens it did not score: env
feedback, a failure row's filler, and the ids of a turn the engine returned without log-probs
(counted per row in ``unscored_tokens``). A turn the engine aborts (a weight sync) or answers
with no tokens is re-issued, never stepped as an empty action; one aborted every time ends its
episode as a reward-0 row (stop reason ``"abort"``).

SkyRL's generator settings: ``max_turns`` caps the env's turns (the env ends the episode there);
``zero_reward_on_non_stop`` and ``apply_overlong_filtering`` act on the stop reasons as in
SkyRL's own generator; ``use_cache_salt`` salts every request with the engine's weight version;
``step_wise_trajectories`` returns one row per planner turn instead (``step_wise.py``: each turn's
own prompt ids, structured observations by default). Settings with no meaning for a token-exact
AgentFlow episode (``batched``, a custom ``chat_template`` or ``chat_template_kwargs``) are
refused at construction.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import skyrl_compat  # noqa: F401  (first: skyrl.train imports on Python 3.11)
from agentflow_sessions import check_tokenizer, new_session
from generator_output import batch_output, check_settings, scored_samples
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from step_output import check_trajectory_ids
from step_wise import ShapedSharedEnvs, sample_shape, token_budget

from agentflow_env.rollout import (
    Session,
    TrainerEpisode,
    dump_samples,
    filler_token_id,
    run_trainer_episode,
)

logger = logging.getLogger("agentflow_env.adapters.skyrl")
shared_envs = ShapedSharedEnvs()  # this process's envs and settings, read on first use
LOGPROB_FILL = 0.0
"""The rollout log-prob of a response token the engine did not score (as SkyRL's own generator
fills env tokens)."""
ABORTED_RETRIES = 2
"""How many times a turn the engine aborted is re-issued before the trajectory ends."""
_warned_unscored = [False]


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
        check_settings(generator_cfg)
        self.shape = sample_shape(generator_cfg)  # SkyRL's step-wise flag picks it
        check_tokenizer(shared_envs(self.shape), tokenizer)
        self.cfg, self.model = generator_cfg, policy_model_name
        self.client = inference_engine_client
        self.tokenizer = tokenizer
        self.filler = filler_token_id(tokenizer)
        self.max_turns: int | None = generator_cfg.max_turns
        backend = generator_cfg.inference_engine.backend
        self.default_params = get_sampling_params_for_backend(
            backend, generator_cfg.sampling_params
        )
        per_turn = generator_cfg.sampling_params.max_generate_length
        self.budget = token_budget(self.shape, generator_cfg.max_input_length, per_turn)
        self.retry_delay_s = 1.0
        """Seconds before an aborted turn is first re-issued (then twice that)."""

    def cache_salt(self) -> str | None:
        """The prefix-cache salt of one batch (``generator.use_cache_salt``): the policy and the
        engine's weight version when the batch starts, so cached blocks are only shared by
        trajectories that began on the same weights; ``None`` when off or unknown."""
        if not getattr(self.cfg, "use_cache_salt", False):
            return None
        version = getattr(self.client, "weight_version", None)
        if version is None:
            return None
        return f"{self.model}@{version}" if self.model is not None else str(version)

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        params = dict(input_batch.get("sampling_params") or self.default_params)
        wanted = params.get("logprobs") is not None
        salt = self.cache_salt()
        prompts = input_batch["prompts"]
        if self.shape == "turns":  # before any trajectory runs
            check_trajectory_ids(input_batch.get("trajectory_ids"))
        extras = input_batch.get("env_extras") or [{} for _ in prompts]
        tasks = [
            asyncio.ensure_future(self.trajectory(prompt, extra, params, salt))
            for prompt, extra in zip(prompts, extras, strict=True)
        ]
        try:
            runs = await asyncio.gather(*tasks)
        except BaseException:  # a SystemicFailure or the engine's error: stop the other rows
            for task in tasks:
                task.cancel()
            raise
        fill = LOGPROB_FILL if wanted else None
        trajectory_ids = input_batch.get("trajectory_ids")
        output, unscored = batch_output(
            runs, self.cfg, self.shape, trajectory_ids, self.filler, fill
        )
        if wanted and any(unscored) and not _warned_unscored[0]:
            _warned_unscored[0] = True
            logger.warning(
                "SkyRL's inference engine returned sampled tokens without log-probs (%d in this "
                "batch); they carry %s in rollout_logprobs (environment/agentflow/"
                "unscored_tokens; this warning is logged once per process)",
                sum(run.episode.unscored for run in runs),
                LOGPROB_FILL,
            )
        metadata = input_batch.get("batch_metadata")
        if wanted and getattr(metadata, "training_phase", "train") == "train":
            temperature = params.get("temperature")
            dump_samples(lambda: scored_samples(output, unscored, temperature), logger)
        return output

    async def trajectory(
        self,
        prompt: list[dict[str, str]],
        extras: dict[str, Any],
        params: dict[str, Any],
        salt: str | None,
    ) -> TrainerEpisode:
        """One row's episode, sampled through the inference client as one session; counted by
        the fail-fast guard (a setup that fails every trajectory raises ``SystemicFailure``)."""
        label = extras.get("label", prompt)
        session_id = uuid.uuid4().hex
        shared = shared_envs(self.shape)
        wanted = params.get("logprobs") is not None

        async def generate(
            prompt_ids: list[int], max_tokens: int
        ) -> tuple[Sequence[int], Sequence[float] | None, str | None]:
            request: dict[str, Any] = {
                "prompt_token_ids": [prompt_ids],
                "session_ids": [session_id],
                "sampling_params": {**params, "max_tokens": max_tokens},
            }
            if salt is not None:
                request["cache_salt"] = salt
            output = await self.client.generate(request, model=self.model)
            reasons = output.get("stop_reasons")
            stop = str(reasons[0]) if reasons and reasons[0] is not None else None
            given = output.get("response_logprobs") if wanted else None
            return output["response_ids"][0], given[0] if given else None, stop

        def session() -> Session:
            return new_session(shared, label, self.tokenizer, self.max_turns)

        try:
            return await run_trainer_episode(
                session,
                generate,
                self.budget,
                shared.fail_fast,
                filler=self.filler,
                log=logger,
                label=label,
                aborted_retries=ABORTED_RETRIES,
                retry_delay=self.retry_delay_s,
                logprob_fill=LOGPROB_FILL if wanted else None,
                samples=self.shape,
            )
        finally:
            await self.client.finish_session(session_id)
