"""The console never turns a string into markup or code (issue #15): its scripts build every
element with dom.js's `h` and put text in as text nodes, so a document whose value is
`<img src=x onerror=alert(1)>` shows those characters. The CSP forbids inline script and
eval as a second wall; this test keeps the first one: no script in the console uses a
sink that parses HTML or evaluates a string."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONSOLE_JS = Path(__file__).resolve().parents[2] / "daemon" / "http" / "static" / "console" / "js"

# Each sink, as it is written when used (a property set, a call).
SINKS = {
    "innerHTML": r"\.innerHTML\b",
    "outerHTML": r"\.outerHTML\b",
    "insertAdjacentHTML": r"\binsertAdjacentHTML\s*\(",
    "document.write": r"\bdocument\s*\.\s*write(ln)?\s*\(",
    "eval": r"(?<![\w.$])eval\s*\(",
    "new Function": r"\bnew\s+Function\s*\(",
    "string timer": r"\bset(Timeout|Interval)\s*\(\s*[\"'`]",
    "DOMParser": r"\bDOMParser\b",
    "createContextualFragment": r"\bcreateContextualFragment\b",
    "srcdoc": r"\bsrcdoc\b",
}
PATTERN = re.compile("|".join(f"(?P<s{i}>{regex})" for i, regex in enumerate(SINKS.values())))


def _code(text: str) -> str:
    """The script without its comments (which may name a sink to forbid it)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return re.sub(r"(?m)(^|[^:\"'\\])//.*$", r"\1", text)


def _sinks(text: str) -> list[str]:
    return [match.group(0) for match in PATTERN.finditer(_code(text))]


def test_no_console_script_parses_html_or_evaluates_strings() -> None:
    scripts = sorted(CONSOLE_JS.rglob("*.js"))
    assert len(scripts) >= 10, scripts  # the app, api, dom and the screens
    found = {str(path.relative_to(CONSOLE_JS)): hits for path in scripts if (hits := _sinks(path.read_text()))}
    assert found == {}


@pytest.mark.parametrize("line", [
    "el.innerHTML = value;",
    "node.outerHTML = `<b>${x}</b>`;",
    "main.insertAdjacentHTML('beforeend', html);",
    "document.write(text);",
    "const f = eval(source);",
    "const g = new Function('a', body);",
    "setTimeout('refresh()', 10);",
    "new DOMParser().parseFromString(html, 'text/html');",
    "range.createContextualFragment(html);",
    "frame.srcdoc = html;",
])
def test_each_sink_is_caught(line: str) -> None:
    assert _sinks(line), line


def test_text_that_only_names_a_sink_is_not_a_use() -> None:
    assert _sinks('// never innerHTML\nconst x = h("p", {}, "text"); /* eval( */ el.textContent = s;') == []
    assert _sinks("retrieval(x); medieval(y);") == []
