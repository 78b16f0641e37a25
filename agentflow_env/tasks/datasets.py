"""Real QA data from files: the formats users bring.

- FlashRAG / Search-R1 QA JSONL: one ``{"id", "question", "golden_answers": [...]}`` per line.
- AgentFlow test JSON: a list of ``{"pid", "query" and/or "question", "answer", ...}``. The
  question is ``query`` when present (the text AgentFlow sends its solver: it may carry the
  choices or an ``<answer>`` tag instruction), else ``question``. ``answer`` is a string, a number,
  a list, or a string holding a list of strings (``"['x', 'y']"``, parsed as a literal, never run).
  Every other field (``choices``, ``options``, ``idx``, ``Level``, a list-valued ``question``,
  ...) lands in ``Task.metadata`` as a string (containers as JSON text, ``None`` as ``""``).
- Parquet with the JSONL fields (needs ``pyarrow``, imported only for Parquet files), including
  Search-R1's processed files: gold aliases in ``reward_model.ground_truth.target``, the split in
  ``extra_info.split``, and the question in a ``question`` column or, without one, inside the
  user message of ``prompt`` (``question_from_prompt``).
- AgentFlow's training rows (Parquet or JSONL): ``{"id", "question", "result", "source",
  "extra_info": {"ground_truth", "idx"}}``; the gold answer is ``result`` (else
  ``extra_info.ground_truth``). AgentFlow's data preparation joins an NQ question's aliases
  with ``"; "`` into that one string, so a row whose ``source`` is ``"nq"`` has it split back
  into aliases; other rows (math answers, which may hold ``"; "`` themselves) keep it whole.

Their corpora (wiki-18 style JSONL) are read by ``agentflow_env.retrieval.corpus``.

Files may be gzipped (``.gz``) and may start with a UTF-8 byte-order mark. Errors
(``DatasetError``) name the file and the 1-based line (JSONL; JSON syntax errors also give the
1-based column) or the 0-based record index (JSON lists, Parquet).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agentflow_env.base.errors import DatasetError
from agentflow_env.base.jsonl import Record, as_object, invalid_json, open_text, read_jsonl
from agentflow_env.retrieval.corpus import Corpus, resolve_corpus
from agentflow_env.tasks.base import ListTaskSource, Task
from agentflow_env.tasks.scoring import with_answer_tag_instruction

PathLike = str | os.PathLike[str]
FORMATS = ("jsonl", "json", "parquet")

_QUESTION_KEYS = ("query", "question")  # AgentFlow sends "query" when a record has both
_ANSWER_KEYS = ("golden_answers", "answer", "answers", "result")
_JOINED_ALIASES = {"nq": "; "}
"""AgentFlow training rows' ``source`` -> the separator its data preparation joined the aliases
of one question with."""
_ID_KEYS = ("id", "pid", "qid", "_id")
_SPLIT_WORDS = {
    "train": "train",
    "dev": "dev",
    "val": "dev",
    "valid": "dev",
    "validation": "dev",
    "test": "test",
}
_QUESTION_MARKER = "Question:"
# Where the question ends after Search-R1's "Question:" marker: its line's end, or the
# " Context:" that its RAG template puts after the question.
_QUESTION_END = re.compile(r"\n|\s+Context:")


def load_tasks(
    path: PathLike,
    *,
    corpus: Corpus | None = None,
    split: str | None = None,
    limit: int | None = None,
    format: str | None = None,
    answer_tag_suffix: bool = False,
    strip_questions: bool = True,
) -> list[Task]:
    """Read QA tasks from ``path`` (format from the extension, else sniffed from the content).

    Each task gets every gold alias as a string, ``kind="qa"``, ``hops`` from a ``hops`` field
    (default 1) and ``corpus``. A record's own split is its ``split`` field, else Search-R1's
    ``extra_info.split``. ``split`` filters: a record whose own split differs is left out
    (``dev``, ``val``, ``valid`` and ``validation`` name the same split), and a record with no
    split of its own is kept, since nothing says it belongs elsewhere; every kept task is labelled
    ``split``. Without ``split`` every record is kept, labelled with its own split, else a split
    word in the file name (train/dev/val/test), else ``"test"``. ``limit`` keeps the first tasks
    (after filtering) only. ``answer_tag_suffix`` appends ``ANSWER_TAG_INSTRUCTION`` to every
    question that does not already ask for ``<answer>`` tags (as AgentFlow does for its training
    questions). ``strip_questions=False`` keeps each question as the file has it, surrounding
    whitespace included (AgentFlow's scripts send it so; the presets ask for it).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    file = Path(path)
    name_split = _split_from_name(file)
    left_out: Counter[str] = Counter()
    tasks: list[Task] = []
    for index, (where, record) in enumerate(_records(file, format or _detect_format(file))):
        own_split = _record_split(record)
        if split is not None and own_split is not None and not _same_split(own_split, split):
            left_out[own_split] += 1
            continue
        task_split = split or own_split or name_split
        task = _to_task(record, file, where, index, corpus, task_split, strip_questions)
        if answer_tag_suffix:
            task = dataclasses.replace(task, question=with_answer_tag_instruction(task.question))
        tasks.append(task)
        if limit is not None and len(tasks) >= limit:
            break
    if not tasks and left_out:
        found = ", ".join(f"{name!r}: {count}" for name, count in sorted(left_out.items()))
        raise DatasetError(f"{file}: no records of split {split!r} (records by split: {found})")
    if not tasks:
        raise DatasetError(f"{file}: no records")
    return tasks


def question_from_prompt(prompt: Any) -> str | None:
    """The bare question inside a chat ``prompt`` (Search-R1's processed data), else ``None``.

    ``prompt`` is a list of ``{"role", "content"}`` messages (or one string); the last non-empty
    user message is read. Search-R1's templates end with ``Question: {question}`` (followed by a
    newline, or by `` Context: ...`` in its RAG template), so the question is the text after the
    first ``Question:`` marker up to the end of that line or that ``Context:``; a message without
    the marker is the question as a whole.
    """
    content = prompt if isinstance(prompt, str) else _last_user_content(prompt)
    if content is None:
        return None
    marker = content.find(_QUESTION_MARKER)
    if marker >= 0:
        content = content[marker + len(_QUESTION_MARKER) :].strip()
        content = _QUESTION_END.split(content, maxsplit=1)[0]
    return content.strip() or None


def _last_user_content(messages: Any) -> str | None:
    if not isinstance(messages, list | tuple):
        return None
    contents = [
        m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role") == "user"
    ]
    return next((c for c in reversed(contents) if isinstance(c, str) and c.strip()), None)


class DatasetTaskSource(ListTaskSource):
    """Tasks from a data file, sampled uniformly.

    ``corpus`` is a ``Corpus`` or the path of a corpus JSONL (loaded once per process and shared
    by every source that names the same unchanged file). ``answer_tag_suffix`` and
    ``strip_questions`` are ``load_tasks``'s.
    """

    def __init__(
        self,
        path: PathLike,
        corpus: Corpus | PathLike | None = None,
        split: str | None = None,
        limit: int | None = None,
        format: str | None = None,
        answer_tag_suffix: bool = False,
        strip_questions: bool = True,
    ) -> None:
        self.path = Path(path)
        self.corpus = resolve_corpus(corpus)
        super().__init__(
            load_tasks(
                path,
                corpus=self.corpus,
                split=split,
                limit=limit,
                format=format,
                answer_tag_suffix=answer_tag_suffix,
                strip_questions=strip_questions,
            )
        )


# -- reading records ----------------------------------------------------------------------------
def _detect_format(file: Path) -> str:
    suffixes = [s.lower() for s in file.suffixes if s.lower() != ".gz"]
    suffix = suffixes[-1] if suffixes else ""
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if file.suffix != ".gz":
        try:
            with open(file, "rb") as raw:
                if raw.read(4) == b"PAR1":
                    return "parquet"
        except OSError as error:
            raise DatasetError(f"{file}: cannot open ({error.strerror})") from error
    with open_text(file) as text:
        try:
            first = next((line for line in text if line.strip()), "").strip()
        except (UnicodeDecodeError, OSError) as error:
            raise DatasetError(f"{file}: not a UTF-8 text or Parquet file ({error})") from error
    return "jsonl" if _is_jsonl_record(first) else "json"


def _is_jsonl_record(line: str) -> bool:
    """Whether a file's first line is one whole record (JSONL), not the start of a JSON document."""
    if not line.startswith("{"):
        return not line.startswith("[")
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return False  # a multi-line JSON object
    is_mapping_of_records = bool(value) and all(isinstance(v, Mapping) for v in value.values())
    return not is_mapping_of_records


def _records(file: Path, fmt: str) -> Iterator[Record]:
    if fmt == "jsonl":
        return read_jsonl(file)
    if fmt == "json":
        return _json_records(file)
    if fmt == "parquet":
        return _parquet_records(file)
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


def _json_records(file: Path) -> Iterator[Record]:
    with open_text(file) as text:
        try:
            data = json.loads(text.read())
        except json.JSONDecodeError as error:
            raise DatasetError(f"{file}, line {error.lineno}: {invalid_json(error)}") from None
        except UnicodeDecodeError as error:
            raise DatasetError(f"{file}: not UTF-8 text ({error})") from None
    if isinstance(data, Mapping) and all(isinstance(v, Mapping) for v in data.values()):
        # {pid: record}: the key is the id when the record has none.
        data = [{"pid": key, **value} for key, value in data.items()]
    if not isinstance(data, list):
        raise DatasetError(f"{file}: expected a JSON list of objects, got {type(data).__name__}")
    for index, record in enumerate(data):
        where = f"record {index} (0-based)"
        yield where, as_object(record, file, where)


def _parquet_records(file: Path) -> Iterator[Record]:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise DatasetError(
            f"{file}: reading Parquet needs pyarrow (pip install pyarrow)"
        ) from error
    try:
        parquet = pq.ParquetFile(file)
    except Exception as error:
        raise DatasetError(f"{file}: not a readable Parquet file ({error})") from error
    index = 0
    for batch in parquet.iter_batches(batch_size=4096):
        for record in batch.to_pylist():
            yield f"record {index} (0-based)", record
            index += 1


# -- records to tasks and documents --------------------------------------------------------------
def _to_task(
    record: Mapping[str, Any],
    file: Path,
    where: str,
    index: int,
    corpus: Corpus | None,
    task_split: str,
    strip_question: bool = True,
) -> Task:
    def fail(message: str) -> DatasetError:
        return DatasetError(f"{file}, {where}: {message}")

    question_key = next((k for k in _QUESTION_KEYS if record.get(k) is not None), None)
    question = record[question_key] if question_key else None
    if question_key is None and record.get("prompt") is not None:
        question_key, question = "prompt", question_from_prompt(record["prompt"])
    if not isinstance(question, str) or not question.strip():
        raise fail(
            f"missing or empty question (one of {list(_QUESTION_KEYS)}, or a user message "
            "in 'prompt')"
        )
    answers_key, answers = _find_answers(record)
    if answers_key is None:
        raise fail(f"missing gold answers (one of {list(_ANSWER_KEYS)})")
    gold = _answer_aliases(_split_joined(record, answers))
    if gold is None:
        raise fail(f"'{answers_key}' must be a string or a list of strings, got {answers!r:.80}")
    if not gold:
        raise fail(f"'{answers_key}' holds no non-empty answer")
    hops = record.get("hops", 1)
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
        raise fail(f"'hops' must be a positive integer, got {hops!r}")
    id_key = next((k for k in _ID_KEYS if record.get(k) is not None), None)
    task_id = str(record[id_key]) if id_key else f"{file.name.split('.')[0]}-{index}"
    used = {question_key, answers_key, id_key, "hops", "split"}
    extra = {str(k): _metadata_text(v) for k, v in record.items() if k not in used}
    return Task(
        task_id=task_id,
        question=question.strip() if strip_question else question,
        gold_answers=gold,
        corpus=corpus,
        kind="qa",
        hops=hops,
        split=task_split,
        metadata={"source": file.name, "location": where, **extra},
    )


def _record_split(record: Mapping[str, Any]) -> str | None:
    """A record's own split: its ``split`` field, else Search-R1's ``extra_info.split``."""
    extra_info = record.get("extra_info")
    nested = extra_info.get("split") if isinstance(extra_info, Mapping) else None
    for value in (record.get("split"), nested):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _same_split(a: str, b: str) -> bool:
    return _canonical_split(a) == _canonical_split(b)


def _canonical_split(name: str) -> str:
    word = name.strip().lower()
    return _SPLIT_WORDS.get(word, word)


def _find_answers(record: Mapping[str, Any]) -> tuple[str | None, Any]:
    for key in _ANSWER_KEYS:
        if record.get(key) is not None:
            return key, record[key]
    # AgentFlow's training rows: extra_info.ground_truth (the same text as their result)
    extra_info = record.get("extra_info")
    if isinstance(extra_info, Mapping) and extra_info.get("ground_truth") is not None:
        return "extra_info.ground_truth", extra_info["ground_truth"]
    # Search-R1's processed Parquet: reward_model.ground_truth.target
    reward_model = record.get("reward_model")
    if isinstance(reward_model, Mapping):
        truth = reward_model.get("ground_truth")
        if isinstance(truth, Mapping) and truth.get("target") is not None:
            return "reward_model.ground_truth.target", truth["target"]
    return None, None


def _split_joined(record: Mapping[str, Any], answers: Any) -> Any:
    """An AgentFlow training row's joined aliases as a list (``_JOINED_ALIASES``), else
    ``answers`` as they are."""
    source = record.get("source")
    separator = _JOINED_ALIASES.get(source) if isinstance(source, str) else None
    if separator is None or not isinstance(answers, str) or _listed_strings(answers):
        return answers
    return answers.split(separator)


def _answer_aliases(value: Any) -> tuple[str, ...] | None:
    """Every alias as a stripped string; ``None`` if ``value`` has the wrong type."""
    if isinstance(value, str):
        value = _listed_strings(value) or value
    items = list(value) if isinstance(value, list | tuple) else [value]
    aliases: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            return None
        text = str(item).strip()
        if text and text not in aliases:
            aliases.append(text)
    return tuple(aliases)


def _listed_strings(text: str) -> list[str] | None:
    """The strings of a list written as text (``"['a', "b"]"``, Python or JSON quoting), else
    ``None``. Parsed as a literal, never evaluated. Only lists of strings count: ``"[0, 1]"`` may
    be an answer in its own right (an interval), so it stays one alias."""
    stripped = text.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return None
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        try:
            value = json.loads(stripped)
        except (ValueError, RecursionError):
            return None
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    return None


def _metadata_text(value: Any) -> str:
    """A record field as metadata text: strings as they are, ``None`` as ``""``, containers as
    JSON, anything else through ``str``."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _split_from_name(file: Path) -> str:
    words = file.name.lower().replace("-", "_").replace(".", "_").split("_")
    return next((_SPLIT_WORDS[w] for w in words if w in _SPLIT_WORDS), "test")


__all__ = [
    "FORMATS",
    "DatasetError",
    "DatasetTaskSource",
    "load_tasks",
    "question_from_prompt",
]
