"""TRL's OpenEnv pattern with a served env: the tool-choice probe learned through ``rollout_func``.

The env runs in its own process, served over OpenEnv's protocol (``agentflow-env serve``), and
the trainer plays it through ``RemoteEnv`` (a Gymnasium client): TRL's ``GRPOTrainer`` gets a
``rollout_func`` that resets one ``RemoteEnv`` per sample, generates with the training model
from the observation's token ids, sends the sampled ids (and their log-probs) back as the action,
and takes the reward from the env. Token ids in, token ids out: what TRL trains on is what the
served env recorded, id for id. ::

    python examples/trl/openenv_tool_choice.py --seed 0 --out examples/trl/results
    agentflow-env serve --env-id AgentFlow-Probe-ToolChoice-v0 --observation-mode flat \\
        --max-action-tokens 24 --port 8000 &
    python examples/trl/openenv_tool_choice.py --env-url http://127.0.0.1:8000 --seed 0

Without ``--env-url`` the script starts that server itself (on a free loopback port) and stops
it at the end. The recipe is ``probes.py --probe tool_choice``'s, settings included: the tiny
planner (115 k parameters), SFT on the probe's random demonstrator, then GRPO (G = 8, 8
questions per step, temperature 0.7, lr 3e-4 held, no KL, fp32) on the same train-split tasks.
Held-out: greedy and sampled success on the same 200 test-split episodes before and after, with
95% Wilson intervals; the null control is the same GRPO run from the same SFT weights with each
step's rewards permuted across its batch (reward carries no information about the actions).

Every episode, training and evaluation alike, is a task label (``probe_label``: the probe's env
id, the split and the episode seed) sent as the reset's ``label`` option, so one server serves
both splits and the tasks are the ones the in-process example draws.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import httpx
import torch
import transformers
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOTrainer

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.remote import RemoteEnv
from agentflow_env.rollout import HFGenerator, action_logprobs
from agentflow_env.rollout.agents.probes import probe_demonstrations
from agentflow_env.rollout.labels.probe_labels import probe_env_id, probe_label

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "adapters" / "trl"))
sys.path.insert(0, str(HERE))
from probes import DEFAULTS, EVAL_SEEDS, GRPO_SEEDS, LOG_KEYS, SFT_SEEDS, reproducible  # noqa: E402
from recipe_common import paired_gain, rate  # noqa: E402
from rollout import env_reward  # noqa: E402
from train_tiny_cpu import build_model, cpu_grpo_config, sft_trainer  # noqa: E402
from trl_generation import trainer_generate  # noqa: E402

PROBE = "tool_choice"
ENV_ID = probe_env_id(PROBE)
SETTINGS = DEFAULTS[PROBE]
"""``probes.py``'s tool-choice defaults: 1000 demonstrations, 150 SFT steps, 60 GRPO steps at
lr 3e-4, actions of at most 24 tokens."""
MAX_ENVS = 64
"""``RemoteEnv``s (WebSocket sessions) open at once: ``agentflow-env serve``'s default
``--max-sessions``. A larger batch is played in chunks of this many."""

Generate = Callable[[Sequence[Sequence[int]], int], tuple[list[list[int]], Any]]


# -- the served env ----------------------------------------------------------------------------
def serve_command(port: int, max_action_tokens: int) -> list[str]:
    """``agentflow-env serve`` for the probe: flat observations (the prompt only grows, so an
    episode is one sequence) and the action cap the trainer generates to."""
    return [
        *("agentflow-env", "serve", "--env-id", ENV_ID, "--port", str(port)),
        *("--observation-mode", "flat", "--max-action-tokens", str(max_action_tokens)),
        *("--max-sessions", str(MAX_ENVS), "--log-level", "warning"),
    ]


@contextlib.contextmanager
def served_env(url: str | None, max_action_tokens: int) -> Iterator[tuple[str, list[str] | None]]:
    """``(url, command)``: ``url`` as given, or a server this function starts on a free loopback
    port (``command``) and stops on exit."""
    if url:
        yield url, None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    command = serve_command(port, max_action_tokens)
    # The CLI by module, so the venv's Python runs it whatever PATH says.
    process = subprocess.Popen([sys.executable, "-m", "agentflow_env.cli", *command[1:]])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the env server exited ({process.returncode}): {command}")
            try:
                if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the env server at {url} did not come up in 120 s")
            time.sleep(0.2)
        yield url, command
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- episodes on RemoteEnvs --------------------------------------------------------------------
@dataclass
class Episode:
    """One played episode as one flat sample: the first prompt, then actions (mask 1) and the
    env's feedback between them (mask 0), exactly as sent and received."""

    label: str
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    observation: list[int] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    turns: int = 0
    invalid_actions: float = 0.0
    done: bool = False


