"""AgentFlow as a SkyRL-Gym ``BaseTextEnv``: chat messages in, chat messages out.

Checked against skyrl-gym 0.4.0 with SkyRL's ``SkyRLGymGenerator`` (skyrl 0.3.0). Register it
with ``register_env()`` (``skyrl_gym.register``, id ``agentflow``) in the process that runs the
generator, and name it per dataset row with ``env_class: agentflow``; the row's ``label`` (a
``TaskSpec`` JSON string) names the task, else the prompt's last message does. Env settings and
the tokenizer come from the ``AGENTFLOW_*`` variables (``AGENTFLOW_TOKENIZER``: the policy's).

``init`` returns the planner's first prompt as plain messages (system + user); each ``step``
takes the model's text and returns the next user message (``info["feedback_message"]``: plain
text, no template markup), reward 0 until the last step, which carries the env's reward and no
message. SkyRL renders those messages with its own chat template and keeps its own ids, so the
env's ids are NOT the trained ids (the env re-encodes the text; SkyRL tokenizes the feedback):
for training on exactly the ids the env recorded, use ``AgentFlowGenerator``
(``agentflow_generator.py``).

SkyRL's ``generator.max_turns`` (``extras["max_turns"]``) caps the env's turns: the env ends the
episode there as at its own limit. Each finished trajectory is recorded by the process's fail-fast
guard (``agentflow_env.rollout.checks.fail_fast``): when the first trajectories all fail the same way,
``init``, ``step`` or ``close`` raises ``SystemicFailure`` out of SkyRL's generator. The failure
rate is the env metric ``failed`` (SkyRL logs its mean as ``environment/failed``).

``step`` blocks until the env's turn is done (tools, frozen modules). Every session runs on one
background event loop; SkyRL calls ``step`` from its env worker threads when
``environment.skyrl_gym.max_env_workers > 0`` (its default, 32). With 0 it calls ``step`` on its
own event loop, which then waits for each turn: keep it above 0.
"""

from __future__ import annotations

import logging
from typing import Any

import skyrl_gym
from agentflow_sessions import new_session
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_row_format import ENV_CLASS

from agentflow_env.rollout import (
    BackgroundLoop,
    LazySharedEnvs,
    Session,
    episode_logs,
    failure_reason,
    warn_failed,
)

logger = logging.getLogger("agentflow_env.adapters.skyrl")
shared_envs = LazySharedEnvs()  # this process's envs and settings, read on first use
sessions = BackgroundLoop("agentflow-skyrl-sessions")


def register_env(env_id: str = ENV_CLASS) -> None:
    """Register ``AgentFlowTextEnv`` with SkyRL-Gym under ``env_id`` (once per process)."""
    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point=f"{__name__}:AgentFlowTextEnv")


class AgentFlowTextEnv(BaseTextEnv):
    """One AgentFlow episode; a trajectory that fails ends at once with reward 0."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.extras = dict(extras or {})
        self.session: Session | None = None
        self.error: str | None = None
        self.recorded = False

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        label = self.extras.get("label", prompt)
        shared = shared_envs()
        try:
            self.session = new_session(shared, label, max_turns=self.extras.get("max_turns"))
            observation, _ = sessions.run(self.session.start())
        except Exception as exc:  # the first step ends the episode with reward 0
            warn_failed(logger, exc, 0, label)
            self.error = failure_reason(exc)
            self.finish()
            return list(prompt), {"error": self.error}
        self.max_turns = self.session.config.max_turns
        return [dict(m) for m in observation.messages], {"task_id": self.session.task.task_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        session = self.session
        if session is None or self.error is not None:
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={})
        try:
            outcome = sessions.run(session.step(action))
        except Exception as exc:
            warn_failed(logger, exc, len(session.turn_records), self.extras.get("label"))
            self.error = failure_reason(exc)
            self.finish()
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={})
        self.turns = session.turn
        metadata = {"turn": session.turn, "tool": outcome.info.get("tool")}
        if session.done:
            self.finish()
            metadata.update(
                success=bool(outcome.info.get("success")), answer=outcome.info["answer"]
            )
            return BaseTextEnvStepOutput(
                observations=[], reward=float(outcome.reward), done=True, metadata=metadata
            )
        message = dict(outcome.info["feedback_message"])
        return BaseTextEnvStepOutput(
            observations=[message], reward=float(outcome.reward), done=False, metadata=metadata
        )

    def finish(self) -> None:
        """Record the trajectory with the fail-fast guard, once (``SystemicFailure`` propagates)."""
        if not self.recorded:
            self.recorded = True
            shared_envs().judge(self.session, self.error)

    def close(self) -> None:
        """SkyRL ends every trajectory here, also one it cut short (its input length)."""
        self.finish()

    def get_metrics(self) -> dict[str, Any]:
        """The episode's numeric logs (``failures.EPISODE_LOG_KEYS``), averaged by SkyRL."""
        return episode_logs(self.session, error=self.error is not None)
