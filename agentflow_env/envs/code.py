"""``AgentFlow-Code-v0``: an ``AgentFlowEnv`` over the computation tasks of
``agentflow_env.tasks.code``, with the Python tool (sandboxed), Calculator and Search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.tasks.code import FACT_MATH, CodeTaskSource

CODE_TOOLS: tuple[str, ...] = ("Python", "Calculator", "Search")


# ``AgentFlowEnv`` settings that pick or shape other task sources: this variant generates its own.
UNUSED_SETTINGS: tuple[str, ...] = (
    "hops",
    "task_source",
    "tasks",
    "dataset",
    "corpus",
    "dataset_split",
    "dataset_limit",
    "index_cache_dir",
)


def make_code_env(
    seed: int | None = None,
    kinds: str | Sequence[str] | None = None,
    split: str = "train",
    fresh_world: bool = False,
    tools: Sequence[Any] = CODE_TOOLS,
    world_seed: int | None = None,
    world_size: str | None = None,
    **env_kwargs: Any,
) -> AgentFlowEnv:
    """An ``AgentFlowEnv`` over a ``CodeTaskSource`` (the ``AgentFlow-Code-v0`` entry point).

    ``world_seed`` (or its older name ``seed``) and ``world_size`` pick the synthetic world the
    fact questions are about, so they need ``"fact_math"`` among ``kinds``. Settings this variant
    does not use (``hops``, other task sources) raise ``ValueError`` instead of being ignored.
    """
    unused = [name for name in UNUSED_SETTINGS if env_kwargs.get(name) is not None]
    if unused:
        raise ValueError(
            f"AgentFlow-Code-v0 does not use {', '.join(f'{n}=' for n in unused)}: it generates "
            "its own tasks (settings: kinds=, split=, fresh_world=, world_seed=, world_size=)"
        )
    for name in UNUSED_SETTINGS:
        env_kwargs.pop(name, None)
    if seed is not None and world_seed is not None and seed != world_seed:
        raise ValueError(
            f"seed={seed} and world_seed={world_seed} name the same world seed: give one of them"
        )
    source = CodeTaskSource(
        seed=world_seed if world_seed is not None else seed or 0,
        kinds=kinds,
        split=split,
        fresh_world=fresh_world,
        world_size=world_size,
    )
    world = {"seed": seed, "world_seed": world_seed, "world_size": world_size}
    given = [f"{name}=" for name, value in world.items() if value is not None]
    if given and FACT_MATH not in source.kinds:
        raise ValueError(
            f"{', '.join(given)} only shape the world of fact_math questions, and "
            f"kinds={list(source.kinds)} has none: add 'fact_math' to kinds or drop them"
        )
    return AgentFlowEnv(task_source=source, tools=tools, **env_kwargs)


__all__ = ["CODE_TOOLS", "UNUSED_SETTINGS", "make_code_env"]
