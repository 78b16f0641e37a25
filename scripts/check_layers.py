"""The import rules import-linter cannot express; its contracts (``lint-imports``) hold the rest.

The layers, the cycles between sibling modules or subpackages, and the packages the core never
imports are contracts in ``pyproject.toml`` (``[tool.importlinter]``). import-linter sees every
import alike, wherever it stands, and only inside the package; this script fails (exit status 1)
on:

- a function-local import of anything but an optional dependency (``OPTIONAL``) or a subpackage
  built on an extra (``EXTRA_PACKAGES``): a function-local import of another package module
  dodges an import cycle at run time;
- an optional dependency imported at module level outside ``if TYPE_CHECKING:`` (the package
  imports without them), except in the subpackages of ``EXTRA_PACKAGES``;
- an import cycle through a package's ``__init__`` and its own modules (the ``acyclic_siblings``
  contract sees cycles between the children of a package, not through the package itself);
- in ``adapters/`` (files, not a package), an ``agentflow_env`` import of anything but the public
  surfaces ``PUBLIC``: the package itself and ``agentflow_env.rollout``, not their submodules;
- an ``os.environ`` / ``os.getenv`` read of an ``AGENTFLOW_*`` name outside ``SETTINGS`` (the
  module that declares every variable, and reads them: ``read_env_var``), in the package or the
  adapters; and an ``AGENTFLOW_*`` name in a string there (or in ``adapters/`` shell scripts) that
  ``SETTINGS`` does not declare (a Python name of the package, such as ``AGENTFLOW_TOOLS``, and a
  prefix of declared names, such as ``AGENTFLOW_LLM_``, are fine).

    python scripts/check_layers.py [--root REPOSITORY]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "agentflow_env"
ROOT = Path(__file__).resolve().parents[1]
# Third-party modules imported only inside functions (optional, heavy, or platform-specific).
# aiohttp is a core dependency, but only the LLM client and the remote retriever (client and
# server) need it, and it costs ~0.1 s to import: every env would pay that at import time.
OPTIONAL = {
    "aiohttp",
    "e2b",
    "e2b_code_interpreter",
    "matplotlib",
    "msgpack",
    "openenv",
    "pyarrow",
    "pyseccomp",
    "ray",
    "torch",
    "transformers",
    "uvicorn",
    "vllm",
    "websockets",
}
# Subpackages built on an extra (its modules import it at module level: a served env's models
# subclass OpenEnv's), imported only in the function that needs them: the CLI's subcommand.
EXTRA_PACKAGES = {f"{PACKAGE}.service": "serve"}
# What the adapters may import from the package (each a module, not a package with descendants).
PUBLIC = (PACKAGE, f"{PACKAGE}.rollout")

# The module that declares every AGENTFLOW_* environment variable (standard library only: the check
# loads it by path): ENV_VARS and TEST_VARS, dicts keyed by name.
SETTINGS = Path(PACKAGE, "base", "settings.py")
VARIABLE = re.compile(r"AGENTFLOW_[A-Z0-9_]*")

Found = Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(node: ast.AST, local: bool = False, type_checking: bool = False) -> Found:
    """Every import statement under ``node``, with whether it is function-local and whether it
    sits under ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, local, type_checking
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for stmt in node.body:
            yield from imports(stmt, local, True)
        for stmt in node.orelse:
            yield from imports(stmt, local, type_checking)
        return
    inner = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    for child in ast.iter_child_nodes(node):
        yield from imports(child, inner, type_checking)


def targets(node: ast.Import | ast.ImportFrom, package: str, root: Path) -> list[str]:
    """The modules an import statement imports: for ``from X import name``, ``X.name`` where that
    is a module of the package under ``root``, else ``X``. ``package`` anchors relative imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    if base.split(".")[0] != PACKAGE:
        return [base]
    found = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        path = root / Path(*submodule.split("."))
        found.append(submodule if path.is_dir() or path.with_suffix(".py").is_file() else base)
    return list(dict.fromkeys(found))


def check_package(root: Path) -> list[str]:
    """Function-local imports only of optional dependencies, and those only in functions."""
    problems = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = ".".join(parts[:-1])  # what a relative import is relative to
        where = path.relative_to(root)
        for node, local, type_checking in imports(ast.parse(path.read_bytes(), str(path))):
            for target in targets(node, package, root):
                top = target.split(".")[0]
                in_extra = any(
                    ".".join(parts) == key or ".".join(parts).startswith(key + ".")
                    for key in EXTRA_PACKAGES
                )
                extra_target = any(
                    target == key or target.startswith(key + ".") for key in EXTRA_PACKAGES
                )
                if local and top == PACKAGE and not extra_target:
                    problems.append(
                        f"{where}:{node.lineno}: function-local import of package module {target}"
                    )
                elif local and top not in OPTIONAL and not extra_target:
                    problems.append(
                        f"{where}:{node.lineno}: function-local import of {target} (only the "
                        f"optional dependencies {sorted(OPTIONAL)} are imported in functions)"
                    )
                elif not local and not type_checking and top in OPTIONAL and not in_extra:
                    problems.append(
                        f"{where}:{node.lineno}: module-level import of the optional {target} "
                        "(import it in the function that needs it, or under TYPE_CHECKING)"
                    )
    return problems


def check_package_cycles(root: Path) -> list[str]:
    """Cycles that pass through a package's ``__init__`` and modules inside that package."""
    import grimp  # import-linter's graph builder (the dev extra)

    sys.path.insert(0, str(root))
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    problems = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if not module.startswith(imported + "."):
                continue
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain:
                problems.append(f"import cycle: {' -> '.join((*chain, imported))}")
    return problems


