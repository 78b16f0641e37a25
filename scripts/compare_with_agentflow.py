"""Run AgentFlow's own code beside this package on the same state and count identical prompts.

A measuring instrument, not part of the package (CI does not run it). Given a real checkout of
AgentFlow (``--agentflow PATH``), it imports AgentFlow's modules from that checkout, with
stand-ins in ``sys.modules`` for the third-party packages missing here (openai, dashscope, vllm,
...) and a recording LLM engine in place of AgentFlow's engine factory: the engine answers from
a script and records every prompt AgentFlow sends (planner, query analysis, executor command,
verifier, direct answer). The same scripted episodes then run through
``gym.make("AgentFlow-Search-v0", preset=..., agentflow_source=PATH)``, its LLM modules answered
by the test suite's scripted OpenAI-compatible server over a socket and its planner fed the same
replies. Both sides see the same state: the same question, model replies and tool answers
(AgentFlow's generalist tool returns the tools' model's reply, its Wikipedia tool what the
package's returned, its Python tool runs the scripted program as AgentFlow wrote it). Prompts
are compared byte for byte:

- episodes with a step naming an unknown tool: evaluation (AgentFlow's ``test/solve.py`` as its
  ``test/<bench>/run.sh`` calls it) and training (``train/rollout.py``'s ``_solve_and_evaluate``
  on its training solver), with numbered or plain labels, with a tool answer past 8,000
  characters, and with whitespace around the question;
- sixteen ways a planner may write its step (backticks, a trailing period, ``###`` headers,
  JSON, ...), each the first step of a two-step evaluation episode;
- AgentFlow's Wikipedia tool as published (on a stand-in ``wikipedia`` package finding what the
  package's search found) and its Python tool (printed output, variables, cuts, errors);
- the first-turn planner and analysis prompts of the records of the ten test files
  (``test/*/data/data.json``);
- the module prompts (analysis, command, verifier, direct answer) of every episode, and the
  ``max_tokens`` / ``top_p`` each module call sends;
- where AgentFlow's generalist and Python tools run as written, the prompts their model gets.

The modules' endpoint stands for the engine AgentFlow's script runs them on (the package picks
AgentFlow's engine defaults and whether to ask for a structured analysis by it): DashScope for
evaluation (a host named ``dashscope.stand-in``, resolved to the loopback in this process),
gpt-4o-mini for training. The analysis model's free-text reply is the four sections as AgentFlow renders its
structured analysis; asked for JSON, the server answers the same fields as JSON.

Nothing of AgentFlow is copied here: everything comes from the checkout at run time. Usage::

    python scripts/compare_with_agentflow.py --agentflow ~/src/AgentFlow --out compare.json
    python scripts/compare_with_agentflow.py --agentflow ~/src/AgentFlow --limit 20 --no-text

``--no-text`` keeps only counts and mismatch locations (line and column) in the JSON, no prompt
text, so the file can be committed; ``--dump FILE`` writes every compared pair in full.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# The tools and engines AgentFlow's scripts run with (test/<bench>/run.sh, train/config.yaml).
ENABLED_TOOLS = [
    "Base_Generator_Tool",
    "Python_Coder_Tool",
    "Google_Search_Tool",
    "Wikipedia_Search_Tool",
]
EVAL_PLANNER = "vllm-AgentFlow/agentflow-planner-7b"
EVAL_TOOL_ENGINE = ["gpt-4o-mini", "dashscope-qwen2.5-coder-7b-instruct", "Default", "Default"]
EVAL_MODEL_ENGINE = ["trainable", "dashscope", "dashscope", "dashscope"]
TRAIN_PLANNER = "Qwen/Qwen2.5-7B-Instruct"
TRAIN_TOOL_ENGINE = ["gpt-4o", "gpt-4o", "Default", "Default"]
TRAIN_MODEL_ENGINE = ["trainable", "gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini"]
BENCHES = [
    "2wiki", "aime24", "amc23", "bamboogle", "gaia",
    "gameof24", "gpqa", "hotpotqa", "medqa", "musique",
]  # fmt: skip
MODULE_ROLES = ("analysis", "command", "verifier", "direct")
CALLER_ROLES = {
    "analyze_query": "analysis",
    "generate_next_step": "planner",
    "generate_tool_command": "command",
    "verificate_context": "verifier",
    "generate_direct_output": "direct",
    "generate_final_output": "final",
    "generate_base_response": "base",
}
SNIPPET = 160
# the modules' models of AgentFlow's scripts: DashScope's Qwen in test/<bench>/run.sh, gpt-4o-mini
# in train/config.yaml (the package picks AgentFlow's engine defaults by the endpoint)
MODULE_MODELS = {"agentflow_eval": "qwen2.5-7b-instruct", "agentflow_train": "gpt-4o-mini"}
DASHSCOPE_STAND_IN = "dashscope.stand-in"
DUMP: list[dict[str, Any]] | None = None  # every compared pair, with --dump


# -- pure helpers ---------------------------------------------------------------------------------
def first_difference(agentflow: str, package: str, *, text: bool = True) -> dict[str, Any] | None:
    """Where two prompts first differ (1-based line and column), ``None`` when identical."""
    if agentflow == package:
        return None
    a_lines, p_lines = agentflow.split("\n"), package.split("\n")
    line = next(
        (i for i, (a, p) in enumerate(zip(a_lines, p_lines, strict=False)) if a != p),
        min(len(a_lines), len(p_lines)),
    )
    a_line = a_lines[line] if line < len(a_lines) else None
    p_line = p_lines[line] if line < len(p_lines) else None
    column = None
    if a_line is not None and p_line is not None:
        column = next(
            (i for i, (x, y) in enumerate(zip(a_line, p_line, strict=False)) if x != y),
            min(len(a_line), len(p_line)),
        )
    out: dict[str, Any] = {
        "differing_lines": sum(a != p for a, p in zip(a_lines, p_lines, strict=False))
        + abs(len(a_lines) - len(p_lines)),
        "line": line + 1,
        "column": None if column is None else column + 1,
        "agentflow_lines": len(a_lines),
        "package_lines": len(p_lines),
    }
    if text:
        start = max(0, (column or 0) - 40)
        out["agentflow"] = None if a_line is None else a_line[start : start + SNIPPET]
        out["package"] = None if p_line is None else p_line[start : start + SNIPPET]
    return out


@dataclass
class Tally:
    """Identical / total over compared prompt pairs, with the first few mismatches."""

    identical: int = 0
    total: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    keep: int = 5

    def add(self, where: Any, agentflow: str | None, package: str | None, *, text: bool) -> bool:
        self.total += 1
        if DUMP is not None:
            DUMP.append({"at": where, "agentflow": agentflow, "package": package})
        if agentflow is None or package is None:
            missing = "agentflow" if agentflow is None else "package"
            self._keep({"at": where, "missing": missing})
            return False
        diff = first_difference(agentflow, package, text=text)
        if diff is None:
            self.identical += 1
            return True
        self._keep({"at": where, **diff})
        return False

    def _keep(self, entry: dict[str, Any]) -> None:
        if len(self.mismatches) < self.keep:
            self.mismatches.append(entry)

    def as_dict(self) -> dict[str, Any]:
        return {"identical": self.identical, "total": self.total, "mismatches": self.mismatches}


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def classify(user_text: str, first_lines: dict[str, str]) -> str:
    """The module role whose prompt begins with the same first non-empty line, else ``other``."""
    head = first_line(user_text)
    return next((role for role, line in first_lines.items() if line and head == line), "other")


def backend_of(model: str) -> str:
    """Which of AgentFlow's engine classes its factory builds for ``model`` (the ones used here)."""
    if "azure" in model:
        return "azure"
    if any(x in model for x in ("gpt", "o1", "o3", "o4")):
        return "openai"
    if "dashscope" in model:
        return "dashscope"
    return "vllm" if "vllm" in model else "other"


