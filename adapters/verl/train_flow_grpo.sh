#!/usr/bin/env bash
# Flow-GRPO training of the AgentFlow planner with verl 0.9.1 (keys checked against its
# ppo_trainer config), modelled on verl's GRPO recipes: group size 8, rollouts through verl's
# async vLLM servers and agent loops, the AgentFlow loop chosen per row by agent_name.
#
# The planner is the policy; every other module runs inside the env in verl's agent-loop workers
# (adapters/verl/agentflow_agent_loop.py). Beside the trainer this script can start:
#   - a frozen-module endpoint (`vllm serve $FROZEN_MODEL`) when FROZEN_MODEL is set; otherwise
#     the env's offline rule modules are used;
#   - a retriever server (`agentflow-env serve-retriever`) when CORPUS is set; otherwise Search
#     runs BM25 over each task's own corpus (the synthetic world).
#
# Single node (default):  bash adapters/verl/train_flow_grpo.sh
# Real QA data:           CORPUS=wiki18.jsonl TRAIN_FILE=data/nq.jsonl FROZEN_MODEL=... bash ...
# Extra verl overrides go after the script's own: bash adapters/verl/train_flow_grpo.sh trainer.nnodes=2
#
# verl starts a local Ray cluster whose workers inherit this shell's environment: PYTHONPATH
# (the agent loop's folder) and the AGENTFLOW_* settings. On a cluster you start yourself
# (multi-node), export the same variables before `ray start` on every node.
set -euo pipefail

# The shared settings (POLICY_MODEL, FROZEN_MODEL, CORPUS, GPUS_PER_NODE, ..., TRAIN_FILE),
# start_services and write_labels: adapters/common.sh.
TRAINER=verl
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
SAVE_DIR="${SAVE_DIR:-$REPO/checkpoints/flow-grpo-planner-verl}"
# verl pads every sample to these lengths and never shortens one: the first prompt must fit
# PROMPT_LENGTH, every action and feedback after it RESPONSE_LENGTH (an episode that runs out of
# room ends there with reward 0).
PROMPT_LENGTH="${PROMPT_LENGTH:-4096}"
RESPONSE_LENGTH="${RESPONSE_LENGTH:-8192}"

# 1. Prompts: AgentFlow labels as verl rows (`agentflow-env labels --format verl`).
write_labels

# 2. Env configuration, read by the agent loop in every worker (the tokenizer is verl's own).
export PYTHONPATH="$REPO/adapters/verl${PYTHONPATH:+:$PYTHONPATH}"
# AGENTFLOW_MAX_ACTION_TOKENS (default 1024) caps one planner turn: the env's max_action_tokens;
# set it, or max_action_tokens in AGENTFLOW_ENV_KWARGS, not two values.

# 3. The frozen-module endpoint and the retriever server, when FROZEN_MODEL / CORPUS are set.
start_services
if [ -n "$FROZEN_MODEL" ]; then  # keep verl off the frozen model's GPUs
  export CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((GPUS_PER_NODE - 1)))"
fi

# 4. Flow-GRPO: the trajectory reward (terminal: the env's answer score, placed on the last
# response token) normalised over the 8 trajectories of a prompt; KL to the reference is a loss.
python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  algorithm.use_kl_in_reward=False \
  data.train_files="$TRAIN_FILE" \
  data.val_files="$EVAL_FILE" \
  data.train_batch_size=32 \
  data.max_prompt_length="$PROMPT_LENGTH" \
  data.max_response_length="$RESPONSE_LENGTH" \
  data.filter_overlong_prompts=True \
  data.truncation=error \
  actor_rollout_ref.model.path="$POLICY_MODEL" \
  actor_rollout_ref.model.use_remove_padding=True \
  actor_rollout_ref.model.enable_gradient_checkpointing=True \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
  actor_rollout_ref.actor.use_kl_loss=True \
  actor_rollout_ref.actor.kl_loss_coef=0.001 \
  actor_rollout_ref.actor.kl_loss_type=low_var_kl \
  actor_rollout_ref.actor.entropy_coeff=0 \
  actor_rollout_ref.actor.fsdp_config.param_offload=False \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.mode=async \
  actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
  actor_rollout_ref.rollout.calculate_log_probs=True \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$REPO/adapters/verl/agent_loop.yaml" \
  actor_rollout_ref.rollout.agent.default_agent_loop=agentflow \
  actor_rollout_ref.rollout.val_kwargs.temperature=0.6 \
  actor_rollout_ref.rollout.val_kwargs.do_sample=True \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
  trainer.critic_warmup=0 \
  trainer.logger='["console","tensorboard"]' \
  trainer.project_name=agentflow \
  trainer.experiment_name=flow-grpo-planner \
  trainer.default_local_dir="$SAVE_DIR" \
  trainer.n_gpus_per_node="$GPUS_PER_NODE" \
  trainer.nnodes=1 \
  trainer.save_freq=50 \
  trainer.test_freq=20 \
  trainer.total_epochs=1 \
  "$@"
