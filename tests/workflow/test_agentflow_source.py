"""AgentFlow's wording from the user's checkout (``agentflow_source``).

Every test builds a FAKE checkout in ``tmp_path``: AgentFlow's file layout (the classes, methods
and keyword names the reader looks for) around made-up sentences ("ZEBRA ..."). The expected
prompts are built here from the same pieces, so each made-up string is checked to reach the
prompt byte for byte, whitespace included.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fake_openai_server import FakeOpenAIServer, user_text

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.cli import main
from agentflow_env.envs.config import SearchEnvConfig
from agentflow_env.modules.agentflow_prompts import (
    command_messages,
    generalist_messages,
    verifier_messages,
)
from agentflow_env.modules.llm import LLMQueryAnalysis
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tasks.base import Task
from agentflow_env.tools.agentflow.names import AGENTFLOW_TOOLS, SHORT_NAMES
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.agentflow_format import agentflow_planner_messages, memory_actions
from agentflow_env.workflow.agentflow_source import (
    AgentFlowSourceError,
    checkout_commit,
    read_agentflow_source,
)
from agentflow_env.workflow.memory import Memory, MemoryEntry

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SYSTEM = "ZEBRA system prompt, plain."
UNMATCHED = "QUAGGA no tool answers to {tool_name}!"
NO_COMMAND = "QUAGGA command sentence."
NO_RESULT = "QUAGGA result sentence."
EVAL_NO_COMMAND = "OKAPI eval command sentence."
EVAL_NO_RESULT = "OKAPI eval result sentence."
TAG_SENTENCE = "ZEBRA tag sentence: wrap it in <answer></answer>."

# The prompts as they appear in the fake files: f-string bodies in the fake checkout's source.
# A "\\t" is an escape in the source (a tab in the text), the trailing spaces are the source's.
NEXT_STEP = """
ZEBRA task sentence: choose what comes next.

Context:
- **Query:** {question}
- **Query Analysis:** {query_analysis}
- **Available Tools:** {self.available_tools}
- **Toolbox Metadata:** {self.toolbox_metadata}
- **Previous Steps:** {memory.get_actions()}

ZEBRA instructions sentence.\\tIndented.
ZEBRA response format sentence.
ZEBRA rules sentence.
                    """
ANALYSIS = """
YAK analysis sentence.
- Q: {question}
- T: {self.available_tools}
- M: {self.toolbox_metadata}
YAK closing sentence."""  # a space and a newline follow (added: no trailing space here)
ANALYSIS += " \n"
COMMAND = """
        ZEBRA command task.
- Q: {question}
- SG: {sub_goal}
- TN: {tool_name}
- TM: {tool_metadata}
- C: {context}
ZEBRA command format sentence.
"""
VERIFIER = """
ZEBRA verifier sentence.
- Q: {question}
- T: {self.available_tools}
- M: {self.toolbox_metadata}
- A: {query_analysis}
- S: {memory.get_actions()}
ZEBRA verifier conclusion sentence.
"""
GENERALIST = """
OKAPI answer sentence.
- Q: {question}
- A: {self.query_analysis}
- S: {memory.get_actions()}
OKAPI closing sentence.
"""


def text_of(source: str) -> str:
    """An f-string body's literal text as Python reads it (the escapes the fakes use)."""
    return source.replace("\\t", "\t")


def fill(source: str, values: dict[str, Any]) -> str:
    """The fake prompt with its placeholders replaced by ``str`` of the values (what an
    f-string does), built without the reader."""
    text = text_of(source)
    for name, value in values.items():
        text = text.replace("{" + name + "}", str(value))
    return text


def card(name: str) -> dict[str, Any]:
    """The made-up metadata of one fake tool, as AgentFlow's initializer lays it out."""
    plural = name == AGENTFLOW_TOOLS[1]  # one tool with the other key names
    keys = ("limitations", "best_practices") if plural else ("limitation", "best_practice")
    return {
        "tool_name": name,
        "tool_description": f"ZEBRA description of {name}.",
        "tool_version": "9.9.9",
        "input_types": {"query": f"str - ZEBRA query of {name}."},
        "output_type": "str - ZEBRA output.",
        "demo_commands": [
            {"command": 'execution = tool.execute(query="ZEBRA?")', "description": "ZEBRA demo."}
        ],
        "user_metadata": {
            keys[0]: f"\nThe {name} ZEBRA limitation.\n",
            keys[1]: "\nZEBRA practice one.\nZEBRA practice two.\n",
        },
        "require_llm_engine": name == AGENTFLOW_TOOLS[0],
    }


