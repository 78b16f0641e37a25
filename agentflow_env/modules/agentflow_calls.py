"""How AgentFlow's own scripts call their frozen modules (``agentflow_script`` set, the presets).

Two things differ from this project's own calls, both read from the user's checkout through the
prompt pack (``PromptPack.engine_defaults``, ``analysis_fields``, ``analysis_shown``):

- each call's ``max_tokens`` and ``top_p`` are the defaults of the AgentFlow engine that stands
  for the endpoint (``engine_backend``);
- the query analysis is asked for as a structured reply with the fields of AgentFlow's analysis
  class (a JSON-schema ``response_format``, which OpenAI and vLLM servers take), and the parsed
  fields are shown as that class's ``__str__`` shows them. AgentFlow's DashScope engine sends
  no format, so a DashScope endpoint is asked for free text, as there.

The own pack names no engine defaults and no analysis class: without a checkout the calls are
this project's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from agentflow_env.llm.client import ChatClient, LLMEndpoint
from agentflow_env.workflow.prompt_pack import PromptPack

__all__ = [
    "STRUCTURED",
    "STRUCTURED_REFUSED",
    "STRUCTURED_UNREAD",
    "analysis_format",
    "engine_backend",
    "module_sampling",
    "read_structured",
    "shown_analysis",
]

STRUCTURED = "json_schema"
"""``meta["response_format"]`` of an analysis asked for, and read, as a structured reply."""
STRUCTURED_REFUSED = "refused"
"""... of one whose endpoint refused the format: asked again as free text."""
STRUCTURED_UNREAD = "json_schema_unread"
"""... of one asked for a structured reply whose text is not one (shown as written)."""


def engine_backend(backend: object) -> str:
    """Which AgentFlow engine an endpoint stands for: ``dashscope`` on a DashScope host;
    ``openai`` on OpenAI's host or for a model whose name holds ``gpt`` (the rule AgentFlow's
    engine factory picks its OpenAI engine by); else ``vllm`` (a local OpenAI-compatible
    server, an in-process engine)."""
    endpoint = getattr(backend, "endpoint", backend)
    if not isinstance(endpoint, LLMEndpoint):
        return "vllm"
    host = (urlsplit(endpoint.base_url).hostname or "").lower()
    if "dashscope" in host:
        return "dashscope"
    if host == "api.openai.com" or "gpt" in endpoint.model.lower():
        return "openai"
    return "vllm"


def module_sampling(backend: object, pack: PromptPack | None, script: str | None) -> dict[str, Any]:
    """The ``max_tokens`` and ``top_p`` AgentFlow's engine for ``backend`` sends by default
    (``{}`` outside AgentFlow's scripts, or where the pack names none)."""
    if script is None or pack is None:
        return {}
    values = pack.engine_defaults.get(engine_backend(backend), {})
    options: dict[str, Any] = {}
    if "max_tokens" in values:
        options["max_tokens"] = int(values["max_tokens"])
    if "top_p" in values:
        options["top_p"] = float(values["top_p"])
    return options


def analysis_format(
    backend: object, pack: PromptPack | None, script: str | None
) -> dict[str, Any] | None:
    """The ``response_format`` asking for the analysis fields of ``pack`` as a JSON object;
    ``None`` outside AgentFlow's scripts, for a pack that asks for free text, for a DashScope
    endpoint (AgentFlow's DashScope engine sends none) and for a backend that is no HTTP client
    (it takes no format)."""
    if script is None or pack is None or not pack.analysis_fields:
        return None
    if not isinstance(backend, ChatClient) or engine_backend(backend) == "dashscope":
        return None
    fields = list(pack.analysis_fields)
    schema = {
        "type": "object",
        "properties": {name: {"type": "string"} for name in fields},
        "required": fields,
        "additionalProperties": False,
    }
    return {
        "type": "json_schema",
        "json_schema": {"name": "query_analysis", "strict": True, "schema": schema},
    }


def read_structured(text: str, fields: Sequence[str]) -> dict[str, str] | None:
    """The fields of a structured reply: the JSON object ``text`` holds, with every field;
    ``None`` for any other reply. Values are kept as text, untouched."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        value = json.JSONDecoder(strict=False).raw_decode(text[start:])[0]
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or any(name not in value for name in fields):
        return None
    return {name: _as_text(value[name]) for name in fields}


def shown_analysis(pack: PromptPack, values: Mapping[str, str]) -> str:
    """The structured analysis as AgentFlow's analysis class shows itself (its ``__str__``),
    unstripped; the planner and the verifier see it stripped."""
    if pack.analysis_shown is None:
        raise ValueError("the pack names no analysis class to show a structured reply with")
    return pack.analysis_shown.render({f"self.{name}": value for name, value in values.items()})


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
