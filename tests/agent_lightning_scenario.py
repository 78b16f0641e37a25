"""Agent Lightning's own rollout path on CPU, for ``tests/adapters/test_agent_lightning.py``.

Run with the Agent Lightning venv's python (``scripts/install_agent_lightning_env.sh``): Python
>= 3.12, agentlightning 1.0.2. On 127.0.0.1 it starts

- a fake vLLM server answering ``POST /v1/completions`` as vLLM does for a prompt of token ids
  (``token_ids`` and ``prompt_token_ids`` with ``return_token_ids``, ``logprobs.token_logprobs``
  when asked). It plays a scripted planner on mirror envs: envs of the same tasks in the agent's
  observation mode, each stepped with the ids it answers. A request whose prompt is no mirror's
  current observation gets HTTP 400, which fails its rollout. With ``--other-prompt`` its replies
  name other prompt ids than the request's, as a server that adds a BOS would;
- Agent Lightning's gateway and store (``agentlightning.server.app.create_app``) and its local
  controller (``LocalReconciler``), which runs ``adapters/agent_lightning``'s agent in one
  subprocess per rollout;

then has the trainer's rollout manager (``AglRolloutManager``, what Agent Lightning's verl trainer
calls) enqueue the labels ``TRAIN_ROLLOUT_N`` times each and wait. It writes to ``--out`` a JSON
object: the completed rollouts (state, reward, triplets, events), the mirrors' turn records and
rewards per label, and the bodies of the requests the fake server received.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import uvicorn
from agentlightning.client import AgentLightningAsyncClient
from agentlightning.controller.local_reconciler import LocalReconciler
from agentlightning.server.app import create_app
from agentlightning.verl.agl_rollout_manager import AglRolloutManager
from aiohttp import web
from omegaconf import OmegaConf

from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.rollout.labels.spec import TaskSpec, synthetic_specs
from agentflow_env.workflow.session import Session

ROOT = Path(__file__).resolve().parents[1]
KEY = "agl-test-key"
MODEL = "agentflow-planner"
TRAIN_TEMPERATURE = 0.7
TRAIN_ROLLOUT_N = 2
ACTION_CAP = 1024  # the adapter's default max_action_tokens: mirrors must cut actions alike
STUBBORN = "Justification: look\nContext: weather today\nSub-Goal: none\nTool Name: Search"
"""The planner of the second task: one useless search after another, so its reward is 0."""


def labels() -> list[TaskSpec]:
    """Two 2-hop synthetic tasks, three planner turns at most (AgentFlow's TOOL_STEPS)."""
    specs = [spec for spec, _ in synthetic_specs(2, split="train", hops=2, seed=7)]
    return [dataclasses.replace(s, env_kwargs={**s.env_kwargs, "max_turns": 3}) for s in specs]


class Mirror:
    """An env of one task in the observation mode the agent's samples take, acting as the
    expert (or the stubborn planner)."""

    def __init__(self, spec: TaskSpec, expert: bool, mode: str) -> None:
        self.tok = load_default_tokenizer()
        env = spec.make_env(observation_mode=mode, tokenizer=self.tok, max_action_tokens=ACTION_CAP)
        self.session: Session = env.new_session(spec.resolve(env.task_source), seed=spec.seed)
        self.expert, self.mode = expert, mode

    async def prompt(self) -> list[int] | None:
        """The observation the next action acts on; ``None`` once the episode ended."""
        observation = self.session.observation or (await self.session.start())[0]
        return None if self.session.done else list(observation.token_ids)

    async def act(self, max_tokens: int) -> tuple[list[int], list[float]]:
        text = await ExpertPlanner().next_action(self.session) if self.expert else STUBBORN
        ids = (self.tok.encode(text) + [self.tok.eos_token_id])[:max_tokens]
        logprobs = [-0.5 - 0.01 * i for i in range(len(ids))]
        await self.session.step(ids, logprobs)
        return ids, logprobs

    def record(self) -> dict[str, Any]:
        turns = self.session.trajectory().turns
        outcome = self.session.outcome
        record: dict[str, Any] = {
            "turns": [[t.prompt_ids, t.action_ids, t.logprobs] for t in turns],
            "reward": None if outcome is None else float(outcome.reward),
        }
        if self.mode == "flat":
            flat = self.session.trajectory().flat_sample()
            record["flat"] = [flat.input_ids, flat.loss_mask]
        return record


class FakeVLLM:
    """``POST /v1/completions`` on 127.0.0.1, answered by the mirror whose current observation
    is the request's prompt (one aiohttp loop in a thread: the mirrors' sessions live on it)."""

    def __init__(self, mirrors: dict[str, list[Mirror]], other_prompt: bool = False) -> None:
        self.mirrors, self.other_prompt = mirrors, other_prompt
        self.requests: list[dict[str, Any]] = []
        self.lock = asyncio.Lock()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.port = asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(30)

    async def _serve(self) -> int:
        app = web.Application()
        app.router.add_post("/v1/completions", self._complete)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return int(runner.addresses[0][1])

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        async with self.lock:  # one mirror claims a prompt and steps before the next request
            self.requests.append(body)
            for mirror in (m for group in self.mirrors.values() for m in group):
                if await mirror.prompt() == body.get("prompt"):
                    ids, logprobs = await mirror.act(int(body["max_tokens"]))
                    reply = completion(body, ids, logprobs)
                    if self.other_prompt:  # as a server that put a BOS before the prompt
                        choice = reply["choices"][0]
                        choice["prompt_token_ids"] = [body["prompt"][0], *body["prompt"]]
                    return web.json_response(reply)
        return web.json_response({"error": {"message": "no env observation"}}, status=400)


def completion(body: dict[str, Any], ids: list[int], logprobs: list[float]) -> dict[str, Any]:
    """A vLLM ``CompletionResponse`` for a prompt of token ids."""
    choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": "stop", "stop_reason": None}
    if body.get("logprobs") is not None and body.get("logprobs") is not False:
        tokens = [f"token_id:{i}" for i in ids]
        choice["logprobs"] = {
            "text_offset": [0] * len(ids),
            "token_logprobs": logprobs,
            "tokens": tokens,
            "top_logprobs": [{t: lp} for t, lp in zip(tokens, logprobs, strict=True)],
        }
    if body.get("return_token_ids"):
        choice.update(token_ids=ids, prompt_token_ids=body["prompt"])
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [choice],
        "usage": usage,
    }