# -- the scripted episode -------------------------------------------------------------------------
QUESTION = "Which river flows through the town where the Zorblat kettle was invented?"
GOLD = "Glimmer River"
ANALYSIS_FIELDS = {
    "concise_summary": "Find the town where the Zorblat kettle was invented, then its river.",
    "required_skills": "- Looking facts up\n- Chaining two facts",
    "relevant_tools": "- Wikipedia_RAG_Search_Tool: finds the town and the river",
    "additional_considerations": "- The kettle may have several makers",
}
_LATER_REPLIES = [
    # a tool nobody has
    "Justification: A map would help.\nContext: The kettle comes from Quibble.\n"
    "Sub-Goal: Find the river of Quibble.\nTool Name: River_Atlas_Tool",
    "Justification: Look the town up.\nContext: The kettle comes from Quibble.\n"
    "Sub-Goal: Find the river that flows through Quibble.\nTool Name: Wikipedia_RAG_Search_Tool",
]
PLANNER_REPLIES = {
    # the first step with numbered, bold labels (what a trained planner writes, the format its
    # prompt shows), then plain ones; "plain" keeps every step plain, so that a difference in
    # reading numbered labels does not hide the later ones
    "numbered": [
        "1.  **Justification:** Start from the kettle.\n"
        "2.  **Context:** The query names the Zorblat kettle.\n"
        "3.  **Sub-Goal:** Find the town where the Zorblat kettle was invented.\n"
        "4.  **Tool Name:** Generalist_Solution_Generator_Tool",
        *_LATER_REPLIES,
    ],
    "plain": [
        "Justification: Start from the kettle.\nContext: The query names the Zorblat kettle.\n"
        "Sub-Goal: Find the town where the Zorblat kettle was invented.\n"
        "Tool Name: Generalist_Solution_Generator_Tool",
        *_LATER_REPLIES,
    ],
}
TOOL_MODEL_REPLY = "The Zorblat kettle was invented in Quibble, on the Glimmer River."
# a tool answer longer than the package's own cut (8,000 characters), shorter than AgentFlow's
LONG_TOOL_MODEL_REPLY = " ".join(["The Zorblat kettle was invented in Quibble."] * 220)
# how a planner may write its step: each kind is a first reply (then a plain one) of a two-step
# evaluation episode; the planner's second prompt holds what each side read from the first
_G = "Generalist_Solution_Generator_Tool"
_J, _C, _S = (
    "Justification: Ask the generalist.",
    "Context: The kettle.",
    "Sub-Goal: Name its town.",
)
REPLY_KINDS = {
    "plain": f"{_J}\n{_C}\n{_S}\nTool Name: {_G}",
    "numbered_bold": f"1.  **Justification:** Ask.\n2.  **Context:** The kettle.\n"
    f"3.  **Sub-Goal:** Name its town.\n4.  **Tool Name:** {_G}",
    "bold_labels": f"**Justification:** Ask.\n**Context:** The kettle.\n"
    f"**Sub-Goal:** Name its town.\n**Tool Name:** {_G}",
    "backticked_name": f"{_J}\n{_C}\n{_S}\nTool Name: `{_G}`",
    "trailing_period": f"{_J}\n{_C}\n{_S}\nTool Name: {_G}.",
    "line_after_name": f"{_J}\n{_C}\n{_S}\nTool Name: {_G}\nIt fits best.",
    "paragraph_after_name": f"{_J}\n{_C}\n{_S}\nTool Name: {_G}\n\nIt fits best.",
    "no_context": f"{_J}\n{_S}\nTool Name: {_G}",
    "hash_headers": f"### Justification\nAsk.\n### Context\nThe kettle.\n"
    f"### Sub-Goal\nName its town.\n### Tool Name\n{_G}",
    "spaced_lowercase_name": f"{_J}\n{_C}\n{_S}\nTool Name: generalist solution generator tool",
    "short_class_name": f"{_J}\n{_C}\n{_S}\nTool Name: Base_Generator_Tool",
    "json_object": json.dumps(
        {
            "justification": "Ask.",
            "context": "The kettle.",
            "sub_goal": "Name its town.",
            "tool_name": _G,
        }
    ),
    "two_blocks": f"{_C}\n{_S}\nTool Name: Wikipedia_RAG_Search_Tool\n\n{_J}\n{_C}\n{_S}\nTool Name: {_G}",
    "fenced": f"{_J}\n```\n{_C}\n{_S}\nTool Name: {_G}\n```",
    "bold_in_sub_goal": f"{_J}\n{_C}\nSub-Goal: Name **its** town.\nTool Name: {_G}",
    "no_tool_name": f"{_J}\n{_C}\n{_S}",
}
KIND_SECOND_REPLY = (
    "Justification: Look it up.\nContext: The kettle.\nSub-Goal: Name its river.\n"
    "Tool Name: Generalist_Solution_Generator_Tool"
)
KIND_VERDICTS = [("The town is not named yet.", False), ("The memory names it.", True)]
# AgentFlow's Python tool runs as written (the code below is this script's own, run by AgentFlow's
# tool in this process and by the package's tool in its sandbox): markers, cuts and error texts
PYTHON_TOOL = "Python_Code_Generator_Tool"
PYTHON_STEP = (
    "Justification: Compute it.\nContext: The kettle.\nSub-Goal: Compute the number.\n"
    f"Tool Name: {PYTHON_TOOL}"
)
PYTHON_CASES = {
    "python_result": "total = 17 * 23 + 5\nprint(f'The total is {total}')",
    "python_error": "ratio = 1 / 0",
    "python_long_output": "print('kettle ' * 1000)",
    "python_many_variables": "\n".join(f"v{i} = {i}" for i in range(25)),
    "python_long_variable": "text = 'q' * 3000",
    "python_function_and_module": "import math\ndef area(r):\n    return math.pi * r * r\nprint(area(2))",
    # a comprehension reading a top-level name (its own scope before Python 3.12)
    "python_comprehension": "n = 3\nsquares = [i * n for i in range(4)]\nprint(squares)",
}
# AgentFlow's Wikipedia tool runs as published (its page reader gets no model name) on a stand-in
# of the ``wikipedia`` package that finds what the package's search found
WIKIPEDIA_TOOL = "Wikipedia_RAG_Search_Tool"
WIKIPEDIA_STEP = (
    "Justification: Look it up.\nContext: The kettle.\nSub-Goal: Find the kettle's town.\n"
    f"Tool Name: {WIKIPEDIA_TOOL}"
)
WIKIPEDIA_CASES = {
    "wikipedia_pages": 'execution = tool.execute(query="Zorblat kettle museum Quibble")',
    "wikipedia_no_results": 'execution = tool.execute(query="xyzzy plugh")',
}
# a question as some rows hold it, with whitespace around it (neither script strips it)
SPACED_QUESTION = f"  {QUESTION} \n"
# AgentFlow's tool classes whose model prompts are compared, by the names the planner sees
TOOL_CLASSES = {
    "Base_Generator_Tool": "Generalist_Solution_Generator_Tool",
    "Python_Coder_Tool": PYTHON_TOOL,
}
EPISODES = {  # name -> (preset, planner replies, the tools' model's reply, question)
    "eval": ("agentflow_eval", "numbered", TOOL_MODEL_REPLY, QUESTION),
    "eval_plain_labels": ("agentflow_eval", "plain", TOOL_MODEL_REPLY, QUESTION),
    "eval_long_result": ("agentflow_eval", "plain", LONG_TOOL_MODEL_REPLY, QUESTION),
    "eval_spaced_question": ("agentflow_eval", "plain", TOOL_MODEL_REPLY, SPACED_QUESTION),
    "train": ("agentflow_train", "numbered", TOOL_MODEL_REPLY, QUESTION),
    "train_plain_labels": ("agentflow_train", "plain", TOOL_MODEL_REPLY, QUESTION),
    "train_long_result": ("agentflow_train", "plain", LONG_TOOL_MODEL_REPLY, QUESTION),
    "train_spaced_question": ("agentflow_train", "plain", TOOL_MODEL_REPLY, SPACED_QUESTION),
}
UNKNOWN_TOOL_STEP = 2
COMMANDS = [
    'execution = tool.execute(query="Where was the Zorblat kettle invented?")',
    'execution = tool.execute(query="Quibble river")',
]
VERDICTS = [
    ("The memory does not name the river yet.", False),
    ("The memory still does not name the river.", False),
    ("The memory names the river.", True),
]
DIRECT = "1.  **Process Summary:** Found the town, then its river.\n2.  **Answer:** <answer>Glimmer River</answer>"
CORPUS_DOCS = [
    {"id": "1", "title": "Zorblat kettle", "text": "The Zorblat kettle was invented in Quibble."},
    {"id": "2", "title": "Quibble", "text": "Quibble is a town on the Glimmer River."},
    {
        "id": "3",
        "title": 'The "Zorblat" kettle museum',
        "text": "The museum in Quibble shows every Zorblat kettle ever made, from the first "
        "copper one to the glass kettles of the later years, and the river boats.",
    },
]


