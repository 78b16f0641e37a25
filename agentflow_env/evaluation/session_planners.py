"""What ``eval`` asks of its planners: one per episode from a ``PlannerFactory``, and the named
samplings of a served planner.

The planners are the package's one family (``agentflow_env.rollout``): ``ExpertPlanner``,
``RandomPlanner`` and ``OpenAIPlanner`` follow the planner protocol (``await
planner.next_action(session)``), so many episodes run concurrently on one event loop; a blocking
planner in the Gymnasium calling style (``HFPlanner``) runs through
``ObservationPlanner(planner, in_thread=True)``, off the event loop, one call at a time.
"""

from __future__ import annotations

from collections.abc import Callable

from agentflow_env.rollout.agents.episodes import Planner
from agentflow_env.rollout.agents.llm_planners import Sampling

__all__ = ["AGENTFLOW_SAMPLING", "SAMPLINGS", "PlannerFactory", "Sampling"]

PlannerFactory = Callable[[int], Planner]
"""``factory(episode_index)``: the planner of one episode (one per episode keeps per-episode
state, such as a random planner's generator, apart)."""

AGENTFLOW_SAMPLING = Sampling(
    temperature=0.7, top_p=0.99, frequency_penalty=1.2, presence_penalty=0.0
)
"""What AgentFlow's vLLM engine sends for every planner call of its published runs, whatever
temperature its scripts pass: the engine keeps none of the sampling it is built with and the
planner's calls give none, so its per-call defaults hold."""

SAMPLINGS: dict[str, Sampling] = {"agentflow": AGENTFLOW_SAMPLING}
"""Named samplings (``eval --sampling NAME``)."""
