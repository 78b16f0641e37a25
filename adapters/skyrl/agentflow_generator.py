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
from dataclasses import dataclass
from typing import Any

import skyrl_compat  # noqa: F401  (first: skyrl.train imports on Python 3.11)
from agentflow_sessions import check_tokenizer, new_session
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from skyrl.train.generators.utils import apply_overlong_filtering
from step_wise import (
    ShapedSharedEnvs,
    check_trajectory_ids,
    sample_shape,
    step_rows,
    token_budget,
)

from agentflow_env.rollout import (
    ABORTED,
    DONE,
    ERROR,
    PROMPT_BUDGET,
    RESPONSE_BUDGET,
    AdapterError,
    Session,
    TokenEpisode,
    dump_samples,
    filler_token_id,
    run_token_episode,
    skyrl_group_signal,
    skyrl_samples,
    trajectory_failure,
)

logger = logging.getLogger("agentflow_env.adapters.skyrl")
shared_envs = ShapedSharedEnvs()  # this process's envs and settings, read on first use
METRIC = "environment/agentflow/"
"""The prefix of the generator's metrics in SkyRL's logs (beside its ``environment/*``)."""
LOGPROB_FILL = 0.0
"""The rollout log-prob of a response token the engine did not score (as SkyRL's own generator
fills env tokens)."""
ABORTED_RETRIES = 2
"""How many times a turn the engine aborted is re-issued before the trajectory ends."""
_warned_unscored = [False]


@dataclass
class Trajectory:
    """One row's episode and what the adapter saw of the engine while sampling it."""

    episode: TokenEpisode
    engine_stop: str | None
    """The engine's stop reason for the last action (``"length"``: cut at its token cap)."""
    failure: str | None
    """Why the trajectory counts as failed (``failures.trajectory_failure``), else ``None``."""

    @property
    def stop_reason(self) -> str:
        """SkyRL's stop reason: the engine's for the last action of an episode the env ended (as
        SkyRL's own generator reports it), ``"length"`` when a token budget ran out, ``"error"``
        for a failed trajectory, ``"abort"`` for one the engine aborted, else how it ended."""
        end = self.episode.end
        if end == DONE:
            return self.engine_stop or "stop"
        if end in (RESPONSE_BUDGET, PROMPT_BUDGET):
            return "length"
        return {ERROR: "error", ABORTED: "abort"}.get(end, str(end))

    @property
    def logs(self) -> dict[str, float]:
        """The row's numeric logs (``env_metrics``; the same keys on every row): the episode's,
        ``failed``, the engine's turn ends (``turns_stop``, ``turns_length``,
        ``turns_aborted``), ``unscored_tokens`` and ``env_seconds``."""
        episode = self.episode
        return {
            **episode.logs,
            "failed": float(self.failure is not None),
            **{f"turns_{end}": float(count) for end, count in episode.turn_ends.items()},
            "unscored_tokens": float(episode.unscored),
            "env_seconds": float(episode.env_seconds),
        }


def check_settings(cfg: Any) -> None:
    """Refuse SkyRL generator settings this generator cannot honour, rather than ignore them."""
    refused = []
    if getattr(cfg, "batched", False):
        refused.append(
            "generator.batched=true: SkyRL's batched path is single-turn with the engine "
            "rendering the chat; AgentFlow episodes are multi-turn and the env renders every "
            "prompt. Set it to false"
        )
    template = getattr(getattr(cfg, "chat_template", None), "name_or_path", None)
    if template is not None or getattr(cfg, "chat_template_kwargs", None):
        refused.append(
            "generator.chat_template / chat_template_kwargs: the env renders every prompt with "
            "the policy tokenizer's own chat template and no extra arguments, so these would "
            "not reach it. Leave them unset"
        )
    if refused:
        raise AdapterError("AgentFlowGenerator cannot honour " + "; ".join(refused) + ".")


def row_logprobs(episode: TokenEpisode, size: int) -> list[float]:
    """``size`` log-probs: the episode's (``run_token_episode`` fills what the engine did not
    score), ``LOGPROB_FILL`` past them (a row that is only a filler token)."""
    known = [float(x) for x in episode.response_logprobs or []][:size]
    return known + [LOGPROB_FILL] * (size - len(known))


