"""The layers have one home, the import-linter contract in ``pyproject.toml``: the docs name the
same layers in the same order. And what ``scripts/check_layers.py`` checks by hand (the rules
import-linter cannot express), on small made-up repositories."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_layers.py"
# Above the contract's layers, not in it: the public API and the adapters.
ON_TOP = {"agentflow_env/__init__.py", "adapters/"}


def contract_layers() -> list[set[str]]:
    """The layers contract's layers, bottom first, each a set of subpackages."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["id"] == "layers"]
    assert layers["containers"] == ["agentflow_env"]
    return [
        {name.strip().strip("()") for name in re.split(r"[|:]", layer)}
        for layer in reversed(layers["layers"])
    ]


def architecture_layers() -> tuple[list[set[str]], list[set[str]]]:
    """The packages of each row of docs/architecture.md's layer table (bottom first), without
    and with what sits on top of the layers."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("| layer | package | holds |\n| --- | --- | --- |\n", 1)[1]
    rows = [line for line in table.split("\n\n", 1)[0].splitlines() if line.startswith("|")]
    numbers, found = [], []
    for row in rows:
        number, packages = (cell.strip() for cell in row.split("|")[1:3])
        numbers.append(int(number))
        found.append(set(re.findall(r"`([^`]+)`", packages)))
    assert numbers == list(range(1, len(rows) + 1))
    layers = [{name.removeprefix("agentflow_env/").rstrip("/") for name in row} for row in found]
    return [row - {"__init__.py", "adapters"} for row in layers], found


def contributing_layers() -> list[set[str]]:
    """The ``Layers:`` line of CONTRIBUTING.md (bottom first; ``a | b``: side by side)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    (paragraph,) = re.findall(r"^Layers: (.*?)\n\n", text, flags=re.MULTILINE | re.DOTALL)
    return [set(re.findall(r"`([^`]+)`", part)) for part in paragraph.split("<")]


def test_the_docs_name_the_contracts_layers_in_its_order() -> None:
    layers = contract_layers()
    assert {"base", "retrieval", "tools", "tasks", "cli"} <= set().union(*layers)
    assert contributing_layers() == layers
    table, with_top = architecture_layers()
    assert table == layers
    # The public API and the adapters stand in the top row, and only there.
    assert with_top[-1] >= ON_TOP and not ON_TOP & set().union(*with_top[:-1])


def test_retrieval_is_its_own_layer_under_tools_and_tasks() -> None:
    layers = contract_layers()
    assert layers.index({"retrieval"}) + 1 == layers.index({"tools", "tasks"})


# -- scripts/check_layers.py ------------------------------------------------------------------
def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


PACKAGE = {
    "agentflow_env/__init__.py": "from agentflow_env.core import thing\n",
    "agentflow_env/core/__init__.py": "from agentflow_env.core.impl import thing\n",
    "agentflow_env/core/impl.py": """
        from typing import TYPE_CHECKING

        from agentflow_env.core import helpers

        if TYPE_CHECKING:
            import torch

        thing = helpers.VALUE


        def load() -> object:
            import torch
            from transformers import AutoTokenizer

            return torch, AutoTokenizer
    """,
    "agentflow_env/core/helpers.py": "VALUE = 1\n",
    "agentflow_env/cli/__init__.py": "def main() -> int:\n    return 0\n",
    "agentflow_env/cli/__main__.py": "from agentflow_env.cli import main\n\nmain()\n",
    "agentflow_env/rollout/__init__.py": "from agentflow_env.rollout.driver import run\n",
    "agentflow_env/rollout/driver.py": "def run() -> None:\n    pass\n",
    "agentflow_env/base/settings.py": """
        import os

        ENV_VARS = {"AGENTFLOW_KNOWN": "a declared variable", "AGENTFLOW_LLM_MODEL": "one more"}


        def read_env_var(name: str) -> str | None:
            return os.environ.get(name) or os.environ.get("AGENTFLOW_KNOWN")
    """,
}


def test_a_clean_repository_passes(tmp_path: Path) -> None:
    write(tmp_path, PACKAGE)
    write(
        tmp_path,
        {
            "adapters/trainer/glue.py": """
                import json

                import agentflow_env
                import agentflow_env.rollout
                from agentflow_env import rollout, thing
                from agentflow_env.rollout import run
                from helpers_beside_me import helper
            """
        },
    )
    result = check(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": OK") == 5


