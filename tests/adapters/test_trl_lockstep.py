"""TRL adapter on several processes: the ranks generate in lockstep.

Two real CPU processes (``torch.distributed`` over gloo on 127.0.0.1) run real episodes of
deliberately different lengths on each rank. Their generate functions are collectives, as in
vLLM server mode: each call gathers every rank's prompts and hands each rank the slice
``rank * batch : (rank + 1) * batch`` of the results, so a rank that calls more often hangs and
a rank with another batch size gets another rank's completions. The checks: both ranks make the
same calls with the same batch sizes, the shorter rank pads, and each rank's results are its own
episodes. The processes run with a deadline; a hang fails the test instead of blocking it.

This file is also the worker script: ``python test_trl_lockstep.py <worker> <rank> <port> <out>``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from conftest import load_adapter  # noqa: E402

from agentflow_env.rollout import EnvPool, build_env, distributed_max, plan_episode, read_task_spec  # noqa: E402

WORLD = 2
DEADLINE_S = 300  # for both ranks together; a normal run takes well under a minute
COLLECTIVE_TIMEOUT_S = 120  # a rank stuck in a collective raises after this
# Rank 0 plays the expert (episodes end after one or two turns); rank 1 sends nonsense and runs
# each episode to its own max_turns (2, 3, 4, 4), so the ranks' live counts differ every turn.
EPISODE_SPECS: dict[int, list[tuple[int, dict[str, Any]]]] = {
    0: [(100 + i, {"hops": 1, "max_turns": 4}) for i in range(3)],
    1: [(200 + i, {"hops": 1, "max_turns": turns}) for i, turns in enumerate((2, 3, 4, 4))],
}
NONSENSE = "I am not sure what to do."


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters" / "trl"))  # its siblings
rollout = load_adapter("adapters/trl/rollout.py", "agentflow_trl_rollout_lockstep")


# -- the parent side ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(worker: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Start one process per rank, wait with a deadline, return each rank's JSON report."""
    port = free_port()
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1"}
    here = Path(__file__).resolve()  # tests/ for conftest, the repository for the package
    env["PYTHONPATH"] = os.pathsep.join(
        [str(here.parents[1]), str(here.parents[2]), env.get("PYTHONPATH", "")]
    )
    procs = []
    for rank in range(WORLD):
        log = open(tmp_path / f"rank{rank}.log", "w")  # noqa: SIM115 (closed below)
        cmd = [sys.executable, __file__, worker, str(rank), str(port), str(tmp_path)]
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    deadline = time.monotonic() + DEADLINE_S
    hung = []
    for rank, (proc, _) in enumerate(procs):
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(rank)
    for proc, log in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    logs = {r: (tmp_path / f"rank{r}.log").read_text()[-3000:] for r in range(WORLD)}
    assert not hung, f"ranks {hung} still running after {DEADLINE_S}s (out of lockstep?): {logs}"
    for rank, (proc, _) in enumerate(procs):
        assert proc.returncode == 0, f"rank {rank} exited with {proc.returncode}:\n{logs[rank]}"
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_run_episodes_generate_in_lockstep_across_two_ranks(tmp_path: Path) -> None:
    ranks = run_ranks("episodes", tmp_path)
    batches = [r["batch_sizes"] for r in ranks]
    live = [r["live_counts"] for r in ranks]
    # The scenario is a real test: the ranks' live counts differ (rank 0 finishes early), and
    # without lockstep they would make different numbers of calls.
    assert live[0] != live[1]
    assert live[0][-1] == 0 and live[1][-1] > 0
    assert len(ranks[0]["unsynced_batch_sizes"]) < len(ranks[1]["unsynced_batch_sizes"])
    # Lockstep: the same calls with the same batch sizes, each the larger live count.
    assert batches[0] == batches[1]
    assert batches[0] == [max(a, b) for a, b in zip(live[0], live[1], strict=True)]
    assert len(batches[0]) == max(kw["max_turns"] for _, kw in EPISODE_SPECS[1])
    for rank, report in enumerate(ranks):
        # Every call handed this rank the completions made for its own prompts.
        assert report["foreign_completions"] == 0
        # One result per own episode, in order, each starting from its own task's first prompt.
        assert report["result_first_prompts"] == report["expected_first_prompts"]
        assert report["errors"] == [None] * len(EPISODE_SPECS[rank])
    assert ranks[0]["result_first_prompts"] != ranks[1]["result_first_prompts"]
    assert all(ranks[0]["success"]) and not any(ranks[1]["success"])
    assert ranks[0]["turns"] == ranks[0]["unsynced_turns"]  # padding changed nothing
    assert ranks[1]["turns"] == [kw["max_turns"] for _, kw in EPISODE_SPECS[1]]


