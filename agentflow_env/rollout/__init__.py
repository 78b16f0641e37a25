"""Trainer-neutral driving of the envs; this package's names are the trainers' front door.

Modules:

- ``episodes``: whole episodes with a planner, and their summary;
- ``driver``: the batched rollout driver (many episodes, one generate call per turn, lockstep
  across ranks: ``lockstep``) that trains and evaluates;
- ``pool``: the env pool every adapter shares; ``labels``: trainer labels, episode plans and the
  ``AGENTFLOW_*`` adapter settings; ``spec``: ``TaskSpec`` labels naming an env and a task;
  ``label_files``: the label datasets (``agentflow-env labels``) in a registered row format
  (``row_formats``: the core's generic rows, the trainers' from their adapters);
- ``token_episode``: one episode token-in-token-out over an async generate call, within a
  trainer's token budgets (verl's agent loop, SkyRL's generator); ``background_loop``: sessions
  for trainers that step envs from blocking code (SkyRL's ``BaseTextEnv``); ``vllm_outputs``:
  sampled ids, log-probs and finish reasons as generators return them, a turn's capped
  ``SamplingParams``;
- ``token_check``: a trainer's token sequence against the env's, and the mismatch diagnosis;
  ``failures``: zero-reward failure samples and the errors that stop a run; ``fail_fast``: the
  guard that stops a run whose first trajectories all fail the same way;
- ``hf_generation``: Hugging Face generation with the package's one log-prob definition;
- ``samples``: the trainer record and its two shapes; ``trainer_episode``: one token-in-token-out
  trajectory judged for its trainer, and its row fields;
- ``group_credit``: the turn-level credit methods over a group's trajectories; ``turn_credit``:
  their advantages for a batch of trajectories grouped by label (the one home of credit);
  ``held_out``: a held-out probe's pass rates;
- ``train_diagnostics``: trainer-neutral training diagnostics; ``logprob_check``: any trainer's
  recorded log-probs against a model's forward pass (``agentflow-env check-logprobs``);
  ``trainer_samples``: OpenRLHF's, verl's and SkyRL's sample objects read for both;
- ``demonstrations``, ``planners``, ``llm_planners``, ``probes``: expert demonstrations, scripted
  and model-backed planners, the probe tasks' labels and random demonstrators.

The front door: a trainer adapter (``adapters/``) imports only names of ``ADAPTER_API``, from
``agentflow_env.rollout`` (or the top ``agentflow_env`` package), never a module
(``scripts/check_layers.py`` and ``tests/adapters/test_front_door.py`` check it); the rest of
``__all__`` serves tests, examples and the CLI. Grouped by what they are for:

- labels and settings: what a dataset row names and how an adapter is configured (``TaskSpec``,
  ``task_prompt``, ``read_task_spec``, ``plan_episode``, ``AdapterConfig`` from the
  ``AGENTFLOW_*`` variables, ``ADAPTER_MAX_ACTION_TOKENS``; any declared variable through
  ``read_env_var`` or ``env_var_text``, a malformed one an ``EnvVarError``);
- label files: the rows each trainer reads (``write_label_rows``, ``convert_label_file``,
  ``add_label_commands`` and ``write_labels`` behind ``agentflow-env labels``); the row formats'
  registry (``register_row_format``, which a trainer's ``adapters/<trainer>/<trainer>_row_format.py``
  calls, ``load_row_formats``, ``load_row_file``, ``row_formats``, the core's ``GENERIC`` rows);
- envs and sessions: the per-process env pool and the ``Session`` an adapter steps
  (``EnvPool``, ``SharedEnvs``, whose ``judge`` counts a finished trajectory with the fail-fast
  guard, ``LazySharedEnvs``);
- the batched driver, for trainers that call generate on a batch (TRL): ``run_episodes``,
  ``EpisodeResult``, ``Generate``, ``default_pool``, the ranks' ``MaxAcrossRanks`` collective
  (``distributed_max``), ``HFGenerator``;
- one episode token-in-token-out, for trainers that run one async trajectory at a time (verl,
  SkyRL): ``run_token_episode``, ``TokenBudget``, ``TokenEpisode`` and its end reasons;
  ``run_trainer_episode``, the same judged and counted by the fail-fast guard, and its
  ``TrainerEpisode`` (a row's logs, stop reason, ``padded_logprobs``, check-logprobs sample);
  ``BackgroundLoop`` for blocking callers;
- vLLM outputs: ``read_request_output``, ``capped_params``, ``sampled_logprob``,
  ``action_logprobs``; ``CheckedEngine``, a trainer's vLLM engine checked every turn;
- failures and the token check: the reward-0 sample of a failed trajectory and its logs
  (``filler_token_id``, ``episode_logs``, ``EPISODE_LOG_KEYS``, ``trajectory_failure``,
  ``warn_failed``), the errors that stop a run (``AdapterError``, ``SeamError`` and its
  ``SeamLatch``, ``SystemicFailure`` from the ``FailFast`` guard), a trainer's token sequence
  against the env's (``TrainerSequence``, ``MismatchHints``, ``describe_mismatch``,
  ``TokenMismatchError``);
- the trainer record and credit: ``TrainerSample``, the one record every driver returns in
  either sample shape (``SampleShape``: ``flat``, one per trajectory; ``turns``, one per planner
  turn on the prompt it acted on; ``turn_samples``), ``CreditMethod`` and ``token_advantages``
  (per-token turn-level advantages of flat samples, ``padded_rows`` to a trainer's width;
  ``group_key``: which labels form a group), ``turn_sample_advantages`` (Flow-GRPO's group
  advantage broadcast to turn samples, either ``Normalization``, or turn-level credit) and
  ``grouped_turn_advantages`` over a batch's labels; ``check_credit_options``;
- diagnostics: ``DiagnosticsLog``, ``StepFigures``, ``group_signal``, ``logprob_gap``,
  ``planner_token_figures``, ``permuted``, ``held_out_pass_rates``; samples for
  ``agentflow-env check-logprobs`` (``dump_samples``, ``LogprobSample``) and the trainers' own
  sample objects read for it (``openrlhf_response_sample``, ``verl_samples``,
  ``skyrl_group_signal``, ...).
"""

