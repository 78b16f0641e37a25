"""The planner's prompt: a system message with the tool cards and a user message from memory."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

from agentflow_env.base.tokens import ChatTokenizer
from agentflow_env.base.untrusted import shorten
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import FINISH_TOOL_NAME
from agentflow_env.workflow.agentflow_format import agentflow_planner_messages
from agentflow_env.workflow.memory import Memory, QueryAnalysis, cached_text
from agentflow_env.workflow.outcome import planner_may_finish, verifier_may_stop
from agentflow_env.workflow.prompt_pack import PromptPack

Message = dict[str, str]
PromptStyle = Literal["full", "compact", "agentflow"]
"""The planner prompts: this project's (``"full"``), ``"compact"``, or AgentFlow's own format."""
PROMPT_STYLES: tuple[str, ...] = get_args(PromptStyle)


@dataclass(frozen=True)
class StyleRules:
    """What a prompt style changes beyond the planner's prompt: a style is this project's
    prompt, or a prompt pack rendered in AgentFlow's formats plus these named behaviours."""

    renders_pack: bool = False
    """The planner and the LLM modules speak a ``PromptPack`` (``agentflow_source`` picks it)."""
    exact_tool_names: bool = False
    """Tool names match only as AgentFlow's planner matches them (no aliases, no fuzz)."""
    agentflow_shapes: bool = False
    """Tool results take AgentFlow's tools' shapes."""


STYLE_RULES: dict[str, StyleRules] = {
    "full": StyleRules(),
    "compact": StyleRules(),
    "agentflow": StyleRules(renders_pack=True, exact_tool_names=True, agentflow_shapes=True),
}
"""Prompt style -> its rules; the one place a style's behaviours are named."""


def style_rules(style: str) -> StyleRules:
    """The rules of ``style`` (``KeyError`` for a style that is not one of ``PROMPT_STYLES``)."""
    return STYLE_RULES[style]


MAX_FEEDBACK_FIELD_CHARS = 2000

PLANNER_SYSTEM = """You are the planner of a tool-using agent. Each turn you choose ONE tool call \
that moves the agent toward answering the query; an executor runs it, a verifier checks the \
memory, and a final writer answers once the evidence is enough.

Available tools:
{tool_cards}

Reply with exactly these four fields and nothing else:
Justification: <why this tool, now>
Context: <everything the tool needs, e.g. the exact search query or arithmetic expression>
Sub-Goal: <what this step should achieve>
Tool Name: <one of: {tool_names}>"""

COMPACT_SYSTEM = """Plan one tool call per turn. Tools: {tool_names}.
Reply as:
Context: <query or expression>
Sub-Goal: <goal>
Tool Name: <tool>"""

FINISH_FULL = f"""

When the memory holds the evidence that answers the query, end the episode with your answer \
instead of a tool call:
Justification: <why the evidence is enough>
Final Answer: <the answer, as short as possible>
Tool Name: {FINISH_TOOL_NAME}"""
FINISH_ADVISORY = """
The verifier's verdict on each step (Verification: STOP or CONTINUE) is advice: the episode \
goes on until you finish or the steps run out."""
FINISH_OR_VERIFIER = """
The episode also ends when the verifier says STOP; a final writer then answers."""
FINISH_COMPACT = f"""
To finish with an answer, reply as:
Final Answer: <answer>
Tool Name: {FINISH_TOOL_NAME}"""


def finish_instructions(termination: str, style: str = "full") -> str:
    """What the system prompt adds about the finish action (nothing when the planner may not
    finish: then the prompt is exactly that of a workflow without one)."""
    if not planner_may_finish(termination):
        return ""
    if style == "compact":
        return FINISH_COMPACT
    return FINISH_FULL + (FINISH_OR_VERIFIER if verifier_may_stop(termination) else FINISH_ADVISORY)