LONG_TO_SHORT = {long: short for short, long in SHORT_NAMES.items()}


def directory_of(name: str) -> str:
    return LONG_TO_SHORT[name].lower().replace("_tool", "")


def tool_source(name: str, imports: str = "") -> str:
    meta = card(name)
    keys = list(meta["user_metadata"])
    requires = "    require_llm_engine = True\n" if meta["require_llm_engine"] else ""
    return f'''from agentflow.tools.base import BaseTool
{imports}
TOOL_NAME = "{name}"

LIMITATION = f"""
The {{TOOL_NAME}} ZEBRA limitation.
"""


class {LONG_TO_SHORT[name]}(BaseTool):
{requires}    def __init__(self, model_string="some-model"):
        super().__init__(
            tool_name=TOOL_NAME,
            tool_description="ZEBRA description of " + TOOL_NAME + ".",
            tool_version="9.9.9",
            input_types={{"query": f"str - ZEBRA query of {{TOOL_NAME}}."}},
            output_type="str - ZEBRA output.",
            demo_commands=[
                {{
                    "command": 'execution = tool.execute(query="ZEBRA?")',
                    "description": "ZEBRA demo.",
                }},
            ],
            user_metadata={{
                "{keys[0]}": LIMITATION,
                "{keys[1]}": "\\nZEBRA practice one.\\n" "ZEBRA practice two.\\n",
            }},
        )
        self.model_string = model_string

    def execute(self, query):
        return query
'''


def f_string(source: str) -> str:
    return f'f"""{source}"""'


ANALYSIS_CLASS = '''from pydantic import BaseModel


class Reading(BaseModel):
    concise_summary: str
    required_skills: str
    relevant_tools: str
    additional_considerations: str

    def __str__(self):
        return f"""
GNU gist >> {self.concise_summary}
GNU know-how:
{self.required_skills}
GNU helpers:
{self.relevant_tools}
GNU caveats:
{self.additional_considerations}
"""
'''
"""A made-up analysis class: AgentFlow's field names, made-up labels."""


def engine_source(name: str, max_tokens: int, top_p: float) -> str:
    """A made-up AgentFlow engine whose ``_generate_text`` has these defaults."""
    return (
        f"class {name}:\n"
        "    def _generate_text(self, prompt, system_prompt=None, temperature=0, "
        f"max_tokens={max_tokens}, top_p={top_p}, response_format=None):\n"
        "        return prompt\n"
    )


WIKI_CUT_END = " <<ZEBRA snip>>"
WIKI_NO_RESULTS = "ZEBRA found nothing for {query}!"
PY_MIDDLE_CUT = " <ZEBRA middle gone> "
PY_OMITTED = "ZEBRA: {count} variables not shown"
COUNTED = "{len(local_vars) - var_count}"  # the count as AgentFlow's f-string computes it
PY_NO_CODE = "ZEBRA saw no code"
PY_TIMEOUT = "ZEBRA ran out of time"
TOOL_PARTS = {
    "wikipedia_search": f'''

class ZebraPages:
    def search_wikipedia(self, query, max_length=100):
        found = self.lookup(query)
        if not found:
            return [{{"title": None, "error": f"{WIKI_NO_RESULTS}"}}]
        text = found[0]
        text = text[:max_length] + f"{WIKI_CUT_END}" if len(text) > max_length else text
        return [{{"title": "x", "abstract": text, "error": f"ZEBRA broke: {{str(query)}}"}}]
''',
    "python_coder": f'''

class ZebraRunner:
    @staticmethod
    def preprocess_code(code):
        if "```" not in code:
            raise ValueError("{PY_NO_CODE}")
        return code

    def truncate_string(self, text, max_length):
        if len(text) <= max_length:
            return text
        return text[:10] + "{PY_MIDDLE_CUT}" + text[-10:]

    def execute_code_snippet(self, code, max_vars=20):
        local_vars, var_count, used_vars = {{}}, 0, {{}}
        try:
            self.run(code)
        except TimeoutError:
            return {{"error": "{PY_TIMEOUT}"}}
        except Exception as e:
            return {{"error": str(e)}}
        if var_count >= max_vars:
            used_vars["__truncated__"] = f"{PY_OMITTED.replace("{count}", COUNTED)}"
        return used_vars
''',
}
"""Made-up pieces of AgentFlow's Wikipedia and Python tools holding their own strings."""