def rollout_metrics(
    logs: Sequence[dict[str, float]], rewards: Sequence[float], trajectory_ids: Any
) -> dict[str, float]:
    """The batch's mean row logs (``Trajectory.logs``; ``error``: trajectories that raised),
    ``env/failed`` (the failure rate the fail-fast guard counts) and, where SkyRL names each
    row's group (``trajectory_ids``, as its trainer does), the group signal of the rewards SkyRL
    trains on: the fractions of groups whose rewards are all equal (no gradient) and all 0, and
    the mean |advantage|."""
    metrics = {f"{METRIC}{key}": sum(log[key] for log in logs) / len(logs) for key in logs[0]}
    metrics["env/failed"] = metrics[f"{METRIC}failed"]
    if trajectory_ids is not None:
        signal = skyrl_group_signal(list(rewards), trajectory_ids)
        for key in ("equal_reward_groups", "all_zero_groups", "mean_abs_advantage"):
            metrics[f"{METRIC}{key}"] = signal[key]
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
        check_settings(generator_cfg)
        self.shape = sample_shape(generator_cfg)  # SkyRL's step-wise flag picks it
        check_tokenizer(shared_envs(self.shape), tokenizer)
        self.cfg, self.client, self.model = (
            generator_cfg,
            inference_engine_client,
            policy_model_name,
        )
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
        episodes = [run.episode for run in runs]
        stop_reasons = [run.stop_reason for run in runs]
        rewards = [float(e.reward) for e in episodes]
        if self.cfg.zero_reward_on_non_stop:
            rewards = [
                r if s == "stop" else 0.0 for r, s in zip(rewards, stop_reasons, strict=True)
            ]
        logs = [run.logs for run in runs]
        trajectory_ids = input_batch.get("trajectory_ids")
        metrics = rollout_metrics(logs, rewards, trajectory_ids)
        if self.shape == "turns":
            rows = step_rows(episodes, rewards, stop_reasons, logs, trajectory_ids)
            overlong = self.cfg.apply_overlong_filtering
            output = rows.output(metrics, self.filler, LOGPROB_FILL if wanted else None, overlong)
            unscored = rows.unscored
        else:
            # A response is never empty (SkyRL puts the reward on its last token): a masked filler.
            responses = [list(e.response_ids) or [self.filler] for e in episodes]
            masks = [list(e.response_mask) if e.response_ids else [0] for e in episodes]
            if self.cfg.apply_overlong_filtering:
                masks = apply_overlong_filtering(masks, stop_reasons)
            output = {
                "prompt_token_ids": [e.prompt_ids for e in episodes],
                "response_ids": responses,
                "rewards": rewards,
                "loss_masks": masks,
                "stop_reasons": stop_reasons,
                "rollout_metrics": metrics,
                "rollout_logprobs": (
                    [row_logprobs(e, len(r)) for e, r in zip(episodes, responses, strict=True)]
                    if wanted
                    else None
                ),
                "trajectory_ids": None,
                "trajectory_generation_times": None,
                "rollout_expert_indices": None,
                "is_last_step": None,
                "env_metrics": logs,
            }
            unscored = [e.unscored for e in episodes]
        if wanted and any(unscored) and not _warned_unscored[0]:
            _warned_unscored[0] = True
            logger.warning(
                "SkyRL's inference engine returned sampled tokens without log-probs (%d in this "
                "batch); they carry %s in rollout_logprobs (environment/agentflow/"
                "unscored_tokens; this warning is logged once per process)",
                sum(e.unscored for e in episodes),
                LOGPROB_FILL,
            )
        metadata = input_batch.get("batch_metadata")
        if wanted and getattr(metadata, "training_phase", "train") == "train":
            temperature = params.get("temperature")
            scored = {  # a filled log-prob is no sampling log-prob: those rows are not dumped
                key: [row for row, n in zip(output[key], unscored, strict=True) if not n]
                for key in ("prompt_token_ids", "response_ids", "loss_masks", "rollout_logprobs")
            }
            dump_samples(lambda: skyrl_samples(scored, temperature), logger)
        return output

    async def trajectory(
        self,
        prompt: list[dict[str, str]],
        extras: dict[str, Any],
        params: dict[str, Any],
        salt: str | None,
    ) -> Trajectory:
        """One row's episode, sampled through the inference client as one session; counted by
        the fail-fast guard (a setup that fails every trajectory raises ``SystemicFailure``)."""
        label = extras.get("label", prompt)
        session_id = uuid.uuid4().hex
        shared = shared_envs(self.shape)
        wanted = params.get("logprobs") is not None
        last_stop: list[str | None] = [None]

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
            last_stop[0] = str(reasons[0]) if reasons and reasons[0] is not None else None
            given = output.get("response_logprobs") if wanted else None
            return output["response_ids"][0], given[0] if given else None, last_stop[0]

        def session() -> Session:
            return new_session(shared, label, self.tokenizer, self.max_turns)

        try:
            episode = await run_token_episode(
                session,
                generate,
                self.budget,
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
        failure = trajectory_failure(episode.session, episode.error)
        if episode.end not in (ABORTED, PROMPT_BUDGET):  # the env never judged it: not counted
            shared.fail_fast.record(failure)  # SystemicFailure: the setup fails every trajectory
        return Trajectory(episode, last_stop[0], failure)
