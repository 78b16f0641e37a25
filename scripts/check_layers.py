"""Check the package's layering: every ``agentflow_env`` import points down, never in a circle.

Each module is assigned a layer by its path (``LAYERS``); a module may import only from lower
layers, or from its own package (subpackage of ``agentflow_env``), or from the same-layer
packages ``SIDEWAYS`` allows. ``ONLY`` narrows what some packages may use. The script fails
(exit status 1) on:

- an upward (or forbidden sideways) import, ``TYPE_CHECKING`` imports included;
- an import cycle between modules (``TYPE_CHECKING`` imports included);
- a function-local import of a package module (a cycle dodged at run time), or of anything but
  an optional heavy dependency (``OPTIONAL_LOCAL``);
- a module outside every layer, or an import of a package module that does not exist.

``python scripts/check_layers.py`` prints a summary; ``--list`` also prints every module's
``agentflow_env`` imports. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "agentflow_env"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# Package (first component under agentflow_env; "" is agentflow_env/__init__.py) -> layer.
LAYERS: dict[str, int] = {
    "base": 1,
    "retrieval": 2,
    "tools": 2,
    "tasks": 2,
    "llm": 3,
    "workflow": 4,
    "modules": 5,
    "envs": 6,
    "rollout": 7,
    "evaluation": 8,
    "cli": 9,
    "": 9,
}
LAYER_NAMES = {
    1: "base: leaf utilities",
    2: "retrieval, tools, tasks",
    3: "llm: client, judge",
    4: "workflow: one episode",
    5: "modules: frozen-module backends",
    6: "envs: Gymnasium facade, registration",
    7: "rollout: trainer-neutral driving",
    8: "evaluation: metrics over many episodes, eval, ablations, checks, viewer",
    9: "top: public API, cli",
}
# Same-layer imports that are allowed (importer package, imported package).
SIDEWAYS: set[tuple[str, str]] = {("tools", "retrieval"), ("tasks", "retrieval")}
# Packages restricted to fewer lower layers than their position allows.
ONLY: dict[str, set[str]] = {"retrieval": {"base"}, "llm": {"base"}}
# Third-party modules a function may import (optional, heavy, or platform-specific).
OPTIONAL_LOCAL = {
    "aiohttp",
    "e2b",
    "e2b_code_interpreter",
    "matplotlib",
    "pyarrow",
    "pyseccomp",
    "torch",
    "transformers",
    "vllm",
}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    local: bool  # inside a function body
    type_checking: bool  # under ``if TYPE_CHECKING:``

    def where(self, root: Path) -> str:
        return f"{module_path(self.importer, root)}:{self.line}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(name: str, root: Path) -> str:
    base = root.parent / Path(*name.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return str(path.relative_to(root.parent))


def package_of(module: str) -> str:
    """The top-level subpackage (or root module) a module belongs to; "" for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    node: ast.AST, local: bool = False, type_checking: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement under ``node``, with whether it is function-local and whether it
    sits under ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, local, type_checking
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for stmt in node.body:
            yield from _imports(stmt, local, True)
        for stmt in node.orelse:
            yield from _imports(stmt, local, type_checking)
        return
    inner = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    for child in ast.iter_child_nodes(node):
        yield from _imports(child, inner, type_checking)