def make_checkout(root: Path) -> Path:
    """A fake AgentFlow checkout: AgentFlow's layout, made-up sentences."""
    package = root / "agentflow" / "agentflow"
    files = {
        "models/planner.py": f'''import json


class Planner:
    def __init__(self, toolbox_metadata=None, available_tools=None, is_multimodal=False):
        self.toolbox_metadata = toolbox_metadata
        self.available_tools = available_tools
        self.is_multimodal = is_multimodal

    def analyze_query(self, question, image):
        if self.is_multimodal:
            query_prompt = f"MULTIMODAL analysis of {{question}} with {{image}}"
        else:
            query_prompt = {f_string(ANALYSIS)}
        self.query_analysis = self.ask(query_prompt)
        return str(self.query_analysis).strip()

    def extract_context_subgoal_and_tool(self, response):
        def normalize_tool_name(tool_name):
            for tool in self.available_tools:
                if tool.lower() == tool_name.lower():
                    return tool
            return f"{UNMATCHED}"

        return normalize_tool_name(response)

    def generate_next_step(self, question, image, query_analysis, memory, step_count,
                           max_step_count, json_data=None):
        if self.is_multimodal:
            prompt_generate_next_step = f"""MULTIMODAL {{question}} {{image}} {{step_count}}"""
        else:
            prompt_generate_next_step = {f_string(NEXT_STEP)}
        next_step = self.ask(prompt_generate_next_step)
        return next_step

    def generate_direct_output(self, question, image, memory):
        if self.is_multimodal:
            prompt_generate_final_output = f"MULTIMODAL {{question}} {{image}}"
        else:
            prompt_generate_final_output = {f_string(GENERALIST)}
        return self.ask(prompt_generate_final_output)
''',
        "models/executor.py": f"""class Executor:
    def generate_tool_command(self, question, image, context, sub_goal, tool_name,
                              tool_metadata, step_count=0, json_data=None):
        prompt_generate_tool_command = {f_string(COMMAND)}
        return self.ask(prompt_generate_tool_command)

    def extract_explanation_and_command(self, response):
        explanation = "Nothing explained here."
        command = "Nothing to run here."
        return explanation, command

    def execute_tool_command(self, tool_name, command):
        def run_one(block):
            if block is None:
                return f"Gave up after {{self.max_time}} ticks"
            return block

        if tool_name is None:
            return f"Could not load {{tool_name}}: {{str(tool_name)}}"
        try:
            executions = []
            for block in command.split(";"):
                result = run_one(block)
                if result is None:
                    executions.append(f"Missed one: {{block}}")
            return executions
        except Exception as e:
            return f"Running failed, sorry: {{str(e)}}"
""",
        "models/verifier.py": f"""class Verifier:
    def verificate_context(self, question, image, query_analysis, memory, step_count=0):
        if self.is_multimodal:
            prompt_memory_verification = f"MULTIMODAL {{question}} {{image}}"
        else:
            prompt_memory_verification = {f_string(VERIFIER)}
        return self.ask(prompt_memory_verification)
""",
        "solver.py": f'''class Solver:
    def solve(self, question, image_path=None):
        tool_name = self.pick(question)
        if tool_name is None or tool_name not in self.planner.available_tools:
            command = "{NO_COMMAND}"
            result = "{NO_RESULT}"
        else:
            command = "run it"
            result = self.run(command)
        return command, result
''',
        "engine/vllm.py": f'''class ChatVLLM:
    DEFAULT_SYSTEM_PROMPT = "{SYSTEM}"

    def __init__(self, system_prompt=DEFAULT_SYSTEM_PROMPT):
        self.system_prompt = system_prompt
''',
        "models/formatters.py": ANALYSIS_CLASS,  # the analysis's response_format class
        "engine/openai.py": engine_source("ChatHosted", 1234, 0.5),
        "engine/dashscope.py": engine_source("ChatCloud", 777, 0.25),
        "tools/base.py": """class BaseTool:
    require_llm_engine = False

    def __init__(self, tool_name=None, tool_description=None, tool_version=None,
                 input_types=None, output_type=None, demo_commands=None, user_metadata=None):
        self.tool_name = tool_name
""",
    }
    wiki = next(n for n in AGENTFLOW_TOOLS if directory_of(n) == "wikipedia_search")
    web = [n for n in AGENTFLOW_TOOLS if directory_of(n) == "web_search"]
    for name in AGENTFLOW_TOOLS:
        imports = ""
        if name == wiki and web:  # AgentFlow's Wikipedia module imports the web RAG tool
            imports = f"from agentflow.tools.web_search.tool import {LONG_TO_SHORT[web[0]]}\n"
        parts = TOOL_PARTS.get(directory_of(name), "")  # the tools' own strings
        files[f"tools/{directory_of(name)}/tool.py"] = tool_source(name, imports) + parts
    for relative, text in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    rollout = root / "train" / "rollout.py"
    rollout.parent.mkdir(parents=True)
    rollout.write_text(
        f'''class Rollout:
    async def _solve_and_evaluate(self, rollout, task, step_n, val=False):
        output_format = "{TAG_SENTENCE}"
        prompt = task["question"] + " " + output_format
        return rollout.solve(question=prompt)
''',
        "utf-8",
    )
    evaluation = root / "test" / "solve.py"  # AgentFlow's evaluation script
    evaluation.parent.mkdir(parents=True, exist_ok=True)
    evaluation.write_text(
        f'''class Solver:
    def solve_single_problem(self, index):
        tool_name = self.pick(index)
        if tool_name is None or tool_name not in self.planner.available_tools:
            print("no such tool")
            command = "{EVAL_NO_COMMAND}"
            result = "{EVAL_NO_RESULT}"
        else:
            command = "run it"
            result = self.run(command)
        return command, result
''',
        "utf-8",
    )
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(COMMIT + "\n")
    return root


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path / "AgentFlow")


