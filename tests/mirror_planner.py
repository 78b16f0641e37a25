"""A scripted planner on its own env, for tests that play a trainer's engine: it answers each
generate call with the next action's ids and steps its own session with them, so the trainer's
record can be compared with the env's own."""

from __future__ import annotations

from typing import Any

from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner
from agentflow_env.rollout.labels.spec import TaskSpec, synthetic_specs


def spec_for(index: int, hops: int = 2) -> TaskSpec:
    """The ``index``-th synthetic training task (seed 7) with ``hops`` hops."""
    return list(synthetic_specs(index + 1, split="train", hops=hops, seed=7))[index][0]


class Mirror:
    """The expert (or random) planner on a flat-mode env of ``spec``'s task."""

    def __init__(self, spec: TaskSpec, tokenizer: Any, planner: str = "expert", seed: int = 0):
        self.env = spec.make_env(observation_mode="flat", tokenizer=tokenizer)
        self.session = self.env.new_session(spec.resolve(self.env.task_source), seed=spec.seed)
        self.env.session = self.session  # the scripted planners read env.session
        self.planner = (
            ExpertPlanner(self.env) if planner == "expert" else RandomPlanner(self.env, seed)
        )
        self.tok = self.env.tokenizer
        self.prompts: list[list[int]] = []
        self.actions: list[list[int]] = []

    async def first_prompt(self) -> list[int]:
        if self.session.observation is None:
            await self.session.start()
        assert self.session.observation is not None
        return list(self.session.observation.token_ids)

    async def next_action(self, max_tokens: int | None) -> list[int]:
        """The planner's next action as ids ending with EOS, cut to ``max_tokens``; recorded."""
        await self.first_prompt()
        assert not self.session.done, "generate after the episode ended"
        ids = self.tok.encode(self.planner.act()) + [self.tok.eos_token_id]
        ids = ids[:max_tokens] if max_tokens else ids
        self.actions.append(ids)
        return ids