class RemoteEpisodes:
    """Plays task labels on a served env, a batch at a time: every live episode's observation
    ids go to ``generate`` in one call, each sampled completion goes back to its ``RemoteEnv`` as
    the action (``{"token_ids", "logprobs"}``), until every episode has ended.

    The ``RemoteEnv``s are made once (each checks the server's tokenizer against the policy's)
    and reused: each ``reset`` ends its env's previous WebSocket session and opens the next, so
    a finished episode's session stays open until then (at most ``MAX_ENVS``). A ``RemoteEnv``
    answers the server's keep-alive pings only while one of its calls runs: an episode whose
    next action takes longer than about 20 s to generate loses its session (the probe's one
    turn never does). ``trajectories`` keeps, per label of the last ``play``, what the env
    recorded (the test compares the samples with it)."""

    def __init__(self, url: str, tokenizer: Any, max_action_tokens: int) -> None:
        self.url, self.tokenizer, self.max_action_tokens = url, tokenizer, max_action_tokens
        self.envs: list[RemoteEnv] = []
        self.trajectories: list[Any] = []

    def play(self, labels: Sequence[str], generate: Generate) -> list[Episode]:
        self.trajectories = []
        episodes: list[Episode] = []
        for start in range(0, len(labels), MAX_ENVS):
            episodes += self._play(labels[start : start + MAX_ENVS], generate)
        return episodes

    def _play(self, labels: Sequence[str], generate: Generate) -> list[Episode]:
        while len(self.envs) < len(labels):
            self.envs.append(RemoteEnv(self.url, tokenizer=self.tokenizer))
        envs = self.envs[: len(labels)]
        episodes = []
        for env, label in zip(envs, labels, strict=True):
            observation, _ = env.reset(options={"label": label, "samples": "flat"})
            ids = [int(i) for i in observation["token_ids"]]
            episodes.append(Episode(label, prompt_ids=ids, observation=ids))
        while live := [(e, env) for e, env in zip(episodes, envs, strict=True) if not e.done]:
            completions, logprobs = generate(
                [e.observation for e, _ in live], self.max_action_tokens
            )
            rows = logprobs if logprobs is not None else [None] * len(live)
            for (episode, env), ids, row in zip(live, completions, rows, strict=True):
                self._step(episode, env, [int(i) for i in ids], action_logprobs(row, len(ids)))
        self.trajectories += [env.trajectory() for env in envs]
        return episodes

    @staticmethod
    def _step(episode: Episode, env: RemoteEnv, ids: list[int], logprobs: list[float]) -> None:
        observation, reward, terminated, truncated, info = env.step(
            {"token_ids": ids, "logprobs": logprobs}
        )
        episode.turns += 1
        episode.completion_ids += ids
        episode.env_mask += [1] * len(ids)
        episode.logprobs += logprobs
        if terminated or truncated:
            episode.done = True
            episode.reward = float(info.get("reward", reward))  # the terminal reward
            episode.success = bool(info.get("success", False))
            episode.invalid_actions = float(info.get("metrics", {}).get("invalid_actions", 0))
            return
        # Flat observations only grow: the next prompt is this one, the action, the feedback.
        sent = episode.observation + ids
        following = [int(i) for i in observation["token_ids"]]
        if following[: len(sent)] != sent:
            raise RuntimeError("the served env's observation does not extend the last one")
        feedback = following[len(sent) :]
        episode.completion_ids += feedback
        episode.env_mask += [0] * len(feedback)
        episode.logprobs += [0.0] * len(feedback)
        episode.observation = following

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