# -- the reader -----------------------------------------------------------------------------------
def test_the_reader_takes_every_string_from_the_checkout(checkout: Path) -> None:
    wording = read_agentflow_source(checkout)
    assert wording.system_prompt == SYSTEM
    assert wording.planner.literal == fill(NEXT_STEP, dict.fromkeys(wording.planner.fields, ""))
    assert wording.planner.fields == (
        "question",
        "query_analysis",
        "self.available_tools",
        "self.toolbox_metadata",
        "memory.get_actions()",
    )
    assert wording.planner.literal.endswith("ZEBRA rules sentence.\n" + " " * 20)
    assert "\t" in wording.planner.literal and "MULTIMODAL" not in wording.planner.literal
    assert wording.command.fields == (
        "question",
        "sub_goal",
        "tool_name",
        "tool_metadata",
        "context",
    )
    assert wording.unmatched_tool.render({"tool_name": "X"}) == UNMATCHED.format(tool_name="X")
    assert (wording.no_tool_command, wording.no_tool_result) == (NO_COMMAND, NO_RESULT)
    assert wording.answer_suffix == " " + TAG_SENTENCE
    assert [t.tool_name for t in wording.tools] == sorted(AGENTFLOW_TOOLS, key=directory_of)
    for name in AGENTFLOW_TOOLS:
        assert wording.card(name) == card(name)
    assert wording.commit == COMMIT
    assert wording.label == f"AgentFlow's, from {checkout.resolve()} at {COMMIT}"
    enabled = [
        LONG_TO_SHORT[name] for name in AGENTFLOW_TOOLS if directory_of(name) != "web_search"
    ]
    assert wording.toolbox(enabled) == tuple(sorted(AGENTFLOW_TOOLS))  # the import comes along