def command_reply(command: str) -> str:
    return f"Generated Command:\n```python\n{command}\n```"


def verdict_reply(analysis: str, stop: bool) -> str:
    return f"{analysis}\nConclusion: {'STOP' if stop else 'CONTINUE'}"


# -- AgentFlow's side -----------------------------------------------------------------------------
class _Anything:
    """A stand-in for anything a missing third-party module holds: callable, subclassable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Anything()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything


def install_stub(name: str) -> None:
    """Put a stand-in module (and its missing parents) in ``sys.modules``; a parent that exists
    (a namespace package such as ``google``, say) stays the real one."""
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        dotted = ".".join(parts[:depth])
        if depth < len(parts) and dotted not in sys.modules:
            with contextlib.suppress(ImportError):
                importlib.import_module(dotted)
        if dotted not in sys.modules or depth == len(parts):
            module = _StubModule(dotted)
            module.__path__ = []  # a package, so submodules import
            sys.modules[dotted] = module
        if depth > 1:
            parent = sys.modules[".".join(parts[: depth - 1])]
            setattr(parent, parts[depth - 1], sys.modules[dotted])


def import_with_stubs(name: str, own: tuple[str, ...] = ("agentflow", "tools", "utils")) -> Any:
    """Import ``name``, standing in for each missing third-party module it needs."""
    for _ in range(50):
        try:
            return importlib.import_module(name)
        except ImportError as error:  # AgentFlow's engines re-raise a missing package as this
            cause: BaseException | None = error
            while cause is not None and not isinstance(cause, ModuleNotFoundError):
                cause = cause.__context__
            missing = getattr(cause, "name", None) or ""
            named = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(error))
            if cause is None and named and importlib.util.find_spec(named.group(2)) is not None:
                missing = f"{named.group(2)}.{named.group(1)}"  # a submodule of a namespace package
            if not missing or missing.split(".")[0] in own:
                raise
            install_stub(missing)
    raise RuntimeError(f"too many missing modules importing {name}")


@dataclass
class Scripted:
    text: str
    fields: dict[str, Any] | None = None


class AgentFlowRig:
    """AgentFlow's modules from a checkout, on a recording engine that answers from a script."""

    def __init__(self, checkout: Path) -> None:
        self.checkout = checkout
        self.calls: list[dict[str, Any]] = []
        self.script: dict[str, list[Scripted]] = {}
        self.tool_results: list[Any] = []
        self.question = QUESTION
        self.other_reply = TOOL_MODEL_REPLY
        self.real_tools: set[str] = set()  # tools that run as AgentFlow wrote them
        kit = str(checkout / "agentflow")
        if kit not in sys.path:
            sys.path.insert(0, kit)
        os.environ.setdefault("OPENAI_API_KEY", "stand-in")
        os.environ.setdefault("GOOGLE_API_KEY", "stand-in")
        os.environ.setdefault("DASHSCOPE_API_KEY", "stand-in")
        with quiet():
            self.factory = import_with_stubs("agentflow.engine.factory")
            self.engines = {
                "openai": import_with_stubs("agentflow.engine.openai").ChatOpenAI,
                "dashscope": import_with_stubs("agentflow.engine.dashscope").ChatDashScope,
                "vllm": import_with_stubs("agentflow.engine.vllm").ChatVLLM,
            }
            self.real_factory = self.factory.create_llm_engine
            self.factory.create_llm_engine = self._create_engine
            sys.modules["wikipedia"] = self.wikipedia = _FakeWikipedia()
            for module in (
                "planner",
                "executor",
                "verifier",
                "memory",
                "initializer",
                "formatters",
                "utils",
            ):
                import_with_stubs(f"agentflow.models.{module}")
            for tool in (
                "base_generator",
                "python_coder",
                "google_search",
                "web_search",
                "wikipedia_search",
            ):
                import_with_stubs(f"agentflow.tools.{tool}.tool")
        self.models = sys.modules["agentflow.models.planner"]
        self.formatters = sys.modules["agentflow.models.formatters"]
        self.Initializer = sys.modules["agentflow.models.initializer"].Initializer
        self._wrap_initializer()

    # the recording engine
    def _create_engine(
        self, model_string: str, use_cache: bool = False, is_multimodal: bool = False, **kwargs: Any
    ) -> Any:
        if model_string is None:  # AgentFlow's own factory decides (it fails, as run there)
            return self.real_factory(model_string=model_string, **kwargs)
        return _RecordingEngine(self, model_string)

    def structured(self, model: str) -> bool:
        openai_engine = sys.modules["agentflow.engine.openai"]
        return (
            backend_of(model) == "openai"
            and openai_engine.validate_chat_model(model)
            and openai_engine.validate_structured_output_model(model)
        )

    def system_prompt(self, model: str) -> str | None:
        engine = self.engines.get(backend_of(model))
        return None if engine is None else engine.DEFAULT_SYSTEM_PROMPT

    def settings(self, model: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The max_tokens and top_p the engine sends: its text method's defaults unless passed."""
        engine = self.engines.get(backend_of(model))
        if engine is None:
            return {}
        parameters = inspect.signature(engine._generate_text).parameters
        out = {k: parameters[k].default for k in ("max_tokens", "top_p") if k in parameters}
        out.update({k: kwargs[k] for k in ("max_tokens", "top_p") if k in kwargs})
        return out

    def reply(self, role: str, model: str, response_format: Any) -> Any:
        queue = self.script.get(role) or []
        scripted = queue.pop(0) if queue else Scripted(self.other_reply)
        if response_format is not None and scripted.fields is not None and self.structured(model):
            return response_format(**scripted.fields)
        return scripted.text

    def _wrap_initializer(self) -> None:
        rig, original = self, self.Initializer.__init__
        if getattr(original, "_compare_wrapped", False):
            return

        def init(initializer: Any, *args: Any, **kwargs: Any) -> None:
            original(initializer, *args, **kwargs)
            for name, instance in initializer.tool_instances_cache.items():
                if name not in rig.real_tools:
                    instance.execute = rig._tool_execute

        init._compare_wrapped = True  # type: ignore[attr-defined]
        self.Initializer.__init__ = init

    def _tool_execute(self, *args: Any, **kwargs: Any) -> Any:
        """What the package's tool returned for this step (the same state on both sides)."""
        return self.tool_results.pop(0) if self.tool_results else self.other_reply

    def set_episode(
        self,
        analysis_text: str,
        tool_results: list[Any],
        replies: list[str] | None = None,
        verdicts: list[tuple[str, bool]] | None = None,
        other_reply: str = TOOL_MODEL_REPLY,
        real_tools: tuple[str, ...] = (),
        commands: list[str] = COMMANDS,
        question: str = QUESTION,
    ) -> None:
        self.calls = []
        self.question = question
        self.tool_results = list(tool_results)
        self.other_reply = other_reply
        self.real_tools = set(real_tools)
        self.script = {
            "analysis": [Scripted(analysis_text, ANALYSIS_FIELDS)],
            "planner": [Scripted(text) for text in replies or PLANNER_REPLIES["plain"]],
            "command": [
                Scripted(command_reply(c), {"analysis": "a", "explanation": "e", "command": c})
                for c in commands
            ],
            "verifier": [
                Scripted(verdict_reply(a, s), {"analysis": a, "stop_signal": s})
                for a, s in (verdicts or VERDICTS)
            ],
            "direct": [Scripted(DIRECT)],
        }

    def analysis_text(self) -> str:
        """The four sections as AgentFlow's planner shows a structured analysis."""
        return str(self.formatters.QueryAnalysis(**ANALYSIS_FIELDS)).strip()

    # the module prompts' first lines, to tell the package's requests apart
    def probe_first_lines(self) -> dict[str, str]:
        modules = sys.modules
        with quiet():
            planner = modules["agentflow.models.planner"].Planner("dashscope", "dashscope")
            verifier = modules["agentflow.models.verifier"].Verifier("dashscope", "dashscope")
            executor = modules["agentflow.models.executor"].Executor("dashscope")
            memory = modules["agentflow.models.memory"].Memory()
            self.set_episode("probe", [])
            planner.analyze_query("probe", None)
            executor.generate_tool_command("probe", None, "c", "s", "t", {}, 1, None)
            verifier.verificate_context("probe", None, "a", memory, 1, None)
            planner.generate_direct_output("probe", None, memory)
        return {call["role"]: first_line(call["prompt"]) for call in self.calls}

    # the evaluation episode: test/solve.py as test/<bench>/run.sh calls it
    def eval_episode(self, work: Path) -> list[dict[str, Any]]:
        data = work / "eval_data.json"
        data.write_text(json.dumps([{"pid": "0", "question": self.question, "answer": GOLD}]))
        solve = self._load_solve()
        args = argparse.Namespace(
            llm_engine_name=EVAL_PLANNER,
            max_tokens=2048,
            run_baseline_only=False,
            task="compare",
            data_file=str(data),
            task_description="",
            output_types="direct",
            enabled_tools=",".join(ENABLED_TOOLS),
            tool_engine=",".join(EVAL_TOOL_ENGINE),
            model_engine=",".join(EVAL_MODEL_ENGINE),
            index=0,
            root_cache_dir=str(work / "cache"),
            output_json_dir=str(work / "out"),
            max_steps=10,
            max_time=300,
            verbose=True,
            temperature=0.0,
            vllm_config_path=None,
            base_url="http://localhost:8000/v1",
            check_model=True,
        )
        with quiet():
            solve.main(args)
        return self.calls

    def _load_solve(self) -> Any:
        if "compare_agentflow_solve" in sys.modules:
            return sys.modules["compare_agentflow_solve"]
        # test/solve.py imports agentflow.agentflow.models.*: the same modules under that name
        kit = sys.modules["agentflow"]
        sys.modules.setdefault("agentflow.agentflow", kit)
        kit.agentflow = kit  # type: ignore[attr-defined]
        for name in list(sys.modules):
            if name.startswith("agentflow.models") or name.startswith("agentflow.engine"):
                sys.modules.setdefault(
                    "agentflow.agentflow." + name[len("agentflow.") :], sys.modules[name]
                )
        spec = importlib.util.spec_from_file_location(
            "compare_agentflow_solve", self.checkout / "test" / "solve.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        saved = list(sys.path)
        with quiet():
            spec.loader.exec_module(module)
        sys.path[:] = saved
        sys.modules["compare_agentflow_solve"] = module
        return module

    # the training episode: train/rollout.py's _solve_and_evaluate on its training solver
    def train_episode(self, work: Path) -> tuple[list[dict[str, Any]], str]:
        rollout = self._load_rollout()
        with quiet():
            agent = rollout.get_agent(
                model=TRAIN_PLANNER,
                openai_base_url="http://localhost:9999/v1",
                temperature=0.7,
                resources=None,
                tools=ENABLED_TOOLS,
                max_steps=3,
                tool_engine=TRAIN_TOOL_ENGINE,
                model_engine=TRAIN_MODEL_ENGINE,
                max_tokens=2048,
                output_type="direct",
                timeout=500,
            )
            runner = rollout.Rollout.__new__(rollout.Rollout)
            runner.train_rollout_dir = str(work / "rollouts")
            runner.val_rollout_dir = str(work / "rollouts_val")
            runner.rollout_num = 8
            runner.tools = ENABLED_TOOLS
            task = {"question": self.question, "result": GOLD, "extra_info": {"idx": 0}}
            asyncio.run(runner._solve_and_evaluate(agent, task, 0))
        planner = [c for c in self.calls if c["role"] == "planner"]
        question = planner[0]["question"] if planner else ""
        return self.calls, question

    def _load_rollout(self) -> Any:
        if "compare_agentflow_rollout" in sys.modules:
            return sys.modules["compare_agentflow_rollout"]
        kit = sys.modules["agentflow"]
        # rollout.py's trainer imports (agent-lightning's names) are not what is measured
        for name in ("Trainer", "NamedResources", "LLM", "DevTaskLoader"):
            setattr(kit, name, _Anything)
        kit.LitAgent = type("LitAgent", (), {})  # type: ignore[attr-defined]
        kit.reward = lambda function: function  # type: ignore[attr-defined]
        kit.configure_logger = lambda *a, **k: None  # type: ignore[attr-defined]
        import_with_stubs("agentflow.solver")
        install_stub("autogen_ext.tools.mcp")
        train = str(self.checkout / "train")
        sys.path.insert(0, train)
        try:
            spec = importlib.util.spec_from_file_location(
                "compare_agentflow_rollout", self.checkout / "train" / "rollout.py"
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            with quiet():
                spec.loader.exec_module(module)
        finally:
            sys.path.remove(train)
        # its reward is a judge model's verdict; the reward is not what is measured
        module.compute_score = lambda *args: False  # type: ignore[attr-defined]
        sys.modules["compare_agentflow_rollout"] = module
        return module

    # first-turn prompts of a test file, as test/solve.py loads and prompts it
    def first_turns(
        self, data_file: Path, limit: int | None
    ) -> list[tuple[str, str | None, str | None]]:
        solve = self._load_solve()
        holder = types.SimpleNamespace(task_description="", data_file=str(data_file))
        with quiet():
            records = solve.Solver.load_benchmark_data(holder)
            if not hasattr(self, "_first_turn_planner"):
                initializer = self.Initializer(
                    enabled_tools=ENABLED_TOOLS,
                    tool_engine=EVAL_TOOL_ENGINE,
                    model_string=EVAL_PLANNER,
                    verbose=False,
                    base_url="http://localhost:8000/v1",
                )
                self._first_turn_planner = self.models.Planner(
                    llm_engine_name=EVAL_PLANNER,
                    llm_engine_fixed_name="dashscope",
                    toolbox_metadata=initializer.toolbox_metadata,
                    available_tools=initializer.available_tools,
                    base_url="http://localhost:8000/v1",
                    temperature=0.0,
                )
            planner = self._first_turn_planner
            memory_class = sys.modules["agentflow.models.memory"].Memory
            out: list[tuple[str, str | None, str | None]] = []
            for record in records[:limit]:
                question = record["query"] if "query" in record else record["question"]
                self.set_episode(self.analysis_text(), [])
                analysis = planner.analyze_query(question, None)
                planner.generate_next_step(question, None, analysis, memory_class(), 1, 10, {})
                prompts = {c["role"]: c["prompt"] for c in self.calls}
                out.append(
                    (
                        str(record.get("pid", len(out))),
                        prompts.get("analysis"),
                        prompts.get("planner"),
                    )
                )
        return out


class _RecordingEngine:
    def __init__(self, rig: AgentFlowRig, model_string: str) -> None:
        self.rig = rig
        self.model_string = model_string

    def __call__(self, prompt: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        role = CALLER_ROLES.get(caller.f_code.co_name, "other")
        # a list of strings reaches the model joined by newlines (its engines' generate)
        text = (
            prompt
            if isinstance(prompt, str)
            else "\n".join(p for p in prompt if isinstance(p, str))
        )
        response_format = kwargs.get("response_format")
        self.rig.calls.append(
            {
                "role": role,
                "model": self.model_string,
                "prompt": text,
                "system": self.rig.system_prompt(self.model_string),
                "response_format": getattr(response_format, "__name__", None),
                "settings": self.rig.settings(self.model_string, kwargs),
                "question": caller.f_locals.get("question"),
                "tool": type(caller.f_locals.get("self")).__name__ if role == "other" else None,
            }
        )
        return self.rig.reply(role, self.model_string, response_format)

    generate = __call__  # AgentFlow's tools call either


class _FakeWikipedia(types.ModuleType):
    """The ``wikipedia`` package AgentFlow's Wikipedia tool searches: the titles the package's
    search found, each page's text from the scripted corpus, its URL by AgentFlow's own rule
    (each space an underscore; a live page's canonical URL is not reproducible offline)."""

    def __init__(self) -> None:
        super().__init__("wikipedia")
        self.titles: list[str] = []

    def search(self, query: str) -> list[str]:
        return list(self.titles)

    def page(self, title: str) -> Any:
        text = next(doc["text"] for doc in CORPUS_DOCS if doc["title"] == title)
        url = "https://en.wikipedia.org/wiki/" + title.replace(" ", "_")
        return types.SimpleNamespace(content=text, url=url)


@contextlib.contextmanager
def loopback_stand_in(host: str) -> Iterator[None]:
    """Resolve ``host`` to 127.0.0.1 in this process (the scripted server standing for it)."""
    original = socket.getaddrinfo

    def getaddrinfo(name: Any, *args: Any, **kwargs: Any) -> Any:
        return original("127.0.0.1" if name == host else name, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    try:
        yield
    finally:
        socket.getaddrinfo = original


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """AgentFlow prints every step; keep it off the report."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """Run in ``folder``: AgentFlow's solver makes its cache folder in the working directory."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


# -- the package's side ---------------------------------------------------------------------------
class PackageRig:
    """The package's env on the scripted server, its planner fed the scripted replies."""

    def __init__(self, checkout: Path, first_lines: dict[str, str], analysis_text: str) -> None:
        sys.path.insert(0, str(TESTS))
        from fake_openai_server import FakeOpenAIServer

        self.checkout = checkout
        self.source = str(checkout)  # or a prompt pack read from it (--via-pack)
        self.first_lines = first_lines
        self.analysis_text = analysis_text
        self.queues: dict[str, list[str]] = {}
        self.tool_reply = TOOL_MODEL_REPLY
        self.server = FakeOpenAIServer(self._respond).start()
        os.environ.pop("AGENTFLOW_SOURCE", None)
        self.stand_for("agentflow_eval")

    def stand_for(self, preset: str) -> None:
        """Point the modules' endpoint at the scripted server, standing for the engine AgentFlow's
        script runs its modules on: DashScope for evaluation (a host named so, resolved to the
        loopback), gpt-4o-mini for training."""
        host = f"{DASHSCOPE_STAND_IN}:{self.server.port}" if preset == "agentflow_eval" else None
        base_url = f"http://{host}/v1" if host else self.server.base_url
        os.environ["AGENTFLOW_LLM_BASE_URL"] = base_url
        os.environ["AGENTFLOW_LLM_MODEL"] = MODULE_MODELS[preset]

    def close(self) -> None:
        self.server.stop()

    def _respond(self, role: str, request: dict[str, Any]) -> str:
        kind = self.kind(request)
        if kind == "analysis":
            if request.get("response_format") is not None:
                return json.dumps(ANALYSIS_FIELDS)
            return self.analysis_text
        queue = self.queues.get(kind) or []
        return queue.pop(0) if queue else self.tool_reply

    def kind(self, request: dict[str, Any]) -> str:
        messages = request.get("messages") or []
        user = next(
            (m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), ""
        )
        return classify(user if isinstance(user, str) else "", self.first_lines)

    def reset_script(self, verdicts: list[tuple[str, bool]], commands: list[str]) -> None:
        self.queues = {
            "command": [command_reply(c) for c in commands],
            "verifier": [verdict_reply(a, s) for a, s in verdicts],
            "direct": [DIRECT],
        }

    def requests(self, start: int) -> list[dict[str, Any]]:
        return self.server.requests[start:]

    def make(self, preset: str, **settings: Any) -> Any:
        import gymnasium as gym

        import agentflow_env  # noqa: F401  (registers the env ids)

        return gym.make(
            "AgentFlow-Search-v0", preset=preset, agentflow_source=self.source, **settings
        )

    def episode(
        self,
        preset: str,
        replies: list[str],
        tool_reply: str,
        work: Path,
        verdicts: list[tuple[str, bool]] = VERDICTS,
        commands: list[str] = COMMANDS,
        question: str = QUESTION,
    ) -> dict[str, Any]:
        """Planner prompts per turn, module requests and each step's tool result."""
        from agentflow_env.workflow.agentflow_format import memory_actions

        corpus = write_corpus(work)
        data = work / f"{preset}.jsonl"
        row = {"question": question, "result": GOLD, "answer": GOLD}
        data.write_text(json.dumps(row) + "\n")
        self.reset_script(verdicts, commands)
        self.tool_reply = tool_reply
        self.stand_for(preset)
        start = len(self.server.requests)
        env = self.make(preset, dataset=str(data), corpus=str(corpus))
        prompts: list[list[dict[str, str]]] = []
        try:
            env.reset(seed=0)
            session = env.unwrapped.session
            for reply in replies:
                prompts.append([dict(m) for m in session.messages()])
                _, _, terminated, truncated, _ = env.step(reply)
                if terminated or truncated:
                    break
            steps = memory_actions(
                session.memory, getattr(env.unwrapped, "agentflow_wording", None)
            )
            asked = session.task.question if hasattr(session, "task") else None
        finally:
            env.close()
        # AgentFlow's tools return: at step 1 the generalist tool, the tools' model's reply as
        # written (so that how each side cuts and shapes it shows); at step 3 the Wikipedia tool,
        # what the package's tool returned (AgentFlow's searches the live web)
        results: list[Any] = [tool_reply]
        last = list(steps.values())[UNKNOWN_TOOL_STEP:]
        if last:
            result = last[0].get("result")
            results.append(result[0] if isinstance(result, list) and len(result) == 1 else result)
        return {
            "steps": list(steps.values()),
            "planner": prompts,
            "requests": self.requests(start),
            "tool_results": results,
            "question": asked,
        }

    def first_turns(
        self, data_file: Path, limit: int | None, work: Path
    ) -> list[tuple[str, str | None, str | None]]:
        self.stand_for("agentflow_eval")
        env = self.make("agentflow_eval", dataset=str(data_file), corpus=str(write_corpus(work)))
        out = []
        try:
            tasks = list(env.unwrapped.task_source.tasks)[:limit]
            for task in tasks:
                start = len(self.server.requests)
                env.reset(seed=0, options={"task": task})
                user = env.unwrapped.session.messages()[-1]["content"]
                analysis = next(
                    (
                        m["content"]
                        for r in self.requests(start)
                        if self.kind(r) == "analysis"
                        for m in r["messages"]
                        if m["role"] == "user"
                    ),
                    None,
                )
                out.append((str(task.task_id), analysis, user))
        finally:
            env.close()
        return out


def found_titles(steps: list[dict[str, Any]]) -> list[str]:
    """The page titles the package's Wikipedia tool returned at its first step (any key)."""
    result = steps[0].get("result") if steps else None
    value = result[0] if isinstance(result, list) and result else None
    if not isinstance(value, dict):
        return []
    pages = [p for key, v in value.items() if key != "query" and isinstance(v, list) for p in v]
    return [p["title"] for p in pages if isinstance(p, dict) and p.get("title")]


def write_corpus(work: Path) -> Path:
    corpus = work / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(doc) + "\n" for doc in CORPUS_DOCS))
    return corpus


# -- comparing ------------------------------------------------------------------------------------
def compare_episode(
    name: str,
    agentflow_calls: list[dict[str, Any]],
    package: dict[str, Any],
    rig: PackageRig,
    text: bool,
) -> dict[str, Any]:
    planner = Tally(keep=10)
    system = Tally()
    af_planner = [c for c in agentflow_calls if c["role"] == "planner"]
    turns = max(len(af_planner), len(package["planner"]))
    for turn in range(turns):
        af = af_planner[turn] if turn < len(af_planner) else None
        pk = package["planner"][turn] if turn < len(package["planner"]) else None
        pk_user = pk[-1]["content"] if pk else None
        pk_system = next((m["content"] for m in pk if m["role"] == "system"), None) if pk else None
        planner.add(
            {"episode": name, "turn": turn + 1}, af["prompt"] if af else None, pk_user, text=text
        )
        system.add(
            {"episode": name, "turn": turn + 1}, af["system"] if af else None, pk_system, text=text
        )
    modules: dict[str, Any] = {}
    package_by_role: dict[str, list[dict[str, Any]]] = {}
    for request in package["requests"]:
        package_by_role.setdefault(rig.kind(request), []).append(request)
    for role in MODULE_ROLES:
        tally, sys_tally = Tally(), Tally()
        af_calls = [c for c in agentflow_calls if c["role"] == role]
        pk_calls = package_by_role.get(role, [])
        for index in range(max(len(af_calls), len(pk_calls))):
            af = af_calls[index] if index < len(af_calls) else None
            pk = pk_calls[index] if index < len(pk_calls) else None
            pk_user = (
                next((m["content"] for m in pk["messages"] if m["role"] == "user"), None)
                if pk
                else None
            )
            pk_system = (
                next((m["content"] for m in pk["messages"] if m["role"] == "system"), None)
                if pk
                else None
            )
            where = {"episode": name, "call": index + 1}
            tally.add(where, af["prompt"] if af else None, pk_user, text=text)
            sys_tally.add(where, af["system"] if af else None, pk_system, text=text)
        modules[role] = {**tally.as_dict(), "system": sys_tally.as_dict()}
        if role == "analysis" and pk_calls:
            modules[role]["package_response_format"] = (
                pk_calls[0].get("response_format") is not None
            )
            modules[role]["agentflow_response_format"] = (
                af_calls[0]["response_format"] is not None if af_calls else None
            )
    # the tools' model's prompts (the generalist's and the Python tool's, where AgentFlow's ran)
    tools = Tally()
    tool_system = Tally()
    af_tools = [
        c for c in agentflow_calls if c["role"] == "other" and c.get("tool") in TOOL_CLASSES
    ]
    pk_tools = package_by_role.get("other", [])[: len(af_tools)]
    for index, af in enumerate(af_tools):
        pk = pk_tools[index] if index < len(pk_tools) else None
        where = {"episode": name, "tool": TOOL_CLASSES[af["tool"]], "call": index + 1}
        pk_user = (
            next((m["content"] for m in pk["messages"] if m["role"] == "user"), None)
            if pk
            else None
        )
        pk_system = (
            next((m["content"] for m in pk["messages"] if m["role"] == "system"), None)
            if pk
            else None
        )
        tools.add(where, af["prompt"], pk_user, text=text)
        tool_system.add(where, af["system"], pk_system, text=text)
    settings = {}
    for role in MODULE_ROLES:
        af_calls = [c for c in agentflow_calls if c["role"] == role]
        pk_calls = package_by_role.get(role, [])
        if af_calls and pk_calls:
            af_settings = af_calls[0]["settings"]
            pk_settings = {key: pk_calls[0].get(key) for key in af_settings}
            settings[role] = {
                "agentflow": af_settings,
                "package": pk_settings,
                "same": af_settings == pk_settings,
            }
    return {
        "planner": planner.as_dict(),
        "system_prompt": system.as_dict(),
        "modules": modules,
        "unknown_tool_step": UNKNOWN_TOOL_STEP,
        "module_request_settings": settings,
        "tool_model_prompts": {**tools.as_dict(), "system": tool_system.as_dict()},
        "other_requests": len(package_by_role.get("other", [])),
    }


def compare_first_turns(
    agentflow: list[tuple[str, str | None, str | None]],
    package: list[tuple[str, str | None, str | None]],
    bench: str,
    text: bool,
) -> dict[str, Any]:
    planner, analysis = Tally(keep=3), Tally(keep=3)
    for index in range(max(len(agentflow), len(package))):
        af = agentflow[index] if index < len(agentflow) else None
        pk = package[index] if index < len(package) else None
        where = {"bench": bench, "record": index}
        planner.add(where, af[2] if af else None, pk[2] if pk else None, text=text)
        analysis.add(where, af[1] if af else None, pk[1] if pk else None, text=text)
    return {"planner": planner.as_dict(), "analysis": analysis.as_dict()}


def checkout_commit(checkout: Path) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def package_commit() -> str | None:
    """The commit of the package checkout measured, ``+changes`` when its files differ from it."""
    import agentflow_env

    folder = Path(agentflow_env.__file__).resolve().parent
    commit = checkout_commit(folder)
    if commit is None:
        return None
    status = subprocess.run(
        ["git", "-C", str(folder), "status", "--porcelain", "--", "."],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return commit + ("+changes" if status.strip() else "")


def run(
    checkout: Path,
    limit: int | None,
    text: bool,
    benches: list[str],
    kinds: bool = True,
    python: bool = True,
    via_pack: bool = False,
) -> dict[str, Any]:
    af = AgentFlowRig(checkout)
    first_lines = af.probe_first_lines()
    analysis_text = af.analysis_text()
    with (
        loopback_stand_in(DASHSCOPE_STAND_IN),
        tempfile.TemporaryDirectory() as cwd,
        inside(Path(cwd)),
    ):
        return _run(
            af, checkout, limit, text, benches, first_lines, analysis_text, kinds, python, via_pack
        )


def _run(
    af: AgentFlowRig,
    checkout: Path,
    limit: int | None,
    text: bool,
    benches: list[str],
    first_lines: dict[str, str],
    analysis_text: str,
    kinds: bool,
    python: bool,
    via_pack: bool,
) -> dict[str, Any]:
    package = PackageRig(checkout, first_lines, analysis_text)
    if via_pack:  # the package reads its wording from a pack file written from the checkout
        from agentflow_env.workflow.agentflow_source import read_agentflow_source
        from agentflow_env.workflow.prompt_pack import write_pack

        package.source = str(write_pack(read_agentflow_source(checkout), Path.cwd() / "pack.json"))
    report: dict[str, Any] = {
        "agentflow_commit": checkout_commit(checkout),
        "package_commit": package_commit(),
        "package_wording_from": "a prompt pack file" if via_pack else "the checkout",
        "episodes": {},
        "first_turn": {},
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)

            def pair(
                name: str,
                preset: str,
                replies: list[str],
                tool_reply: str,
                real_tools: tuple[str, ...] = (),
                **kw: Any,
            ) -> Any:
                try:
                    pk = package.episode(preset, replies, tool_reply, work, **kw)
                except Exception as error:  # the package side failing is a result too
                    return {"error": f"package: {type(error).__name__}: {error}"}
                # the two-step cases: every scripted tool answers with the tools' model's reply
                results = [] if kw.get("verdicts") else pk["tool_results"]
                af.set_episode(
                    analysis_text,
                    results,
                    replies,
                    kw.get("verdicts"),
                    other_reply=tool_reply,
                    real_tools=real_tools,
                    commands=kw.get("commands", COMMANDS),
                    question=kw.get("question", QUESTION),
                )
                af.wikipedia.titles = found_titles(pk["steps"])
                try:
                    if preset == "agentflow_eval":
                        calls = af.eval_episode(work)
                    else:
                        calls, _ = af.train_episode(work)
                except Exception as error:
                    return {"error": f"agentflow: {type(error).__name__}: {error}"}
                return compare_episode(name, calls, pk, package, text)

            for name, (preset, replies, tool_reply, question) in EPISODES.items():
                report["episodes"][name] = pair(
                    name, preset, PLANNER_REPLIES[replies], tool_reply, question=question
                )
            if kinds:
                report["reply_kinds"] = {
                    kind: pair(
                        kind,
                        "agentflow_eval",
                        [reply, KIND_SECOND_REPLY],
                        TOOL_MODEL_REPLY,
                        verdicts=KIND_VERDICTS,
                    )
                    for kind, reply in REPLY_KINDS.items()
                }
            if python:
                report["wikipedia_tool"] = {
                    case: pair(
                        case,
                        "agentflow_eval",
                        [WIKIPEDIA_STEP, KIND_SECOND_REPLY],
                        TOOL_MODEL_REPLY,
                        real_tools=(WIKIPEDIA_TOOL,),
                        verdicts=KIND_VERDICTS,
                        commands=[command, COMMANDS[1]],
                    )
                    for case, command in WIKIPEDIA_CASES.items()
                }
                report["python_tool"] = {
                    case: pair(
                        case,
                        "agentflow_eval",
                        [PYTHON_STEP, KIND_SECOND_REPLY],
                        f"Here is the program.\n```python\n{code}\n```",
                        real_tools=(PYTHON_TOOL, "Generalist_Solution_Generator_Tool"),
                        verdicts=KIND_VERDICTS,
                    )
                    for case, code in PYTHON_CASES.items()
                }
            totals = {"planner": [0, 0], "analysis": [0, 0]}
            for bench in benches:
                data = checkout / "test" / bench / "data" / "data.json"
                try:
                    result = compare_first_turns(
                        af.first_turns(data, limit),
                        package.first_turns(data, limit, work),
                        bench,
                        text,
                    )
                except Exception as error:
                    report["first_turn"][bench] = {"error": f"{type(error).__name__}: {error}"}
                    continue
                report["first_turn"][bench] = result
                for key in totals:
                    totals[key][0] += result[key]["identical"]
                    totals[key][1] += result[key]["total"]
            report["first_turn_totals"] = {
                k: {"identical": v[0], "total": v[1]} for k, v in totals.items()
            }
    finally:
        package.close()
    report["summary"] = summarize(report)
    return report


def summarize(report: dict[str, Any]) -> dict[str, str]:
    """One line per count, as the issue's Acceptance asks for them."""
    lines: dict[str, str] = {}
    for name, episode in report["episodes"].items():
        if "error" in episode:
            lines[f"{name} episode"] = episode["error"]
            continue
        p = episode["planner"]
        lines[f"{name} planner prompts"] = f"{p['identical']} of {p['total']} identical"
        for role, counts in episode["modules"].items():
            lines[f"{name} {role} prompts"] = (
                f"{counts['identical']} of {counts['total']} identical"
            )
    for bench, result in report["first_turn"].items():
        if "error" in result:
            lines[f"first turn {bench}"] = result["error"]
            continue
        p, a = result["planner"], result["analysis"]
        lines[f"first turn {bench}"] = (
            f"planner {p['identical']} of {p['total']}, analysis {a['identical']} of {a['total']}"
        )
    for section, label in (
        ("reply_kinds", "reply kind"),
        ("wikipedia_tool", "wikipedia case"),
        ("python_tool", "python case"),
    ):
        _summarize_cases(lines, report.get(section, {}), label)
    every = [
        case
        for section in ("episodes", "reply_kinds", "wikipedia_tool", "python_tool")
        for case in report.get(section, {}).values()
        if "error" not in case
    ]
    planner_totals = [sum(c["planner"][k] for c in every) for k in ("identical", "total")]
    lines["planner prompts, every episode"] = f"{planner_totals[0]} of {planner_totals[1]}"
    tool_counts = [c["tool_model_prompts"] for c in every if "tool_model_prompts" in c]
    lines["tools' model prompts (generalist, Python), every episode"] = (
        f"{sum(t['identical'] for t in tool_counts)} of {sum(t['total'] for t in tool_counts)}"
        f" (system prompt {sum(t['system']['identical'] for t in tool_counts)}"
        f" of {sum(t['system']['total'] for t in tool_counts)})"
    )
    lines["module prompts, every episode"] = ", ".join(
        f"{role} {sum(c['modules'][role]['identical'] for c in every)}"
        f" of {sum(c['modules'][role]['total'] for c in every)}"
        for role in MODULE_ROLES
    )
    totals = report.get("first_turn_totals", {})
    if totals:
        lines["first turn, all files"] = ", ".join(
            f"{key} {v['identical']} of {v['total']}" for key, v in totals.items()
        )
    return lines


def _summarize_cases(lines: dict[str, str], cases: dict[str, Any], label: str) -> None:
    if not cases:
        return
    same = [
        case
        for case, result in cases.items()
        if "error" not in result
        and result["planner"]["identical"] == result["planner"]["total"]
        and all(m["identical"] == m["total"] for m in result["modules"].values())
    ]
    lines[f"{label}s (all prompts identical)"] = f"{len(same)} of {len(cases)}"
    for case, result in cases.items():
        if case not in same:
            lines[f"{label} {case}"] = result.get("error") or (
                f"planner {result['planner']['identical']} of {result['planner']['total']}, "
                + ", ".join(
                    f"{role} {m['identical']} of {m['total']}"
                    for role, m in result["modules"].items()
                )
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agentflow", type=Path, required=True, help="a checkout of AgentFlow")
    parser.add_argument("--limit", type=int, default=None, help="records per test file (all)")
    parser.add_argument("--bench", action="append", choices=BENCHES, help="only these test files")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--no-text", action="store_true", help="no prompt text in the report")
    parser.add_argument("--no-kinds", action="store_true", help="skip the planner reply kinds")
    parser.add_argument("--no-python", action="store_true", help="skip the tool cases")
    parser.add_argument(
        "--via-pack", action="store_true", help="the package reads a pack file written from PATH"
    )
    parser.add_argument("--dump", type=Path, help="write every compared pair here (prompt text)")
    args = parser.parse_args(argv)
    global DUMP
    DUMP = [] if args.dump else None
    checkout = args.agentflow.expanduser().resolve()
    if not (checkout / "agentflow" / "agentflow" / "models" / "planner.py").is_file():
        parser.error(f"{checkout} is not an AgentFlow checkout (no agentflow/agentflow/models)")
    report = run(
        checkout,
        args.limit,
        not args.no_text,
        args.bench or BENCHES,
        not args.no_kinds,
        not args.no_python,
        args.via_pack,
    )
    for key, line in report["summary"].items():
        print(f"{key}: {line}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if args.dump:
        args.dump.write_text(json.dumps(DUMP, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