def make_remote_rollout_func(
    episodes: RemoteEpisodes, *, null_seed: int | None = None
) -> Callable[[list[Any], Any], dict[str, list]]:
    """TRL's ``rollout_func(prompts, trainer)``: one episode per prompt entry (TRL's sampler
    repeats each prompt ``num_generations`` times; the copies share the task), generated with
    the trainer's own generation path (``trainer_generate``: the unwrapped model at the
    trainer's temperature). Returns TRL's ``prompt_ids`` / ``completion_ids`` / ``logprobs``,
    ``env_mask`` (TRL masks the loss with it: 0 on the env's tokens), and the reward
    function's fields: ``env_reward`` and the logged ``success``, ``turns``,
    ``invalid_actions``, ``failed``.

    ``null_seed`` (the null control): ``env_reward`` is the batch's rewards in a random order
    (seeded); ``success`` stays the truth, so TRL's ``env/success`` logs what was sampled."""
    shuffle = random.Random(null_seed) if null_seed is not None else None

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        if trainer.accelerator.num_processes > 1:
            raise RuntimeError(
                "this example runs one process (the adapter's rollout keeps ranks in step)"
            )
        played = episodes.play([str(p) for p in prompts], trainer_generate(trainer))
        rewards = [e.reward for e in played]
        if shuffle is not None:
            shuffle.shuffle(rewards)
        return {
            "prompt_ids": [e.prompt_ids for e in played],
            "completion_ids": [e.completion_ids for e in played],
            "logprobs": [e.logprobs for e in played],
            "env_mask": [e.env_mask for e in played],
            "env_reward": rewards,
            "success": [float(e.success) for e in played],
            "turns": [e.turns for e in played],
            "invalid_actions": [e.invalid_actions for e in played],
            "failed": [0.0] * len(played),
        }

    return rollout_func


# -- held-out evaluation -----------------------------------------------------------------------
def eval_labels(count: int) -> list[str]:
    """The held-out episodes: test-split tasks of seeds ``EVAL_SEEDS + i`` (``probes.py``'s)."""
    return [probe_label(PROBE, EVAL_SEEDS + i, split="test") for i in range(count)]


def evaluate(
    model: Any, tokenizer: Any, episodes: RemoteEpisodes, args: argparse.Namespace, *, sample: bool
) -> dict[str, Any]:
    """Held-out success on the served env, greedy or sampled at the training temperature: the
    rate, its 95% Wilson interval and the per-episode outcomes (for paired differences)."""
    generate = HFGenerator(
        model,
        tokenizer.pad_token_id,
        [tokenizer.eos_token_id],
        temperature=args.temperature,
        greedy=not sample,
    )
    start = time.time()
    with torch.no_grad():
        played = episodes.play(eval_labels(args.eval_episodes), generate)
    outcomes = [int(e.success) for e in played]
    return {
        **rate(outcomes),
        "mean_turns": sum(e.turns for e in played) / len(played),
        "invalid_actions": sum(e.invalid_actions for e in played) / len(played),
        "eval_s": time.time() - start,
        "outcomes": outcomes,
    }


class Curve(TrainerCallback):
    """Greedy held-out success every ``every`` GRPO steps, and the first step at 90 %."""

    def __init__(self, tokenizer: Any, episodes: RemoteEpisodes, args: argparse.Namespace) -> None:
        self.tokenizer, self.episodes, self.args = tokenizer, episodes, args
        self.points: list[dict[str, Any]] = []
        self.steps_to_90: int | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any):
        every = self.args.curve_every
        if every > 0 and state.global_step % every == 0 and state.global_step < state.max_steps:
            self.record(model, state.global_step)

    def record(self, model: Any, step: int) -> dict[str, Any]:
        was_training = model.training
        model.eval()
        point = evaluate(model, self.tokenizer, self.episodes, self.args, sample=False)
        model.train(was_training)
        self.points.append({"step": step, **{k: v for k, v in point.items() if k != "outcomes"}})
        if self.steps_to_90 is None and point["success"] >= 0.9:
            self.steps_to_90 = step
        print(f"[curve] step {step}: success {point['success']:.3f}", flush=True)
        return point


