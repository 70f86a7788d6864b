"""A value the engine found for a field, where, and how sure: a `Candidate`;
the best of a field's candidates (`choose`), and the winner as the JSON value
of the field's type with its evidence (`typed`, `evidence_of`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from daemon.extraction.providers.rules.fields import FieldQuery
from daemon.extraction.providers.rules.layout import Layout, LineRef
from daemon.extraction.providers.rules.values import Found, as_date_time, find_time


@dataclass
class Candidate:
    value: Any
    score: float
    ref: LineRef
    start: int  # span of the value in ref.text
    end: int
    text: str
    currency: str | None = None
    extra: list[LineRef] = field(default_factory=list)  # further lines of a multi-line value
    repaired: bool = False  # the value is not the text as read, but what a misread of it stood for

    @property
    def order(self) -> tuple[int, int, int]:
        return (self.ref.page, self.ref.order, self.start)


def found_at(ref: LineRef, start: int, end: int, value: Found, score: float) -> Candidate:
    """`value` found at [start, end) of `ref`'s text, scored `score` times its own quality."""
    return Candidate(value.value, score * value.quality, ref, start, end, ref.text[start:end], value.currency)


def choose(query: FieldQuery, candidates: list[Candidate]) -> Candidate | None:
    """The best-scored candidate; of near-equals the last in the document for
    fields whose last occurrence wins (totals), else the first."""
    if not candidates:
        return None
    best = max(c.score for c in candidates)
    close = [c for c in candidates if c.score >= best - 0.02]
    close.sort(key=lambda c: c.order)
    return close[-1] if query.labels.last else close[0]


def typed(query: FieldQuery, found: Candidate) -> Any:
    """The candidate's value as the field's JSON type (None when it cannot be one)."""
    value = found.value
    json_type = query.type
    if isinstance(value, dt.date):
        if query.format == "date-time":
            # RFC 3339 needs an offset, which a receipt or an invoice does not print: its
            # clock time is given as UTC (README "Extraction").
            clock = find_time(found.ref.text[found.end :]) or (0, 0, 0)
            return as_date_time(dt.datetime(value.year, value.month, value.day, *clock))
        return value.isoformat()
    if json_type == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, float):
            return int(value) if value.is_integer() else None
        return value if isinstance(value, int) else None
    if json_type == "number":
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if json_type == "boolean":
        return value if isinstance(value, bool) else None
    if json_type == "string":
        if isinstance(value, float):
            return found.text.strip()
        return str(value)
    return value


def evidence_of(layout: Layout, found: Candidate) -> dict[str, Any]:
    """resultMeta's evidence of a candidate: confidence, page, box and the text it was read from."""
    ref = found.ref
    page = layout.pages[ref.page].page
    x0, y0, x1, y1 = ref.box(found.start, found.end)
    text = found.text
    conf = ref.conf(found.start, found.end)
    for extra in found.extra:
        x0, y0 = min(x0, extra.line.x0), min(y0, extra.line.y0)
        x1, y1 = max(x1, extra.line.x1), max(y1, extra.line.y1)
        text += "\n" + extra.text
    # A score above 1 (a total the receipt's arithmetic confirms) ranks candidates; the
    # confidence in a value is still no more than the OCR's in the words it was read from.
    return {
        "confidence": round(max(0.0, min(0.99, min(found.score, 1.0) * conf)), 3),
        "page": page.number,
        "bbox": page.relative(x0, y0, x1, y1),
        "text": text,
    }
