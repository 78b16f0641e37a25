"""This project's own prompt pack: its own sentences in AgentFlow's formats.

The ``agentflow`` prompt style renders every pack the same way (``agentflow_format``,
``modules.agentflow_prompts``); without a checkout or a pack file this is the pack it renders.
The headers, field names and renderings are AgentFlow's, so a planner trained with AgentFlow's
code recognises the prompt; the task, instruction and rule sentences are this project's.
"""

from __future__ import annotations

from agentflow_env.tasks.scoring import ANSWER_TAG_INSTRUCTION
from agentflow_env.workflow.prompt_pack import OWN_WORDING, PromptPack, Template

__all__ = ["AGENTFLOW_SYSTEM", "NO_TOOL_COMMAND", "NO_TOOL_RESULT", "OWN_PACK"]

AGENTFLOW_SYSTEM = "You are a helpful, creative, and smart assistant."
"""The system prompt every AgentFlow model call runs under (its engines' default): kept verbatim,
since a trained planner saw it in every prompt."""

NO_TOOL_COMMAND = "No command: the selected tool is not available."
NO_TOOL_RESULT = "No result: the selected tool is not available."
"""What a turn that named no usable tool records as its command and result (AgentFlow records such
a step too, and its verifier still runs)."""

UNMATCHED_TOOL = "No matched tool given: {tool_name}"

NO_COMMAND = "No command: the executor's reply held no code block."
COMMAND_FAILURE = "The command could not be run: {reason}"
NO_EXECUTION = "This part of the command set no execution: {block}"
"""What memory records, under AgentFlow's scripts, for an executor reply with no command, a
command that cannot be run, and a part of one that sets no ``execution``."""

PLANNER_TEMPLATE = """
Task: Decide the most useful next step toward answering the query, using the available tools \
and what the previous steps found.

Context:
- **Query:** {query}
- **Query Analysis:** {analysis}
- **Available Tools:** {tools}
- **Toolbox Metadata:** {metadata}
- **Previous Steps:** {steps}

Instructions:
1. Study the query, the steps taken so far and the tools that are available.
2. Pick the **single best tool** for the next step.
3. State a concrete **sub-goal** that this tool can achieve.
4. Give the tool every piece of **context** it needs (data, names, values from earlier steps).

Response Format:
1.  **Justification:** Why this tool and this sub-goal.
2.  **Context:** Everything the tool needs to know.
3.  **Sub-Goal:** The objective of this step for the tool.
4.  **Tool Name:** The exact name of the chosen tool.

Rules:
- Choose exactly ONE tool.
- The tool must be able to achieve the sub-goal directly.
- The Context section must hold all the information the tool needs.
- End the response with the Context, Sub-Goal and Tool Name sections, in that order, and add \
nothing after them.
"""

ANALYSIS_TEMPLATE = """
Task: Analyze the query to work out which skills and tools answering it takes.

Inputs:
- Query: {query}
- Available tools: {tools}
- Metadata for tools: {metadata}

Instructions:
1. Name the main objectives of the query.
2. List the skills and the tools it needs.
3. Say briefly how each skill and tool helps.
4. Note anything else that matters.

Reply with these four sections:
Concise Summary: <the query's main points and objectives>
Required Skills:
<one skill per line, with why it is needed>
Relevant Tools:
<one tool per line, with how it would be used and its limits>
Additional Considerations:
<anything else to keep in mind>

Keep it brief and precise.
"""

COMMAND_TEMPLATE = """
Task: Write the exact command that runs the selected tool for this step.

Context:
- **Query:** {query}
- **Sub-Goal:** {sub_goal}
- **Tool Name:** {tool_name}
- **Tool Metadata:** {metadata}
- **Relevant Data:** {context}

Instructions:
1. Read the tool's parameters from its metadata.
2. Write one call `tool.execute(...)` that achieves the sub-goal with the given data.
3. Assign the call to a variable named **`execution`**.
4. Give every value literally (exact numbers and strings), not as expressions.

Output Format:
Generated Command:
```python
execution = tool.execute(<parameter>=<value>)
```
"""

VERIFIER_TEMPLATE = """
Task: Judge whether the memory already answers the query completely and correctly, or whether \
more tool calls are needed.

Context:
- **Query:** {query}
- **Available Tools:** {tools}
- **Toolbox Metadata:** {metadata}
- **Initial Analysis:** {analysis}
- **Memory (Tools Used & Results):** {memory}

Instructions:
1.  Read the query, the initial analysis and the memory.
2.  Check that every part of the query is answered by a result in memory.
3.  Look for contradictions, and for facts that are unclear or still need checking.
4.  Consider whether a tool not used yet could supply what is missing.

Final Determination:
-   If the memory is enough, say why and conclude with "STOP".
-   If something is missing, say what and which tool could find it, and conclude with "CONTINUE".

IMPORTANT: End the response with either "Conclusion: STOP" or "Conclusion: CONTINUE".
"""

GENERALIST_TEMPLATE = """
Task: Write a concise final answer to the query from everything gathered.

Context:
- **Query:** {query}
- **Initial Analysis:** {analysis}
- **Actions Taken:** {memory}

Instructions:
1. Review the query and the results of every action.
2. Summarise, step by step, how the query was addressed.
3. Give a direct, precise answer to the query.

Output Structure:
1.  **Process Summary:** The steps taken, with the purpose and key result of each.
2.  **Answer:** The direct, concise answer to the query.
"""


def _template(text: str, where: str, **names: str) -> Template:
    return Template.from_format(text, f"this project's {where}", names)


OWN_PACK = PromptPack(
    name=OWN_WORDING,
    origin=None,
    commit=None,
    system_prompt=AGENTFLOW_SYSTEM,
    planner=_template(
        PLANNER_TEMPLATE,
        "next-step prompt",
        query="question",
        analysis="query_analysis",
        tools="self.available_tools",
        metadata="self.toolbox_metadata",
        steps="memory.get_actions()",
    ),
    analysis=_template(
        ANALYSIS_TEMPLATE,
        "query-analysis prompt",
        query="question",
        tools="self.available_tools",
        metadata="self.toolbox_metadata",
    ),
    command=_template(
        COMMAND_TEMPLATE,
        "command prompt",
        query="question",
        sub_goal="sub_goal",
        tool_name="tool_name",
        metadata="tool_metadata",
        context="context",
    ),
    verifier=_template(
        VERIFIER_TEMPLATE,
        "verifier prompt",
        query="question",
        tools="self.available_tools",
        metadata="self.toolbox_metadata",
        analysis="query_analysis",
        memory="memory.get_actions()",
    ),
    generalist=_template(
        GENERALIST_TEMPLATE,
        "direct-answer prompt",
        query="question",
        analysis="query_analysis",
        memory="memory.get_actions()",
    ),
    unmatched_tool=_template(UNMATCHED_TOOL, "unknown-tool text", tool_name="tool_name"),
    no_tool_command=NO_TOOL_COMMAND,
    no_tool_result=NO_TOOL_RESULT,
    answer_suffix=" " + ANSWER_TAG_INSTRUCTION,
    no_command=NO_COMMAND,
    command_failure=_template(COMMAND_FAILURE, "command failure text", reason="str(e)"),
    no_execution=_template(NO_EXECUTION, "no-execution text", block="block"),
)
"""The pack the ``agentflow`` style renders without ``agentflow_source``. It holds no tool cards
(each tool shows its own), and the task sources append its answer-tag sentence themselves
(``answer_tag_suffix``: ``tasks.scoring.with_answer_tag_instruction``)."""