def read_imports(
    path: Path, name: str, modules: set[str]
) -> tuple[list[Import], list[tuple[int, str]], list[tuple[int, str]]]:
    """Package imports of one module, function-local third-party imports, unresolved targets."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    other_local: list[tuple[int, str]] = []
    missing: list[tuple[int, str]] = []
    for node, local, type_checking in _imports(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            for imported in names:
                if imported == PACKAGE or imported.startswith(PACKAGE + "."):
                    targets.append(imported)
                elif local and imported.split(".")[0] not in OPTIONAL_LOCAL:
                    other_local.append((node.lineno, imported))
        else:
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base == PACKAGE or base.startswith(PACKAGE + "."):
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    # ``from pkg import submodule`` depends on the submodule, not on pkg's body.
                    targets.append(submodule if submodule in modules else base)
            elif local and base.split(".")[0] not in OPTIONAL_LOCAL:
                other_local.append((node.lineno, base))
        for target in dict.fromkeys(targets):
            if target not in modules:
                missing.append((node.lineno, target))
                continue
            found.append(Import(name, target, node.lineno, local, type_checking))
    return found, other_local, missing


def check_edge(edge: Import) -> str | None:
    """Why ``edge`` breaks the layering, or ``None``."""
    source, target = package_of(edge.importer), package_of(edge.target)
    if source == target:
        return None
    low, high = LAYERS[target], LAYERS[source]
    if low > high:
        return (
            f"upward: layer {high} ({source or PACKAGE}) imports layer {low} ({target or PACKAGE})"
        )
    if source in ONLY and target not in ONLY[source]:
        return f"{source or PACKAGE} may import only from {sorted(ONLY[source])}"
    if low == high and (source, target) not in SIDEWAYS:
        return f"sideways within layer {high}: {source or PACKAGE} imports {target or PACKAGE}"
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:  # Tarjan's algorithm, iterative over successors
        nonlocal counter
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        while work:
            current, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[current] = min(low[current], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                if len(component) > 1 or current in graph[current]:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import path from the component's first module back to itself."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {start: start}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    return [*component, component[0]]  # not reached: a component always holds a cycle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every module's imports")
    parser.add_argument("--root", type=Path, default=ROOT, help="the package directory")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()

    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = set(paths)
    problems: list[str] = []
    edges: list[Import] = []
    for name, path in paths.items():
        if package_of(name) not in LAYERS:
            problems.append(f"{module_path(name, root)}: in no layer (add its package to LAYERS)")
            continue
        found, other_local, missing = read_imports(path, name, modules)
        edges.extend(found)
        for line, target in other_local:
            problems.append(
                f"{module_path(name, root)}:{line}: function-local import of {target} "
                f"(only optional dependencies {sorted(OPTIONAL_LOCAL)} may be imported locally)"
            )
        for line, target in missing:
            problems.append(
                f"{module_path(name, root)}:{line}: imports {target}, which does not exist"
            )

    graph: dict[str, set[str]] = {name: set() for name in paths}
    for edge in edges:
        if edge.local:
            problems.append(
                f"{edge.where(root)}: function-local import of package module {edge.target}"
            )
        layered = package_of(edge.importer) in LAYERS and package_of(edge.target) in LAYERS
        reason = check_edge(edge) if layered else None
        if reason:
            problems.append(f"{edge.where(root)}: {edge.importer} -> {edge.target}: {reason}")
        graph[edge.importer].add(edge.target)
    for component in cycles(graph):
        path = cycle_path(graph, component)
        problems.append(f"import cycle ({len(component)} module(s)): " + " -> ".join(path))

    if args.list:
        for name in sorted(paths):
            own = [e for e in edges if e.importer == name]
            print(f"{name}  [layer {LAYERS.get(package_of(name), '?')}]")
            for edge in sorted(own, key=lambda e: e.line):
                notes = [
                    n
                    for n, on in (("local", edge.local), ("TYPE_CHECKING", edge.type_checking))
                    if on
                ]
                suffix = f"  ({', '.join(notes)})" if notes else ""
                print(f"    {edge.line:4d}  {edge.target}{suffix}")
        print()

    per_layer: dict[int, list[str]] = {}
    for name in paths:
        layer = LAYERS.get(package_of(name))
        if layer is not None:
            per_layer.setdefault(layer, []).append(name)
    for layer in sorted(per_layer):
        print(f"layer {layer} ({LAYER_NAMES[layer]}): {len(per_layer[layer])} modules")
    print(f"{len(paths)} modules, {len(edges)} package imports checked")
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print("OK: no upward imports, no import cycles, no function-local package imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
