"""The viewer's page shell: stylesheet, the index's filter script and a strict content policy.

Pages are self-contained files opened with ``file://``: no server, no network, no external
file but the plots' PNGs. The content security policy allows only this module's own stylesheet
and script (by their hashes), so even text that escaped escaping could not run a script or load
anything from the network.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from agentflow_env.evaluation.text import esc

__all__ = ["FILTER_SCRIPT", "STYLE", "page", "write_page"]

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px;
       padding: 0 1em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 .4em; overflow-wrap: anywhere; }
h2 { font-size: 1.15em; margin: 1.2em 0 .4em; }
h3 { font-size: 1em; margin: .8em 0 .3em; }
a { color: #0b57d0; }
table { border-collapse: collapse; margin: .4em 0 1em; }
th, td { border: 1px solid #d0d0d7; padding: .25em .55em; text-align: left;
         vertical-align: top; }
th { background: #f2f2f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f9; border: 1px solid #e0e0e6; padding: .5em .7em; margin: .3em 0;
      white-space: pre-wrap; overflow-wrap: anywhere; max-height: 24em; overflow: auto; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .2em 1em; margin: .3em 0; }
dt { font-weight: 600; color: #555; }
dd { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; }
dd:empty::after { content: "(empty)"; color: #999; }
dd ul, dd pre { white-space: normal; margin: 0; }
dd pre { white-space: pre-wrap; }
dd ul { padding-left: 1.2em; }
pre:empty { display: none; }
.muted { color: #777; }
.ok { color: #137333; font-weight: 600; }
.bad { color: #b3261e; font-weight: 600; }
.warn { color: #a05a00; font-weight: 600; }
.banner { background: #fff4e5; border: 1px solid #f0b35a; padding: .5em .8em; }
.question-cell { max-width: 28em; }
#filters label { margin-right: 1.2em; }
#filters select { margin-left: .3em; }
#plots img { display: block; max-width: 100%; height: auto; margin-bottom: 0.5em; border: 1px solid #e0e0e6; }
section.turn { border: 1px solid #d0d0d7; border-left: 5px solid #8a8aa0; border-radius: 4px;
               padding: .3em 1em .6em; margin: 1em 0; }
section.turn h3 { margin-top: .5em; }
section.turn dl.plan { padding-bottom: .4em; border-bottom: 1px dashed #d0d0d7; }
section.turn[data-verdict="STOP"] { border-left-color: #137333; }
section.turn[data-verdict="CONTINUE"] { border-left-color: #0b57d0; }
section.turn[data-verdict="INVALID"] { border-left-color: #e37400; }
section.turn[data-verdict="ERROR"] { border-left-color: #b3261e; }
.verdict { font-weight: 700; }
nav a { margin-right: 1em; }
""".strip()

# Filters the index's rows by the selects (#filter-success, #filter-end_reason, #filter-run),
# whose first values come from the page's query string; hidden rows get the ``hidden``
# attribute. Text only ever enters the page through textContent and Option().
FILTER_SCRIPT = """
(function () {
  "use strict";
  var FILTERS = {success: "success", end_reason: "endReason", run: "run"};
  var ALIASES = {success: {"true": "1", "false": "0", "success": "1", "failure": "0"}};
  var params = new URLSearchParams(window.location.search);
  function control(name) { return document.getElementById("filter-" + name); }
  function apply() {
    var rows = document.querySelectorAll("#episodes tbody tr.episode");
    var shown = 0;
    rows.forEach(function (row) {
      var visible = Object.keys(FILTERS).every(function (name) {
        var select = control(name);
        return !select || select.value === "" || row.dataset[FILTERS[name]] === select.value;
      });
      row.hidden = !visible;
      if (visible) { shown += 1; }
    });
    document.getElementById("shown").textContent = String(shown);
  }
  function remember() {
    var query = new URLSearchParams();
    Object.keys(FILTERS).forEach(function (name) {
      var select = control(name);
      if (select && select.value !== "") { query.set(name, select.value); }
    });
    var text = query.toString();
    try {
      window.history.replaceState(null, "", text ? "?" + text : window.location.pathname);
    } catch (error) { /* some browsers refuse it for file:// pages: the view still works */ }
  }
  Object.keys(FILTERS).forEach(function (name) {
    var select = control(name);
    if (!select) { return; }
    var wanted = params.get(name);
    if (wanted !== null && wanted !== "") {
      wanted = (ALIASES[name] || {})[wanted.toLowerCase()] || wanted;
      var known = Array.prototype.some.call(select.options, function (option) {
        return option.value === wanted;
      });
      if (!known) { select.add(new Option(wanted, wanted)); }
      select.value = wanted;
    }
    select.addEventListener("change", function () { apply(); remember(); });
  });
  apply();
})();
""".strip()


def _hash_source(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def _policy(script: str | None) -> str:
    scripts = _hash_source(script) if script is not None else "'none'"
    return (
        f"default-src 'none'; img-src 'self' file:; style-src {_hash_source(STYLE)}; "
        f"script-src {scripts}; base-uri 'none'; form-action 'none'"
    )


def page(title: str, body: str, *, script: str | None = None) -> str:
    """A whole HTML document; ``title`` is escaped here, ``body`` must already be safe HTML."""
    tail = f"<script>{script}</script>\n" if script is not None else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_policy(script)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"{body}\n{tail}</body>\n</html>\n"
    )


def write_page(path: Path, document: str) -> None:
    # ``document`` is built from repaired text; "replace" only guards against a missed surrogate.
    path.write_text(document, encoding="utf-8", errors="replace")
