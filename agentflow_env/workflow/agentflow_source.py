"""AgentFlow's own wording, read from the user's checkout of AgentFlow (``agentflow_source``).

This project does not carry AgentFlow's prose. A planner trained with AgentFlow's code keys on
its exact prompts, so with ``agentflow_source=PATH`` every sentence AgentFlow puts in front of a
model is read from the user's own checkout at PATH when the env is built: the planner's
next-step prompt, the executor's, verifier's and direct-answer prompts, the tool cards, the
system prompt, the memory text of a step with no usable tool (its training solver's and its
evaluation script's) and the sentence its training rollout appends to each question. The
files are parsed with ``ast``; nothing of AgentFlow is imported or run. A prompt is kept as
the literal parts and placeholders of AgentFlow's f-string (``Template``), so filling the
placeholders with the same values gives AgentFlow's text byte for byte, whitespace included.

A checkout that lacks a file or a piece raises ``AgentFlowSourceError`` naming both. Two
pieces are optional: the structured query analysis (the fields and the ``__str__`` of the class
its planner passes as ``response_format``; none where it passes none) and its engines' per-call
``max_tokens`` and ``top_p`` defaults (a backend whose engine file lacks them keeps the
endpoint's).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentflow_env.tools.texts import COUNT_FIELD, QUERY_FIELD, AgentFlowToolTexts
from agentflow_env.workflow.prompt_pack import (
    Placeholder,
    PromptPack,
    Template,
    ToolCardSource,
    read_pack,
)

__all__ = [
    "ANALYSIS_FIELDS",
    "COMMAND_FIELDS",
    "GENERALIST_FIELDS",
    "PLANNER_FIELDS",
    "SOURCE_ENV_VAR",
    "VERIFIER_FIELDS",
    "AgentFlowSourceError",
    "checkout_commit",
    "read_agentflow_source",
    "read_tool_texts",
]

SOURCE_ENV_VAR = "AGENTFLOW_SOURCE"
"""The environment variable naming the checkout when ``agentflow_source`` is not given."""

# The files read, relative to the checkout's root (the folder holding agentflow/, train/, test/).
PACKAGE = Path("agentflow", "agentflow")
PLANNER_FILE = PACKAGE / "models" / "planner.py"
EXECUTOR_FILE = PACKAGE / "models" / "executor.py"
VERIFIER_FILE = PACKAGE / "models" / "verifier.py"
SOLVER_FILE = PACKAGE / "solver.py"
ENGINE_FILE = PACKAGE / "engine" / "vllm.py"
TOOLS_DIR = PACKAGE / "tools"
TOOL_BASE_FILE = TOOLS_DIR / "base.py"
ROLLOUT_FILE = Path("train", "rollout.py")
EVAL_FILE = Path("test", "solve.py")

# The placeholders each prompt may hold: the expressions AgentFlow's f-strings use, which the
# renderers know how to fill. A checkout whose prompt holds another one is refused when read.
PLANNER_FIELDS = frozenset(
    {
        "question",
        "query_analysis",
        "self.available_tools",
        "self.toolbox_metadata",
        "memory.get_actions()",
        "step_count",
        "max_step_count",
        "max_step_count - step_count",
    }
)
ANALYSIS_FIELDS = frozenset({"question", "self.available_tools", "self.toolbox_metadata"})
COMMAND_FIELDS = frozenset({"question", "sub_goal", "tool_name", "tool_metadata", "context"})
VERIFIER_FIELDS = frozenset(
    {
        "question",
        "self.available_tools",
        "self.toolbox_metadata",
        "query_analysis",
        "memory.get_actions()",
    }
)
GENERALIST_FIELDS = frozenset({"question", "self.query_analysis", "memory.get_actions()"})
UNMATCHED_FIELDS = frozenset({"tool_name"})

# The keyword arguments of AgentFlow's ``BaseTool.__init__`` that make up a tool's metadata, in
# the order its initializer lays the metadata dict out (``require_llm_engine`` last).
_CARD_KEYWORDS = (
    "tool_name",
    "tool_description",
    "tool_version",
    "input_types",
    "output_type",
    "demo_commands",
    "user_metadata",
)
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


class AgentFlowSourceError(ValueError):
    """The checkout cannot supply a piece of AgentFlow's wording; the message names the file
    and the missing piece."""


# -- reading a checkout ---------------------------------------------------------------------------
def read_agentflow_source(root: str | os.PathLike[str]) -> PromptPack:
    """Read AgentFlow's wording from the checkout at ``root`` (its top folder, the one holding
    ``agentflow/`` and ``train/``), or from a pack file written from one (``agentflow-env
    agentflow-pack``). Raises ``AgentFlowSourceError`` naming the file and the piece a checkout
    lacks (``PromptPackError`` for a file that is no pack)."""
    base = Path(root).expanduser()
    if base.is_file():
        return read_pack(base)
    if not base.is_dir():
        raise AgentFlowSourceError(
            f"agentflow_source={root}: not a directory (give the top folder of your AgentFlow "
            "checkout, the one holding agentflow/ and train/)"
        )
    if not (base / PLANNER_FILE).is_file() and (base / "models" / "planner.py").is_file():
        raise AgentFlowSourceError(
            f"agentflow_source={root}: this is AgentFlow's inner package; give the checkout's "
            f"top folder (the one holding {PLANNER_FILE} and {ROLLOUT_FILE})"
        )
    base = base.resolve()
    planner = _Module.read(base, PLANNER_FILE)
    solver = _Module.read(base, SOLVER_FILE)
    command, result = _no_tool_texts(solver, "solve")
    evaluation = _Module.read(base, EVAL_FILE)
    eval_command, eval_result = _no_tool_texts(evaluation, "solve_single_problem")
    tools, module_tools = _tool_cards(base)
    return PromptPack(
        name="agentflow",
        origin=str(base),
        commit=checkout_commit(base),
        system_prompt=_system_prompt(_Module.read(base, ENGINE_FILE)),
        planner=planner.prompt("Planner", "generate_next_step", PLANNER_FIELDS),
        analysis=planner.prompt("Planner", "analyze_query", ANALYSIS_FIELDS),
        command=_Module.read(base, EXECUTOR_FILE).prompt(
            "Executor", "generate_tool_command", COMMAND_FIELDS
        ),
        verifier=_Module.read(base, VERIFIER_FILE).prompt(
            "Verifier", "verificate_context", VERIFIER_FIELDS
        ),
        generalist=planner.prompt("Planner", "generate_direct_output", GENERALIST_FIELDS),
        unmatched_tool=_unmatched_tool(planner),
        no_tool_command=command,
        no_tool_result=result,
        answer_suffix=_answer_suffix(_Module.read(base, ROLLOUT_FILE)),
        tools=tools,
        module_tools=module_tools,
        eval_no_tool_command=eval_command,
        eval_no_tool_result=eval_result,
        **_analysis_and_engines(base, planner),
        **_command_texts(_Module.read(base, EXECUTOR_FILE)),
        tool_texts=read_tool_texts(base),
    )


def checkout_commit(root: str | os.PathLike[str]) -> str | None:
    """The commit the checkout at ``root`` has checked out, read from ``.git`` without running
    git (a worktree's ``.git`` file, loose refs and ``packed-refs`` included); ``None`` when it
    cannot be told."""
    try:
        git = Path(root) / ".git"
        if git.is_file():
            text = git.read_text("utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            git = (Path(root) / text.removeprefix("gitdir:").strip()).resolve()
        head = (git / "HEAD").read_text("utf-8").strip()
        if _HEX40.match(head):
            return head
        if not head.startswith("ref:"):
            return None
        ref = head.removeprefix("ref:").strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text("utf-8").strip()).resolve()
        for folder in dict.fromkeys((git, common)):
            loose = folder / ref
            if loose.is_file():
                value = loose.read_text("utf-8").strip()
                return value if _HEX40.match(value) else None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text("utf-8").splitlines():
                value, _, name = line.partition(" ")
                if name.strip() == ref and _HEX40.match(value):
                    return value
    except (OSError, UnicodeDecodeError):
        return None
    return None


class _Module:
    """One parsed file of the checkout, with its module-level constants."""

    def __init__(self, path: Path, relative: Path, tree: ast.Module) -> None:
        self.path = path
        self.relative = relative
        self.tree = tree
        self.constants: dict[str, ast.expr] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.constants[target.id] = node.value
            elif (
                isinstance(node, ast.AnnAssign)
                and node.value is not None
                and isinstance(node.target, ast.Name)
            ):
                self.constants[node.target.id] = node.value

    @classmethod
    def read(cls, root: Path, relative: Path) -> _Module:
        path = root / relative
        try:
            source = path.read_bytes()
        except OSError as error:
            raise AgentFlowSourceError(
                f"{relative}: cannot read it in the AgentFlow checkout {root} "
                f"({error.strerror or error})"
            ) from None
        try:
            tree = ast.parse(source, filename=str(path))  # bytes: the encoding as Python reads it
        except (SyntaxError, ValueError) as error:
            raise AgentFlowSourceError(f"{relative}: not valid Python ({error})") from None
        return cls(path, relative, tree)

    def error(self, missing: str) -> AgentFlowSourceError:
        return AgentFlowSourceError(f"{self.relative} (AgentFlow checkout): {missing}")

    # -- finding things
    def class_def(self, name: str) -> ast.ClassDef:
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise self.error(f"no class {name}")

    def method(self, class_name: str, name: str) -> ast.FunctionDef:
        for node in self.class_def(class_name).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        raise self.error(f"no method {class_name}.{name}")

    def prompt(self, class_name: str, method: str, fields: frozenset[str]) -> Template:
        """The prompt f-string ``class_name.method`` builds for a text-only model: the one
        f-string assigned outside its ``if self.is_multimodal:`` branch."""
        where = f"{self.relative}, {class_name}.{method}"
        found = [
            (name, value)
            for name, value in _assignments(self.method(class_name, method).body)
            if isinstance(value, ast.JoinedStr)
        ]
        if len(found) > 1:
            found = [(name, value) for name, value in found if name.startswith("prompt")]
        if len(found) != 1:
            raise self.error(
                f"{class_name}.{method} builds {len(found) or 'no'} prompt f-strings for a "
                "text-only model (expected one)"
            )
        template = self.template(found[0][1], where)
        unknown = [name for name in template.fields if name not in fields]
        if unknown:
            raise self.error(
                f"the prompt of {class_name}.{method} has the placeholder(s) "
                f"{', '.join('{' + u + '}' for u in unknown)}, which this env cannot fill "
                f"(it fills {', '.join(sorted(fields))})"
            )
        return template

    def template(self, node: ast.expr, where: str) -> Template:
        parts: list[str | Placeholder] = []
        for piece in _joined_pieces(node):
            if isinstance(piece, ast.Constant) and isinstance(piece.value, str):
                parts.append(piece.value)
            elif isinstance(piece, ast.FormattedValue):
                spec = ""
                if piece.format_spec is not None:
                    spec = self.literal(piece.format_spec, f"the format spec in {where}")
                parts.append(Placeholder(ast.unparse(piece.value), piece.conversion, spec))
            else:
                raise self.error(f"{where}: cannot read the prompt part {ast.unparse(piece)!r}")
        return Template(tuple(parts), where)

    # -- literal values
    def literal(self, node: ast.expr, what: str, scope: Mapping[str, Any] | None = None) -> Any:
        """The value of ``node`` from literals, f-strings and names of module constants alone
        (never running anything); ``scope`` adds names of the enclosing function."""
        return self._value(node, what, dict(scope or {}), set())

    def _value(self, node: ast.expr, what: str, scope: dict[str, Any], busy: set[str]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.JoinedStr):
            out: list[str] = []
            for piece in node.values:
                if isinstance(piece, ast.FormattedValue):
                    value = self._value(piece.value, what, scope, busy)
                    spec = ""
                    if piece.format_spec is not None:
                        spec = self._value(piece.format_spec, what, scope, busy)
                    out.append(Placeholder("", piece.conversion, spec).format(value))
                else:
                    out.append(self._value(piece, what, scope, busy))
            return "".join(out)
        if isinstance(node, ast.Dict):
            if any(key is None for key in node.keys):
                raise self.error(f"{what}: cannot read a ** entry of {ast.unparse(node)[:80]!r}")
            return {
                self._value(key, what, scope, busy): self._value(value, what, scope, busy)
                for key, value in zip(node.keys, node.values, strict=True)
                if key is not None
            }
        if isinstance(node, ast.List | ast.Tuple):
            items = [self._value(item, what, scope, busy) for item in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._value(node.left, what, scope, busy) + self._value(
                node.right, what, scope, busy
            )
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            if node.id in self.constants and node.id not in busy:
                return self._value(self.constants[node.id], what, scope, busy | {node.id})
            raise self.error(f"{what}: {node.id} is not a constant of the file")
        raise self.error(f"{what}: {ast.unparse(node)[:80]!r} is not a literal")


def _joined_pieces(node: ast.expr) -> Iterator[ast.expr]:
    """The parts of an f-string, or of a ``+`` of f-strings and strings, in order."""
    if isinstance(node, ast.JoinedStr):
        yield from node.values
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        yield from _joined_pieces(node.left)
        yield from _joined_pieces(node.right)
    else:
        yield node


def _is_multimodal_test(test: ast.expr) -> bool | None:
    """``True`` for ``if self.is_multimodal:``, ``False`` for ``if not self.is_multimodal:``,
    ``None`` for any other condition."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if isinstance(test, ast.UnaryOp) and negated else test
    if isinstance(inner, ast.Attribute) and inner.attr == "is_multimodal":
        return not negated
    return None


def _assignments(body: Sequence[ast.stmt]) -> Iterator[tuple[str, ast.expr]]:
    """``(name, value)`` of every ``name = value`` in ``body``, nested blocks included, except
    in the multimodal branch of an ``if self.is_multimodal`` and in nested definitions."""
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                yield target.id, node.value
        elif isinstance(node, ast.If):
            multimodal = _is_multimodal_test(node.test)
            if multimodal is not True:
                yield from _assignments(node.body)
            if multimodal is not False:
                yield from _assignments(node.orelse)
        elif isinstance(node, ast.For | ast.While | ast.With | ast.Try):
            for block in ("body", "orelse", "finalbody"):
                yield from _assignments(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _assignments(handler.body)


# -- the pieces -----------------------------------------------------------------------------------
def _system_prompt(engine: _Module) -> str:
    """The system prompt of the engine that serves AgentFlow's planner (``ChatVLLM``)."""
    for node in engine.class_def("ChatVLLM").body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DEFAULT_SYSTEM_PROMPT" for t in node.targets
        ):
            value = engine.literal(node.value, "ChatVLLM.DEFAULT_SYSTEM_PROMPT")
            if isinstance(value, str):
                return value
    raise engine.error("no string ChatVLLM.DEFAULT_SYSTEM_PROMPT (the planner's system prompt)")


def _unmatched_tool(planner: _Module) -> Template:
    """What ``normalize_tool_name`` returns for a name that matches no tool."""
    method = planner.method("Planner", "extract_context_subgoal_and_tool")
    for node in ast.walk(method):
        if isinstance(node, ast.FunctionDef) and node.name == "normalize_tool_name":
            returns = [
                r.value
                for r in ast.walk(node)
                if isinstance(r, ast.Return) and isinstance(r.value, ast.JoinedStr)
            ]
            if len(returns) == 1:
                where = f"{planner.relative}, normalize_tool_name"
                template = planner.template(returns[0], where)
                if set(template.fields) <= UNMATCHED_FIELDS:
                    return template
    raise planner.error(
        "no f-string returned by normalize_tool_name (in "
        "Planner.extract_context_subgoal_and_tool) for a tool name that matches none"
    )


def _no_tool_texts(solver: _Module, method: str) -> tuple[str, str]:
    """The command and result ``Solver.<method>`` records for a step with no usable tool: the
    branch that sets both ``command`` and ``result`` to strings (the training solver's
    ``solve``, the evaluation script's ``solve_single_problem``)."""
    for node in ast.walk(solver.method("Solver", method)):
        if not isinstance(node, ast.If):
            continue
        texts = {
            target.id: statement.value.value
            for statement in node.body
            if isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(target := statement.targets[0], ast.Name)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        }
        if "command" in texts and "result" in texts:
            return texts["command"], texts["result"]
    raise solver.error(
        f"no branch of Solver.{method} that records a step with no usable tool (command = "
        "'...' and result = '...')"
    )


def _command_texts(executor: _Module) -> dict[str, Any]:
    """What AgentFlow's executor records for a reply with no command (the string
    ``extract_explanation_and_command`` starts ``command`` with), for a command whose run fails
    (the f-string ``execute_tool_command`` returns with ``str(e)`` alone) and for a piece that
    sets no ``execution`` (the f-string it appends with ``block``)."""
    extract = executor.method("Executor", "extract_explanation_and_command")
    no_command = next(
        (
            value.value
            for name, value in _assignments(extract.body)
            if name == "command"
            and isinstance(value, ast.Constant)
            and isinstance(value.value, str)
        ),
        None,
    )
    if not isinstance(no_command, str):
        raise executor.error(
            "no string assigned to command in Executor.extract_explanation_and_command"
        )
    run = executor.method("Executor", "execute_tool_command")
    where = f"{executor.relative}, Executor.execute_tool_command"
    failures = [
        executor.template(node.value, where)
        for node in ast.walk(run)
        if isinstance(node, ast.Return) and isinstance(node.value, ast.JoinedStr)
    ]
    failure = next((t for t in reversed(failures) if t.fields == ("str(e)",)), None)
    appended = [
        executor.template(call.args[0], where)
        for call in ast.walk(run)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "append"
        and len(call.args) == 1
        and isinstance(call.args[0], ast.JoinedStr)
    ]
    uncaptured = next((t for t in appended if t.fields == ("block",)), None)
    if failure is None or uncaptured is None:
        raise executor.error(
            "no f-string of Executor.execute_tool_command for a failed run (returned, with "
            "{str(e)}) or for a piece with no execution (appended, with {block})"
        )
    return {"no_command": no_command, "command_failure": failure, "no_execution": uncaptured}


def _answer_suffix(rollout: _Module) -> str:
    """What the training rollout appends to ``task["question"]``: every string after it in the
    ``task["question"] + ...`` expression, names of strings of the same function resolved."""
    for function in ast.walk(rollout.tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        strings: dict[str, Any] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
                    strings[target.id] = node.value.value
        for node in ast.walk(function):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
                continue
            operands = _added(node)
            if not _is_question(operands[0]) or len(operands) < 2:
                continue
            pieces = [
                rollout.literal(o, "the text appended to each training question", strings)
                for o in operands[1:]
            ]
            if all(isinstance(p, str) for p in pieces):
                return "".join(pieces)
    raise rollout.error(
        'no task["question"] + ... expression appending the answer-format sentence to each '
        "training question"
    )


def _added(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [*_added(node.left), *_added(node.right)]
    return [node]


def _is_question(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "question"
    )


def _tool_cards(root: Path) -> tuple[tuple[ToolCardSource, ...], dict[str, tuple[str, ...]]]:
    """Every tool class of ``tools/*/tool.py`` with its metadata, and each directory's tool
    classes (defined or imported there)."""
    folder = root / TOOLS_DIR
    if not folder.is_dir():
        raise AgentFlowSourceError(f"{TOOLS_DIR}: no such folder in the AgentFlow checkout {root}")
    default_llm = _base_requires_llm(root)
    cards: list[ToolCardSource] = []
    imported: dict[str, list[tuple[str, str]]] = {}
    defined: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*/tool.py")):
        directory = path.parent.name
        module = _Module.read(root, path.relative_to(root))
        defined[directory] = []
        imported[directory] = []
        for node in module.tree.body:
            if isinstance(node, ast.ClassDef):
                card = _card(module, node, directory, default_llm)
                if card is not None:
                    cards.append(card)
                    defined[directory].append(node.name)
            elif isinstance(node, ast.ImportFrom) and node.module:
                source = _tool_directory(node.module)
                for alias in node.names:
                    if source is not None and alias.name.endswith("Tool"):
                        imported[directory].append((alias.asname or alias.name, source))
    if not cards:
        raise AgentFlowSourceError(
            f"{TOOLS_DIR}: no tool class (a class whose __init__ calls super().__init__("
            "tool_name=...)) in any */tool.py of the AgentFlow checkout"
        )
    classes = {card.class_name for card in cards}
    module_tools = {
        directory: tuple(
            sorted(
                {*names, *(n for n, _ in imported[directory] if n in classes and n != "BaseTool")}
            )
        )
        for directory, names in defined.items()
    }
    return tuple(cards), module_tools


def _tool_directory(module: str) -> str | None:
    """``web_search`` for ``agentflow.tools.web_search.tool`` (a sibling tool module)."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[-3] == "tools" and parts[-1] == "tool":
        return parts[-2]
    return None


def _base_requires_llm(root: Path) -> bool:
    """``BaseTool.require_llm_engine`` (what a tool class that sets none inherits)."""
    if not (root / TOOL_BASE_FILE).is_file():
        return False
    base = _Module.read(root, TOOL_BASE_FILE)
    for node in base.tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "BaseTool":
            return bool(_class_constant(base, node, "require_llm_engine", False))
    return False


def _class_constant(module: _Module, node: ast.ClassDef, name: str, default: Any) -> Any:
    for statement in node.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in statement.targets
        ):
            return module.literal(statement.value, f"{node.name}.{name}")
    return default


def _card(
    module: _Module, node: ast.ClassDef, directory: str, default_llm: bool
) -> ToolCardSource | None:
    """The metadata of tool class ``node`` from its ``super().__init__(...)`` keywords; ``None``
    for a class that is no tool (no such call)."""
    init = next(
        (s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
    )
    if init is None:
        return None
    call = next((c for c in ast.walk(init) if _is_super_init(c)), None)
    if not isinstance(call, ast.Call):
        return None
    given = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if "tool_name" not in given:
        return None
    if call.args:
        raise module.error(
            f"{node.name}: super().__init__ takes positional arguments; only keywords are read"
        )
    metadata: dict[str, Any] = {}
    for keyword in _CARD_KEYWORDS:
        what = f"the {keyword} of {node.name}"
        # A keyword left out is None in AgentFlow too (BaseTool's default).
        metadata[keyword] = module.literal(given[keyword], what) if keyword in given else None
    metadata["require_llm_engine"] = _class_constant(
        module, node, "require_llm_engine", default_llm
    )
    if not isinstance(metadata["tool_name"], str):
        raise module.error(f"{node.name}: tool_name is not a string")
    return ToolCardSource(directory, node.name, metadata)


def _is_super_init(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
    )


# -- the structured analysis and the engines' defaults ---------------------------------------------
ENGINE_FILES = {"openai": "openai.py", "dashscope": "dashscope.py", "vllm": "vllm.py"}
"""Backend -> AgentFlow's engine file for it (under ``engine/``), whose ``_generate_text``
defaults give the backend's ``max_tokens`` and ``top_p``."""
_ENGINE_SETTINGS = ("max_tokens", "top_p")


def _analysis_and_engines(root: Path, planner: _Module) -> dict[str, Any]:
    """The pack fields of the structured analysis and of the engines' per-call defaults."""
    fields, shown = _structured_analysis(root, planner)
    return {
        "analysis_fields": fields,
        "analysis_shown": shown,
        "engine_defaults": _engine_defaults(root),
    }


def _structured_analysis(root: Path, planner: _Module) -> tuple[tuple[str, ...], Template | None]:
    """The fields and the ``__str__`` f-string of the class ``Planner.analyze_query`` passes as
    ``response_format``; ``((), None)`` where it passes none (it asks for free text)."""
    passed = [
        keyword.value.id
        for call in ast.walk(planner.method("Planner", "analyze_query"))
        if isinstance(call, ast.Call)
        for keyword in call.keywords
        if keyword.arg == "response_format" and isinstance(keyword.value, ast.Name)
    ]
    if not passed:
        return (), None
    module, name = _class_home(root, planner, passed[-1])
    node = module.class_def(name)
    fields = tuple(
        statement.target.id
        for statement in node.body
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
    )
    where = f"{module.relative}, {name}.__str__"
    returned = [
        value
        for method in node.body
        if isinstance(method, ast.FunctionDef) and method.name == "__str__"
        for ret in ast.walk(method)
        if isinstance(ret, ast.Return) and isinstance(value := ret.value, ast.JoinedStr)
    ]
    if not fields or len(returned) != 1:
        raise module.error(
            f"{name} (the analysis's response_format) needs typed fields and an f-string "
            "returned by its __str__ (how AgentFlow shows the analysis)"
        )
    shown = module.template(returned[0], where)
    unknown = [part for part in shown.fields if part.removeprefix("self.") not in fields]
    if unknown:
        raise module.error(f"{where}: {unknown} name no field of {name}")
    return fields, shown


def _class_home(root: Path, module: _Module, name: str) -> tuple[_Module, str]:
    """The file that defines the class ``module`` knows as ``name``, and its name there."""
    for node in module.tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, name
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                parts = (node.module or "").split(".") if node.module else []
                if node.level:
                    folder = module.relative.parents[node.level - 1]
                    relative = folder.joinpath(*parts).with_suffix(".py")
                else:
                    relative = Path("agentflow", *parts).with_suffix(".py")
                return _Module.read(root, relative), alias.name
    raise module.error(f"{name} (the analysis's response_format) is neither defined nor imported")


def _engine_defaults(root: Path) -> dict[str, dict[str, float]]:
    """Backend -> the ``max_tokens`` and ``top_p`` defaults of its engine's ``_generate_text``;
    a backend whose file or defaults the checkout lacks is left out (the endpoint's hold)."""
    found: dict[str, dict[str, float]] = {}
    for backend, filename in ENGINE_FILES.items():
        relative = PACKAGE / "engine" / filename
        if not (root / relative).is_file():
            continue
        engine = _Module.read(root, relative)
        for node in ast.walk(engine.tree):
            if isinstance(node, ast.FunctionDef) and node.name == "_generate_text":
                values = _numeric_defaults(node.args)
                if values:
                    found[backend] = values
                break
    return found


def _numeric_defaults(arguments: ast.arguments) -> dict[str, float]:
    positional = arguments.posonlyargs + arguments.args
    with_default = positional[len(positional) - len(arguments.defaults) :]
    pairs = list(zip(with_default, arguments.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d]
    return {
        argument.arg: float(default.value)
        for argument, default in pairs
        if argument.arg in _ENGINE_SETTINGS
        and isinstance(default, ast.Constant)
        and isinstance(default.value, int | float)
        and not isinstance(default.value, bool)
    }


# -- the tools' own strings -----------------------------------------------------------------------
WIKIPEDIA_TOOL_FILE = TOOLS_DIR / "wikipedia_search" / "tool.py"
PYTHON_TOOL_FILE = TOOLS_DIR / "python_coder" / "tool.py"


def read_tool_texts(root: str | os.PathLike[str]) -> AgentFlowToolTexts:
    """The strings AgentFlow's Wikipedia and Python tools put in their results, read from the
    checkout at ``root`` (part of ``read_agentflow_source``'s pack)."""
    root = Path(root)
    wiki = _Module.read(root, WIKIPEDIA_TOOL_FILE)
    python = _Module.read(root, PYTHON_TOOL_FILE)
    search = _function(wiki, "search_wikipedia")
    run = _function(python, "execute_code_snippet")
    return AgentFlowToolTexts(
        wikipedia_abstract_end=_cut_ending(wiki, search),
        wikipedia_no_results=_error_sentence(wiki, search, "query", QUERY_FIELD),
        python_middle_cut=_middle_marker(python, _function(python, "truncate_string")),
        python_omitted=_omitted_note(python, run),
        python_no_code=_raised_message(python, _function(python, "preprocess_code")),
        python_timeout=_constant_error(python, run),
    )


def _function(module: _Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise module.error(f"no function {name}")


def _one_field_text(module: _Module, node: ast.JoinedStr, where: str, field: str) -> str | None:
    """An f-string with one placeholder as text with ``field`` in its place (``None`` when
    it has another number of placeholders or a literal part already holds ``field``)."""
    template = module.template(node, where)
    if len(template.fields) != 1:
        return None
    parts = [part if isinstance(part, str) else field for part in template.parts]
    literal = [part for part in template.parts if isinstance(part, str)]
    return None if any(field in part for part in literal) else "".join(parts)


def _cut_ending(module: _Module, function: ast.FunctionDef) -> str:
    """What ``search_wikipedia`` puts after a page's text cut with ``text[:n]``."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and isinstance(node.left, ast.Subscript)
            and isinstance(node.left.slice, ast.Slice)
            and node.left.slice.lower is None
            and isinstance(node.right, ast.Constant | ast.JoinedStr)
        ):
            value = module.literal(node.right, "the ending of a cut abstract")
            if isinstance(value, str):
                return value
    raise module.error(f"{function.name}: no text[:n] + '...' cutting a page's abstract")


def _error_sentence(module: _Module, function: ast.FunctionDef, name: str, field: str) -> str:
    """The ``"error"`` f-string of ``function`` whose only placeholder is ``name``."""
    where = f"{module.relative}, {function.name}"
    for node in ast.walk(function):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if (
                isinstance(key, ast.Constant)
                and key.value == "error"
                and isinstance(value, ast.JoinedStr)
                and [ast.unparse(p.value) for p in _placeholders(value)] == [name]
            ):
                text = _one_field_text(module, value, where, field)
                if text is not None:
                    return text
    raise module.error(f"{function.name}: no 'error' f-string holding only {{{name}}}")


def _placeholders(node: ast.JoinedStr) -> list[ast.FormattedValue]:
    return [piece for piece in node.values if isinstance(piece, ast.FormattedValue)]


def _middle_marker(module: _Module, function: ast.FunctionDef) -> str:
    """The one string ``truncate_string`` returns between a text's head and tail."""
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None:
            strings = [
                piece.value
                for piece in _added(node.value)
                if isinstance(piece, ast.Constant) and isinstance(piece.value, str)
            ]
            if len(strings) == 1:
                return strings[0]
    raise module.error(f"{function.name}: no head + '...' + tail returned")


def _omitted_note(module: _Module, function: ast.FunctionDef) -> str:
    """The f-string ``execute_code_snippet`` stores under ``"__truncated__"``, its count as
    ``COUNT_FIELD``."""
    where = f"{module.relative}, {function.name}"
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(target := node.targets[0], ast.Subscript)
            and isinstance(target.slice, ast.Constant)
            and target.slice.value == "__truncated__"
            and isinstance(node.value, ast.JoinedStr)
        ):
            text = _one_field_text(module, node.value, where, COUNT_FIELD)
            if text is not None:
                return text
    raise module.error(f"{function.name}: no f-string with one count stored under '__truncated__'")


def _raised_message(module: _Module, function: ast.FunctionDef) -> str:
    """The message of the exception ``function`` raises (a string literal)."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Raise)
            and isinstance(node.exc, ast.Call)
            and node.exc.args
            and isinstance(first := node.exc.args[0], ast.Constant)
            and isinstance(first.value, str)
        ):
            return first.value
    raise module.error(f"{function.name}: raises no exception with a message")


def _constant_error(module: _Module, function: ast.FunctionDef) -> str:
    """The one fixed ``{"error": "..."}`` ``function`` returns (its time-out's)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "error"
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                ):
                    return value.value
    raise module.error(f"{function.name}: returns no fixed {{'error': '...'}}")
