"""Planners that play episodes outside a trainer: the expert and random demonstrators, HF and
LLM-backed planners, and episode runners that record every turn."""