def test_grpo_trainer_on_two_processes_generates_in_lockstep(tmp_path: Path) -> None:
    ranks = run_ranks("trainer", tmp_path)
    for report in ranks:
        # TRL's own trainer ran a step on two processes (accelerate's multi-CPU mode).
        assert report["num_processes"] == 2
        assert report["logged_loss"] is not None
        # Each call's gathered batch sizes agree across ranks (a mismatch would have hung).
        assert all(len(set(sizes)) == 1 for sizes in report["gathered_sizes"])
        assert report["result_first_prompts"] == report["expected_first_prompts"]
    assert ranks[0]["batch_sizes"] == ranks[1]["batch_sizes"]
    assert ranks[0]["turns"] == [1] * 4 and ranks[1]["turns"] == [3] * 4
    assert len(ranks[0]["batch_sizes"]) == 3  # rank 0 kept generating (padded) until rank 1 ended
    assert ranks[0]["seeds"] != ranks[1]["seeds"]


def test_single_process_has_no_collective_and_no_padding() -> None:
    """Without lockstep (one process; see also test_trl_failures) calls follow the live count."""
    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer

    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    calls: list[int] = []
    nonsense = tokenizer.encode(NONSENSE, add_special_tokens=False) + [tokenizer.eos_token_id]

    def generate(prompts: list[list[int]], max_new_tokens: int):
        calls.append(len(prompts))
        return [list(nonsense) for _ in prompts], None

    results = rollout.run_episodes(EPISODE_SPECS[1], generate, tokenizer, pool=EnvPool())
    assert calls == [4, 4, 3, 2]  # the live episodes only, one call per turn
    assert [r.turns for r in results] == [2, 3, 4, 4]


# -- the workers ------------------------------------------------------------------------------------
def _expected_first_prompts(specs: list[Any], tokenizer: Any, **plan_kwargs: Any) -> list[Any]:
    """Each spec's first prompt from a fresh env of its own (not the rollout's pool)."""
    out = []
    for spec in specs:
        plan = plan_episode(spec, **plan_kwargs)
        env = build_env(plan, tokenizer)
        task = plan.spec.resolve(env.task_source)
        observation, _ = env.reset(seed=plan.spec.seed, options={"task": task})
        out.append([int(i) for i in observation["token_ids"]])
    return out


def pool_envs(pool: Any) -> list[Any]:
    return [env for envs in pool._envs.values() for env in envs]


def _live_env(pool: Any, prompt: list[int]) -> Any:
    for env in pool_envs(pool):
        session = env.session
        if session is not None and not session.done and session.observation.token_ids == prompt:
            return env
    return None


def episodes_worker(rank: int, port: int, out: Path) -> None:
    """Real run_episodes on real envs, with a server-mode-like collective generate."""
    import torch.distributed as dist

    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
    from agentflow_env.rollout.agents.planners import ExpertPlanner

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    pool = EnvPool()
    nonsense = tokenizer.encode(NONSENSE, add_special_tokens=False) + [tokenizer.eos_token_id]
    report: dict[str, Any] = {
        "batch_sizes": [],
        "live_counts": [],
        "foreign_completions": 0,
        "unsynced_batch_sizes": [],
    }

    def policy(prompt: list[int]) -> list[int]:
        env = _live_env(pool, prompt)
        if rank == 0 and env is not None:
            action = ExpertPlanner(env).act()
            return tokenizer.encode(action, add_special_tokens=False) + [tokenizer.eos_token_id]
        return list(nonsense)

    def server_generate(prompts: list[list[int]], max_new_tokens: int):
        report["batch_sizes"].append(len(prompts))
        report["live_counts"].append(
            sum(env.session is not None and not env.session.done for env in pool_envs(pool))
        )
        # The "server" sees every rank's prompts, in rank order, and answers them all; each
        # rank takes its slice by position, as TRL's vLLM server mode does.
        local = [(rank, list(p), policy(p)) for p in prompts]
        gathered: list[Any] = [None] * WORLD
        dist.all_gather_object(gathered, local)
        answers = [answer for part in gathered for answer in part]
        mine = answers[rank * len(prompts) : (rank + 1) * len(prompts)]
        mine += [(None, None, list(nonsense))] * (len(prompts) - len(mine))  # ran off the end
        report["foreign_completions"] += sum(
            owner != rank or seen != list(p)
            for (owner, seen, _), p in zip(mine, prompts, strict=True)
        )
        return [ids for _, _, ids in mine], [[0.0] * len(ids) for _, _, ids in mine]

    specs = EPISODE_SPECS[rank]
    results = rollout.run_episodes(
        specs, server_generate, tokenizer, pool=pool, lockstep=distributed_max()
    )
    report["result_first_prompts"] = [r.prompt_ids for r in results]
    report["expected_first_prompts"] = _expected_first_prompts(specs, tokenizer)
    report["success"] = [r.success for r in results]
    report["turns"] = [r.turns for r in results]
    report["errors"] = [r.error for r in results]
    dist.barrier()

    # Control, local only (no collective): the same episodes without lockstep.
    def local_generate(prompts: list[list[int]], max_new_tokens: int):
        report["unsynced_batch_sizes"].append(len(prompts))
        answers = [policy(p) for p in prompts]
        return answers, [[0.0] * len(a) for a in answers]

    unsynced = rollout.run_episodes(specs, local_generate, tokenizer, pool=pool)
    report["unsynced_turns"] = [r.turns for r in unsynced]
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


