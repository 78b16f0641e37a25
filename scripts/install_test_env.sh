#!/usr/bin/env bash
# Install everything the test suite needs into the active Python environment.
# Used by the README's test command and by .ci/run, so the two cannot drift apart.
set -euo pipefail
cd "$(dirname "$0")/.."

# Headless Chromium for the trajectory viewer's browser tests (tests/test_viewer.py); run as root
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
python -m pip install --quiet -e ".[dev,trl,llm,e2b,data,eval]"
# OpenRLHF pins GPU-only packages (deepspeed, flash-attn, vllm); its agent executor needs none
# of them, only what is listed here.
python -m pip install --quiet --no-deps "openrlhf==0.11.2"
python -m pip install --quiet sympy pylatexenc aiohttp