def test_each_rule_names_what_breaks_it(tmp_path: Path) -> None:
    write(tmp_path, PACKAGE)
    write(
        tmp_path,
        {
            "agentflow_env/core/impl.py": """
                import torch

                thing = 1


                def parse() -> object:
                    import json

                    return json


                def dodge() -> object:
                    from agentflow_env.core import helpers

                    return helpers
            """,
            "agentflow_env/core/helpers.py": "import agentflow_env.core\n",
            "agentflow_env/core/__init__.py": (
                "from agentflow_env.core.impl import thing\nfrom agentflow_env.core import helpers\n"
            ),
            "agentflow_env/envs/__init__.py": "",
            # A subpackage built on an extra imports it at module level, and is imported only in
            # the function that needs it: neither is a problem.
            "agentflow_env/service/__init__.py": "",
            "agentflow_env/service/app.py": "import uvicorn\n",
            "agentflow_env/cli/__init__.py": "",
            "agentflow_env/cli/serve.py": (
                "def run() -> object:\n    from agentflow_env.service import app\n\n    return app\n"
            ),
            "adapters/trainer/glue.py": """
                import agentflow_env.envs
                from agentflow_env import envs
                from agentflow_env.rollout import driver, run
                from agentflow_env.workflow.session import Session
            """,
        },
    )
    result = check(tmp_path)
    assert result.returncode == 1
    problems = [line.strip() for line in result.stdout.splitlines() if line.startswith("  ")]
    assert problems == [
        "agentflow_env/core/impl.py:2: module-level import of the optional torch (import it in "
        "the function that needs it, or under TYPE_CHECKING)",
        "agentflow_env/core/impl.py:8: function-local import of json (only the optional "
        "dependencies ['aiohttp', 'e2b', 'e2b_code_interpreter', 'matplotlib', 'msgpack', "
        "'openenv', 'pyarrow', 'pyseccomp', 'ray', 'torch', 'transformers', 'uvicorn', 'vllm', "
        "'websockets'] are imported in functions)",
        "agentflow_env/core/impl.py:14: function-local import of package module "
        "agentflow_env.core.helpers",
        "import cycle: agentflow_env.core -> agentflow_env.core.helpers -> agentflow_env.core",
        "adapters/trainer/glue.py:2: imports agentflow_env.envs",
        "adapters/trainer/glue.py:3: imports agentflow_env.envs",
        "adapters/trainer/glue.py:4: imports agentflow_env.rollout.driver",
        "adapters/trainer/glue.py:5: imports agentflow_env.workflow.session",
    ]


def test_the_package_keeps_the_rules_import_linter_cannot_check() -> None:
    spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.check_package(ROOT) == []
    assert script.check_package_cycles(ROOT) == []
    assert script.check_environment_reads(ROOT) == []
    assert script.check_declared_variables(ROOT) == []


def test_environment_variables_are_read_in_one_module_and_declared_there(tmp_path: Path) -> None:
    write(tmp_path, PACKAGE)
    write(
        tmp_path,
        {
            "agentflow_env/core/impl.py": """
                import os
                from collections.abc import Mapping

                NAME = "AGENTFLOW_KNOWN"
                AGENTFLOW_CONSTANT = ("a Python name, not a variable",)
                os.environ["AGENTFLOW_KNOWN"] = "1"  # setting one for a child process is fine
                child = {"AGENTFLOW_KNOWN": "1", **os.environ}


                def read(environ: Mapping[str, str], role: str) -> object:
                    return (
                        os.environ.get("AGENTFLOW_KNOWN"),
                        os.getenv(NAME),
                        environ[f"AGENTFLOW_{role}_MODEL"],
                        "AGENTFLOW_KNOWN" in os.environ,
                        os.environ.get("HOME"),
                        "AGENTFLOW_CONSTANT, AGENTFLOW_LLM_* and AGENTFLOW_KNOWN are fine",
                        "AGENTFLOW_UNKNOWN is not",
                    )
            """,
            "adapters/trainer/glue.py": """
                import os

                limit = int(os.environ.get("AGENTFLOW_KNOWN", "0"))
            """,
            "adapters/trainer/train.sh": 'export AGENTFLOW_KNOWN=1\necho "$AGENTFLOW_OTHER"\n',
        },
    )
    result = check(tmp_path)
    assert result.returncode == 1
    problems = [line.strip() for line in result.stdout.splitlines() if line.startswith("  ")]
    settings = "agentflow_env/base/settings.py"
    assert problems == [
        f"{where}: reads {name} from the environment (read it with read_env_var: {settings})"
        for where, name in (
            ("adapters/trainer/glue.py:4", "AGENTFLOW_KNOWN"),
            ("agentflow_env/core/impl.py:13", "AGENTFLOW_KNOWN"),
            ("agentflow_env/core/impl.py:14", "AGENTFLOW_KNOWN"),  # a constant holding the name
            ("agentflow_env/core/impl.py:15", "AGENTFLOW_"),  # a name built from a prefix
            ("agentflow_env/core/impl.py:16", "AGENTFLOW_KNOWN"),
        )
    ] + [
        f"agentflow_env/core/impl.py:19: AGENTFLOW_UNKNOWN is not declared in {settings}",
        f"adapters/trainer/train.sh:2: AGENTFLOW_OTHER is not declared in {settings}",
    ]
    (tmp_path / settings).unlink()
    result = check(tmp_path)
    assert f"{settings}: missing (it declares every AGENTFLOW_* environment variable)" in (
        result.stdout
    )
