"""Train the AgentFlow planner with SkyRL 0.3.0 (``skyrl.train``), SkyRL's own config overrides.

  python adapters/skyrl/main_agentflow.py [--text-env] trainer.policy.model.path=... ...

By default rollouts go through ``AgentFlowGenerator`` (token-exact: SkyRL trains on exactly the
ids the env recorded). ``--text-env`` uses SkyRL's own ``SkyRLGymGenerator`` with
``AgentFlowTextEnv`` instead (messages in, messages out; SkyRL tokenizes the feedback itself).
The rollout runs in SkyRL's entrypoint task, which gets this folder on ``PYTHONPATH`` and every
``AGENTFLOW_*`` variable of this shell (``train_flow_grpo.sh`` sets them). With
``generator.step_wise_trajectories=true`` the generator trains one row per planner turn
(``step_wise.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
import skyrl_compat  # noqa: F401  (first: skyrl.train imports on Python 3.11)
from agentflow_generator import AgentFlowGenerator
from agentflow_text_env import register_env
from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.utils import validate_cfg
from skyrl.train.utils.utils import initialize_ray
from step_wise import check_text_env_shape, sample_shape

HERE = Path(__file__).resolve().parent


class AgentFlowExp(BasePPOExp):
    """SkyRL's PPO experiment with the token-exact AgentFlow generator."""

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
        return AgentFlowGenerator(
            generator_cfg=cfg.generator,
            skyrl_gym_cfg=cfg.environment.skyrl_gym,
            inference_engine_client=inference_engine_client,
            tokenizer=tokenizer,
            policy_model_name=resolve_policy_model_name(cfg),
        )


@ray.remote(num_cpus=1)
def agentflow_entrypoint(cfg: SkyRLTrainConfig, text_env: bool) -> None:
    if text_env:
        register_env()  # SkyRL's generator builds envs with skyrl_gym.make in this process
        BasePPOExp(cfg).run()
    else:
        AgentFlowExp(cfg).run()


def runtime_env() -> dict[str, Any]:
    """This folder on ``PYTHONPATH`` and the ``AGENTFLOW_*`` settings, for the entrypoint task."""
    env = {k: v for k, v in os.environ.items() if k.startswith("AGENTFLOW_")}
    paths = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return {"env_vars": env}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    text_env = "--text-env" in args
    cfg = SkyRLTrainConfig.from_cli_overrides([a for a in args if a != "--text-env"])
    validate_cfg(cfg)
    if text_env:
        check_text_env_shape()  # AGENTFLOW_SAMPLES=turns has no meaning there
    else:
        sample_shape(cfg.generator)  # AGENTFLOW_SAMPLES against step-wise: refused before Ray
    initialize_ray(cfg)
    task = agentflow_entrypoint.options(runtime_env=runtime_env())
    ray.get(task.remote(cfg, text_env))


if __name__ == "__main__":
    main()