def planner_messages(
    memory: Memory,
    tools: ToolSet,
    turn: int,
    max_turns: int,
    *,
    style: str = "full",
    show_sub_questions: bool = True,
    termination: str = "verifier",
    wording: PromptPack | None = None,
) -> list[Message]:
    """Messages for the planner's next turn (``turn`` counts from 1).

    ``style``: ``"full"`` (this project's prompt), ``"compact"`` or ``"agentflow"`` (AgentFlow's
    own format, ``agentflow_format``). ``show_sub_questions``: the analysis's sub-questions and
    the verifier's open questions appear in the prompt (a hint AgentFlow never gives).
    ``termination``: with ``"planner"`` or ``"both"`` the prompt describes the finish action.
    ``wording``: the prompt pack a pack-rendering style speaks (``None``: this project's own).
    """
    if style_rules(style).renders_pack:
        return agentflow_planner_messages(
            memory,
            tools,
            show_sub_questions=show_sub_questions,
            finish=planner_may_finish(termination),
            wording=wording,
            turn=turn,
            max_turns=max_turns,
        )
    template = COMPACT_SYSTEM if style == "compact" else PLANNER_SYSTEM
    system = template.format(tool_cards=cards_text(tools), tool_names=", ".join(tools.names))
    system += finish_instructions(termination, style)
    return [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": user_message(
                memory, turn, max_turns, style=style, show_sub_questions=show_sub_questions
            ),
        },
    ]


def user_message(
    memory: Memory,
    turn: int,
    max_turns: int,
    *,
    style: str = "full",
    show_sub_questions: bool = True,
) -> str:
    if style == "compact":
        history = memory.render(keep_full=2, max_old_result_chars=200)
        return f"Query: {memory.query}\n\n{history}\n\nStep {turn}:"
    analysis = ""
    if memory.analysis is not None:
        analysis = analysis_render(memory.analysis, show_sub_questions=show_sub_questions)
    open_questions = memory.open_questions() if show_sub_questions else ()
    parts = [f"Query: {memory.query}"]
    if analysis:
        parts.append(f"Query analysis:\n{analysis}")
    parts.append(f"Memory:\n{memory.render()}")
    if open_questions and len(memory):
        parts.append("Open questions: " + " | ".join(open_questions))
    parts.append(f"Step {turn} of at most {max_turns}: choose the next tool call.")
    return "\n\n".join(parts)


def cards_text(tools: ToolSet) -> str:
    """``tools.cards_text()``, each card rendered once (``cached_text``: cards are frozen)."""
    if type(tools) is not ToolSet:
        return tools.cards_text()
    return "\n".join(cached_text(tool.card, "card", tool.card.render) for tool in tools)


def analysis_render(analysis: QueryAnalysis, *, show_sub_questions: bool = True) -> str:
    """``analysis.render()``, without the sub-questions unless ``show_sub_questions``; made once
    per analysis (``cached_text``)."""
    key = ("analysis", show_sub_questions)
    return cached_text(analysis, key, _render_analysis, analysis, show_sub_questions)


def _render_analysis(analysis: QueryAnalysis, show_sub_questions: bool) -> str:
    shown = analysis
    if not show_sub_questions:
        shown = dataclasses.replace(shown, sub_questions=())
    return shown.render()


def step_feedback(
    memory: Memory, turn: int, max_turns: int, *, show_open_questions: bool = True
) -> str:
    """What the planner is told after a turn when the history grows (flat mode)."""
    entry = memory.entries[-1]
    lines = [f"Step {entry.turn} result ({entry.selected_tool or 'no tool'}):"]
    if entry.errors:
        lines.append("Errors: " + shorten(" | ".join(entry.errors), MAX_FEEDBACK_FIELD_CHARS))
    if entry.tool_result:
        lines.append(entry.tool_result)
    lines.append(f"Verification: {entry.verification_status}")
    if entry.open_questions and show_open_questions:
        lines.append("Open questions: " + " | ".join(entry.open_questions))
    lines.append(f"Step {turn} of at most {max_turns}: choose the next tool call.")
    return "\n".join(lines)


_MARK = "\u2063AGENTFLOW-ACTION\u2063"


def chat_continuation(tokenizer: ChatTokenizer, user_text: str, *, after_eos: bool) -> str:
    """The text that follows a planner action in a growing conversation.

    It closes the assistant turn, adds ``user_text`` as the next user turn and opens the next
    assistant turn, all in the tokenizer's own chat template, so a trainer can tokenize it alone
    and append it (as OpenRLHF's executor does). If the action already ended with the
    end-of-turn token, that token is not repeated.
    """
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": _MARK},
        {"role": "user", "content": user_text},
    ]
    rendered = tokenizer.render_chat(messages, add_generation_prompt=True)
    glue = rendered[rendered.index(_MARK) + len(_MARK) :]
    if after_eos:
        eos = tokenizer.decode([tokenizer.eos_token_id])
        if eos and glue.startswith(eos):
            glue = glue[len(eos) :]
    return glue