def test_the_commit_is_read_from_packed_refs_a_detached_head_or_a_worktree(
    checkout: Path, tmp_path: Path
) -> None:
    git = checkout / ".git"
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{COMMIT} refs/heads/main\n")
    assert checkout_commit(checkout) == COMMIT
    (git / "HEAD").write_text("f" * 40 + "\n")
    assert checkout_commit(checkout) == "f" * 40
    worktree = tmp_path / "worktree"
    (git / "worktrees" / "wt").mkdir(parents=True)
    (git / "worktrees" / "wt" / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "worktrees" / "wt" / "commondir").write_text("../..\n")
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {git / 'worktrees' / 'wt'}\n")
    assert checkout_commit(worktree) == COMMIT
    assert checkout_commit(tmp_path / "nowhere") is None


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        ("train/rollout.py", "train/rollout.py: cannot read it"),
        ("agentflow/agentflow/engine/vllm.py", "engine/vllm.py: cannot read it"),
        ("test/solve.py", "test/solve.py: cannot read it"),
    ],
)
def test_a_missing_file_is_named(checkout: Path, broken: str, named: str) -> None:
    (checkout / broken).unlink()
    with pytest.raises(AgentFlowSourceError, match=re.escape(named)):
        read_agentflow_source(checkout)


def test_a_missing_piece_is_named_with_its_file(checkout: Path) -> None:
    planner = checkout / "agentflow" / "agentflow" / "models" / "planner.py"
    text = planner.read_text()
    planner.write_text(text.replace("def generate_next_step", "def next_step"))
    with pytest.raises(AgentFlowSourceError, match=r"models/planner\.py.*Planner\.generate_next"):
        read_agentflow_source(checkout)
    planner.write_text(text.replace("{memory.get_actions()}", "{memory.files}", 1))
    with pytest.raises(AgentFlowSourceError, match=r"planner\.py.*\{memory\.files\}"):
        read_agentflow_source(checkout)
    planner.write_text(text)
    rollout = checkout / "train" / "rollout.py"
    rollout.write_text("def solve(task):\n    return task\n")
    with pytest.raises(AgentFlowSourceError, match=r"train/rollout\.py.*answer-format sentence"):
        read_agentflow_source(checkout)
    with pytest.raises(AgentFlowSourceError, match="inner package"):
        read_agentflow_source(checkout / "agentflow" / "agentflow")


# -- prompts in AgentFlow's words ------------------------------------------------------------------
def test_an_unknown_tool_step_is_recorded_in_the_checkouts_words(checkout: Path) -> None:
    wording = read_agentflow_source(checkout)
    memory = Memory("Q?", ToolSet([]))
    memory.add_entry(
        MemoryEntry(
            turn=1, justification="", context="", sub_goal="Look", selected_tool=None,
            tool_arguments={}, tool_result="", tool_ok=False, verification_status="INVALID",
            unmatched_tool="Web_Tool",
        )
    )  # fmt: skip
    assert memory_actions(memory, wording) == {
        "Action Step 1": {
            "tool_name": UNMATCHED.format(tool_name="Web_Tool"),
            "sub_goal": "Look",
            "command": NO_COMMAND,
            "result": NO_RESULT,
        }
    }
    # The finish rule (this project's) goes on the line after the checkout's last rule.
    messages = agentflow_planner_messages(memory, ToolSet([]), wording=wording, finish=True)
    assert messages[0]["content"] == SYSTEM
    assert "ZEBRA rules sentence.\n- Once the previous steps" in messages[1]["content"]


