"""The import rules import-linter cannot express; its contracts (``lint-imports``) hold the rest.

The layers, the cycles between sibling modules or subpackages, and the packages the core never
imports are contracts in ``pyproject.toml`` (``[tool.importlinter]``). import-linter sees every
import alike, wherever it stands, and only inside the package; this script fails (exit status 1)
on:

- a function-local import of anything but an optional dependency (``OPTIONAL``): a function-local
  import of a package module dodges an import cycle at run time;
- an optional dependency imported at module level outside ``if TYPE_CHECKING:`` (the package
  imports without them);
- an import cycle through a package's ``__init__`` and its own modules (the ``acyclic_siblings``
  contract sees cycles between the children of a package, not through the package itself);
- in ``adapters/`` (files, not a package), an ``agentflow_env`` import of anything but the public
  surfaces ``PUBLIC``: the package itself and ``agentflow_env.rollout``, not their submodules.

    python scripts/check_layers.py [--root REPOSITORY]
"""

from __future__ import annotations

import argparse
import ast
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
    "pyarrow",
    "pyseccomp",
    "torch",
    "transformers",
    "vllm",
}
# What the adapters may import from the package (each a module, not a package with descendants).
PUBLIC = (PACKAGE, f"{PACKAGE}.rollout")

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
                if local and top == PACKAGE:
                    problems.append(
                        f"{where}:{node.lineno}: function-local import of package module {target}"
                    )
                elif local and top not in OPTIONAL:
                    problems.append(
                        f"{where}:{node.lineno}: function-local import of {target} (only the "
                        f"optional dependencies {sorted(OPTIONAL)} are imported in functions)"
                    )
                elif not local and not type_checking and top in OPTIONAL:
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
