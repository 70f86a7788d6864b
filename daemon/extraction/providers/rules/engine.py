"""The rules engine: schema fields found by their labels, values read beside
or below them, typed, with evidence (pure: a `Document` and a definition in,
a result and its per-field evidence out).

For each field of the schema:

1. its labels (`labels.field_labels`) are searched in every page's text;
2. from each label the value is read to the right on the same line (the rest
   of the label's cell, then the next cells), else in the cell below the
   label; words between label and value that qualify the label the wrong way
   ("Total *HT*", "Date *limite*") refuse it, other words lower its score;
3. the best candidate wins (the last of equals for totals, the first
   otherwise); with no label, a field of a known kind falls back on where such
   values usually are (the first date, the vendor at the top of a receipt,
   the currency written beside the amounts, …) with a low confidence;
4. arrays of objects are read from tables (`tables`).

Confidence is the candidate's score (label strength x position x value
quality), times the OCR confidence of the words it came from.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from daemon.extraction.document import Document
from daemon.extraction.providers.rules.labels import FieldLabels, field_labels
from daemon.extraction.providers.rules.layout import Layout, LineRef
from daemon.extraction.providers.rules.values import (
    CURRENCY_SIGNS,
    Found,
    clean_text,
    find_amounts,
    find_booleans,
    find_dates,
    find_emails,
    find_enum,
    find_identifier,
    find_integers,
    find_time,
    find_uris,
    fold,
)

# Words that may sit between a label and its value without meaning anything.
_FILLERS = frozenset(
    "on of du le la de des the is in at for no nr n° # : - = ( ) rm eur usd gbp $ € £ rs ttc incl inc "
    "(rm) (eur) (usd) amount total".split()
)
_WORD = re.compile(r"[^\W\d_][\w'.\-/]*", re.UNICODE)
# How far below a label its value may be, in lines.
_BELOW_LINES = 4


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

    @property
    def order(self) -> tuple[int, int, int]:
        return (self.ref.page, self.ref.order, self.start)


@dataclass(frozen=True)
class FieldSpec:
    name: str
    schema: dict[str, Any]
    labels: FieldLabels

    @property
    def type(self) -> str:
        kind = self.schema.get("type", "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        return str(kind)

    @property
    def format(self) -> str | None:
        fmt = self.schema.get("format")
        return str(fmt) if fmt else None

    @property
    def value_kind(self) -> str:
        """What to look for: date, amount, integer, boolean, email, uri, enum, currency, id, party, address, text."""
        if self.schema.get("enum"):
            return "enum"
        if self.type == "number":
            return "amount"
        if self.type == "integer":
            return "integer"
        if self.type == "boolean":
            return "boolean"
        if self.format in ("date", "date-time"):
            return "date"
        if self.format == "email":
            return "email"
        if self.format in ("uri", "url"):
            return "uri"
        kind = self.labels.kind
        if kind == "amount":
            return "text"  # a string field that holds an amount: read it as written
        return kind


def field_spec(name: str, schema: dict[str, Any], *, column: bool = False) -> FieldSpec:
    return FieldSpec(name, schema, field_labels(name, schema, column=column))


class Engine:
    """Reads one document; `extract` may be called for several definitions."""

    def __init__(self, document: Document) -> None:
        self.layout = Layout(document)
        self._dates: list[tuple[LineRef, Found]] | None = None

    # --- values in a piece of text ---------------------------------------------

    def values_in(self, spec: FieldSpec, text: str) -> list[Found]:
        kind = spec.value_kind
        if kind == "amount":
            return find_amounts(text, self.layout.decimal)
        if kind == "integer":
            return find_integers(text)
        if kind == "date":
            return find_dates(text, self.layout.date_order)
        if kind == "email":
            return find_emails(text)
        if kind == "uri":
            return find_uris(text)
        if kind == "boolean":
            return find_booleans(text)
        if kind == "enum":
            return find_enum(text, list(spec.schema["enum"]))
        if kind == "currency":
            return find_currencies(text)
        if kind == "id":
            found = find_identifier(text)
            return [found] if found else []
        if kind == "phone":
            return [Found(clean_text(m.group()), m.start(), m.end()) for m in _PHONE.finditer(text)]
        cleaned = text.strip(" \t:;|-–—=#")
        if not cleaned or not any(ch.isalnum() for ch in cleaned):
            return []
        start = text.index(cleaned)
        return [Found(clean_text(cleaned), start, start + len(cleaned), 0.9)]

    # --- label candidates --------------------------------------------------------

    def candidates(self, spec: FieldSpec) -> list[Candidate]:
        labels = spec.labels
        out: list[Candidate] = []
        for page in self.layout.pages:
            for ref, start, end in label_matches(labels.pattern, page.folded, page.line_at):
                label = _label_key(ref.folded[start:end])
                weight = labels.labels.get(label)
                if weight is None:
                    weight = max((w for lab, w in labels.labels.items() if _label_key(lab) == label), default=0.5)
                if self._refused_before(ref, start, labels):
                    continue
                right = self._right_of(spec, ref, start, end, weight)
                below = self._below(spec, ref, start, end, weight) if right is None or right.score < 0.9 else None
                found = right if below is None or (right is not None and right.score >= below.score) else below
                if found is not None:
                    out.append(found)
        return out

    def _refused_before(self, ref: LineRef, start: int, labels: FieldLabels) -> bool:
        """Qualifiers in the label's cell before the label ("Sub total", "Due date")."""
        cell = ref.cell_at(start)
        cell_start, _ = ref.cell_span(cell)
        before = _words(ref.folded[cell_start:start])[-3:]
        if labels.positives and any(w in labels.positives for w in before):
            return False
        return any(w in labels.negatives for w in before)

    def _gap_factor(self, gap: str, labels: FieldLabels) -> float | None:
        """None when the words between label and value refuse the label, else a factor."""
        words = _words(gap)
        if labels.positives and any(w in labels.positives for w in words):
            words = [w for w in words if w not in labels.negatives]
        if any(w in labels.negatives for w in words):
            return None
        extra = [w for w in words if w not in _FILLERS and w not in CURRENCY_SIGNS]
        if len(extra) > 4:
            return None
        return 1.0 - 0.08 * len(extra)

    def _right_of(self, spec: FieldSpec, ref: LineRef, start: int, end: int, weight: float) -> Candidate | None:
        kind = spec.value_kind
        cell = ref.cell_at(start)
        _, cell_end = ref.cell_span(cell)
        cells = len(ref.line.words)
        # The rest of the label's cell, then the following cells.
        segments: list[tuple[int, int]] = [(end, max(end, cell_end))]
        for index in range(ref.cell_at(end) + 1 if end < cell_end else cell + 1, cells):
            segments.append(ref.cell_span(index))
        if kind in ("amount", "integer"):
            return self._amount_right(spec, ref, end, segments, weight)
        for number, (s, e) in enumerate(segments[:3]):
            chunk = ref.text[s:e]
            if not chunk.strip(" :.#-–|"):
                continue
            values = self.values_in(spec, chunk)
            if kind == "date":
                values = [v for v in values if self._date_context_ok(spec, ref, s + v.start)]
            if not values:
                if kind in ("text", "party", "address", "id"):
                    return None  # the next cell says something else: not this label's value
                continue
            value = values[0]
            factor = self._gap_factor(ref.folded[end : s + value.start], spec.labels)
            if factor is None:
                return None
            position = 1.0 if number == 0 else 0.95 - 0.05 * (number - 1)
            return self._candidate(spec, ref, s + value.start, s + value.end, value, weight * position * factor)
        return None

    def _amount_right(self, spec: FieldSpec, ref: LineRef, end: int, segments: list[tuple[int, int]],
                      weight: float) -> Candidate | None:
        values: list[tuple[int, Found]] = []
        dates = [(d.start, d.end) for d in find_dates(ref.text, self.layout.date_order)]
        for number, (s, e) in enumerate(segments):
            chunk = ref.text[s:e]
            found = [v for v in self.values_in(spec, chunk)
                     if not any(ds <= s + v.start < de for ds, de in dates)]
            letters = [w for w in _words(fold(chunk)) if w not in _FILLERS and w not in CURRENCY_SIGNS]
            if number > 0 and not found and letters:
                break
            if number > 0 and len(letters) >= 2:
                break
            values.extend((s, f) for f in found)
        if not values:
            return None
        # In a row of amounts after a total label, the last column is the total.
        s, value = values[-1] if spec.labels.last else values[0]
        gap_end = values[0][0] + values[0][1].start
        factor = self._gap_factor(_strip_spans(ref.folded, end, gap_end, dates), spec.labels)
        if factor is None:
            return None
        return self._candidate(spec, ref, s + value.start, s + value.end, value, weight * factor)

    def _below(self, spec: FieldSpec, ref: LineRef, start: int, end: int, weight: float) -> Candidate | None:
        cell = ref.cell_at(start)
        cell_start, cell_end = ref.cell_span(cell)
        rest = ref.text[end:cell_end].strip(" :.#-–|")
        word = ref.line.words[cell]
        if rest and _words(fold(rest)):
            if self._gap_factor(fold(rest), spec.labels) is None:
                return None
            # A header cell holding several labels: the value sits under this one.
            x0, x1 = ref.x_of(start), ref.x_of(end)
        else:
            x0, x1 = word.x0, word.x1
        height = ref.line.height
        slack = 0.5 * height
        skipped = 0
        for below in self.layout.below(ref, _BELOW_LINES):
            if below.line.y0 - ref.line.y1 > 4 * height:
                break
            for index, other in enumerate(below.line.words):
                if other.x1 < x0 - slack or other.x0 > x1 + slack:
                    continue
                s, e = below.cell_span(index)
                values = self.values_in(spec, below.text[s:e])
                if spec.value_kind == "date":
                    values = [v for v in values if self._date_context_ok(spec, below, s + v.start)]
                if values:
                    value = values[0]
                    distance = 0.9 if skipped == 0 else 0.8
                    candidate = self._candidate(spec, below, s + value.start, s + value.end, value,
                                                weight * distance)
                    if spec.value_kind == "address":
                        candidate.extra = self._continuation(below, index)
                    return candidate
                skipped += 1
                if skipped > 1:
                    return None
        return None

    def _continuation(self, ref: LineRef, cell: int) -> list[LineRef]:
        """Lines that continue a multi-line value (an address) in the same column."""
        word = ref.line.words[cell]
        out: list[LineRef] = []
        last = ref
        for below in self.layout.below(ref, 4):
            if below.line.y0 - last.line.y1 > 1.2 * last.line.height:
                break
            first = below.line.words[0]
            if abs(first.x0 - word.x0) > 2 * last.line.height or ":" in below.text[:25]:
                break
            if _PHONE_LINE.search(below.folded) or "@" in below.text:
                break
            out.append(below)
            last = below
        return out

    def _date_context_ok(self, spec: FieldSpec, ref: LineRef, offset: int) -> bool:
        # A date whose own cell says "due" or "delivery" is not the document's date.
        cell = ref.cell_at(offset)
        cell_start, _ = ref.cell_span(cell)
        before = _words(ref.folded[cell_start:offset])[-4:]
        return not any(w in spec.labels.negatives for w in before)

    def _candidate(self, spec: FieldSpec, ref: LineRef, start: int, end: int, value: Found,
                   score: float) -> Candidate:
        return Candidate(value.value, score * value.quality, ref, start, end, ref.text[start:end], value.currency)

    # --- choosing ----------------------------------------------------------------

    def choose(self, spec: FieldSpec, candidates: list[Candidate]) -> Candidate | None:
        if not candidates:
            return None
        best = max(c.score for c in candidates)
        close = [c for c in candidates if c.score >= best - 0.02]
        close.sort(key=lambda c: c.order)
        return close[-1] if spec.labels.last else close[0]

    def find(self, spec: FieldSpec) -> Candidate | None:
        kind = spec.value_kind
        if kind == "currency":
            return self.currency(spec)
        chosen = self.choose(spec, self.candidates(spec))
        if chosen is not None and chosen.score >= 0.35:
            return chosen
        fallback = self.fallback(spec)
        if chosen is None:
            return fallback
        if fallback is not None and fallback.score > chosen.score:
            return fallback
        return chosen

    # --- fallbacks -------------------------------------------------------------------

    def fallback(self, spec: FieldSpec) -> Candidate | None:
        kind = spec.value_kind
        concept = spec.labels.concept
        if kind == "date" and concept in (None, "date"):
            return self._first_date(spec)
        if kind == "amount" and concept == "total":
            return self._largest_amount(spec)
        if kind == "party" and concept == "vendor":
            from daemon.extraction.providers.rules.parties import vendor_candidate

            return vendor_candidate(self)
        if kind == "address":
            from daemon.extraction.providers.rules.parties import address_candidate

            return address_candidate(self)
        if kind in ("email", "uri", "enum", "phone"):
            for ref in self.layout.lines():
                values = self.values_in(spec, ref.text)
                if values:
                    return self._candidate(spec, ref, values[0].start, values[0].end, values[0], 0.4)
        return None

    def _first_date(self, spec: FieldSpec) -> Candidate | None:
        for ref in self.layout.lines():
            for value in find_dates(ref.text, self.layout.date_order):
                if self._date_context_ok(spec, ref, value.start):
                    return self._candidate(spec, ref, value.start, value.end, value, 0.4)
        return None

    def _largest_amount(self, spec: FieldSpec) -> Candidate | None:
        best: Candidate | None = None
        for ref in self.layout.lines():
            dates = [(d.start, d.end) for d in find_dates(ref.text, self.layout.date_order)]
            for value in find_amounts(ref.text, self.layout.decimal):
                if value.currency is None or any(s <= value.start < e for s, e in dates):
                    continue
                if best is None or value.value > best.value:
                    best = self._candidate(spec, ref, value.start, value.end, value, 0.3)
        return best

    def currency(self, spec: FieldSpec) -> Candidate | None:
        """The currency written beside the amounts (the total's first), else the most frequent."""
        labelled = self.choose(spec, self.candidates(spec))
        if labelled is not None:
            return labelled
        total = self.find(field_spec("total", {"type": "number"}))
        if total is not None and total.currency:
            return Candidate(total.currency, 0.85 * min(total.score, 1.0), total.ref, total.start, total.end,
                             total.text)
        seen: Counter[str] = Counter()
        first: dict[str, tuple[LineRef, Found]] = {}
        for ref in self.layout.lines():
            for value in find_currencies(ref.text):
                seen[value.value] += 1
                first.setdefault(value.value, (ref, value))
        if not seen:
            return None
        code, count = seen.most_common(1)[0]
        ref, value = first[code]
        return Candidate(code, 0.5 + 0.3 * count / sum(seen.values()), ref, value.start, value.end,
                         ref.text[value.start : value.end])

    # --- the whole schema --------------------------------------------------------------

    def extract(self, definition: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The result for `definition` and its evidence keyed by JSON pointer."""
        result: dict[str, Any] = {}
        evidence: dict[str, Any] = {}
        self._object(definition, "", "", result, evidence)
        return result, evidence

    def _object(self, schema: dict[str, Any], prefix: str, pointer: str, result: dict[str, Any],
                evidence: dict[str, Any]) -> None:
        from daemon.extraction.providers.rules.tables import read_table

        for name, sub in (schema.get("properties") or {}).items():
            if not isinstance(sub, dict):
                continue
            path = f"{pointer}/{_escape(name)}"
            kind = sub.get("type")
            if isinstance(kind, list):
                kind = next((k for k in kind if k != "null"), None)
            if kind == "object":
                nested: dict[str, Any] = {}
                self._object(sub, f"{prefix}{name}_", path, nested, evidence)
                if nested:
                    result[name] = nested
            elif kind == "array":
                items = sub.get("items") if isinstance(sub.get("items"), dict) else {}
                if items.get("type") == "object" or "properties" in items:
                    rows = read_table(self, name, sub, items, path, evidence)
                    if rows:
                        result[name] = rows
                else:
                    values = self._list(prefix + name, sub, items, path, evidence)
                    if values:
                        result[name] = values
            else:
                spec = field_spec(prefix + name if prefix else name, sub)
                if prefix and not spec.labels.concepts:
                    spec = field_spec(name, sub)
                found = self.find(spec)
                if found is not None:
                    value = self.typed(spec, found)
                    if value is not None:
                        result[name] = value
                        evidence[path] = self.evidence(found)

    def _list(self, name: str, schema: dict[str, Any], items: dict[str, Any], pointer: str,
              evidence: dict[str, Any]) -> list[Any]:
        spec = field_spec(name, {**items, "description": schema.get("description", ""),
                                 "title": schema.get("title", "")})
        candidates = self.candidates(spec)
        if not candidates and spec.value_kind in ("email", "uri", "date"):
            for ref in self.layout.lines():
                for value in self.values_in(spec, ref.text):
                    candidates.append(self._candidate(spec, ref, value.start, value.end, value, 0.4))
        out: list[Any] = []
        seen: set[str] = set()
        for candidate in sorted(candidates, key=lambda c: c.order):
            value = self.typed(spec, candidate)
            if value is None or repr(value) in seen:
                continue
            seen.add(repr(value))
            evidence[f"{pointer}/{len(out)}"] = self.evidence(candidate)
            out.append(value)
        return out

    def typed(self, spec: FieldSpec, found: Candidate) -> Any:
        value = found.value
        kind = spec.type
        if isinstance(value, dt.date):
            if spec.format == "date-time":
                clock = find_time(found.ref.text[found.end :]) or (0, 0, 0)
                return dt.datetime(value.year, value.month, value.day, *clock).isoformat()
            return value.isoformat()
        if kind == "integer":
            if isinstance(value, bool):
                return None
            if isinstance(value, float):
                return int(value) if value.is_integer() else None
            return value if isinstance(value, int) else None
        if kind == "number":
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        if kind == "boolean":
            return value if isinstance(value, bool) else None
        if kind == "string":
            if isinstance(value, float):
                return found.text.strip()
            return str(value)
        return value

    def evidence(self, found: Candidate) -> dict[str, Any]:
        ref = found.ref
        page = self.layout.pages[ref.page].page
        x0, y0, x1, y1 = ref.box(found.start, found.end)
        text = found.text
        conf = ref.conf(found.start, found.end)
        for extra in found.extra:
            x0, y0 = min(x0, extra.line.x0), min(y0, extra.line.y0)
            x1, y1 = max(x1, extra.line.x1), max(y1, extra.line.y1)
            text += "\n" + extra.text
        return {
            "confidence": round(max(0.0, min(0.99, found.score * conf)), 3),
            "page": page.number,
            "bbox": page.relative(x0, y0, x1, y1),
            "text": text,
        }


def extract_rules(document: Document, definition: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `rules` provider on a parsed document: (result, resultMeta.fields)."""
    return Engine(document).extract(definition)


# --- helpers -------------------------------------------------------------------------

_CODES = frozenset(v for v in CURRENCY_SIGNS.values())
_CURRENCY_TOKEN = re.compile(
    r"(?<![A-Za-z])(" + "|".join(sorted(_CODES, key=len, reverse=True)) + r")(?![A-Za-z])|[$€£¥₹]|"
    r"(?<![A-Za-z])(?:Rs\.?|RM|zł|US\$|A\$|C\$|HK\$|S\$)(?=\s?-?\d)"
)
_PHONE = re.compile(r"(?<![\w])\+?\(?\d[\d ()./\-]{6,}\d(?![\w])")
_PHONE_LINE = re.compile(r"(?<![a-z])(?:tel|phone|fax|hp|mobile|telefon)\b")


def label_matches(pattern: re.Pattern[str], folded: str,
                  line_at: Callable[[int], LineRef]) -> Iterator[tuple[LineRef, int, int]]:
    """Matches of `pattern` in a page's folded text as (line, start, end) within
    one cell: a match across two cells or lines is retried one character on."""
    position = 0
    while (match := pattern.search(folded, position)) is not None:
        ref = line_at(match.start())
        start, end = match.start() - ref.start, match.end() - ref.start
        if end <= start:
            position = match.start() + 1
            continue
        if end > len(ref.text) or ref.cell_at(start) != ref.cell_at(end - 1):
            position = match.start() + 1
            continue
        yield ref, start, end
        position = match.end()


def find_currencies(text: str) -> list[Found]:
    out = []
    for m in _CURRENCY_TOKEN.finditer(text):
        token = m.group()
        code = token if token in _CODES else CURRENCY_SIGNS.get(token.lower())
        if code:
            out.append(Found(code, m.start(), m.end(), 1.0 if token in _CODES else 0.9))
    return out


def _words(text: str) -> list[str]:
    return [w.strip(".-/'") or w for w in _WORD.findall(text)]


def _label_key(text: str) -> str:
    return " ".join(re.split(r"[\s.:_\-]+", text)).strip()


def _strip_spans(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> str:
    chars = list(text[start:end])
    for s, e in spans:
        for i in range(max(s, start), min(e, end)):
            chars[i - start] = " "
    return "".join(chars)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