@pytest.mark.parametrize(
    ("script", "command", "result"),
    [
        (None, NO_COMMAND, NO_RESULT),  # no preset: the solver's, as before
        ("train", NO_COMMAND, NO_RESULT),  # AgentFlow's training solver
        ("eval", EVAL_NO_COMMAND, EVAL_NO_RESULT),  # AgentFlow's test/solve.py
    ],
)
def test_an_unknown_tool_step_shows_the_no_tool_texts_of_the_script_reproduced(
    checkout: Path, script: str | None, command: str, result: str
) -> None:
    config = SearchEnvConfig.from_kwargs(
        prompt_style="agentflow", agentflow_source=checkout, agentflow_script=script
    )
    wording = config.agentflow_wording()
    assert wording is not None and wording.script == script
    assert (wording.eval_no_tool_command, wording.eval_no_tool_result) == (
        EVAL_NO_COMMAND,
        EVAL_NO_RESULT,
    )
    memory = Memory("Q?", ToolSet([]))
    memory.add_entry(
        MemoryEntry(
            turn=1, justification="", context="", sub_goal="Look", selected_tool=None,
            tool_arguments={}, tool_result="", tool_ok=False, verification_status="INVALID",
            unmatched_tool="Web_Tool",
        )
    )  # fmt: skip
    step = {  # the unmatched-tool text is the planner's, the same in both scripts
        "tool_name": UNMATCHED.format(tool_name="Web_Tool"),
        "sub_goal": "Look",
        "command": command,
        "result": result,
    }
    assert memory_actions(memory, wording) == {"Action Step 1": step}
    shown = str({"Action Step 1": step})
    # The planner's next prompt, the verifier's and the direct-answer prompt all show it.
    planner = agentflow_planner_messages(memory, ToolSet([]), wording=wording)
    assert shown in planner[1]["content"]
    assert shown in verifier_messages(memory, ToolSet([]), wording)[1]["content"]
    assert shown in generalist_messages(memory, wording)[1]["content"]


def test_a_pack_file_keeps_both_scripts_no_tool_texts(checkout: Path, tmp_path: Path) -> None:
    from agentflow_env.workflow.prompt_pack import PromptPack, read_pack, write_pack

    wording = read_agentflow_source(checkout).for_script("eval")
    assert read_pack(write_pack(wording, tmp_path / "pack.json")) == wording
    assert wording.for_script("train").no_tool_texts == (NO_COMMAND, NO_RESULT)
    # A pack file written before the evaluation script was read: the solver's texts.
    data = wording.to_dict()
    for key in ("eval_no_tool_command", "eval_no_tool_result", "script"):
        del data[key]
    older = PromptPack.from_dict(data).for_script("eval")
    assert older.no_tool_texts == (NO_COMMAND, NO_RESULT)


CORPUS = Corpus.from_documents(
    [Document("1", "Zorblat", "The Zorblat is a kitchen robot made by Quonko Corp.")],
    corpus_id="source-test",
)
SEARCH_TASK = Task("zorblat", "Who makes the Zorblat?", ("Quonko Corp",), CORPUS)
PYTHON_TASK = Task("product", "What is 17 * 23 + 5?", ("396",), CORPUS)
ANALYSIS_REPLY = "\n  The query needs one fact.\nA search finds it.  \n"
TOOLS = list(AGENTFLOW_TOOLS)


def responder(role: str, request: dict[str, Any]) -> str:
    """Scripted models keyed on the fake checkout's made-up prompts; anything else is a call
    of a tool's own model."""
    text = user_text(request)
    if text.startswith("\nYAK analysis sentence."):
        return ANALYSIS_REPLY
    if text.startswith("\n        ZEBRA command task."):
        sub_goal = re.search(r"^- SG: (.*)$", text, re.MULTILINE).group(1)  # type: ignore[union-attr]
        return f'Generated Command:\n```python\nexecution = tool.execute(query="{sub_goal}")\n```'
    if text.startswith("\nZEBRA verifier sentence."):
        return "Not yet.\nConclusion: CONTINUE"
    if text.startswith("\nOKAPI answer sentence."):
        return "**Answer:** Quonko Corp"
    if "17 * 23" in text:
        return "```python\nprint(17 * 23 + 5)\n```"
    return "The Zorblat is made by Quonko Corp."


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FakeOpenAIServer(responder) as running:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", running.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        monkeypatch.delenv("AGENTFLOW_SOURCE", raising=False)
        yield running


def planner_prompt(question: str, steps: dict[str, Any]) -> list[dict[str, str]]:
    """The planner's messages as AgentFlow would send them, built from the fake files."""
    values = {
        "question": question,
        "query_analysis": ANALYSIS_REPLY.strip(),
        "self.available_tools": TOOLS,
        "self.toolbox_metadata": {name: card(name) for name in TOOLS},
        "memory.get_actions()": steps,
    }
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": fill(NEXT_STEP, values)},
    ]


