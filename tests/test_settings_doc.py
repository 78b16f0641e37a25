"""docs/settings.md is what ``scripts/write_settings_doc.py`` writes from the declarations: a
setting added, removed or reworded without regenerating the page fails here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from agentflow_env.base.settings import ENV_VARS, SHELL_VARS, TEST_VARS
from agentflow_env.envs.registration import ENV_CONFIGS

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "write_settings_doc.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("write_settings_doc", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_page_is_up_to_date() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == load_script().render(), "stale: run python scripts/write_settings_doc.py"


def test_the_page_lists_every_setting() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    names = [*ENV_VARS, *SHELL_VARS, *TEST_VARS]
    names += [name for cls in ENV_CONFIGS.values() for name in cls.settings()]
    assert [name for name in names if f"`{name}`" not in page] == []
    for doc in ("README.md", "docs/architecture.md"):
        assert "settings.md" in (ROOT / doc).read_text(encoding="utf-8"), doc


def test_every_variable_the_launch_scripts_read_is_declared() -> None:
    scripts = [*(ROOT / "adapters").glob("*.sh"), *(ROOT / "adapters").glob("*/*.sh")]
    read = {
        name
        for path in scripts
        for name in re.findall(r"\$\{([A-Z_][A-Z0-9_]*):-", path.read_text(encoding="utf-8"))
    }
    assert read and sorted(read - set(SHELL_VARS) - set(ENV_VARS)) == []
