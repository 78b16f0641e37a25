"""The benchmark suite: ``python -m bench`` runs every figure, prints a table and writes JSON.

The older single-figure scripts here (``bench_*.py``) still run on their own as
``python bench/<script>.py``; they import their helpers as top-level modules
(``from fake_server import ...``), so this package puts its own folder on ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)
