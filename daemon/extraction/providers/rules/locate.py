"""Evidence for values another provider chose: where each one is written in
the document (page, box, source text), and a confidence from how surely it
was found there.

A value found verbatim (or, for numbers and dates, as the same number or
day in any written form) gets 0.9; a value the document does not show
(inferred, reformatted beyond recognition) gets 0.5 and no box.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from daemon.extraction.document import Document
from daemon.extraction.providers.rules.layout import Layout, LineRef
from daemon.extraction.providers.rules.values import DateOrder, find_amounts, find_dates, fold

FOUND = 0.9
NOT_FOUND = 0.5


def locate_values(document: Document, schema: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """``{json pointer: {confidence, page, bbox?, text}}`` for every scalar of `result`."""
    layout = Layout(document)
    lines = layout.lines()
    out: dict[str, Any] = {}
    for pointer, value in _scalars(result, ""):
        if value is None:
            continue
        hit = _find(layout, lines, value)
        if hit is None:
            out[pointer] = {"confidence": NOT_FOUND, "page": None, "text": str(value)}
            continue
        ref, start, end = hit
        page = layout.pages[ref.page].page
        out[pointer] = {
            "confidence": round(FOUND * ref.conf(start, end), 3),
            "page": page.number,
            "bbox": page.relative(*ref.box(start, end)),
            "text": ref.text[start:end],
        }
    return out


def _scalars(value: Any, pointer: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            out += _scalars(item, f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}")
        return out
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            out += _scalars(item, f"{pointer}/{index}")
        return out
    return [(pointer, value)]


def _find(layout: Layout, lines: list[LineRef], value: Any) -> tuple[LineRef, int, int] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        for ref in lines:
            for found in find_amounts(ref.text, layout.decimal):
                if abs(float(found.value) - float(value)) < 0.005:
                    return ref, found.start, found.end
        return None
    text = str(value).strip()
    if not text:
        return None
    day = _as_date(text)
    if day is not None:
        for order in (layout.date_order, *(o for o in DateOrder if o is not layout.date_order)):
            for ref in lines:
                for found in find_dates(ref.text, order):
                    if found.value == day:
                        return ref, found.start, found.end
    needle = " ".join(fold(text).split())
    for ref in lines:
        at = ref.folded.find(needle)
        if at >= 0:
            return ref, at, at + len(needle)
    return None


def _as_date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        return None