def check_adapters(root: Path) -> list[str]:
    """``agentflow_env`` imports in ``adapters/`` name only the public surfaces."""
    problems = []
    for path in sorted((root / "adapters").rglob("*.py")):
        where = path.relative_to(root)
        for node, _, _ in imports(ast.parse(path.read_bytes(), str(path))):
            for target in targets(node, "", root):
                if target.split(".")[0] == PACKAGE and target not in PUBLIC:
                    problems.append(f"{where}:{node.lineno}: imports {target}")
    return problems


# -- environment variables ---------------------------------------------------------------------
def _python_files(root: Path) -> list[Path]:
    return sorted([*(root / PACKAGE).rglob("*.py"), *(root / "adapters").rglob("*.py")])


def _variable_name(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    """The ``AGENTFLOW_*`` name (or name prefix) an expression spells: a string, an f-string or a
    sum that starts with one, or a module-level constant holding one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if node.value.startswith("AGENTFLOW_") else None
    if isinstance(node, ast.JoinedStr) and node.values:
        return _variable_name(node.values[0], constants)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _variable_name(node.left, constants)
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _is_environ(node: ast.expr) -> bool:
    """``os.environ`` (or a mapping named ``environ`` standing in for it)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _environ_reads(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Each read of an ``AGENTFLOW_*`` name from the environment: ``os.environ.get(name)``,
    ``os.environ[name]``, ``name in os.environ``, ``os.getenv(name)``."""
    constants = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            name = _variable_name(stmt.value, {})
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if name and isinstance(target, ast.Name):
                    constants[target.id] = name
    for node in ast.walk(tree):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            if (func.attr == "get" and _is_environ(func.value)) or func.attr == "getenv":
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice if _is_environ(node.value) else None
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            key = node.left if _is_environ(node.comparators[0]) else None
        name = _variable_name(key, constants)
        if name:
            yield node.lineno, name


def check_environment_reads(root: Path) -> list[str]:
    """No ``AGENTFLOW_*`` variable is read from the environment but in ``SETTINGS``."""
    problems = []
    for path in _python_files(root):
        where = path.relative_to(root)
        if where == SETTINGS:
            continue
        for line, name in _environ_reads(ast.parse(path.read_bytes(), str(path))):
            problems.append(
                f"{where}:{line}: reads {name} from the environment (read it with "
                f"read_env_var: {SETTINGS})"
            )
    return problems


def declared_variables(root: Path) -> set[str] | None:
    """The names ``SETTINGS`` declares (``None``: there is no such module)."""
    path = root / SETTINGS
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_declared_settings", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return set(module.ENV_VARS) | set(getattr(module, "TEST_VARS", {}))


def _python_names(tree: ast.Module) -> set[str]:
    """The names a module binds (assignments and imports), the ``AGENTFLOW_*`` ones among them."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
    return {name for name in names if name.startswith("AGENTFLOW_")}


def check_declared_variables(root: Path) -> list[str]:
    """Every ``AGENTFLOW_*`` name in a string of the package or the adapters (Python or shell) is
    a declared variable, a prefix of declared ones, or a Python name of the package."""
    declared = declared_variables(root)
    if declared is None:
        return [f"{SETTINGS}: missing (it declares every AGENTFLOW_* environment variable)"]
    trees = {path: ast.parse(path.read_bytes(), str(path)) for path in _python_files(root)}
    known = declared.union(*(_python_names(tree) for tree in trees.values()))
    found: list[tuple[Path, int, str]] = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [(path, node.lineno, name) for name in VARIABLE.findall(node.value)]
    for path in sorted((root / "adapters").rglob("*.sh")):
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [(path, line, name) for name in VARIABLE.findall(text)]
    problems = []
    for path, line, name in found:
        prefix = name.endswith("_") and any(d.startswith(name) for d in declared)
        if name not in known and not prefix:
            problems.append(
                f"{path.relative_to(root)}:{line}: {name} is not declared in {SETTINGS}"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to check")
    root: Path = parser.parse_args(argv).root.resolve()
    checks = [
        (
            "function-local imports: of optional dependencies only, and those only there",
            check_package,
        ),
        ("no import cycle through a package's __init__", check_package_cycles),
        (f"adapters/ import only {' and '.join(PUBLIC)}, not submodules", check_adapters),
        (f"AGENTFLOW_* variables are read only in {SETTINGS}", check_environment_reads),
        (f"every AGENTFLOW_* name is declared in {SETTINGS}", check_declared_variables),
    ]
    failed = 0
    for name, check in checks:
        problems = check(root)
        print(f"{name}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  {problem}")
        failed += len(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
