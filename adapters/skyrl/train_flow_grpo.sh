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

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"

POLICY_MODEL="${POLICY_MODEL:-Qwen/Qwen2.5-7B-Instruct}" # the planner being trained
FROZEN_MODEL="${FROZEN_MODEL:-}"          # e.g. Qwen/Qwen2.5-7B-Instruct; empty: rule modules
FROZEN_GPUS="${FROZEN_GPUS:-4}"           # GPUs for `vllm serve` (kept out of SkyRL's GPUs)
CORPUS="${CORPUS:-}"                      # corpus JSONL for the retriever server; empty: local
GPUS_PER_NODE="${GPUS_PER_NODE:-$([ -n "$FROZEN_MODEL" ] && echo 4 || echo 8)}"
SERVICE_HOST="${SERVICE_HOST:-127.0.0.1}"
FROZEN_PORT="${FROZEN_PORT:-8001}"
RETRIEVER_PORT="${RETRIEVER_PORT:-8002}"
TEXT_ENV="${TEXT_ENV:-0}"                 # 1: SkyRL's SkyRLGymGenerator + AgentFlowTextEnv
DATA_DIR="${DATA_DIR:-$REPO/data/skyrl}"
TRAIN_FILE="${TRAIN_FILE:-$DATA_DIR/train.jsonl}"
EVAL_FILE="${EVAL_FILE:-$DATA_DIR/test.jsonl}"
SAVE_DIR="${SAVE_DIR:-$REPO/checkpoints/flow-grpo-planner-skyrl}"
# A trajectory (prompt + every action and feedback) may grow to MAX_INPUT_LENGTH tokens before
# its last action; one action is at most TURN_TOKENS. Out of room: reward 0.
MAX_INPUT_LENGTH="${MAX_INPUT_LENGTH:-12288}"
TURN_TOKENS="${TURN_TOKENS:-1024}"

# Frozen-module endpoint and retriever server: start_services (adapters/services.sh).
# shellcheck source=../services.sh
source "$REPO/adapters/services.sh"

# 1. Prompts: AgentFlow labels (adapters/openrlhf/prepare_data.py), as SkyRL rows.
mkdir -p "$DATA_DIR"
if [ ! -f "$TRAIN_FILE" ]; then
  python adapters/openrlhf/prepare_data.py synthetic --out "$DATA_DIR/train.labels.jsonl" \
    --split train --hops 1,2,3 --count 4000 --fresh-world
  python adapters/skyrl/prepare_skyrl_data.py "$DATA_DIR/train.labels.jsonl" "$TRAIN_FILE"
fi
if [ ! -f "$EVAL_FILE" ]; then
  python adapters/openrlhf/prepare_data.py synthetic --out "$DATA_DIR/test.labels.jsonl" \
    --split test --hops 1,2,3 --count 200 --fresh-world --seed 1000000
  python adapters/skyrl/prepare_skyrl_data.py "$DATA_DIR/test.labels.jsonl" "$EVAL_FILE"
fi

# 2. Env configuration, read in SkyRL's generator process (main_agentflow.py passes on every
# AGENTFLOW_* variable). The token-exact generator renders with the tokenizer SkyRL loads from
# trainer.policy.model.path and refuses an AGENTFLOW_TOKENIZER of another vocabulary; the text
# env (TEXT_ENV=1) gets no tokenizer from SkyRL and renders with this one.
export AGENTFLOW_TOKENIZER="$POLICY_MODEL"
export AGENTFLOW_MAX_TURN_TOKENS="$TURN_TOKENS"  # also the env's max_action_tokens

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
  generator.sampling_params.max_generate_length="$TURN_TOKENS" \
  generator.batched=false \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.num_engines="$GPUS_PER_NODE" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.gpu_memory_utilization=0.5 \
  "$@"
