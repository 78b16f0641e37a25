"""Built-in tools (Search, Calculator), argument validation, the registry and ToolSet."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from agentflow_env.retrieval.bm25 import clear_index_cache
from agentflow_env.retrieval.corpus import Corpus, Document, parse_documents
from agentflow_env.tools import (
    CalculatorTool,
    SearchTool,
    Tool,
    ToolArgumentError,
    ToolCard,
    ToolContext,
    ToolResult,
    ToolSet,
    canonical_tool_name,
    make_tool,
    register_tool,
    registered_tools,
)
from agentflow_env.tools import registry as registry_module

CORPUS = Corpus.from_documents(
    [
        Document("a", "Ada Lovelace", "English mathematician, wrote the first published program."),
        Document("b", "Charles Babbage", "Designed the Analytical Engine, a mechanical computer."),
        Document("c", "Alan Turing", "Defined the Turing machine in 1936. " * 200),
        Document("d", "Grace Hopper", "Developed an early compiler and promoted COBOL."),
    ]
)


def run(tool: Tool, arguments: Any, context: ToolContext | None = None) -> ToolResult:
    return asyncio.run(tool.run(arguments, context or ToolContext(corpus=CORPUS)))


def calc(expression: str) -> ToolResult:
    return run(CalculatorTool(), {"expression": expression}, ToolContext())


@pytest.fixture(autouse=True)
def fresh_index_cache() -> Iterator[None]:
    clear_index_cache()
    yield
    clear_index_cache()


# --- argument validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument 'query'"),
        ({"query": "x", "k": 3}, "unknown argument"),
        ({"query": 3}, "must be string"),
        ({"query": "x", "top_k": "3"}, "must be integer"),
        ({"query": "x", "top_k": True}, "must be integer"),
        ({"query": "   "}, "is empty"),
        (["query"], "must be an object"),
    ],
)
def test_search_validation_errors(arguments: Any, message: str) -> None:
    tool = SearchTool()
    with pytest.raises(ToolArgumentError, match=message):
        tool.validate(arguments)
    result = run(tool, arguments)
    assert not result.ok and result.error is not None and message in result.error


@pytest.mark.parametrize(
    "arguments", [{}, {"expression": 1}, {"expression": ""}, {"expr": "1+1"}, "1+1"]
)
def test_calculator_validation_errors_are_failures(arguments: Any) -> None:
    with pytest.raises(ToolArgumentError):
        CalculatorTool().validate(arguments)
    result = run(CalculatorTool(), arguments)
    assert not result.ok and result.error


# --- Search ------------------------------------------------------------------------------------


def test_search_cards_and_names() -> None:
    assert SearchTool().card.name == "Search"
    assert SearchTool().card.primary_argument == "query"
    assert CalculatorTool().card.name == "Calculator"
    assert CalculatorTool().card.primary_argument == "expression"
    assert "one entity or fact at a time" in SearchTool().card.render()


def test_search_output_parses_back_and_carries_metadata() -> None:
    result = run(SearchTool(top_k=2), {"query": "Ada Lovelace"})
    assert result.ok and result.error is None
    pairs = parse_documents(result.output)
    assert pairs[0] == ("Ada Lovelace", CORPUS.documents[0].text)
    assert len(pairs) == len(result.metadata["doc_ids"]) <= 2
    assert result.metadata["doc_ids"][0] == "a"
    assert len(result.metadata["scores"]) == len(pairs)
    assert all(isinstance(score, float) for score in result.metadata["scores"])


def test_search_top_k_argument_is_clamped() -> None:
    tool = SearchTool(top_k=1)
    assert len(run(tool, {"query": "the"}).metadata["doc_ids"]) == 1
    many = run(tool, {"query": "the", "top_k": 50}).metadata["doc_ids"]
    assert 1 < len(many) <= 10
    assert len(run(tool, {"query": "the", "top_k": -4}).metadata["doc_ids"]) == 1


def test_search_cuts_long_documents() -> None:
    result = run(SearchTool(top_k=1, max_chars_per_document=100), {"query": "Turing machine"})
    ((title, text),) = parse_documents(result.output)
    assert title == "Alan Turing"
    assert text.endswith(" ...")
    assert len(text) <= 100 + len(" ...")
    assert CORPUS.documents[2].text.startswith(text[: -len(" ...")])


def test_search_without_results_or_corpus() -> None:
    result = run(SearchTool(), {"query": "zeppelin"})
    assert result.ok and result.output == "No results."
    assert result.metadata == {"doc_ids": [], "scores": []}
    no_corpus = run(SearchTool(), {"query": "Ada"}, ToolContext(corpus=None))
    assert not no_corpus.ok and no_corpus.error and "no document collection" in no_corpus.error


# --- Calculator --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "output"),
    [
        ("1 + 2", "3"),
        ("1990 - 1975", "15"),
        ("2 ** 10", "1024"),
        ("2^10", "1024"),
        ("10 / 4", "2.5"),
        ("10 / 2", "5"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("-(3 - 5)", "2"),
        ("+4", "4"),
        ("(1 + 2) * (3 + 4)", "21"),
        ("1 / 3", "0.333333"),
        ("2 / 3 * 1000", "666.666667"),
        ("0.1 + 0.2", "0.3"),
        ("1e-7 * 2", "2e-07"),
        ("2 ** 0.5", "1.414214"),
        ("sqrt(16)", "4"),
        ("sqrt(2)", "1.414214"),
        ("abs(-5.5)", "5.5"),
        ("round(3.14159, 2)", "3.14"),
        ("round(2.7)", "3"),
        ("floor(-2.5)", "-3"),
        ("ceil(2.1)", "3"),
        ("min(3, 1, 2)", "1"),
        ("max(1,200)", "200"),
        ("123456789 * 987654321", "121932631112635269"),
        ("1,200 + 300", "1500"),
        ("$1,234,567.5 * 2", "2469135"),
        ("3 x 4", "12"),
        ("3x4", "12"),
        ("6 × 7", "42"),
        ("9 ÷ 2", "4.5"),
        ("5 − 2", "3"),
        ("1990 - 1975 =", "15"),
        ("  12 * 3 = ?  ", "36"),
        ("1_000 + 1", "1001"),
        ("1.5e3 + 0x10", "1516"),
    ],
)
def test_calculator_values(expression: str, output: str) -> None:
    result = calc(expression)
    assert result.ok, result.error
    assert result.output == output
    assert result.metadata["value"] == pytest.approx(float(output), rel=1e-5)
    assert isinstance(result.metadata["expression"], str)


def test_calculator_metadata() -> None:
    result = calc("1,200 x 3 =")
    assert result.metadata == {"value": 3600, "expression": "1200 * 3"}
    assert isinstance(calc("10 / 2").metadata["value"], int)


@pytest.mark.parametrize(
    ("text", "output", "expression"),
    [
        ("compute 1990 - 1975 please", "15", "1990 - 1975"),
        ("What is 12*3?", "36", "12*3"),
        ("Calculate: (2024 - 1969) / 5.", "11", "(2024 - 1969) / 5"),
        ("In 2020, compute 3+4", "7", "3+4"),
        ("the age is 2024 - 1969 years", "55", "2024 - 1969"),
        ("12 * 3 = 36", "36", "12 * 3"),
        ("the square root is sqrt(81)", "9", "sqrt(81)"),
        ("light travels 3e5 * 60 km per minute", "18000000", "3e5 * 60"),
    ],
)
def test_calculator_extracts_the_expression_from_prose(
    text: str, output: str, expression: str
) -> None:
    result = calc(text)
    assert result.ok, result.error
    assert (result.output, result.metadata["expression"]) == (output, expression)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("compute 3+4 and 5*6", "several expressions"),
        ("a + 3", "unknown name 'a'"),
        ("3 + y", "unknown name 'y'"),
        ("add the two numbers", ""),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("sqrt(-1)", "negative"),
        ("(-8) ** (1/3)", "not a real number"),
        ("1e400", "not a finite number"),
        ("1, 200", "commas"),
        ("3 +* 4", "invalid expression"),
        ("max()", "argument"),
        ("round(1.5, 10**100)", "round()"),
        ("True + 1", "only numbers"),
        ("1 < 2", "unsupported operator"),
        ("[1, 2]", "unsupported syntax"),
    ],
)
def test_calculator_readable_failures(text: str, reason: str) -> None:
    result = calc(text)
    assert not result.ok
    assert result.error and reason in result.error
    assert result.error.startswith("Calculator:")


SAFETY_INPUTS = [
    "__import__('os')",
    "__import__('os').system('echo hacked')",
    "().__class__.__bases__[0].__subclasses__()",
    "(1).__class__",
    "(1).real",
    "open('/etc/passwd').read()",
    "x",
    "lambda: 1",
    "(lambda: 9)()",
    "[x for x in range(10**9)]",
    "'a' * 10**9",
    "9**9**9",
    "10**1000000",
    "2 ** 3 ** 4 ** 5",
    "(10**300) * (10**300)",
    "1.5 ** 1e10",
    "max(10**299, 10**299) * 100",
    "(" * 150 + "1" + ")" * 150,
    "(" * 300 + "1" + ")" * 300,
    "-" * 450 + "1",
    "1+" * 240 + "1",
    "sqrt(" * 40 + "4" + ")" * 40,
    "sqrt(" * 99 + "4" + ")" * 99,
    "1" * 100_000,
    "1 + " * 25_000 + "1",
    "compute " + "9" * 400,
]


SAFE_AND_VALID = {"(" * 150 + "1" + ")" * 150: "1", "sqrt(" * 40 + "4" + ")" * 40: "1"}


@pytest.mark.parametrize("text", SAFETY_INPUTS, ids=range(len(SAFETY_INPUTS)))
def test_calculator_safety(text: str) -> None:
    result = calc(text)  # must not raise, nor compute the huge numbers it asks for
    if text in SAFE_AND_VALID:
        assert result.ok and result.output == SAFE_AND_VALID[text]
        return
    assert not result.ok, (text[:60], result.output)
    assert result.error


# --- registry and ToolSet ----------------------------------------------------------------------


class _EchoTool(Tool):
    def __init__(self, name: str = "Base_Generator_Tool") -> None:
        self.card = ToolCard(
            name=name,
            description="Echoes its input.",
            input_schema={"text": {"type": "string", "description": "anything", "required": True}},
            output_type="the same text",
            primary_argument="text",
        )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(ok=True, output=str(arguments["text"]))


def test_canonical_tool_name() -> None:
    assert canonical_tool_name("Base_Generator_Tool") == "basegenerator"
    assert canonical_tool_name("search_tool") == "search"
    assert canonical_tool_name("Web Search-Tool") == "websearch"
    assert canonical_tool_name("Tool") == "tool"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Search", "Search"),
        ("SEARCH", "Search"),
        ("search_tool", "Search"),
        ("Search Tool", "Search"),
        ("calculator-tool", "Calculator"),
        ("Base_Generator_Tool", "Base_Generator_Tool"),
        ("basegenerator", "Base_Generator_Tool"),
        ("Base Generator", "Base_Generator_Tool"),
        ("Python_Coder_Tool", None),
        ("", None),
    ],
)
def test_toolset_forgiving_lookup(query: str, expected: str | None) -> None:
    tools = ToolSet([SearchTool(), CalculatorTool(), _EchoTool()])
    found = tools.get(query)
    assert (found.name if found else None) == expected
    assert (query in tools) == (expected is not None)


def test_toolset_basics_and_duplicates() -> None:
    search, calculator = SearchTool(), CalculatorTool()
    tools = ToolSet([search, calculator])
    assert tools.names == ("Search", "Calculator")
    assert list(tools) == [search, calculator]
    assert len(tools) == 2
    text = tools.cards_text()
    assert text.index("- Search:") < text.index("- Calculator:")
    with pytest.raises(ValueError, match="duplicate"):
        ToolSet([search, SearchTool()])
    with pytest.raises(ValueError, match="duplicate"):
        ToolSet([_EchoTool("Search_Tool"), search])


def test_toolset_with_and_without_return_new_sets() -> None:
    search, calculator = SearchTool(), CalculatorTool()
    tools = ToolSet([search, calculator])
    echo = _EchoTool()
    extended = tools.with_tool(echo)
    assert extended.names == ("Search", "Calculator", "Base_Generator_Tool")
    assert tools.names == ("Search", "Calculator")
    perturbed = SearchTool(top_k=1)
    replaced = tools.with_tool(perturbed)
    assert replaced.names == ("Search", "Calculator")
    assert replaced.get("search") is perturbed
    smaller = extended.without("calculator_tool")
    assert smaller.names == ("Search", "Base_Generator_Tool")
    with pytest.raises(KeyError, match="Python"):
        tools.without("Python")


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "_factories", dict(registry_module._factories))


@pytest.mark.usefixtures("clean_registry")
def test_registry() -> None:
    assert {"Search", "Calculator"} <= set(registered_tools())
    search = make_tool("search", top_k=5)
    assert isinstance(search, SearchTool) and search.top_k == 5
    assert isinstance(make_tool("Calculator_Tool"), CalculatorTool)
    with pytest.raises(KeyError, match="Calculator"):
        make_tool("Web_Browser")
    register_tool("Base_Generator_Tool", _EchoTool)
    assert make_tool("base generator").name == "Base_Generator_Tool"
    with pytest.raises(ValueError, match="already registered"):
        register_tool("basegenerator", _EchoTool)
    register_tool("Base_Generator_Tool", lambda: _EchoTool("Generator"), overwrite=True)
    assert make_tool("Base_Generator_Tool").name == "Generator"
    assert registered_tools() == sorted(registered_tools())