def start_gateway() -> tuple[str, uvicorn.Server]:
    """Agent Lightning's server (gateway, store) on a free port of 127.0.0.1."""
    config = {
        "key": KEY,
        "default_proxy": {
            "model_name": MODEL,
            "include_log_probs": True,
            "include_routed_experts": False,
            "train": {"temperature": TRAIN_TEMPERATURE},
            "val": {"temperature": 0.0},
        },
    }
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        threading.Event().wait(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


class Controller:
    """Agent Lightning's local controller on its own loop in a thread."""

    def __init__(self, base_url: str) -> None:
        self.config = OmegaConf.create(
            {
                "runner_type": "local",
                "agl_server": {"url": base_url, "agent_url": None, "key": KEY},
                "local_runner": {"maximum_size": 4, "poll_interval": 0.2},
            }
        )
        self.base_url = base_url
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),))
        self.thread.start()
        self.ready.wait(30)

    async def _run(self) -> None:
        async with AgentLightningAsyncClient(base_url=self.base_url, key=KEY) as api:
            self.reconciler = LocalReconciler(api=api, config=self.config)
            self.ready.set()
            await self.reconciler.run()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.reconciler.stop)
        self.thread.join(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--samples", default="turns", help="AGENTFLOW_SAMPLES for the agents")
    parser.add_argument(
        "--other-prompt", action="store_true", help="answer with other prompt_token_ids"
    )
    args = parser.parse_args()
    mode = "structured" if args.samples == "turns" else "flat"
    mirrors = {
        s.to_json(): [Mirror(s, index == 0, mode) for _ in range(TRAIN_ROLLOUT_N)]
        for index, s in enumerate(labels())
    }
    fake = FakeVLLM(mirrors, args.other_prompt)
    # The agent subprocesses inherit this environment: the adapter's folder, the settings.
    os.environ["AGENTFLOW_SAMPLES"] = args.samples
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "adapters" / "agent_lightning"), os.environ.get("PYTHONPATH", "")]
    )
    base_url, gateway = start_gateway()
    controller = Controller(base_url)
    try:
        manager = AglRolloutManager(
            agl_base_url=base_url,
            agl_key=KEY,
            model=MODEL,
            step=0,
            train_rollout_n=TRAIN_ROLLOUT_N,
            rollout_timeout_seconds=240,
            poll_interval_seconds=0.2,
            local_agent_class="agentflow_agl_agent:AgentFlowAgent",
            local_env_map={"AGENTFLOW_LABEL": "input.label"},
        )
        manager.register_model([f"http://127.0.0.1:{fake.port}/v1"])
        completed = manager.enqueue_and_wait_until_completed(
            {"label": list(mirrors)}, is_train=True
        )
    finally:
        controller.stop()
        gateway.should_exit = True
    result = {
        "rollouts": [rollout.model_dump(mode="json") for rollout in completed],
        "mirrors": {label: [m.record() for m in group] for label, group in mirrors.items()},
        "requests": fake.requests,
    }
    Path(args.out).write_text(json.dumps(result))
    print(f"wrote {len(completed)} rollouts to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