from __future__ import annotations

from agentflow_env.base.settings import EnvVarError, env_var_text, read_env_var
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
    StepFigures,
    group_signal,
    logprob_gap,
    permuted,
    planner_token_figures,
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
    add_label_commands,
    convert_label_file,
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
from agentflow_env.rollout.labels.row_formats import (
    GENERIC,
    Row,
    load_row_file,
    load_row_formats,
    register_row_format,
    row_formats,
)
from agentflow_env.rollout.labels.spec import DEFAULT_ENV_ID, TaskSpec, TaskSpecError
from agentflow_env.rollout.training.background_loop import BackgroundLoop
from agentflow_env.rollout.training.driver import (
    EpisodeResult,
    Generate,
    default_pool,
    run_episodes,
)
from agentflow_env.rollout.training.dynamic_sampling import (
    DynamicSampling,
    RefillReport,
    fill_informative_groups,
)
from agentflow_env.rollout.training.group_credit import CreditMethod, Normalization
from agentflow_env.rollout.training.held_out import held_out_pass_rates
from agentflow_env.rollout.training.lockstep import MaxAcrossRanks, distributed_max
from agentflow_env.rollout.training.pool import EnvPool, LazySharedEnvs, SharedEnvs, build_env
from agentflow_env.rollout.training.remote_envs import RemoteEnvPool, end_session, served_label
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
from agentflow_env.rollout.training.trainer_episode import (
    TrainerEpisode,
    padded_logprobs,
    run_trainer_episode,
)
from agentflow_env.rollout.training.turn_credit import (
    check_credit_options,
    group_key,
    grouped_turn_advantages,
    padded_rows,
    token_advantages,
)
from agentflow_env.rollout.training.vllm_outputs import (
    CheckedEngine,
    action_logprobs,
    capped_params,
    read_request_output,
    sampled_logprob,
)
from agentflow_env.workflow.session import Session

