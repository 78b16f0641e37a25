"""Reading and writing JSON Lines: one JSON object per line, optionally gzipped (``.gz``).

Read errors are ``DatasetError``s naming the file and the 1-based line.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from agentflow_env.base.errors import DatasetError

__all__ = [
    "Record",
    "as_object",
    "invalid_json",
    "jsonl_line",
    "jsonl_objects",
    "open_text",
    "read_jsonl",
    "rewrite_jsonl",
]

Record = tuple[str, Mapping[str, Any]]
"""``(where, record)``: where is ``"line N"`` (JSONL) or ``"record N (0-based)"``."""


def open_text(file: Path) -> IO[str]:
    """``file`` opened for reading as UTF-8 text (a leading byte-order mark skipped), through gzip
    when it ends in ``.gz``."""
    try:
        if file.suffix == ".gz":
            return gzip.open(file, "rt", encoding="utf-8-sig")
        return open(file, encoding="utf-8-sig")  # noqa: SIM115 - the caller closes it
    except OSError as error:
        raise DatasetError(f"{file}: cannot open ({error.strerror})") from error


def read_jsonl(file: Path) -> Iterator[Record]:
    """Each object of a JSONL file with its line; blank lines are skipped."""
    with open_text(file) as lines:
        yield from jsonl_objects(lines, file)


def jsonl_objects(lines: Iterable[str], file: Path) -> Iterator[Record]:
    """Each object of JSONL ``lines`` (read from ``file``, named in errors) with its line."""
    number = 0
    try:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DatasetError(f"{file}, {where}: {invalid_json(error)}") from None
            yield where, as_object(record, file, where)
    except UnicodeDecodeError as error:
        raise DatasetError(f"{file}, line {number + 1}: not UTF-8 text ({error})") from None


def invalid_json(error: json.JSONDecodeError) -> str:
    """What is wrong with a JSON text, and where on its line."""
    return f"invalid JSON at column {error.colno} ({error.msg})"


def as_object(record: Any, file: Path, where: str) -> Mapping[str, Any]:
    """``record`` if it is a JSON object, else a ``DatasetError`` saying what it is."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"{file}, {where}: expected a JSON object, got {type(record).__name__}")
    return record


def rewrite_jsonl(
    source: Path, out: Path, convert: Callable[[Mapping[str, Any], int], Mapping[str, Any]]
) -> int:
    """Write ``convert(record, index)`` of every record of JSONL ``source`` to ``out`` (its
    folder created); returns the count. For turning one trainer's data rows into another's."""
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("w", encoding="utf-8") as written:
        for _, record in read_jsonl(source):
            written.write(jsonl_line(convert(record, count)))
            count += 1
    return count


def jsonl_line(record: Any) -> str:
    """``record`` as one JSONL line (non-ASCII kept as is), newline included."""
    return json.dumps(record, ensure_ascii=False) + "\n"
