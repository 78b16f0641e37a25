"""The embedded default task: multi-hop questions over a generated fictional world.

``generate_world(seed)`` builds entities, fact tables and an encyclopedia-style corpus;
``generate_tasks(world)`` turns question programs into ``Task`` objects with gold plans;
``SyntheticTaskSource`` serves them to the environment (fixed world or a fresh one per sample).
"""

from agentflow_env.tasks.synthetic.program import Chain, EntityRef, Program
from agentflow_env.tasks.synthetic.questions import build_task, generate_tasks
from agentflow_env.tasks.synthetic.reader import Fact, extract_facts
from agentflow_env.tasks.synthetic.sampling import sample_program
from agentflow_env.tasks.synthetic.solver import SyntheticSolver, read_evidence
from agentflow_env.tasks.synthetic.source import SyntheticTaskSource, training_text
from agentflow_env.tasks.synthetic.world import Entity, World, WorldConfig, generate_world

__all__ = [
    "Chain",
    "Entity",
    "EntityRef",
    "Fact",
    "Program",
    "SyntheticSolver",
    "SyntheticTaskSource",
    "World",
    "WorldConfig",
    "build_task",
    "extract_facts",
    "generate_tasks",
    "generate_world",
    "read_evidence",
    "sample_program",
    "training_text",
]
