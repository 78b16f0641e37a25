#!/usr/bin/env bash
# Install everything the test suite needs into the active Python environment.
# Used by the README's test command and by .ci/run, so the two cannot drift apart.
set -euo pipefail
cd "$(dirname "$0")/.."

# Headless Chromium for the trajectory viewer's browser tests (tests/test_viewer.py); run as root
# on CI's fresh Debian machine. matplotlib, which the viewer plots with, comes with the trl extra.
if [ ! -x /usr/bin/chromium ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# The CPU build of torch first: anything that asks for a bare torch would otherwise pull CUDA.
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ".[dev,trl,llm,e2b,data]"
# OpenRLHF pins GPU-only packages (deepspeed, flash-attn, vllm); its agent executor needs none
# of them, only what is listed here.
python -m pip install --quiet --no-deps "openrlhf==0.11.2"
python -m pip install --quiet sympy pylatexenc aiohttp
