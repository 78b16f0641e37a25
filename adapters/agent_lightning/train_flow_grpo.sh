#!/usr/bin/env bash
# Flow-GRPO training of the AgentFlow planner the way AgentFlow trains it: one verl sample per
# planner turn, each carrying its trajectory's reward, through Agent Lightning 1.0.2 (Python >= 3.12,
# its verl stack: verl 0.7.1 or 0.8.0, see README.md beside this file).
#
# Three processes, as Agent Lightning runs: its server (`agl-server`: the store and the gateway in
# front of verl's vLLM servers, which records every planner call's prompt and response ids), its
# controller (`agl-controller runner_type=local`: one agent process per rollout, running
# agentflow_agl_agent.AgentFlowAgent) and the trainer (train_flow_grpo.py -> run_ppo). Beside them
# adapters/services.sh may start a frozen-module endpoint (FROZEN_MODEL) and a retriever (CORPUS).
#
# The numbers are AgentFlow's (lupantech/AgentFlow, train/config.yaml; its rollout: train/rollout.py):
#   Qwen/Qwen2.5-7B-Instruct on 8 GPUs (BASE_MODEL, N_GPUS), data.train_batch_size 32,
#   actor_rollout_ref.rollout.n 8, lr 1e-6, use_kl_loss with kl_loss_coef 0.001, entropy_coeff 0,
#   clip_ratio_low 0.2 / clip_ratio_high 0.3, ppo_mini_batch_size 8, micro batches of 4,
#   data.max_prompt_length 18432, data.max_response_length 2048 (also each planner call's
#   max_tokens), TOOL_STEPS 3, TRAIN_TEMPERATURE 0.7 / TEST_TEMPERATURE 0.0, N_WORKERS 16,
#   AGENT_MAX_TIMEOUT 500 s, 5 epochs, save and test every 2 steps, validation before training.
# Its frozen modules are gpt-4o-mini and its data NQ + DeepMath: README.md, "Reproduce AgentFlow's
# training", says how to give the same here; by default this runs the synthetic world.
#
#   bash adapters/agent_lightning/train_flow_grpo.sh [key=value ...]   # extra Hydra overrides
set -euo pipefail

# The shared settings (POLICY_MODEL, FROZEN_MODEL, CORPUS, GPUS_PER_NODE, ..., TRAIN_FILE),
# start_services and write_labels: adapters/common.sh. The rows are verl's (a label column).
TRAINER=verl
DATA_DIR="${DATA_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/data/agent_lightning}"
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
HERE="$REPO/adapters/agent_lightning"
SAVE_DIR="${SAVE_DIR:-$REPO/checkpoints/flow-grpo-planner-agl}"
AGL_PORT="${AGL_PORT:-8080}"
AGL_KEY="${AGL_KEY:-agentflow-$RANDOM$RANDOM}"
AGL_URL="http://$SERVICE_HOST:$AGL_PORT"
PROMPT_LENGTH="${PROMPT_LENGTH:-18432}"     # AgentFlow's data.max_prompt_length
RESPONSE_LENGTH="${RESPONSE_LENGTH:-2048}"  # AgentFlow's data.max_response_length
AGENTS="${AGENTS:-16}"                      # AgentFlow's N_WORKERS: rollouts at once

# 1. Labels as verl rows (`agentflow-env labels --format verl`); train_flow_grpo.py reads the label.
write_labels

# 2. The agent processes' settings (the controller hands its environment to each of them):
# per-turn samples on AgentFlow's structured prompt, each turn capped at the response length,
# a turn whose prompt outgrows the prompt length ends its episode (reward 0).
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
export AGENTFLOW_SAMPLES=turns
export AGENTFLOW_MAX_ACTION_TOKENS="$RESPONSE_LENGTH"
export AGENTFLOW_MAX_PROMPT_TOKENS="$PROMPT_LENGTH"

# AgentFlow's TOOL_STEPS: 3 planner turns (labels written with `--preset agentflow_train` carry it
# themselves); with a frozen model, its LLM modules.
if [ -z "${AGENTFLOW_ENV_KWARGS:-}" ]; then
  AGENTFLOW_ENV_KWARGS='{"max_turns": 3}'
  [ -z "$FROZEN_MODEL" ] || AGENTFLOW_ENV_KWARGS='{"max_turns": 3, "modules": "llm"}'
  export AGENTFLOW_ENV_KWARGS
fi

# 3. Frozen modules and retriever (when FROZEN_MODEL / CORPUS are set), then Agent Lightning's
# server (the gateway forces the sampling temperatures: AgentFlow's train 0.7, test 0.0) and
# controller.
start_services
if [ -n "$FROZEN_MODEL" ]; then  # keep verl off the frozen model's GPUs
  export CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((GPUS_PER_NODE - 1)))"
fi
# (Both are Hydra apps: their logs go to $SAVE_DIR/agl-*, not to ./outputs.)
agl-server host=0.0.0.0 port="$AGL_PORT" key="$AGL_KEY" \
  default_proxy.model_name="$POLICY_MODEL" \
  default_proxy.train.temperature=0.7 default_proxy.val.temperature=0.0 \
  hydra.run.dir="$SAVE_DIR/agl-server" &
PIDS+=($!)
wait_for "$AGL_URL/healthz" "${PIDS[-1]}"
agl-controller runner_type=local agl_server.url="$AGL_URL" agl_server.key="$AGL_KEY" \
  local_runner.maximum_size="$AGENTS" local_runner.poll_interval=2 \
  hydra.run.dir="$SAVE_DIR/agl-controller" &
PIDS+=($!)

# 4. verl through Agent Lightning: one training row per planner call (trace level transition),
# the rollout's reward on each; GRPO normalises over the rows of a prompt's 8 rollouts, as
# AgentFlow's trainer does (uid = data id, no rollout-level advantage), with verl's own loss.
python3 "$HERE/train_flow_grpo.py" --train "$TRAIN_FILE" --val "$EVAL_FILE" \
  agentlightning.agl_base_url="$AGL_URL" \
  agentlightning.agl_key="$AGL_KEY" \
  agentlightning.rollout_timeout_seconds=600 \
  agentlightning.trace_aggregator.level=transition \
  algorithm.enable_rollout_level_advantage=False \
  actor_rollout_ref.actor.policy_loss.loss_mode=vanilla \
  algorithm.adv_estimator=grpo \
  algorithm.use_kl_in_reward=False \
  data.train_batch_size=32 \
  data.max_prompt_length="$PROMPT_LENGTH" \
  data.max_response_length="$RESPONSE_LENGTH" \
  actor_rollout_ref.model.path="$POLICY_MODEL" \
  actor_rollout_ref.model.use_remove_padding=True \
  actor_rollout_ref.model.enable_gradient_checkpointing=True \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.actor.use_kl_loss=True \
  actor_rollout_ref.actor.kl_loss_coef=0.001 \
  actor_rollout_ref.actor.entropy_coeff=0.0 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.3 \
  actor_rollout_ref.actor.fsdp_config.param_offload=False \
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.rollout.temperature=0.7 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.ref.fsdp_config.param_offload=False \
  trainer.critic_warmup=0 \
  trainer.logger='["console","tensorboard"]' \
  trainer.project_name=agentflow \
  trainer.experiment_name=flow-grpo-planner-agl \
  trainer.default_local_dir="$SAVE_DIR" \
  trainer.n_gpus_per_node="$GPUS_PER_NODE" \
  trainer.nnodes=1 \
  trainer.val_before_train=True \
  trainer.save_freq=2 \
  trainer.test_freq=2 \
  trainer.total_epochs=5 \
  "$@"
