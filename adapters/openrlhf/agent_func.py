"""OpenRLHF agent for AgentFlow: the planner is the trained policy, the env runs everything else.

Use with ``--train.agent_func_path adapters/openrlhf/agent_func.py`` (OpenRLHF 0.11.x), which
loads this file by path in every vLLM Ray actor and builds ``AgentExecutor()`` with no arguments:
settings come from the ``AGENTFLOW_*`` environment variables (``adapters/openrlhf/README.md``),
each ``label`` is a ``TaskSpec`` JSON string. This file is the OpenRLHF glue only: the sampled ids
reach the env verbatim, OpenRLHF's prompt ids are checked against the env's every turn
(``CheckedEngine``), a failing trajectory is a reward-0 sample.
"""

# OpenRLHF executes this file without registering it in ``sys.modules``: no dataclasses here (they
# fail on string annotations there), and no ``from __future__ import annotations`` either.
import asyncio
import contextvars
import copy
import functools
import logging
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from agentflow_env.rollout import (
    EPISODE_LOG_KEYS,
    AdapterError,
    CheckedEngine,
    LazySharedEnvs,
    MismatchHints,
    SeamError,
    SeamLatch,
    TrainerSequence,
    dump_samples,
    end_session,
    episode_logs,
    filler_token_id,
    hf_encoder,
    openrlhf_response_sample,
    warn_failed,
)
from agentflow_env.rollout import describe_mismatch as describe_token_mismatch

LOG_KEYS = EPISODE_LOG_KEYS
logger = logging.getLogger("agentflow_env.adapters.openrlhf")
# This process's envs and settings, read on first use; OpenRLHF trains flat samples only.
shared_envs = LazySharedEnvs(
    flat_only="OpenRLHF's AgentExecutor returns one sample per trajectory (openrlhf/utils/agent.py), "
    "so its Flow-GRPO is the flat broadcast; per-turn samples train through SkyRL's step-wise "
    "trajectories, TRL's samples='turns' or Agent Lightning on verl (docs/credit.md)"
)
_SEAM = SeamLatch(logger, "AgentFlow's OpenRLHF adapter cannot capture the sampled ids")
_TEXT_FALLBACK = "AgentInstance is driven by another executor: re-encoding action_text (lossy)"
_warn_text_fallback = functools.cache(functools.partial(logger.warning, _TEXT_FALLBACK))


def _hints(tokenizer_name: str) -> MismatchHints:
    fix = "set AGENTFLOW_TOKENIZER to the policy model's tokenizer"
    cut = "raise --data.max_len so that it holds the first prompt and room to generate"
    return MismatchHints("OpenRLHF", tokenizer_name, fix, cut)


def describe_mismatch(theirs: Any, ours: Any, rollout: Any, hf_tokenizer: Any, name: str) -> str:
    """Where OpenRLHF's prompt ids and the env's part, and why (``rollout.checks.token_check``)."""
    return describe_token_mismatch(theirs, ours, rollout, hf_encoder(hf_tokenizer), _hints(name))


Rollout = TrainerSequence  # one trajectory's sequence as OpenRLHF builds it


class TurnEngine(CheckedEngine):
    """OpenRLHF's vLLM engine for one trajectory, checked every turn (``CheckedEngine``)."""

    def __init__(self, engine: Any, hf_tokenizer: Any, cap: int, hints: MismatchHints) -> None:
        super().__init__(engine, hf_encoder(hf_tokenizer), cap, hints, _SEAM)
        self.hf_tokenizer = hf_tokenizer

    def failure(
        self, exc: BaseException, prompt: str, label: str, params: Any, images: Any
    ) -> dict:
        """The reward-0 sample after ``exc`` as OpenRLHF's executor shapes one: tokens, action
        ranges and log-probs so far (none sampled: the prompt, no gradient)."""
        warn_failed(logger, exc, len(self.rollout.ranges), label)
        filler = filler_token_id(self.hf_tokenizer)  # OpenRLHF needs a position after the first
        tokens, ranges, logprobs = self.failure_sample(prompt, filler, min_length=2)
        return {
            "prompt": prompt,
            "label": label,
            "images": images,
            "mm_train_inputs": None,
            "reward": 0.0,
            "scores": 0.0,
            "observation_tokens": tokens,
            "action_ranges": ranges,
            "rollout_log_probs": None if getattr(params, "logprobs", None) is None else logprobs,
            "truncated": self.rollout.finish_reason == "length",
            "extra_logs": episode_logs(self.rollout.session, error=True),
        }


