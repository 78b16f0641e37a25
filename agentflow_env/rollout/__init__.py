"""Layer 7, trainer-neutral driving of the envs: whole episodes, expert demonstrations, scripted
and model-backed planners, and ``TaskSpec`` labels naming an env and one of its tasks."""