@pytest.mark.parametrize(
    ("task", "tool", "sub_goal"),
    [
        (SEARCH_TASK, "Wikipedia_RAG_Search_Tool", "Zorblat maker"),
        (PYTHON_TASK, "Python_Code_Generator_Tool", "Compute 17 * 23 + 5"),
    ],
    ids=["search", "python"],
)
def test_the_first_and_third_planner_prompts_are_agentflows_byte_for_byte(
    server: FakeOpenAIServer, checkout: Path, task: Task, tool: str, sub_goal: str
) -> None:
    env = gym.make(
        "AgentFlow-Search-v0", preset="agentflow_eval", tasks=[task], agentflow_source=checkout
    )
    observation, _ = env.reset(seed=0)
    session = env.unwrapped.session
    first = planner_prompt(task.question, {})
    assert session.messages() == first
    assert first[1]["content"] in observation["text"]

    for action_tool, action_goal in ((tool, sub_goal), ("Nonexistent_Tool", "Look elsewhere")):
        action = format_planner_action(
            justification="Next.", context="ctx", sub_goal=action_goal, tool_name=action_tool
        )
        observation, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated)
    result = memory_actions(session.memory)["Action Step 1"]["result"]  # the tool's own output
    third = planner_prompt(
        task.question,
        {
            "Action Step 1": {
                "tool_name": tool,
                "sub_goal": sub_goal,
                "command": f'execution = tool.execute(query="{sub_goal}")',
                "result": result,
            },
            "Action Step 2": {  # the evaluation script's words (the preset's)
                "tool_name": UNMATCHED.format(tool_name="Nonexistent_Tool"),
                "sub_goal": "Look elsewhere",
                "command": EVAL_NO_COMMAND,
                "result": EVAL_NO_RESULT,
            },
        },
    )
    assert session.messages() == third
    assert third[1]["content"] in observation["text"]
    assert env.unwrapped.wording_label == f"AgentFlow's, from {checkout.resolve()} at {COMMIT}"

    # The modules spoke the checkout's words too, under its system prompt.
    requests = [r["messages"] for r in server.requests]
    module_calls = [m for m in requests if m[0]["content"] == SYSTEM]
    assert [m[1]["content"].split("\n")[1].strip() for m in module_calls] == [
        "YAK analysis sentence.",
        "ZEBRA command task.",
        "ZEBRA verifier sentence.",
        "ZEBRA verifier sentence.",
    ]
    assert module_calls[0][1]["content"] == fill(
        ANALYSIS,
        {
            "question": task.question,
            "self.available_tools": TOOLS,
            "self.toolbox_metadata": {name: card(name) for name in TOOLS},
        },
    )
    assert module_calls[1][1]["content"] == fill(
        COMMAND,
        {
            "question": task.question,
            "sub_goal": sub_goal,
            "tool_name": tool,
            "tool_metadata": card(tool),
            "context": "ctx",
        },
    )
    env.close()


def test_the_verifier_and_generalist_prompts_fill_the_checkouts_f_strings(checkout: Path) -> None:
    wording = read_agentflow_source(checkout)
    env = gym.make(
        "AgentFlow-Search-v0", preset="agentflow_eval", modules="rule", tasks=[SEARCH_TASK]
    )
    toolset = env.unwrapped.tools
    env.close()
    memory = Memory("Q?", toolset)
    memory.set_analysis(
        LLMQueryAnalysis(objective="x", text=ANALYSIS_REPLY.strip(), raw=ANALYSIS_REPLY)
    )
    messages = verifier_messages(memory, toolset, wording)
    assert messages[1]["content"] == fill(
        VERIFIER,
        {
            "question": "Q?",
            "self.available_tools": TOOLS,
            "self.toolbox_metadata": {name: card(name) for name in TOOLS},
            "query_analysis": ANALYSIS_REPLY.strip(),
            "memory.get_actions()": {},
        },
    )
    # The direct-answer prompt shows the analysis reply itself, not stripped (as AgentFlow's).
    answer = generalist_messages(memory, wording)
    assert answer == [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": fill(
                GENERALIST,
                {
                    "question": "Q?",
                    "self.query_analysis": ANALYSIS_REPLY,
                    "memory.get_actions()": {},
                },
            ),
        },
    ]
    command = command_messages("Q?", "SG", "C", toolset.get(TOOLS[0]), wording)
    assert (
        command[0]["content"] == SYSTEM and "- TM: " + str(card(TOOLS[0])) in command[1]["content"]
    )


