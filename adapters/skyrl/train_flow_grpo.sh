#!/usr/bin/env bash
# Flow-GRPO training of the AgentFlow planner with SkyRL 0.3.0 (keys checked against its
# SkyRLTrainConfig): group size 8, rollouts through SkyRL's vLLM engines and, by default, the
# token-exact AgentFlowGenerator (TEXT_ENV=1: SkyRL's own generator with AgentFlowTextEnv).
#
# The planner is the policy; every other module runs inside the env, in SkyRL's generator
# process. Beside the trainer this script can start:
#   - a frozen-module endpoint (`vllm serve $FROZEN_MODEL`) when FROZEN_MODEL is set; otherwise
#     the env's offline rule modules are used;
#   - a retriever server (`agentflow-env serve-retriever`) when CORPUS is set; otherwise Search
#     runs BM25 over each task's own corpus (the synthetic world).
#
# Single node (default):  bash adapters/skyrl/train_flow_grpo.sh
# Real QA data:           CORPUS=wiki18.jsonl TRAIN_FILE=data/nq.jsonl FROZEN_MODEL=... bash ...
# Extra SkyRL overrides go after the script's own: bash adapters/skyrl/train_flow_grpo.sh trainer.epochs=2
set -euo pipefail

# The shared settings (POLICY_MODEL, FROZEN_MODEL, CORPUS, GPUS_PER_NODE, ..., TRAIN_FILE),
# start_services and write_labels: adapters/common.sh.
TRAINER=skyrl
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
TEXT_ENV="${TEXT_ENV:-0}"                 # 1: SkyRL's SkyRLGymGenerator + AgentFlowTextEnv
SAVE_DIR="${SAVE_DIR:-$REPO/checkpoints/flow-grpo-planner-skyrl}"
# A trajectory (prompt + every action and feedback) may grow to MAX_INPUT_LENGTH tokens before
# its last action; one action is at most MAX_ACTION_TOKENS. Out of room: reward 0.
MAX_INPUT_LENGTH="${MAX_INPUT_LENGTH:-12288}"
MAX_ACTION_TOKENS="${MAX_ACTION_TOKENS:-1024}"

# 1. Prompts: AgentFlow labels as SkyRL rows (`agentflow-env labels --format skyrl`).
write_labels

# 2. Env configuration, read in SkyRL's generator process (main_agentflow.py passes on every
# AGENTFLOW_* variable). The token-exact generator renders with the tokenizer SkyRL loads from
# trainer.policy.model.path and refuses an AGENTFLOW_TOKENIZER of another vocabulary; the text
# env (TEXT_ENV=1) gets no tokenizer from SkyRL and renders with this one.
export AGENTFLOW_TOKENIZER="$POLICY_MODEL"
export AGENTFLOW_MAX_ACTION_TOKENS="$MAX_ACTION_TOKENS"  # the env's max_action_tokens

# 3. The frozen-module endpoint and the retriever server, when FROZEN_MODEL / CORPUS are set.
start_services
if [ -n "$FROZEN_MODEL" ]; then  # keep SkyRL off the frozen model's GPUs
  export CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((GPUS_PER_NODE - 1)))"
fi
MODE=()
if [ "$TEXT_ENV" = 1 ]; then MODE=(--text-env); fi

# 4. Flow-GRPO: the trajectory reward (terminal: the env's answer score) normalised over the 8
# trajectories of a prompt; KL to the reference as a loss. max_env_workers > 0: the text env's
# step blocks, so SkyRL must call it from its worker threads.
python adapters/skyrl/main_agentflow.py ${MODE[@]+"${MODE[@]}"} \
  data.train_data="['$TRAIN_FILE']" \
  data.val_data="['$EVAL_FILE']" \
  environment.env_class=agentflow \
  environment.skyrl_gym.max_env_workers=32 \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.algorithm.use_kl_loss=true \
  trainer.algorithm.kl_loss_coef=0.001 \
  trainer.policy.model.path="$POLICY_MODEL" \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.strategy=fsdp \
  trainer.placement.colocate_all=true \
  trainer.placement.policy_num_gpus_per_node="$GPUS_PER_NODE" \
  trainer.placement.ref_num_gpus_per_node="$GPUS_PER_NODE" \
  trainer.train_batch_size=32 \
  trainer.policy_mini_batch_size=32 \
  trainer.micro_forward_batch_size_per_gpu=4 \
  trainer.micro_train_batch_size_per_gpu=2 \
  trainer.max_prompt_length=512 \
  trainer.epochs=1 \
  trainer.eval_interval=20 \
  trainer.eval_batch_size=200 \
  trainer.ckpt_interval=50 \
  trainer.ckpt_path="$SAVE_DIR" \
  trainer.project_name=agentflow \
  trainer.run_name=flow-grpo-planner \
  trainer.logger=tensorboard \
  generator.n_samples_per_prompt=8 \
  generator.max_turns=10 \
  generator.max_input_length="$MAX_INPUT_LENGTH" \
  generator.sampling_params.max_generate_length="$MAX_ACTION_TOKENS" \
  generator.batched=false \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.num_engines="$GPUS_PER_NODE" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.gpu_memory_utilization=0.5 \
  "$@"
