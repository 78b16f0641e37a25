# Sourced first by the launch scripts (adapters/*/train_flow_grpo.sh), which set TRAINER
# (openrlhf, verl or skyrl: also the row format of its labels) before: the settings the three
# share, the services beside the trainer (start_services, adapters/services.sh) and the task
# labels they train on (write_labels). Every setting keeps a value the caller exported.
#
#   POLICY_MODEL    the planner being trained
#   FROZEN_MODEL    the frozen modules' model, served by `vllm serve` on FROZEN_GPUS; empty: the
#                   env's offline rule modules
#   CORPUS          corpus JSONL for a retriever server; empty: Search runs BM25 over each
#                   task's own corpus (the synthetic world)
#   GPUS_PER_NODE   the trainer's GPUs per node (0..N-1): 4 beside a frozen model, else 8
#   SERVICE_HOST, FROZEN_PORT, RETRIEVER_PORT   where the trainer's workers reach the services
#   DATA_DIR, TRAIN_FILE, EVAL_FILE             the label files (data/$TRAINER/{train,test}.jsonl)

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

POLICY_MODEL="${POLICY_MODEL:-Qwen/Qwen2.5-7B-Instruct}" # the planner being trained
FROZEN_MODEL="${FROZEN_MODEL:-}"          # e.g. Qwen/Qwen2.5-7B-Instruct; empty: rule modules
FROZEN_GPUS="${FROZEN_GPUS:-4}"           # GPUs for `vllm serve` (kept out of the trainer's)
CORPUS="${CORPUS:-}"                      # corpus JSONL for the retriever server; empty: local
GPUS_PER_NODE="${GPUS_PER_NODE:-$([ -n "$FROZEN_MODEL" ] && echo 4 || echo 8)}"
SERVICE_HOST="${SERVICE_HOST:-127.0.0.1}"
FROZEN_PORT="${FROZEN_PORT:-8001}"
RETRIEVER_PORT="${RETRIEVER_PORT:-8002}"
DATA_DIR="${DATA_DIR:-$REPO/data/$TRAINER}"
TRAIN_FILE="${TRAIN_FILE:-$DATA_DIR/train.jsonl}"
EVAL_FILE="${EVAL_FILE:-$DATA_DIR/test.jsonl}"

# Frozen-module endpoint and retriever server: start_services (adapters/services.sh).
# shellcheck source=services.sh
source "$REPO/adapters/services.sh"

# The task labels, as $TRAINER rows (`agentflow-env labels`): questions of 1 to 3 hops, each in a
# fresh synthetic world. A file that exists is kept: point TRAIN_FILE / EVAL_FILE at your own
# (`agentflow-env labels dataset ...` or `... probe ...` with `--format $TRAINER`).
write_labels() {
  if [ ! -f "$TRAIN_FILE" ]; then
    agentflow-env labels synthetic --format "$TRAINER" --out "$TRAIN_FILE" --split train \
      --hops 1,2,3 --count 4000 --fresh-world
  fi
  if [ ! -f "$EVAL_FILE" ]; then
    agentflow-env labels synthetic --format "$TRAINER" --out "$EVAL_FILE" --split test \
      --hops 1,2,3 --count 200 --fresh-world --seed 1000000
  fi
}
