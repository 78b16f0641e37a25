"""Import SkyRL's trainer package on Python 3.11.

skyrl 0.3.0 (and 0.2.0) declare Python >= 3.11, but ``skyrl/tinker/types.py``, which every
``skyrl.train`` import reaches through ``skyrl/backends/__init__.py``, puts a ``typing.TypedDict``
inside a pydantic model, and pydantic rejects that before Python 3.12 ("Please use
``typing_extensions.TypedDict`` instead of ``typing.TypedDict`` on Python < 3.12"). Importing
this module first imports that one file with ``typing_extensions.TypedDict`` in ``typing``'s place
and puts ``typing`` back at once; on Python 3.12 and later it does nothing.
"""

from __future__ import annotations

import importlib
import sys
import typing

import typing_extensions


def import_skyrl_types() -> None:
    """Import ``skyrl.tinker.types`` so that pydantic accepts its ``TypedDict`` (idempotent)."""
    if sys.version_info >= (3, 12) or "skyrl.tinker.types" in sys.modules:
        return
    original = typing.TypedDict
    typing.TypedDict = typing_extensions.TypedDict
    try:
        importlib.import_module("skyrl.tinker.types")
    finally:
        typing.TypedDict = original


import_skyrl_types()
