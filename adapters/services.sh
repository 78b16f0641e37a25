# Sourced by adapters/common.sh, which every launch script (adapters/*/train_flow_grpo.sh)
# sources: the services beside a trainer.
#
# start_services starts, in the background and killed when the script exits:
#   - a frozen-module endpoint (`vllm serve $FROZEN_MODEL` on $FROZEN_GPUS, port $FROZEN_PORT)
#     when FROZEN_MODEL is set, and points AGENTFLOW_LLM_* at it; otherwise the env's offline rule
#     modules are used;
#   - a retriever server (`agentflow-env serve-retriever --corpus $CORPUS`, port $RETRIEVER_PORT)
#     when CORPUS is set, and points AGENTFLOW_RETRIEVER_URL at it;
# waits until each answers, and exports AGENTFLOW_ENV_KWARGS (10 turns, LLM modules with a frozen
# model) unless the caller set it. SERVICE_HOST is the address the trainer's workers reach them at.

PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_for() {  # URL PID: wait until URL answers; fail if the server process died
  until curl -sf "$1" >/dev/null; do
    kill -0 "$2" 2>/dev/null || { echo "server for $1 exited" >&2; exit 1; }
    sleep 5
  done
}

start_services() {
  local env_kwargs='{"max_turns": 10}'
  # Frozen modules (initializer, executor, verifier, generalist) on their own vLLM server.
  if [ -n "$FROZEN_MODEL" ]; then
    CUDA_VISIBLE_DEVICES="$FROZEN_GPUS" vllm serve "$FROZEN_MODEL" --host 0.0.0.0 \
      --port "$FROZEN_PORT" --gpu-memory-utilization 0.9 &
    PIDS+=($!)
    export AGENTFLOW_LLM_BASE_URL="http://$SERVICE_HOST:$FROZEN_PORT/v1"
    export AGENTFLOW_LLM_MODEL="$FROZEN_MODEL"
    env_kwargs='{"max_turns": 10, "modules": "llm"}'
    wait_for "$AGENTFLOW_LLM_BASE_URL/models" "${PIDS[-1]}"
  fi
  # Retriever server for real corpora (Search-R1's POST /retrieve protocol).
  if [ -n "$CORPUS" ]; then
    agentflow-env serve-retriever --corpus "$CORPUS" --host 0.0.0.0 --port "$RETRIEVER_PORT" &
    PIDS+=($!)
    export AGENTFLOW_RETRIEVER_URL="http://$SERVICE_HOST:$RETRIEVER_PORT"
    wait_for "$AGENTFLOW_RETRIEVER_URL/health" "${PIDS[-1]}"
  fi
  export AGENTFLOW_ENV_KWARGS="${AGENTFLOW_ENV_KWARGS:-$env_kwargs}"
}
