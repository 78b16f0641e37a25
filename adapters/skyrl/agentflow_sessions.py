"""AgentFlow sessions under SkyRL's settings, shared by the generator and the text env.

SkyRL hands its generator the policy's tokenizer and a turn limit (``generator.max_turns``, which
its own generator passes to every env as ``extras["max_turns"]``). Both shape the episode: the
ids the engine is given and where the env ends. So a session is built with SkyRL's tokenizer when
there is one (``AGENTFLOW_TOKENIZER`` may only name the same vocabulary) and with the lower of the
env's and SkyRL's turn limits, which the env then enforces as its own (the planner's prompts
count down to it; at the limit the env answers and scores the episode).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from agentflow_env.rollout import AdapterError, Session, SharedEnvs

logger = logging.getLogger("agentflow_env.adapters.skyrl")
_warned_caps: set[tuple[int, int]] = set()


def new_session(
    shared: SharedEnvs, label: Any, tokenizer: Any = None, max_turns: int | None = None
) -> Session:
    """A session for ``label``'s task rendered with ``tokenizer`` (``None``: the configured one),
    ended by the env at ``max_turns`` when that is below the env's own limit (blocking)."""
    plan = shared.config.plan(label)
    env = shared.pool.env(plan, tokenizer)
    config = env.session_config
    if max_turns is not None and max_turns < config.max_turns:
        if max_turns < 1:
            raise AdapterError(f"generator.max_turns must be >= 1, got {max_turns}")
        if (max_turns, config.max_turns) not in _warned_caps:
            _warned_caps.add((max_turns, config.max_turns))
            logger.warning(
                "generator.max_turns=%d caps AgentFlow episodes below the env's max_turns=%d: "
                "the env ends them at turn %d (raise generator.max_turns to keep the env's limit)",
                max_turns,
                config.max_turns,
                max_turns,
            )
        config = dataclasses.replace(config, max_turns=max_turns)
    return env.new_session(shared.pool.task(plan, env), seed=plan.spec.seed, config=config)


def tokenizer_name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


def check_tokenizer(shared: SharedEnvs, tokenizer: Any) -> None:
    """Load SkyRL's tokenizer into the env pool, and refuse an ``AGENTFLOW_TOKENIZER`` of another
    vocabulary: the setting would otherwise look used while the env renders with SkyRL's."""
    if tokenizer is None:
        return
    shared.pool.tokenizer(tokenizer)  # a tokenizer the env cannot use fails here, not per episode
    configured, given = shared.config.tokenizer, tokenizer_name(tokenizer)
    if configured is None or _same_path(configured, given):
        return
    try:
        other = shared.tokenizer()
    except Exception as exc:
        raise AdapterError(
            f"AGENTFLOW_TOKENIZER={configured!r} could not be loaded to compare it with the "
            f"tokenizer SkyRL hands the generator ({given!r}, from trainer.policy.model.path): "
            f"{exc}. The generator renders with SkyRL's; unset AGENTFLOW_TOKENIZER or point it "
            "at the policy's tokenizer."
        ) from exc
    if _vocabulary(other) != _vocabulary(tokenizer):
        raise AdapterError(
            f"AGENTFLOW_TOKENIZER={configured!r} is not the tokenizer SkyRL hands the generator "
            f"({given!r}, from trainer.policy.model.path): their vocabularies differ, so env ids "
            "and policy ids would mean different tokens. Unset AGENTFLOW_TOKENIZER (the "
            "generator renders with SkyRL's) or set it to the policy's tokenizer."
        )


def _same_path(a: str, b: str) -> bool:
    if a == b:
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def _vocabulary(tokenizer: Any) -> Any:
    """What must match: the token-to-id map where the tokenizer has one, else its size and EOS."""
    hf = getattr(tokenizer, "hf", tokenizer)  # the env's wrapper keeps the Hugging Face one
    get_vocab = getattr(hf, "get_vocab", None)
    if callable(get_vocab):
        return get_vocab()
    size = getattr(tokenizer, "vocab_size", None)
    return size, getattr(tokenizer, "eos_token_id", None)


__all__ = ["check_tokenizer", "new_session", "tokenizer_name"]
