"""Each trainer's own sample objects, read into ``LogprobSample``s and group signal.

Checked against the installed sources of OpenRLHF 0.11.2, verl 0.9.1 and skyrl 0.3.0; nothing
here imports them (their objects are read by field name, tensors through ``tolist()``):

- OpenRLHF: the dict ``MultiTurnAgentExecutor.execute`` returns (``observation_tokens``,
  ``action_ranges``, ``rollout_log_probs`` over the whole sequence, 0 off the actions), and
  ``Experience`` (``trainer/ppo_utils/experience.py``: ``sequences`` and ``attention_mask``
  (B, T), right-padded; ``action_mask`` and ``rollout_log_probs`` (B, T - 1), position ``j``
  for token ``j + 1``). Rollout log-probs are recorded only with
  ``--algo.advantage.is_correction_level token|seq`` (it asks vLLM for ``logprobs=1``).
- verl: the ``DataProto`` its agent loop returns (``experimental/agent_loop/agent_loop.py``):
  ``prompts`` (B, P) left-padded, ``responses``, ``response_mask`` and ``rollout_log_probs``
  (B, R) right-padded, ``attention_mask`` (B, P + R); groups by ``non_tensor_batch["uid"]``,
  rewards in ``token_level_scores`` (or the agent loop's ``rm_scores``). Rollout log-probs with
  ``actor_rollout_ref.rollout.calculate_log_probs=True``.
- SkyRL: ``GeneratorOutput`` (``train/generators/base.py``): ``prompt_token_ids``,
  ``response_ids``, ``loss_masks``, ``rollout_logprobs`` (``None`` unless
  ``generator.sampling_params.logprobs`` is set), ``rewards`` (one per row, or per token);
  groups by ``GeneratorInput["trajectory_ids"][i].instance_id``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from agentflow_env.rollout.checks.logprob_check import LogprobSample
from agentflow_env.rollout.checks.train_diagnostics import group_signal

__all__ = [
    "keyed_group_signal",
    "openrlhf_experience_samples",
    "openrlhf_response_sample",
    "skyrl_group_signal",
    "skyrl_samples",
    "verl_group_signal",
    "verl_samples",
]

NO_LOGPROBS = {
    "openrlhf": "no rollout_log_probs: OpenRLHF records them only with "
    "--algo.advantage.is_correction_level token (or seq)",
    "verl": "no rollout_log_probs in the batch: set "
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "skyrl": "rollout_logprobs is None: set generator.sampling_params.logprobs (e.g. 1)",
}


def _list(values: Any) -> list[Any]:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _split_at_first_action(
    tokens: Sequence[int],
    mask: Sequence[int],
    logprobs: Sequence[Any],
    temperature: float | None = None,
) -> LogprobSample:
    """A whole sequence (``mask`` and ``logprobs`` aligned with ``tokens``) as prompt (up to the
    first masked token) and completion."""
    first = next((i for i, m in enumerate(mask) if m), len(tokens))
    return LogprobSample.build(
        tokens[:first], tokens[first:], mask[first:], logprobs[first:], temperature
    )


# -- OpenRLHF ----------------------------------------------------------------------------------
def openrlhf_response_sample(
    response: Mapping[str, Any], temperature: float | None = None
) -> LogprobSample:
    """One sample from the dict OpenRLHF's agent executor returns (``agent_func.py``'s too);
    ``temperature``: its sampling params' (recorded in the sample)."""
    logprobs = response.get("rollout_log_probs")
    if logprobs is None:
        raise ValueError(NO_LOGPROBS["openrlhf"])
    tokens = [int(t) for t in _list(response["observation_tokens"])]
    mask = [0] * len(tokens)
    for start, end in response["action_ranges"]:
        mask[start:end] = [1] * (end - start)
    return _split_at_first_action(tokens, mask, _list(logprobs), temperature)


def openrlhf_experience_samples(experience: Any) -> list[LogprobSample]:
    """One sample per row of an OpenRLHF ``Experience``: a batch (2-D tensors), or one sample
    as its replay buffer splits them (1-D)."""
    if experience.rollout_log_probs is None:
        raise ValueError(NO_LOGPROBS["openrlhf"])
    fields = (
        experience.sequences,
        experience.attention_mask,
        experience.action_mask,
        experience.rollout_log_probs,
    )
    rows = [_list(f) for f in fields]
    if rows[0] and not isinstance(rows[0][0], list):
        rows = [[row] for row in rows]
    sequences, attention, actions, logprobs = rows
    samples = []
    for row, tokens in enumerate(sequences):
        length = int(sum(attention[row]))
        if any(not a for a in attention[row][:length]):
            raise ValueError(f"Experience row {row} is not right-padded")
        # action_mask[j] and rollout_log_probs[j] belong to token j + 1: a placeholder for token 0
        mask = [0] + [int(m) for m in actions[row][: length - 1]]
        row_logprobs = [0.0] + list(logprobs[row][: length - 1])
        samples.append(_split_at_first_action(tokens[:length], mask, row_logprobs))
    return samples


