"""Errors raised in one layer and handled in another."""

from __future__ import annotations

__all__ = ["DatasetError", "ModuleError"]


class ModuleError(RuntimeError):
    """A module could not produce a usable output; recorded in memory, never raised out of step."""


class DatasetError(ValueError):
    """A data file cannot be read; the message names the file and the line or record."""