ADAPTER_API = (
    # What the trainer adapters (adapters/) import, by what it is for; tests/adapters/
    # test_front_door.py holds them to it. The rest of __all__ serves tests, examples, the CLI.
    # labels and settings
    "DEFAULT_ENV_ID",
    "SAMPLES_VARIABLE",
    "AdapterConfig",
    "env_var_text",
    "read_env_var",
    "task_prompt",
    # label files and row formats
    "ADAPTER_SETTINGS",
    "Row",
    "add_label_commands",
    "convert_label_file",
    "load_row_file",
    "load_row_formats",
    "register_row_format",
    "write_label_rows",
    "write_labels",
    # envs and sessions
    "LazySharedEnvs",
    "Session",
    "SharedEnvs",
    "end_session",
    # the batched driver
    "EpisodeResult",
    "Generate",
    "HFGenerator",
    "MaxAcrossRanks",
    "default_pool",
    "run_episodes",
    # one episode token-in-token-out
    "BackgroundLoop",
    "TokenBudget",
    "TokenEpisode",
    "TrainerEpisode",
    "padded_logprobs",
    "run_token_episode",
    "run_trainer_episode",
    # vLLM outputs
    "CheckedEngine",
    "sampled_logprob",
    # failures and the token check
    "EPISODE_LOG_KEYS",
    "AdapterError",
    "FailFast",
    "MismatchHints",
    "SeamError",
    "SeamLatch",
    "TrainerSequence",
    "describe_mismatch",
    "episode_logs",
    "fail_fast_limit",
    "failure_reason",
    "filler_token_id",
    "hf_encoder",
    "warn_failed",
    # the trainer record and credit
    "SAMPLE_SHAPES",
    "CreditMethod",
    "Normalization",
    "SampleShape",
    "TrainerSample",
    "check_credit_options",
    "grouped_turn_advantages",
    "padded_rows",
    "token_advantages",
    # dynamic sampling with refill
    "DynamicSampling",
    "fill_informative_groups",
    # diagnostics
    "LogprobSample",
    "StepFigures",
    "dump_samples",
    "group_signal",
    "held_out_pass_rates",
    "openrlhf_response_sample",
    "permuted",
    "planner_token_figures",
    "skyrl_group_signal",
    "skyrl_samples",
)
"""The names the trainer adapters import: an adapter needs no other (``tests/adapters/
test_front_door.py``). ``__all__`` holds them first, then the names for tests, examples and the
CLI."""

__all__ = [
    # -- ADAPTER_API
    # labels and settings
    "DEFAULT_ENV_ID",
    "SAMPLES_VARIABLE",
    "AdapterConfig",
    "env_var_text",
    "read_env_var",
    "task_prompt",
    # label files and row formats
    "ADAPTER_SETTINGS",
    "Row",
    "add_label_commands",
    "convert_label_file",
    "load_row_file",
    "load_row_formats",
    "register_row_format",
    "write_label_rows",
    "write_labels",
    # envs and sessions
    "LazySharedEnvs",
    "Session",
    "SharedEnvs",
    "end_session",
    # the batched driver
    "EpisodeResult",
    "Generate",
    "HFGenerator",
    "MaxAcrossRanks",
    "default_pool",
    "run_episodes",
    # one episode token-in-token-out
    "BackgroundLoop",
    "TokenBudget",
    "TokenEpisode",
    "TrainerEpisode",
    "padded_logprobs",
    "run_token_episode",
    "run_trainer_episode",
    # vLLM outputs
    "CheckedEngine",
    "sampled_logprob",
    # failures and the token check
    "EPISODE_LOG_KEYS",
    "AdapterError",
    "FailFast",
    "MismatchHints",
    "SeamError",
    "SeamLatch",
    "TrainerSequence",
    "describe_mismatch",
    "episode_logs",
    "fail_fast_limit",
    "failure_reason",
    "filler_token_id",
    "hf_encoder",
    "warn_failed",
    # the trainer record and credit
    "SAMPLE_SHAPES",
    "CreditMethod",
    "Normalization",
    "SampleShape",
    "TrainerSample",
    "check_credit_options",
    "grouped_turn_advantages",
    "padded_rows",
    "token_advantages",
    # dynamic sampling with refill
    "DynamicSampling",
    "fill_informative_groups",
    # diagnostics
    "LogprobSample",
    "StepFigures",
    "dump_samples",
    "group_signal",
    "held_out_pass_rates",
    "openrlhf_response_sample",
    "permuted",
    "planner_token_figures",
    "skyrl_group_signal",
    "skyrl_samples",
    # -- the rest
    # dynamic sampling's report
    "RefillReport",
    # episodes on served envs
    "RemoteEnvPool",
    "served_label",
    # labels and settings
    "ADAPTER_MAX_ACTION_TOKENS",
    "EnvVarError",
    "EpisodePlan",
    "TaskSpec",
    "TaskSpecError",
    "parse_task_prompt",
    "plan_episode",
    "read_task_spec",
    # label files and row formats
    "GENERIC",
    "row_formats",
    # envs and sessions
    "EnvPool",
    "build_env",
    # the batched driver
    "distributed_max",
    # one episode token-in-token-out
    "ABORTED",
    "DONE",
    "ERROR",
    "PROMPT_BUDGET",
    "RESPONSE_BUDGET",
    # vLLM outputs
    "action_logprobs",
    "capped_params",
    "read_request_output",
    # failures and the token check
    "SystemicFailure",
    "TokenMismatchError",
    "trajectory_failure",
    # the trainer record and credit
    "group_key",
    "turn_sample_advantages",
    "turn_samples",
    # diagnostics
    "DiagnosticsLog",
    "logprob_gap",
    "openrlhf_experience_samples",
    "verl_group_signal",
    "verl_samples",
]
