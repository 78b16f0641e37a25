#!/usr/bin/env bash
# A venv of its own for Agent Lightning (adapters/agent_lightning): agentlightning 1.0.x requires
# Python >= 3.12 and the test env is Python 3.11, so it cannot go in beside the rest. The venv holds
# agentlightning (without extras: no torch, no verl; the adapter's test needs its gateway,
# controller and rollout manager only) and this package, editable. Run by
# scripts/install_test_env.sh; tests/adapters/test_agent_lightning.py runs its scenario with this
# venv's python.
#
#   AGL_VENV    where the venv goes (default .venv-agl, gitignored)
#   AGL_PYTHON  a Python >= 3.12 to build it with; else python3.12 (or newer) on PATH, else
#               pyenv's versions (PYENV_ROOT, default ~/.pyenv)
set -euo pipefail
cd "$(dirname "$0")/.."

AGL_VERSION="1.0.2"
AGL_VENV="${AGL_VENV:-.venv-agl}"

is_new_enough() {  # PYTHON: runs, and is Python >= 3.12
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1
}

find_python() {
    if [ -n "${AGL_PYTHON:-}" ]; then
        is_new_enough "$AGL_PYTHON" && { echo "$AGL_PYTHON"; return; }
        echo "error: AGL_PYTHON=$AGL_PYTHON is not a Python >= 3.12" >&2
        return 1
    fi
    local candidate
    for candidate in python3.12 python3.13 python3.14; do
        # a pyenv shim exists even when its version is not selected: is_new_enough runs it
        if command -v "$candidate" >/dev/null && is_new_enough "$candidate"; then
            command -v "$candidate"
            return
        fi
    done
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python; do
        if [ -x "$candidate" ] && is_new_enough "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    echo "error: Agent Lightning $AGL_VERSION requires Python >= 3.12 and none was found" \
        "(looked for AGL_PYTHON, python3.12/3.13/3.14 on PATH and" \
        "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12*); install one (pyenv install 3.12) or set" \
        "AGL_PYTHON" >&2
    return 1
}

PYTHON="$(find_python)"
if [ ! -x "$AGL_VENV/bin/python" ] || ! is_new_enough "$AGL_VENV/bin/python"; then
    rm -rf "$AGL_VENV"
    "$PYTHON" -m venv "$AGL_VENV"
fi
"$AGL_VENV/bin/python" -m pip install --quiet "agentlightning==$AGL_VERSION" -e .
"$AGL_VENV/bin/python" -c "import agentlightning, agentflow_env; print('agentlightning', \
agentlightning.__version__, 'in', '$AGL_VENV')"