# -- verl --------------------------------------------------------------------------------------
def verl_samples(data: Any) -> list[LogprobSample]:
    """One sample per row of a verl ``DataProto`` (or its ``batch`` TensorDict)."""
    batch = getattr(data, "batch", data)
    keys = set(batch.keys())
    if "rollout_log_probs" not in keys:
        raise ValueError(NO_LOGPROBS["verl"])
    prompts = _list(batch["prompts"])
    width = len(prompts[0]) if prompts else 0
    attention = _list(batch["attention_mask"])
    responses, masks = _list(batch["responses"]), _list(batch["response_mask"])
    logprobs = _list(batch["rollout_log_probs"])
    samples = []
    for row, prompt in enumerate(prompts):
        prompt_ids = [t for t, a in zip(prompt, attention[row][:width], strict=True) if a]
        length = int(sum(attention[row][width:]))
        samples.append(
            LogprobSample.build(
                prompt_ids,
                responses[row][:length],
                masks[row][:length],
                logprobs[row][:length],
            )
        )
    return samples


def verl_group_signal(data: Any) -> dict[str, float]:
    """``keyed_group_signal`` of a verl ``DataProto``: groups by ``uid``, each row's reward the
    sum of its ``token_level_scores`` (``rm_scores`` before verl's reward step)."""
    keys = set(data.batch.keys())
    scores = data.batch["token_level_scores" if "token_level_scores" in keys else "rm_scores"]
    return keyed_group_signal(_list(scores.sum(-1)), _list(data.non_tensor_batch["uid"]))


# -- SkyRL -------------------------------------------------------------------------------------
def skyrl_samples(
    output: Mapping[str, Any], temperature: float | None = None
) -> list[LogprobSample]:
    """One sample per row of a SkyRL ``GeneratorOutput``; ``temperature``: the sampling
    params' (recorded in each sample)."""
    logprobs = output.get("rollout_logprobs")
    if logprobs is None:
        raise ValueError(NO_LOGPROBS["skyrl"])
    return [
        LogprobSample.build(prompt, response, mask, row_logprobs, temperature)
        for prompt, response, mask, row_logprobs in zip(
            output["prompt_token_ids"],
            output["response_ids"],
            output["loss_masks"],
            logprobs,
            strict=True,
        )
    ]


def skyrl_group_signal(rewards: Sequence[Any], trajectory_ids: Sequence[Any]) -> dict[str, float]:
    """``keyed_group_signal`` of a SkyRL batch: groups by ``TrajectoryID.instance_id``; a row's
    reward is its number, or the sum of its per-token rewards."""
    totals = [float(sum(r)) if isinstance(r, Sequence) else float(r) for r in rewards]
    return keyed_group_signal(totals, [t.instance_id for t in trajectory_ids])


# -- any trainer -------------------------------------------------------------------------------
def keyed_group_signal(rewards: Sequence[float], keys: Sequence[Hashable]) -> dict[str, float]:
    """``train_diagnostics.group_signal`` over groups named by ``keys`` (any order, any sizes):
    the fractions of groups with equal rewards, all 0, informative; the mean |advantage| over
    the samples."""
    groups: dict[Hashable, list[float]] = {}
    for reward, key in zip(rewards, keys, strict=True):
        groups.setdefault(key, []).append(float(reward))
    each = [(len(g), group_signal(g, len(g))) for g in groups.values()]
    n, samples = len(each) or 1, sum(size for size, _ in each) or 1
    return {
        "groups": len(each),
        "equal_reward_groups": sum(s["equal_reward_groups"] for _, s in each) / n,
        "all_zero_groups": sum(s["all_zero_groups"] for _, s in each) / n,
        "informative_groups": sum(s["informative_groups"] for _, s in each) / n,
        "mean_abs_advantage": sum(size * s["mean_abs_advantage"] for size, s in each) / samples,
    }
