"""Trainer-neutral driving of the envs; this package's names are the trainers' front door.

Modules:

- ``episodes``: whole episodes with a planner, and their summary;
- ``driver``: the batched rollout driver (many episodes, one generate call per turn, lockstep
  across ranks: ``lockstep``) that trains and evaluates;
- ``pool``: the env pool every adapter shares; ``labels``: trainer labels, episode plans and the
  ``AGENTFLOW_*`` adapter settings; ``spec``: ``TaskSpec`` labels naming an env and a task;
  ``label_files``: the label datasets in each trainer's row format (``agentflow-env labels``);
- ``token_episode``: one episode token-in-token-out over an async generate call, within a
  trainer's token budgets (verl's agent loop, SkyRL's generator); ``background_loop``: sessions
  for trainers that step envs from blocking code (SkyRL's ``BaseTextEnv``); ``vllm_outputs``:
  sampled ids, log-probs and finish reasons as generators return them, a turn's capped
  ``SamplingParams``;
- ``token_check``: a trainer's token sequence against the env's, and the mismatch diagnosis;
  ``failures``: zero-reward failure samples and the errors that stop a run; ``fail_fast``: the
  guard that stops a run whose first trajectories all fail the same way;
- ``hf_generation``: Hugging Face generation with the package's one log-prob definition;
- ``samples``: the trainer record and its two shapes;
- ``group_credit``: the turn-level credit methods over a group's trajectories; ``turn_credit``:
  their per-token advantages for a batch of episode results;
- ``train_diagnostics``: trainer-neutral training diagnostics; ``logprob_check``: any trainer's
  recorded log-probs against a model's forward pass (``agentflow-env check-logprobs``);
  ``trainer_samples``: OpenRLHF's, verl's and SkyRL's sample objects read for both;
- ``demonstrations``, ``planners``, ``llm_planners``, ``probes``: expert demonstrations, scripted
  and model-backed planners, the probe tasks' labels and random demonstrators.

The front door: a trainer adapter (``adapters/``) imports only the names below, from
``agentflow_env.rollout`` (or the top ``agentflow_env`` package), never a module
(``scripts/check_layers.py`` checks it). Grouped by what they are for:

- labels and settings: what a dataset row names and how an adapter is configured (``TaskSpec``,
  ``task_prompt``, ``read_task_spec``, ``plan_episode``, ``AdapterConfig`` from the
  ``AGENTFLOW_*`` variables, ``ADAPTER_MAX_ACTION_TOKENS``);
- label files: the rows each trainer reads (``write_label_rows``, ``convert_label_file``,
  ``verl_row``, ``skyrl_row``, ``add_label_commands`` and ``write_labels`` behind
  ``agentflow-env labels``; ``VERL_AGENT_NAME`` and ``SKYRL_ENV_CLASS``, the names a verl or
  SkyRL row selects the AgentFlow loop or env by);
- envs and sessions: the per-process env pool and the ``Session`` an adapter steps
  (``EnvPool``, ``SharedEnvs``, ``LazySharedEnvs``);
- the batched driver, for trainers that call generate on a batch (TRL): ``run_episodes``,
  ``EpisodeResult``, ``Generate``, ``default_pool``, the ranks' ``MaxAcrossRanks`` collective
  (``distributed_max``), ``HFGenerator``;
- one episode token-in-token-out, for trainers that run one async trajectory at a time (verl,
  SkyRL): ``run_token_episode``, ``TokenBudget``, ``TokenEpisode`` and its end reasons;
  ``BackgroundLoop`` for blocking callers;
- vLLM outputs: ``read_request_output``, ``capped_params``, ``sampled_logprob``,
  ``action_logprobs``;
- failures and the token check: the reward-0 sample of a failed trajectory and its logs
  (``filler_token_id``, ``episode_logs``, ``EPISODE_LOG_KEYS``, ``trajectory_failure``,
  ``warn_failed``), the errors that stop a run (``AdapterError``, ``SeamError`` and its
  ``SeamLatch``, ``SystemicFailure`` from the ``FailFast`` guard), a trainer's token sequence
  against the env's (``TrainerSequence``, ``MismatchHints``, ``describe_mismatch``,
  ``TokenMismatchError``);
- the trainer record and credit: ``TrainerSample``, the one record every driver returns in
  either sample shape (``SampleShape``: ``flat``, one per trajectory; ``turns``, one per planner
  turn on the prompt it acted on; ``turn_samples``), ``CreditMethod`` and ``token_advantages``
  (per-token turn-level advantages of flat samples; ``group_key``: which labels form a group), ``turn_sample_advantages`` (Flow-GRPO's
  group advantage broadcast to turn samples, either ``Normalization``, or turn-level credit);
- diagnostics: ``DiagnosticsLog``, ``group_signal``, ``logprob_gap``, ``permuted``; samples for
  ``agentflow-env check-logprobs`` (``dump_samples``, ``LogprobSample``) and the trainers' own
  sample objects read for it (``openrlhf_response_sample``, ``verl_samples``,
  ``skyrl_group_signal``, ...).
"""

from __future__ import annotations

