"""Reading one page's text for ``Web_RAG_Search_Tool``: from the task's documents, a local file
or the web.

AgentFlow's web RAG tool downloads the page at a URL. Here a page can also be one of the task's
own documents, so the tool works offline: a Wikipedia URL (``https://en.wikipedia.org/wiki/
<Title>``, the form ``Wikipedia_RAG_Search_Tool`` gives its pages) or a bare title names the
document(s) of that title. A ``file://`` URL reads a file inside the tool's ``pages_dir`` and
nowhere else. Other URLs are fetched over HTTP only when that is allowed, since the planner
chooses them: it could otherwise reach any address the machine can. Every failure is a
``PageError`` whose message says what went wrong with which page.
"""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from agentflow_env.base.settings import read_env_var

WEB_FETCH_ENV_VAR = "AGENTFLOW_WEB_FETCH"
"""``1`` (or ``true``, ``yes``, ``on``) lets ``Web_RAG_Search_Tool`` fetch pages over HTTP when
its ``allow_http`` option is not given."""

USER_AGENT = "Mozilla/5.0 (compatible; agentflow-env page reader)"
MAX_PAGE_BYTES = 5 * 1024 * 1024
MAX_PAGE_CHARS = 1_000_000
"""A page's text is cut here (AgentFlow keeps the first million characters of a page too)."""

_WIKI_PATH = re.compile(r"^/wiki/(?P<title>[^?#]+)$")
_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg"})


class PageError(RuntimeError):
    """The page could not be read; ``kind`` is the failure kind its tool result records."""

    def __init__(self, message: str, kind: str = "page") -> None:
        super().__init__(message)
        self.kind = kind


def web_fetch_allowed(allow_http: bool | None) -> bool:
    """``allow_http`` as given, else what ``AGENTFLOW_WEB_FETCH`` says (off when unset)."""
    if allow_http is not None:
        return bool(allow_http)
    return bool(read_env_var(WEB_FETCH_ENV_VAR))


def is_url(reference: str) -> bool:
    """Whether ``reference`` is a URL (it has a scheme) rather than a page title."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", reference.strip()))


def title_of(reference: str) -> str | None:
    """The document title a reference names: a bare title itself, the title of a Wikipedia
    article URL, or None (another URL)."""
    reference = reference.strip()
    if not is_url(reference):
        return reference or None
    parts = urlsplit(reference)
    if not parts.netloc.lower().endswith("wikipedia.org"):
        return None
    match = _WIKI_PATH.match(parts.path)
    if match is None:
        return None
    return unquote(match.group("title")).replace("_", " ").strip() or None


WIKIPEDIA_BASE_URL = "https://en.wikipedia.org/wiki/"


def wikipedia_url(title: str) -> str:
    """The Wikipedia URL of an article titled ``title`` (what ``title_of`` reads back)."""
    return WIKIPEDIA_BASE_URL + "_".join(title.strip().strip('"').split())


def wikipedia_url_as_agentflow(title: str) -> str:
    """The URL AgentFlow's Wikipedia tool gives a page: every space of ``title`` an
    underscore and nothing else changed, so a corpus's quoted title keeps its quotes
    (``title_of`` and ``same_title`` still find the page from it)."""
    return WIKIPEDIA_BASE_URL + title.replace(" ", "_")


def same_title(a: str, b: str) -> bool:
    """Whether two titles name the same page: case, quotes, underscores and spacing aside
    (corpus files quote some titles, URLs put underscores for spaces)."""
    return _title_key(a) == _title_key(b)


def _title_key(title: str) -> str:
    return " ".join(title.replace("_", " ").strip().strip('"').split()).casefold()


def html_text(html: str) -> str:
    """The visible text of an HTML page, one line per text run (no scripts or styles)."""
    reader = _TextReader()
    reader.feed(html)
    reader.close()
    return "\n".join(reader.lines)


class _TextReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        text = " ".join(data.split())
        if text and not self._skipping:
            self.lines.append(text)


def read_local_page(url: str, pages_dir: str | os.PathLike[str] | None) -> str:
    """The text of the file a ``file://`` URL names, which must lie inside ``pages_dir``."""
    if pages_dir is None:
        raise PageError(
            f"cannot open {url}: local files are readable only inside the tool's pages_dir, "
            "and none is set",
            kind="config",
        )
    root = Path(pages_dir).resolve()
    path = Path(unquote(urlsplit(url).path)).resolve()
    if not path.is_relative_to(root):
        raise PageError(f"cannot open {url}: it is outside the pages directory")
    if not path.is_file():
        raise PageError(f"cannot open {url}: no such file")
    with path.open("rb") as handle:
        data = handle.read(MAX_PAGE_BYTES)
    text = data.decode("utf-8", errors="replace")
    if path.suffix.lower() in (".html", ".htm", ".xhtml"):
        text = html_text(text)
    return _checked(text, url)


async def fetch_page(url: str, *, timeout_s: float) -> str:
    """The text of the web page at ``url``, fetched over HTTP(S)."""
    url = url.strip().replace("arxiv.org/pdf/", "arxiv.org/abs/")  # the abstract page has text
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        raise PageError(f"cannot fetch {url}: only http and https URLs can be fetched")
    try:
        async with (
            httpx.AsyncClient(
                follow_redirects=True, timeout=timeout_s, headers={"User-Agent": USER_AGENT}
            ) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise PageError(f"cannot fetch {url}: HTTP {response.status_code}")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) >= MAX_PAGE_BYTES:
                    break
            encoding = response.charset_encoding or "utf-8"
    except httpx.TimeoutException:
        raise PageError(f"cannot fetch {url}: timed out after {timeout_s:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        problem = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        raise PageError(f"cannot fetch {url}: {problem}") from None
    try:
        text = bytes(body).decode(encoding, errors="replace")
    except LookupError:  # an unknown charset name
        text = bytes(body).decode("utf-8", errors="replace")
    if "html" in kind or (not kind and text.lstrip()[:1] == "<"):
        text = html_text(text)
    elif not (kind.startswith("text/") or kind.endswith(("json", "xml"))):
        raise PageError(f"cannot read {url}: it is not a text page ({kind})")
    return _checked(text, url)


def _checked(text: str, where: str) -> str:
    text = text.strip()
    if not text:
        raise PageError(f"{where} has no text")
    return text[:MAX_PAGE_CHARS]


__all__ = [
    "MAX_PAGE_CHARS",
    "WEB_FETCH_ENV_VAR",
    "PageError",
    "fetch_page",
    "html_text",
    "is_url",
    "read_local_page",
    "same_title",
    "title_of",
    "web_fetch_allowed",
    "wikipedia_url",
    "wikipedia_url_as_agentflow",
]
