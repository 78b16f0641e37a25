"""Driving envs for a trainer: the batched driver and the one-trajectory token episode, the env
pool, trainer samples in both shapes, group and turn credit, and the event-loop glue."""
