#!/usr/bin/env bash
# Flow-GRPO training of the AgentFlow planner with OpenRLHF 0.11.x (flags checked against 0.11.2).
#
# The planner is the policy (trained by DeepSpeed, sampled by vLLM inside OpenRLHF); every other
# module runs inside the env in each vLLM Ray actor (adapters/openrlhf/agent_func.py). Beside the
# trainer this script can start:
#   - a frozen-module endpoint (`vllm serve $FROZEN_MODEL`) when FROZEN_MODEL is set; otherwise
#     the env's offline rule modules are used;
#   - a retriever server (`agentflow-env serve-retriever`) when CORPUS is set; otherwise Search
#     runs BM25 over each task's own corpus (the synthetic world).
#
# Single node (default):  bash adapters/openrlhf/train_flow_grpo.sh
# Real QA data:           CORPUS=wiki18.jsonl TRAIN_FILE=data/nq.jsonl FROZEN_MODEL=... bash ...
#
# Multi-node: start Ray yourself and point RAY_ADDRESS at the head, then run this script on the
# head with START_RAY=0:
#   head:    ray start --head --num-gpus 8
#   workers: ray start --address <head-ip>:6379 --num-gpus 8
# Every node needs this checkout at the same path and `pip install -e .` (the vLLM actors load
# agent_func.py by path and import agentflow_env), and the frozen endpoint and retriever must be
# reachable from every node (set SERVICE_HOST to the head's address). Raise NUM_NODES and
# VLLM_ENGINES to match; the AGENTFLOW_* variables reach the actors via --runtime-env-json.
set -euo pipefail

# The shared settings (POLICY_MODEL, FROZEN_MODEL, CORPUS, GPUS_PER_NODE, ..., TRAIN_FILE),
# start_services and write_labels: adapters/common.sh. Training GPUs per node (0..N-1): with a
# frozen model 4, leaving GPU 4 for `vllm serve` (train.batch_size must divide by
# micro_batch_size x training GPUs).
TRAINER=openrlhf
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
NUM_NODES="${NUM_NODES:-1}"
VLLM_ENGINES="${VLLM_ENGINES:-$((NUM_NODES * GPUS_PER_NODE))}"
START_RAY="${START_RAY:-1}"
SAVE_DIR="${SAVE_DIR:-$REPO/checkpoints/flow-grpo-planner}"
MAX_LEN="${MAX_LEN:-8192}"                # whole trajectory: prompt + every action and feedback

# 1. Prompts: OpenRLHF JSONL whose labels name the task (`agentflow-env labels`).
write_labels

# 2. Env configuration, read by agent_func.py in every vLLM actor.
export AGENTFLOW_TOKENIZER="$POLICY_MODEL"  # the env renders chat glue with the policy's tokenizer
# AGENTFLOW_MAX_ACTION_TOKENS (default 1024) caps one planner turn: the env's max_action_tokens;
# set it, or max_action_tokens in AGENTFLOW_ENV_KWARGS, not two different values.

# 3. The frozen-module endpoint and the retriever server, when FROZEN_MODEL / CORPUS are set.
start_services

# 4. Ray: a one-node cluster on the training GPUs (multi-node: start it yourself, START_RAY=0).
if [ "$START_RAY" = 1 ]; then
  TRAIN_GPU_IDS="$(seq -s, 0 $((GPUS_PER_NODE - 1)))"
  CUDA_VISIBLE_DEVICES="$TRAIN_GPU_IDS" ray start --head --num-gpus "$GPUS_PER_NODE"
  trap 'cleanup; ray stop' EXIT
fi

# Every AGENTFLOW_* variable goes to the Ray actors (they do not inherit this shell's env).
RUNTIME_ENV="$(python - <<'EOF'
import json, os
env = {k: v for k, v in os.environ.items() if k.startswith("AGENTFLOW_")}
print(json.dumps({"env_vars": env}))
EOF
)"

# 5. Flow-GRPO: the trajectory reward (terminal: the env's answer score) is normalised over the
# 8 trajectories of a prompt (group_norm) and placed on every planner token; KL is a loss term.
ARGS=(
  # The planner being trained. No critic and no reward model: rewards come from the env.
  --actor.model_name_or_path "$POLICY_MODEL"
  --actor.num_nodes "$NUM_NODES" --actor.num_gpus_per_node "$GPUS_PER_NODE"
  --ref.num_nodes "$NUM_NODES" --ref.num_gpus_per_node "$GPUS_PER_NODE"
  # vLLM rollout engines, one per GPU; each runs many trajectories in one event loop.
  --vllm.num_engines "$VLLM_ENGINES" --vllm.tensor_parallel_size 1
  # Hybrid engine: actor, reference and vLLM share the GPUs, each sleeping while another runs.
  --train.colocate_all --vllm.enable_sleep --ds.enable_sleep --vllm.gpu_memory_utilization 0.5
  # Each turn re-sends the growing conversation: the prefix cache saves recomputing it.
  --vllm.enable_prefix_caching
  # Our AgentExecutor (loaded by path in every vLLM actor), driving the env turn by turn.
  --train.agent_func_path "$REPO/adapters/openrlhf/agent_func.py"
  # Prompts: the question (for logs) and the label naming the task; no chat template here,
  # the env renders the planner prompt itself.
  --data.prompt_dataset "$TRAIN_FILE" --data.input_key prompt --data.label_key label
  --eval.dataset "$EVAL_FILE" --eval.steps 20 --eval.n_samples_per_prompt 1
  --eval.temperature 0.6
  # Token budget of a whole trajectory (prompt + all actions and feedback). A trajectory that
  # runs out before the episode ends gets reward 0. --rollout.max_new_tokens stays unset:
  # AGENTFLOW_MAX_ACTION_TOKENS caps each turn.
  --data.max_len "$MAX_LEN"
  # Flow-GRPO at trajectory level: A_i = (r_i - mean) / (std + 1e-9) over the group.
  --algo.advantage.estimator group_norm
  --rollout.n_samples_per_prompt 8
  --rollout.batch_size 32 --rollout.micro_batch_size 8 --rollout.temperature 1.0
  --train.batch_size 128 --train.micro_batch_size 4 --train.max_epochs 1 --train.num_episodes 10
  # KL to the reference model as a loss (k3 estimator), not folded into the reward.
  --algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.init_coef 0.001
  --actor.eps_clip 0.2 --actor.adam.lr 1e-6
  --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable
  --ds.packing_samples  # needs flash-attn
  --logger.logging_steps 1 --logger.tensorboard_dir "$SAVE_DIR/tensorboard"
  --ckpt.output_dir "$SAVE_DIR" --ckpt.path "$SAVE_DIR/ckpt" --ckpt.save_steps 50 --ckpt.save_hf
  # Optional: drop groups whose trajectories all succeed or all fail (all advantages 0):
  #   --algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0 1
  # Optional: overlap rollout and training: --train.async_enable (not with --vllm.enable_sleep)
)

ray job submit --address "${RAY_DASHBOARD:-http://127.0.0.1:8265}" \
  --runtime-env-json "$RUNTIME_ENV" \
  -- python3 -m openrlhf.cli.train_ppo_ray "${ARGS[@]}"