# -- the run -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-url", default=None, help="a running server (default: start one)")
    parser.add_argument("--out", default="examples/trl/results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--sft-demos", type=int, default=SETTINGS["sft_demos"])
    parser.add_argument("--sft-steps", type=int, default=SETTINGS["sft_steps"])
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--grpo-steps", type=int, default=SETTINGS["grpo_steps"])
    parser.add_argument("--questions-per-step", type=int, default=8)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--grpo-lr", type=float, default=SETTINGS["grpo_lr"])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-action-tokens", type=int, default=SETTINGS["max_action_tokens"])
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--curve-every", type=int, default=5, help="GRPO steps between evals")
    parser.add_argument(
        "--null", action=argparse.BooleanOptionalAction, default=True, help="run the null control"
    )
    return parser


def grpo_trainer(
    model: Any,
    tokenizer: Any,
    episodes: RemoteEpisodes,
    args: argparse.Namespace,
    work: Path,
    callbacks: list[Any],
    *,
    null: bool = False,
) -> GRPOTrainer:
    """TRL's ``GRPOTrainer`` on the probe's train-split tasks (``probes.py``'s questions, in its
    order), its rollouts played on the served env."""
    count = args.grpo_steps * args.questions_per_step
    prompts = [probe_label(PROBE, GRPO_SEEDS + i, split="train") for i in range(count)]
    return GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=cpu_grpo_config(
            str(work), args, seed=args.seed, max_completion_length=1024, data_seed=args.seed
        ),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        rollout_func=make_remote_rollout_func(episodes, null_seed=args.seed if null else None),
        callbacks=callbacks,
    )


def train_arm(
    model: Any,
    tokenizer: Any,
    episodes: RemoteEpisodes,
    args: argparse.Namespace,
    work: Path,
    *,
    null: bool,
) -> dict[str, Any]:
    """GRPO (or its null control) from ``model``'s weights, then greedy and sampled held-out
    success."""
    curve = Curve(tokenizer, episodes, args)
    start = time.time()
    trainer = grpo_trainer(model, tokenizer, episodes, args, work, [curve], null=null)
    trainer.train()
    grpo_s = time.time() - start
    greedy = evaluate(model, tokenizer, episodes, args, sample=False)
    sampled = evaluate(model, tokenizer, episodes, args, sample=True)
    if greedy["success"] >= 0.9 and curve.steps_to_90 is None:
        curve.steps_to_90 = args.grpo_steps
    return {
        "greedy": greedy,
        "sampled": sampled,
        "curve": curve.points,
        "steps_to_90": curve.steps_to_90,
        "grpo_s": grpo_s,
        "curve_eval_s": sum(p["eval_s"] for p in curve.points),
        "train_log": [
            {k: v for k, v in entry.items() if k in LOG_KEYS}
            for entry in trainer.state.log_history
            if "reward" in entry
        ],
    }


def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    """SFT on the random demonstrator, held-out success, GRPO through the served env (and the
    null control from the same SFT weights), held-out success again."""
    t0 = time.time()
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    episodes = RemoteEpisodes(url, tokenizer, args.max_action_tokens)
    timing: dict[str, float] = {}
    try:
        with reproducible(args.seed, args.threads), tempfile.TemporaryDirectory() as scratch:
            model = build_model(tokenizer, args.hidden, args.layers, args.heads)
            start = time.time()
            records = probe_demonstrations(
                PROBE, range(SFT_SEEDS, SFT_SEEDS + args.sft_demos), seed=args.seed
            )
            sft_trainer(
                model, tokenizer, records, args, Path(scratch) / "sft", [], logging_steps=25
            ).train()
            timing["sft_s"] = time.time() - start
            sft_weights = copy.deepcopy(model.state_dict())
            start = time.time()
            before = {
                "greedy": evaluate(model, tokenizer, episodes, args, sample=False),
                "sampled": evaluate(model, tokenizer, episodes, args, sample=True),
            }
            timing["eval_start_s"] = time.time() - start
            print(f"[start] greedy {before['greedy']['success']:.3f}", flush=True)
            grpo = train_arm(model, tokenizer, episodes, args, Path(scratch) / "grpo", null=False)
            print(f"[grpo] greedy {grpo['greedy']['success']:.3f}", flush=True)
            null = None
            if args.null:
                model = build_model(tokenizer, args.hidden, args.layers, args.heads)
                model.load_state_dict(sft_weights)
                null = train_arm(
                    model, tokenizer, episodes, args, Path(scratch) / "null", null=True
                )
                print(f"[null] greedy {null['greedy']['success']:.3f}", flush=True)
            server = episodes.envs[0].server_info if episodes.envs else {}
    finally:
        episodes.close()
    timing["total_s"] = time.time() - t0
    return summarize(args, before, grpo, null, server, timing, model, len(records))


