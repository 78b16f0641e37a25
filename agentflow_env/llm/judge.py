"""``LLMJudge``: AgentFlow-style answer judging for ``reward="llm_judge"``."""

from __future__ import annotations

from collections.abc import Sequence

from agentflow_env.llm.client import ChatBackend, LLMEndpoint, LLMError, as_backend
from agentflow_env.llm.prompts import judge_messages, parse_judgement

__all__ = ["LLMJudge"]


class LLMJudge:
    """Asks a model whether the answer matches a gold answer; 1.0 for True, 0.0 for False.

    The model writes a short analysis and ends with ``Verdict: True|False`` (an AgentFlow
    ``<true_false>`` tag is read too). A reply without a verdict is asked again up to
    ``verdict_retries`` times, then raises ``LLMError`` (the session scores that as 0.0 and
    records the error). A missing answer scores 0.0 without a call.
    """

    def __init__(self, backend: LLMEndpoint | ChatBackend, verdict_retries: int = 1) -> None:
        self.backend = as_backend(backend)
        self.verdict_retries = verdict_retries

    async def judge(self, question: str, answer: str | None, gold_answers: Sequence[str]) -> float:
        if answer is None or not answer.strip():
            return 0.0
        messages = judge_messages(question, answer, gold_answers)
        replies = []
        for _ in range(self.verdict_retries + 1):
            reply = await self.backend.chat(messages)
            verdict = parse_judgement(reply.text)
            if verdict is not None:
                return 1.0 if verdict else 0.0
            replies.append(reply.text[-200:])
        raise LLMError(f"the judge gave no True/False verdict; last reply ends: {replies[-1]!r}")