from agentflow_env.rollout.agents.hf_generation import HFGenerator
from agentflow_env.rollout.checks.fail_fast import FailFast, SystemicFailure, fail_fast_limit
from agentflow_env.rollout.checks.failures import (
    EPISODE_LOG_KEYS,
    AdapterError,
    SeamError,
    SeamLatch,
    episode_logs,
    failure_reason,
    filler_token_id,
    trajectory_failure,
    warn_failed,
)
from agentflow_env.rollout.checks.logprob_check import LogprobSample, dump_samples
from agentflow_env.rollout.checks.token_check import (
    MismatchHints,
    TokenMismatchError,
    TrainerSequence,
    describe_mismatch,
    hf_encoder,
)
from agentflow_env.rollout.checks.train_diagnostics import (
    DiagnosticsLog,
    group_signal,
    logprob_gap,
    permuted,
)
from agentflow_env.rollout.checks.trainer_samples import (
    openrlhf_experience_samples,
    openrlhf_response_sample,
    skyrl_group_signal,
    skyrl_samples,
    verl_group_signal,
    verl_samples,
)
from agentflow_env.rollout.labels.label_files import (
    ADAPTER_SETTINGS,
    LABEL_FORMATS,
    SKYRL_ENV_CLASS,
    VERL_AGENT_NAME,
    add_label_commands,
    convert_label_file,
    skyrl_row,
    verl_row,
    write_label_rows,
    write_labels,
)
from agentflow_env.rollout.labels.plans import (
    ADAPTER_MAX_ACTION_TOKENS,
    SAMPLES_VARIABLE,
    AdapterConfig,
    EpisodePlan,
    parse_task_prompt,
    plan_episode,
    read_task_spec,
    task_prompt,
)
from agentflow_env.rollout.labels.spec import DEFAULT_ENV_ID, TaskSpec, TaskSpecError
from agentflow_env.rollout.training.background_loop import BackgroundLoop
from agentflow_env.rollout.training.driver import (
    EpisodeResult,
    Generate,
    default_pool,
    run_episodes,
)
from agentflow_env.rollout.training.group_credit import CreditMethod, Normalization
from agentflow_env.rollout.training.lockstep import MaxAcrossRanks, distributed_max
from agentflow_env.rollout.training.pool import EnvPool, LazySharedEnvs, SharedEnvs, build_env
from agentflow_env.rollout.training.samples import (
    SAMPLE_SHAPES,
    SampleShape,
    TrainerSample,
    turn_sample_advantages,
    turn_samples,
)
from agentflow_env.rollout.training.token_episode import (
    ABORTED,
    DONE,
    ERROR,
    PROMPT_BUDGET,
    RESPONSE_BUDGET,
    TokenBudget,
    TokenEpisode,
    run_token_episode,
)
from agentflow_env.rollout.training.turn_credit import group_key, token_advantages
from agentflow_env.rollout.training.vllm_outputs import (
    action_logprobs,
    capped_params,
    read_request_output,
    sampled_logprob,
)
from agentflow_env.workflow.session import Session

__all__ = [
    # labels and settings
    "DEFAULT_ENV_ID",
    "ADAPTER_MAX_ACTION_TOKENS",
    "SAMPLES_VARIABLE",
    "AdapterConfig",
    "EpisodePlan",
    "TaskSpec",
    "TaskSpecError",
    "parse_task_prompt",
    "plan_episode",
    "read_task_spec",
    "task_prompt",
    # label files
    "ADAPTER_SETTINGS",
    "LABEL_FORMATS",
    "SKYRL_ENV_CLASS",
    "VERL_AGENT_NAME",
    "add_label_commands",
    "convert_label_file",
    "skyrl_row",
    "verl_row",
    "write_label_rows",
    "write_labels",
    # envs and sessions
    "EnvPool",
    "LazySharedEnvs",
    "Session",
    "SharedEnvs",
    "build_env",
    # the batched driver
    "EpisodeResult",
    "Generate",
    "HFGenerator",
    "MaxAcrossRanks",
    "default_pool",
    "distributed_max",
    "run_episodes",
    # one episode token-in-token-out
    "ABORTED",
    "DONE",
    "ERROR",
    "PROMPT_BUDGET",
    "RESPONSE_BUDGET",
    "BackgroundLoop",
    "TokenBudget",
    "TokenEpisode",
    "run_token_episode",
    # vLLM outputs
    "action_logprobs",
    "capped_params",
    "read_request_output",
    "sampled_logprob",
    # failures and the token check
    "EPISODE_LOG_KEYS",
    "AdapterError",
    "FailFast",
    "MismatchHints",
    "SeamError",
    "SeamLatch",
    "SystemicFailure",
    "TokenMismatchError",
    "TrainerSequence",
    "describe_mismatch",
    "episode_logs",
    "fail_fast_limit",
    "failure_reason",
    "filler_token_id",
    "hf_encoder",
    "trajectory_failure",
    "warn_failed",
    # the trainer record and credit
    "SAMPLE_SHAPES",
    "CreditMethod",
    "Normalization",
    "SampleShape",
    "TrainerSample",
    "group_key",
    "token_advantages",
    "turn_sample_advantages",
    "turn_samples",
    # diagnostics
    "DiagnosticsLog",
    "LogprobSample",
    "dump_samples",
    "group_signal",
    "logprob_gap",
    "openrlhf_experience_samples",
    "openrlhf_response_sample",
    "permuted",
    "skyrl_group_signal",
    "skyrl_samples",
    "verl_group_signal",
    "verl_samples",
]