_ROLLOUT: contextvars.ContextVar[Rollout | None] = contextvars.ContextVar("agentflow_rollout")


class AgentInstance(AgentInstanceBase):
    """One trajectory's env session. Cheap to build: envs are shared per process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.session: Any = None  # a Session, or a RemoteSession with AGENTFLOW_ENV_URL
        self.rollout = _ROLLOUT.get(None)

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """Start the episode the ``label`` names; returns the first planner prompt (text)."""
        self.session = await asyncio.to_thread(shared_envs().new_session, states["label"])
        if self.rollout is not None:
            self.rollout.session = self.session
        observation, _ = await self.session.start()
        return {"observation": observation.text}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        """One planner turn; the reward is terminal (0 before the end): OpenRLHF takes one scalar
        per sample, so shaping rewards and per-turn advantages do not reach it."""
        if self.session is None:
            raise RuntimeError("step() before reset()")
        action, logprobs = self._action(states)
        outcome = await self.session.step(action, logprobs)
        end = self.session.outcome if outcome.terminated or outcome.truncated else None
        return {
            "rewards": torch.tensor(end.reward if end else 0.0),
            "scores": float(end.score) if end else 0.0,
            # After the end no prompt follows: nothing to append (the sequence ends on the action).
            "environment_feedback": "" if end else outcome.feedback.text,
            "done": end is not None,
            "extra_logs": episode_logs(self.session),
        }

    def _action(self, states: dict) -> tuple[Any, list[float] | None]:
        if self.rollout is None:
            _warn_text_fallback()  # once: the env's tokens may then differ from OpenRLHF's
            return states["action_text"], None
        action = self.rollout.take_action()
        if action is None:
            raise _SEAM.error(
                "OpenRLHF called AgentInstance.step without sampling through the engine given "
                "its executor (TurnEngine.generate): this openrlhf does not fit (checked: 0.11.2)"
            )
        return action


class AgentExecutor(MultiTurnAgentExecutor):
    """OpenRLHF's multi-turn loop, with action ids passed to the env, per-turn caps equal to the
    env's, and every failure of one trajectory returned as a reward-0 sample."""

    def __init__(self) -> None:
        super().__init__(AgentInstance)
        self.shared = shared_envs()  # a bad setting or tokenizer stops the run here, at start-up
        self.shared.tokenizer()

    async def execute(
        self,
        prompt: str,
        label: str,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict:
        _SEAM.check()
        cap, hints = self.shared.config.max_action_tokens, _hints(self.shared.tokenizer_name())
        engine = TurnEngine(llm_engine, hf_tokenizer, cap, hints)
        rollout, token = engine.rollout, _ROLLOUT.set(engine.rollout)
        try:  # the group shares one sampling_params, and the loop writes max_tokens into it
            params = copy.deepcopy(sampling_params)
            result = await super().execute(
                prompt, label, params, max_length, hf_tokenizer, engine, images
            )
            tokens, ranges = result.get("observation_tokens"), result.get("action_ranges")
            problem = rollout.sample_problem(tokens, ranges)
            if problem is not None:
                raise _SEAM.error(f"OpenRLHF's executor returned {problem}")
            if rollout.session is None or not rollout.session.done:
                result["reward"] = result["scores"] = 0.0  # the token budget ran out first
            result["extra_logs"] = episode_logs(rollout.session)
        except AdapterError:
            raise
        except Exception as exc:
            if exc is engine.error:
                raise
            result = engine.failure(exc, prompt, label, sampling_params, images)
            self.shared.judge(rollout.session, exc)
        else:
            self.shared.judge(rollout.session)  # a setup failing every trajectory: SystemicFailure
        finally:
            _ROLLOUT.reset(token)
            await end_session(rollout.session)  # a served env's: its server frees it now
        if result.get("rollout_log_probs") is not None:  # AGENTFLOW_DUMP_SAMPLES: check-logprobs
            temperature = getattr(sampling_params, "temperature", None)
            dump_samples(lambda: [openrlhf_response_sample(result, temperature)], logger)
        return result


__all__ = ["LOG_KEYS", "AgentExecutor", "AgentInstance", "SeamError", "describe_mismatch"]