def trainer_worker(rank: int, port: int, out: Path) -> None:
    """TRL's GRPOTrainer on two processes; rank 0's tasks end after one turn, rank 1's after 3."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        LOCAL_WORLD_SIZE=str(WORLD),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch.distributed as dist
    from datasets import Dataset
    from test_trl import cpu_grpo_config, tiny_model
    from trl import GRPOTrainer

    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer

    torch.set_num_threads(1)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    report: dict[str, Any] = {"batch_sizes": [], "gathered_sizes": []}
    real_generate = rollout.trainer_generate

    def recording_generate(trainer: Any, greedy: bool = False) -> Any:
        generate = real_generate(trainer, greedy=greedy)

        def call(prompts: list[list[int]], max_new_tokens: int):
            # A collective per call, like vLLM server mode's gather of the prompts.
            sizes: list[Any] = [None] * WORLD
            dist.all_gather_object(sizes, len(prompts))
            report["batch_sizes"].append(len(prompts))
            report["gathered_sizes"].append(sizes)
            return generate(prompts, max_new_tokens)

        return call

    rollout.trainer_generate = recording_generate
    env_kwargs = {"hops": 1, "max_turns": 1 if rank == 0 else 3}
    rollout_func = rollout.make_rollout_func(env_kwargs, max_action_tokens=8)
    seen: list[Any] = []

    def recording_rollout(prompts: list[Any], trainer: Any) -> dict[str, list]:
        output = rollout_func(prompts, trainer)
        seen.append((list(prompts), output))
        return output

    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=rollout.env_reward,
        args=cpu_grpo_config(
            out / f"grpo{rank}",
            per_device_train_batch_size=4,
            num_generations=4,
            max_steps=1,
            learning_rate=1e-4,
            beta=0.0,
            ddp_timeout=COLLECTIVE_TIMEOUT_S,
        ),
        train_dataset=Dataset.from_dict({"prompt": [rollout.task_prompt(s) for s in range(8)]}),
        processing_class=tokenizer,
        rollout_func=recording_rollout,
    )
    trainer.train()
    prompts, output = seen[0]
    report["num_processes"] = trainer.accelerator.num_processes
    report["logged_loss"] = next(
        (e["loss"] for e in trainer.state.log_history if "loss" in e), None
    )
    report["seeds"] = [read_task_spec(p).seed for p in prompts]
    report["turns"] = output["turns"]
    report["result_first_prompts"] = output["prompt_ids"]
    report["expected_first_prompts"] = _expected_first_prompts(
        prompts,
        tokenizer,
        env_kwargs=env_kwargs,
        default_env_kwargs=rollout.DEFAULT_ENV_KWARGS,
    )
    (out / f"rank{rank}.json").write_text(json.dumps(report))


WORKERS = {"episodes": episodes_worker, "trainer": trainer_worker}

if __name__ == "__main__":
    name, rank_arg, port_arg, out_arg = sys.argv[1:5]
    WORKERS[name](int(rank_arg), int(port_arg), Path(out_arg))