def summarize(
    args: argparse.Namespace,
    before: dict[str, Any],
    grpo: dict[str, Any],
    null: dict[str, Any] | None,
    server: dict[str, Any],
    timing: dict[str, float],
    model: Any,
    sft_records: int,
) -> dict[str, Any]:
    """The result file's contents: rates with intervals up front, paired gains, then details."""

    def brief(arm: dict[str, Any]) -> dict[str, Any]:
        return {
            mode: {k: arm[mode][k] for k in ("success", "ci95", "episodes")}
            for mode in ("greedy", "sampled")
        }

    start_greedy = before["greedy"]["outcomes"]
    result: dict[str, Any] = {
        "probe": PROBE,
        "env_id": ENV_ID,
        "seed": args.seed,
        "before": brief(before),
        "after": brief(grpo),
        "null": brief(null) if null else None,
        "gain_over_start": paired_gain(start_greedy, grpo["greedy"]["outcomes"]),
        "gain_over_null": (
            paired_gain(null["greedy"]["outcomes"], grpo["greedy"]["outcomes"]) if null else None
        ),
        "null_gain_over_start": (
            paired_gain(start_greedy, null["greedy"]["outcomes"]) if null else None
        ),
        "steps_to_90": grpo["steps_to_90"],
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("out",)},
            "sft_records": sft_records,
            "parameters": sum(p.numel() for p in model.parameters()),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": __import__("trl").__version__,
            "null_control": "each step's env rewards permuted across its batch (seeded by --seed)",
        },
        "server": {
            k: server.get(k) for k in ("env_id", "settings", "observation_mode", "tokenizer")
        },
        "timing_s": {
            **timing,
            "grpo_s": grpo["grpo_s"],
            **({"null_grpo_s": null["grpo_s"]} if null else {}),
        },
        "start_detail": {k: _without_outcomes(v) for k, v in before.items()},
        "grpo_detail": _arm_detail(grpo),
        "null_detail": _arm_detail(null) if null else None,
    }
    return result


def _without_outcomes(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in evaluation.items() if k != "outcomes"}


def _arm_detail(arm: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: v for k, v in arm.items() if k not in ("greedy", "sampled")},
        "greedy": _without_outcomes(arm["greedy"]),
        "sampled": _without_outcomes(arm["sampled"]),
    }


def main() -> None:
    args = build_parser().parse_args()
    # A SIGTERM unwinds like Ctrl-C, so the server this script started is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with served_env(args.env_url, args.max_action_tokens) as (url, command):
        result = run(args, url)
    result["command"] = " ".join(["python", "examples/trl/openenv_tool_choice.py", *sys.argv[1:]])
    result["server_command"] = " ".join(command) if command else f"given: --env-url {url}"
    result["timing_s"]["wall_s"] = time.time() - started
    path = out / f"openenv_tool_choice_seed{args.seed}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    summary = {
        "before": result["before"]["greedy"]["success"],
        "after": result["after"]["greedy"]["success"],
        "null": result["null"]["greedy"]["success"] if result["null"] else None,
        "wall_s": round(result["timing_s"]["wall_s"]),
    }
    print(json.dumps({str(path): summary}), flush=True)


if __name__ == "__main__":
    main()