# -- the setting ---------------------------------------------------------------------------------
def test_without_a_checkout_the_wording_is_the_projects_own(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTFLOW_SOURCE", raising=False)
    config = SearchEnvConfig.from_kwargs(preset="agentflow_eval")
    assert config.agentflow_wording() is None and config.wording_label() == "own"
    monkeypatch.setenv("AGENTFLOW_SOURCE", str(checkout))
    assert config.wording_label().startswith("AgentFlow's, from ")
    assert SearchEnvConfig().wording_label() == "own"  # this project's prompt style: ignored
    with pytest.raises(ValueError, match="prompt_style='agentflow'"):
        SearchEnvConfig(agentflow_source=str(checkout))


def test_a_broken_checkout_fails_when_the_env_is_built(checkout: Path) -> None:
    (checkout / "agentflow" / "agentflow" / "solver.py").write_text("class Solver:\n    pass\n")
    with pytest.raises(ValueError, match=r"solver\.py.*Solver\.solve"):
        gym.make("AgentFlow-Search-v0", preset="agentflow_eval", agentflow_source=checkout)


def test_training_questions_get_the_checkouts_tag_sentence(checkout: Path, tmp_path: Path) -> None:
    data = tmp_path / "train.json"
    questions = ["Who makes the Zorblat?", "Say <answer>x</answer> please"]
    data.write_text(json.dumps([{"question": q, "answer": "x"} for q in questions]))
    config = SearchEnvConfig.from_kwargs(
        preset="agentflow_train",
        dataset=os.fspath(data),
        tools=("Calculator",),
        agentflow_source=checkout,
    )
    source = config.make_task_source()
    # As AgentFlow's rollout: appended to each question as it is, joined with its separator.
    assert [t.question for t in source.tasks] == [q + " " + TAG_SENTENCE for q in questions]


def test_prepared_training_labels_carry_the_checkouts_tag_sentence(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``prepare_data.py`` writes inline records: the sentence must be in them, not the env's."""
    from conftest import load_adapter

    from agentflow_env.rollout.labels.spec import TaskSpec

    prepare = load_adapter("adapters/openrlhf/prepare_data.py", "agentflow_prepare_checkout")
    data = tmp_path / "train.json"
    questions = ["Who makes the Zorblat?", "What is 2 + 2?"]
    data.write_text(json.dumps([{"question": q, "answer": "x"} for q in questions]))
    for how, out in (("kwargs", "a.jsonl"), ("variable", "b.jsonl")):
        argv = ["dataset", "--file", str(data), "--out", str(tmp_path / out)]
        argv += ["--preset", "agentflow_train"]
        if how == "kwargs":
            argv += ["--env-kwargs", json.dumps({"agentflow_source": os.fspath(checkout)})]
        else:
            monkeypatch.setenv("AGENTFLOW_SOURCE", os.fspath(checkout))
        assert prepare.main(argv) == 0
        rows = [json.loads(line) for line in (tmp_path / out).read_text().splitlines()]
        records = [TaskSpec.from_json(row["label"]).record or {} for row in rows]
        assert [r["question"] for r in records] == [q + " " + TAG_SENTENCE for q in questions]


def test_check_and_eval_say_which_wording_they_used(
    checkout: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTFLOW_SOURCE", raising=False)
    out = tmp_path / "run"
    argv = ["eval", "--out", str(out), "--quiet", "--episodes", "2", "--no-budget-curve"]
    settings = ["--prompt-style", "agentflow", "--agentflow-source", str(checkout)]
    assert main([*argv, *settings]) == 0
    printed = capsys.readouterr().out
    label = f"AgentFlow's, from {checkout.resolve()} at {COMMIT}"
    assert f"wording: {label}" in printed
    assert json.loads((out / "summary.json").read_text())["wording"] == label
    assert main(["eval", "--out", str(tmp_path / "own"), "--quiet", "--episodes", "1"]) == 0
    assert json.loads((tmp_path / "own" / "summary.json").read_text())["wording"] == "own"

    capsys.readouterr()
    assert main(["check", "--json", *settings]) == 0
    assert json.loads(capsys.readouterr().out)["facts"]["wording"] == label
