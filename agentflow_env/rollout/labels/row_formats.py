"""The row formats label files are written in: a registry the trainers' adapters fill.

The core knows one format, ``generic``: one ``{"prompt", "label", "datasource"}`` per task (the
question for logs, the ``TaskSpec`` JSON label, the data source), the rows every other format is
converted from. A trainer's row format belongs to its adapter: ``adapters/<trainer>/
<trainer>_row_format.py`` calls ``register_row_format`` when it is loaded. The adapters are files of
the repository, not installed with the package, so ``agentflow-env labels`` loads them by path
(``load_row_formats``): from ``--adapters DIR``, by default ``CHECKOUT_ADAPTERS``, the
``adapters/`` folder of the checkout the package runs from (a package installed apart from its
checkout: ``adapters/`` in the current directory). A format registered in-process (a script, a
test) is offered as well.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = Mapping[str, Any]
"""One ``generic`` row: ``{"prompt", "label", "datasource"}``."""
Convert = Callable[[Row, int], dict[str, Any]]
"""A format's row from a ``generic`` row and the row's index in its file."""

GENERIC = "generic"
"""The core's own format, the default: the rows the others are converted from."""
CHECKOUT_ADAPTERS = Path(__file__).resolve().parents[3] / "adapters"
"""Where ``load_row_formats`` looks by default: the checkout's ``adapters/`` folder (absent when
the package is installed without its repository)."""
ROW_FILES = "*/*_row_format.py"
"""The files under an adapters folder that register row formats (one per trainer folder; each
name unique, as a trainer may put its folder on ``sys.path`` and import it)."""


@dataclass(frozen=True)
class RowFormat:
    """A registered row format: its name, its converter and what its rows are called."""

    name: str
    convert: Convert
    rows: str = "rows"
    """What the rows are called in messages (``wrote 3 verl rows to ...``)."""
    description: str = ""


_FORMATS: dict[str, RowFormat] = {}
_LOADED: dict[Path, Any] = {}


def register_row_format(
    name: str, convert: Convert, *, rows: str = "rows", description: str = ""
) -> RowFormat:
    """Offer ``name`` to ``agentflow-env labels --format`` (and ``convert_label_file``): its rows
    are ``convert(generic_row, index)``. Registering a name again replaces it (a file loaded
    twice)."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"row format name {name!r:.40}: letters, digits, '-' and '_' only")
    _FORMATS[name] = RowFormat(name, convert, rows, description)
    return _FORMATS[name]


def row_formats() -> tuple[str, ...]:
    """The registered formats' names, ``generic`` first."""
    return (GENERIC, *sorted(name for name in _FORMATS if name != GENERIC))


def row_format(name: str) -> RowFormat:
    """The format ``name``; a ``ValueError`` naming the offered ones when none is registered."""
    try:
        return _FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown row format {name!r:.40} (offered: {', '.join(row_formats())}); a trainer's "
            f"format is registered by its adapter ({ROW_FILES} under --adapters DIR)"
        ) from None


def load_row_formats(adapters: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """Load the row-format files (``ROW_FILES``) under ``adapters`` (``None``:
    ``CHECKOUT_ADAPTERS``, else ``./adapters``, skipped when neither exists), each file once;
    returns the offered formats. A given folder that does not exist is a ``ValueError``."""
    if adapters is not None:
        folder = Path(adapters)
        if not folder.is_dir():
            raise ValueError(f"--adapters {folder}: not a folder")
    else:
        found = [f for f in (CHECKOUT_ADAPTERS, Path("adapters")) if f.is_dir()]
        if not found:
            return row_formats()
        folder = found[0]
    for path in sorted(folder.glob(ROW_FILES)):
        load_row_file(path)
    return row_formats()


def load_row_file(path: str | os.PathLike[str]) -> Any:
    """Load one row-format file by path (its formats register themselves); returns the module
    (a file already loaded: the module it gave)."""
    resolved = Path(path).resolve()
    if resolved in _LOADED:
        return _LOADED[resolved]
    name = f"agentflow_row_format_{resolved.parent.name}_{resolved.stem}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ValueError(f"{resolved}: cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _LOADED[resolved] = module
    return module


def generic_row(row: Row, index: int) -> dict[str, Any]:
    """A ``generic`` row as it is."""
    return dict(row)


register_row_format(
    GENERIC, generic_row, rows="label rows", description="prompt, label and datasource"
)


__all__ = [
    "CHECKOUT_ADAPTERS",
    "GENERIC",
    "ROW_FILES",
    "Convert",
    "Row",
    "RowFormat",
    "generic_row",
    "load_row_file",
    "load_row_formats",
    "register_row_format",
    "row_format",
    "row_formats",
]
