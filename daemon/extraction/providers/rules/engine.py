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

import bisect
import datetime as dt
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from daemon.extraction.document import Document, Word
from daemon.extraction.parsers.scanned import readings_of
from daemon.extraction.providers.rules.labels import (
    PAYMENT_CONCEPTS,
    FieldLabels,
    LabelIndex,
    concept_labels,
    field_labels,
    one_edit,
    word_set,
)
from daemon.extraction.providers.rules.layout import Layout, LineRef
from daemon.extraction.providers.rules.receipts import agree_totals, repair_dates, repair_totals
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
_FILLERS = word_set(
    "on of du le la de des the is in at for no nr n° # : - = ( ) rm eur usd gbp $ € £ rs ttc incl inc "
    "(rm) (eur) (usd) amount total"
)
_WORD = re.compile(r"[^\W\d_][\w'.\-/]*", re.UNICODE)
# How far below a label its value may be, in lines.
_BELOW_LINES = 4
# How far to the right of a label its value may be: this many cells, and this
# many characters of the label's own cell on either side of it. Without a
# reach, every label of a line would read the whole rest of its line: a table
# row of a thousand "Total" cells (a 60 KB HTML page) took minutes, growing with
# the square of its length. A row of amounts after a total label has a handful.
_CELLS_RIGHT = 16
_CELL_REACH = 200


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


@dataclass(frozen=True)
class FieldSpec:
    name: str
    schema: dict[str, Any]
    labels: FieldLabels
    type: str = "string"
    format: str | None = None
    # What to look for: date, amount, integer, boolean, email, uri, enum,
    # currency, id, phone, party, address or text.
    value_kind: str = "text"


def _value_kind(kind: str, fmt: str | None, schema: dict[str, Any], labels: FieldLabels) -> str:
    if schema.get("enum"):
        return "enum"
    if kind == "number":
        return "amount"
    if kind in ("integer", "boolean"):
        return kind
    if fmt in ("date", "date-time"):
        return "date"
    if fmt == "email":
        return "email"
    if fmt in ("uri", "url"):
        return "uri"
    if labels.kind == "amount":
        return "text"  # a string field that holds an amount: read it as written
    return labels.kind


def field_spec(name: str, schema: dict[str, Any], *, column: bool = False) -> FieldSpec:
    labels = field_labels(name, schema, column=column)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    fmt = str(schema["format"]) if schema.get("format") else None
    return FieldSpec(name, schema, labels, str(kind), fmt, _value_kind(str(kind), fmt, schema, labels))


class Engine:
    """Reads one document; `extract` may be called for several definitions."""

    def __init__(self, document: Document) -> None:
        self.layout = Layout(document)
        # Read by OCR: values may hold misread characters and are repaired where their shape is sure.
        self.ocr = any(page.ocr for page in document.pages)
        self._found: dict[tuple[str, str], Candidate | None] = {}
        self._memo: dict[str, object] = {}
        self._dates: dict[int, tuple[list[tuple[int, int]], list[int], list[int]]] = {}

    def memo(self, key: str) -> object:
        """What `remember` kept under `key` for this document (None if nothing)."""
        return self._memo.get(key)

    def remember(self, key: str, value: object) -> None:
        self._memo[key] = value

    # --- values in a piece of text ---------------------------------------------

    def values_in(self, spec: FieldSpec, text: str) -> list[Found]:
        kind = spec.value_kind
        if kind == "amount":
            return find_amounts(text, self.layout.decimal)
        if kind == "integer":
            return find_integers(text)
        if kind == "date":
            return find_dates(repair_dates(text) if self.ocr else text, self.layout.date_order)
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
        quality = 0.9
        if kind == "party" and sum(ch.isdigit() for ch in cleaned) > sum(ch.isalpha() for ch in cleaned):
            quality = 0.3  # a name is words, not a registration number
        first = _words(fold(cleaned))[:1]
        if kind == "party" and first and first[0] in spec.labels.negatives:
            quality = 0.3  # "Company *Reg No* 1234-K": a longer label, not a name
        if kind == "address" and (not any(ch.isdigit() for ch in cleaned) or len(cleaned) < 8
                                  or sum(ch.isalpha() for ch in cleaned) < 5):
            # A postal address has a number (street, postcode) and words: "GST No." is
            # another label, "Location/SP: 05 /0531" a code.
            quality = 0.4
        return [Found(clean_text(cleaned), start, start + len(cleaned), quality)]

    # --- label candidates --------------------------------------------------------

    def candidates(self, spec: FieldSpec) -> list[Candidate]:
        labels = spec.labels
        out: list[Candidate] = []
        for ref, start, end, weight in self.label_matches(labels):
            if self._refused_before(ref, start, labels):
                continue
            right = self._right_of(spec, ref, start, end, weight)
            below = self._below(spec, ref, start, end, weight) if right is None or right.score < 0.9 else None
            found = right if below is None or (right is not None and right.score >= below.score) else below
            if found is not None:
                out.append(found)
        return out

    def label_matches(self, labels: FieldLabels) -> Iterator[tuple[LineRef, int, int, float]]:
        """Every label of a field in the document, as (line, start, end, weight),
        each within one cell (a match across two cells is two other words)."""
        for ref in self._lines_with(labels.index):

            def one_cell(start: int, end: int, _: Any, ref: LineRef = ref) -> bool:
                return ref.cell_at(start) == ref.cell_at(end - 1)

            ocr = self.layout.pages[ref.page].page.ocr
            for start, end, _, weight, exact in labels.index.find(ref.folded, ref.tokens, one_cell, fuzzy=ocr):
                yield ref, start, end, weight if exact else 0.9 * weight

    def _lines_with(self, index: LabelIndex) -> list[LineRef]:
        """The lines that may hold one of the index's labels, in document order
        (every line of an OCR page: a misread first word may still match)."""
        word_lines = self.layout.word_lines
        hit: dict[int, LineRef] = {}
        for word in index.by_first:
            for ref in word_lines.get(word, ()):
                hit[ref.order] = ref
        for ref in self.layout.lines():
            if ref.tokens and self.layout.pages[ref.page].page.ocr:
                hit[ref.order] = ref
        return [hit[order] for order in sorted(hit)]

    def _refused_before(self, ref: LineRef, start: int, labels: FieldLabels) -> bool:
        """Qualifiers in the label's cell before the label ("Sub total", "Due date")."""
        cell = ref.cell_at(start)
        cell_start, _ = ref.cell_span(cell)
        before = _words(_reach_back(ref.folded, cell_start, start))[-3:]
        if labels.positives and self._any_positive(before, labels):
            return False
        return any(w in labels.negatives for w in before)

    def _any_positive(self, words: list[str], labels: FieldLabels) -> bool:
        """Whether a word cancels the label's negatives ("Total *incl* GST"); read by OCR,
        also a word one letter off ("Inci", "Inch")."""
        if any(w in labels.positives for w in words):
            return True
        return self.ocr and any(len(w) >= 4 and one_edit(w, p) for w in words for p in labels.positives)

    def _gap_factor(self, gap: str, labels: FieldLabels, label: str = "") -> float | None:
        """None when the words between label and value refuse the label, else a factor."""
        words = _words(gap)
        if labels.positives and self._any_positive(words + _words(label), labels):
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
        # The rest of the label's cell, then the following cells (within reach).
        segments: list[tuple[int, int]] = [(end, max(end, min(cell_end, end + _CELL_REACH)))]
        first = ref.cell_at(end) + 1 if end < cell_end else cell + 1
        for index in range(first, min(cells, first + _CELLS_RIGHT)):
            segments.append(ref.cell_span(index))
        if kind in ("amount", "integer"):
            return self._amount_right(spec, ref, start, end, segments, weight)
        for number, (s, e) in enumerate(segments[:3]):
            chunk = ref.text[s:e]
            if not chunk.strip(" :.#-–|"):
                continue
            if number == 0 and chunk.rstrip().endswith(":") and len(segments) > 1:
                continue  # "Vendor Address:": the cell is one longer label, its words qualify this one
            values = self.values_in(spec, chunk)
            if kind == "date":
                values = [v for v in values if self._date_context_ok(spec, ref, s + v.start)]
            if not values:
                if kind in ("text", "party", "address", "id"):
                    return None  # the next cell says something else: not this label's value
                continue
            value = values[0]
            factor = self._gap_factor(ref.folded[end : s + value.start], spec.labels, ref.folded[start:end])
            if factor is None:
                return None
            position = 1.0 if number == 0 else 0.95 - 0.05 * (number - 1)
            return self._candidate(spec, ref, s + value.start, s + value.end, value, weight * position * factor)
        return None

    def _amount_right(self, spec: FieldSpec, ref: LineRef, start: int, end: int, segments: list[tuple[int, int]],
                      weight: float) -> Candidate | None:
        values: list[tuple[int, Found]] = []
        dates = self._dates_between(ref, start, segments[-1][1])
        # OCR misreads a currency or a colon between label and amount ("Total  Ri  =86.00"):
        # one short unknown word there is let through.
        stray = 1 if self.layout.pages[ref.page].page.ocr else 0
        for number, (s, e) in enumerate(segments):
            chunk = ref.text[s:e]
            found = [v for v in self.values_in(spec, chunk)
                     if not any(ds <= s + v.start < de for ds, de in dates) and not _is_percent(chunk, v)]
            letters = [w for w in _words(fold(chunk)) if w not in _FILLERS and w not in CURRENCY_SIGNS]
            if number > 0 and not found and letters:
                if stray and len(letters) == 1 and len(letters[0]) <= 3 and not values:
                    stray = 0
                    continue
                break
            if number > 0 and len(letters) >= 2:
                break
            values.extend((s, f) for f in found)
        if not values:
            return None
        gap_end = values[0][0] + values[0][1].start
        factor = self._gap_factor(_strip_spans(ref.folded, end, gap_end, dates), spec.labels, ref.folded[start:end])
        if factor is None:
            return None
        if spec.labels.concept == "total" and len(values) > 1:
            # A row of amounts after a total label (net, tax, gross): the gross is the
            # largest. Such a row is a table's, a little less sure than a total alone.
            s, value = max(values, key=lambda item: float(item[1].value))
            # On a scanned receipt, "TOTAL  26.00  1.56" is the tax summary's row (amount, tax).
            factor *= 0.75 if self.ocr else 0.93
        else:
            s, value = values[-1] if spec.labels.last else values[0]
        return self._candidate(spec, ref, s + value.start, s + value.end, value, weight * factor)

    def _dates_between(self, ref: LineRef, start: int, end: int) -> list[tuple[int, int]]:
        """The spans of the dates of `ref`'s line that overlap [start, end) (the
        line's dates are found once, whatever the number of labels on it)."""
        if ref.order not in self._dates:
            spans = [(d.start, d.end) for d in find_dates(ref.text, self.layout.date_order)]
            spans.sort()
            self._dates[ref.order] = (spans, [s for s, _ in spans], [e for _, e in spans])
        spans, starts, ends = self._dates[ref.order]
        # Dates found in one text do not overlap: sorted by start, they are sorted by end.
        return spans[bisect.bisect_right(ends, start) : bisect.bisect_left(starts, end)]

    def _below(self, spec: FieldSpec, ref: LineRef, start: int, end: int, weight: float) -> Candidate | None:
        cell = ref.cell_at(start)
        _, cell_end = ref.cell_span(cell)
        rest = ref.text[end : min(cell_end, end + _CELL_REACH)].strip(" :.#-–|")
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
            words = below.line.words
            # A line's words run left to right without overlapping (closer ones are one
            # phrase), so their right edges are sorted: skip those left of the label at once.
            for index in range(bisect.bisect_left(words, x0 - slack, key=_right_edge), len(words)):
                other = words[index]
                if other.x0 > x1 + slack:
                    break
                s, e = below.cell_span(index)
                values = self.values_in(spec, below.text[s:e])
                if spec.value_kind == "date":
                    values = [v for v in values if self._date_context_ok(spec, below, s + v.start)]
                if spec.value_kind == "amount":
                    values = [v for v in values if not _is_percent(below.text[s:e], v)]
                if values:
                    value = values[0]
                    distance = 0.9 if skipped == 0 else 0.8
                    if spec.value_kind == "amount" and self.layout.pages[ref.page].page.ocr:
                        # A receipt writes its amounts beside their labels; one below a
                        # label is an item under a column header ("Qty  Amount").
                        distance *= 0.6
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
        # A date whose own cell says "due" or "delivery" is not the document's date, unless
        # a reference number stands between: in "Order No. 1000219 11/03/2018" "order"
        # names the number ("due in 30 days 11/03/2018" is still due).
        cell = ref.cell_at(offset)
        cell_start, _ = ref.cell_span(cell)
        text = _reach_back(ref.folded, cell_start, offset)
        references = list(_REFERENCE.finditer(text))
        if references:
            text = text[references[-1].end() :]
        return not any(w in spec.labels.negatives for w in _words(text)[-4:])

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
        key = (spec.name, repr(sorted(spec.schema.items())))
        if key not in self._found:
            self._found[key] = self._find(spec)
        return self._found[key]

    def _find(self, spec: FieldSpec) -> Candidate | None:
        kind = spec.value_kind
        if kind == "currency":
            return self.currency(spec)
        candidates = self.candidates(spec)
        if kind == "amount" and spec.labels.concept == "total":
            candidates = agree_totals(self, spec, self._check_totals(spec, repair_totals(self, candidates)))
        chosen = self.choose(spec, candidates)
        # A name or an address after a weak label is less likely than the usual place.
        enough = 0.8 if kind in ("party", "address") else 0.35
        if chosen is not None and chosen.score >= enough:
            return chosen
        fallback = self.fallback(spec)
        if chosen is None:
            return fallback
        if fallback is not None and (fallback.score > chosen.score or kind in ("party", "address")):
            return fallback
        return chosen

    def _check_totals(self, spec: FieldSpec, candidates: list[Candidate]) -> list[Candidate]:
        """Totals that agree with the payment (tendered - change) win; totals
        in a tax summary table (below "GST SUMMARY", "VAT analysis") lose."""
        summaries = self._summary_lines()
        for candidate in candidates:
            if any(ref.page == candidate.ref.page and ref.index < candidate.ref.index for ref in summaries):
                candidate.score *= 0.5
        paid = self.payment()
        if paid is None:
            return candidates
        agreeing = [c for c in candidates if abs(float(c.value) - paid) < 0.005]
        for candidate in agreeing:
            candidate.score = min(candidate.score + 0.3, 1.2)
        if not agreeing:
            # Two readings (tendered, change) agree with each other better than a
            # misread total: the amount paid, where it is written, else as computed.
            for ref in self.layout.lines():
                for value in find_amounts(ref.text, self.layout.decimal):
                    if abs(float(value.value) - paid) < 0.005:
                        candidates.append(self._candidate(spec, ref, value.start, value.end, value, 0.75))
                        return candidates
            change = self._memo["change"]
            if isinstance(change, Candidate):
                candidates.append(Candidate(paid, 0.6, change.ref, change.start, change.end, change.text))
        return candidates

    def payment(self) -> float | None:
        """What was paid according to the receipt: the amount tendered minus the change."""
        if "payment" not in self._memo:
            tendered = self.choose(_TENDERED, self.candidates(_TENDERED))
            change = self.choose(_CHANGE, self.candidates(_CHANGE))
            paid = None
            if (tendered is not None and change is not None and tendered.ref.order < change.ref.order
                    and _CENTS.search(tendered.text) and _CENTS.search(change.text)):
                given, back = float(tendered.value), float(change.value)
                if given > 0 and 0 <= back < given:
                    paid = round(given - back, 2)
            self._memo["payment"] = paid
            self._memo["change"] = change
        value = self._memo["payment"]
        return value if isinstance(value, float) else None

    def _summary_lines(self) -> list[LineRef]:
        if "summaries" not in self._memo:
            self._memo["summaries"] = [
                ref for ref in self.layout.lines()
                if (any(t[2] in _SUMMARY for t in ref.tokens) and any(t[2] in _TAX_WORDS for t in ref.tokens))
                or (self.ocr and _OCR_SUMMARY.search(ref.folded) is not None)
            ]
        found = self._memo["summaries"]
        return found if isinstance(found, list) else []

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
        best: Candidate | None = None
        sure: Candidate | None = None
        for ref in self.layout.lines():
            for value in self.values_in(spec, ref.text):
                if self._date_context_ok(spec, ref, value.start):
                    candidate = self._candidate(spec, ref, value.start, value.end, value, 0.4)
                    if value.quality >= 0.9:
                        # On a scanned receipt the sale's date is stamped with its time; other
                        # date-shaped numbers (item codes, expiry dates) are not.
                        if not self.ocr or find_time(ref.text[value.end :]) is not None:
                            return candidate
                        sure = sure or candidate
                    best = best or candidate
        return sure or best

    def _largest_amount(self, spec: FieldSpec) -> Candidate | None:
        best: Candidate | None = None
        for ref in self.layout.lines():
            dates = [(d.start, d.end) for d in find_dates(ref.text, self.layout.date_order)]
            for value in find_amounts(ref.text, self.layout.decimal):
                if value.currency is None or any(s <= value.start < e for s, e in dates):
                    continue
                if self.ocr and (value.value <= 0 or not _CENTS.search(ref.text[value.start : value.end])):
                    continue  # a misread registration or phone number beside "RM"
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

        for name, sub, kind in _properties(schema):
            path = f"{pointer}/{_escape(name)}"
            if kind == "object":
                nested: dict[str, Any] = {}
                self._object(sub, f"{prefix}{name}_", path, nested, evidence)
                if nested:
                    result[name] = nested
            elif kind == "array":
                raw_items = sub.get("items")
                items: dict[str, Any] = raw_items if isinstance(raw_items, dict) else {}
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


_TENDERED = FieldSpec("tendered", {"type": "number"}, concept_labels(PAYMENT_CONCEPTS["tendered"]), "number", None,
                      "amount")
_CHANGE = FieldSpec("change", {"type": "number"}, concept_labels(PAYMENT_CONCEPTS["change"]), "number", None,
                    "amount")
_CENTS = re.compile(r"\d[.,]\d{2}(?!\d)")
PAYMENT_SPECS = (_TENDERED, _CHANGE)
_SUMMARY = word_set("summary sunmary summery analysis breakdown recap recapitulatif overzicht specificatie "
                    "ubersicht aufstellung podsumowanie resumen riepilogo")
_TAX_WORDS = word_set("tax gst vat tva btw mwst ust iva sst")
# "GSTSUMMARY", "GST Sunmary", "Tax Suinmay": a tax summary's title as OCR reads it.
_OCR_SUMMARY = re.compile(r"(?<![a-z])(?:gst|tax|vat|sst)\s*[_-]?\s*su\w{0,2}m\w{2,4}(?![a-z])")


def extract_rules(document: Document, definition: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `rules` provider on a parsed document: (result, resultMeta.fields).

    A document read by OCR more than once (`ScannedDocument`) is read in each
    reading; every field gets the value most readings agree on (`_agree`).
    """
    readings = readings_of(document)
    if len(readings) == 1:
        return Engine(document).extract(definition)
    results = [Engine(reading).extract(definition) for reading in readings]
    result: dict[str, Any] = {}
    evidence: dict[str, Any] = {}
    _agree(definition, "", [r for r, _ in results], [e for _, e in results], result, evidence)
    return result, evidence


def _agree(schema: dict[str, Any], pointer: str, results: list[dict[str, Any]], evidences: list[dict[str, Any]],
           result: dict[str, Any], evidence: dict[str, Any]) -> None:
    """Each scalar field's value in most readings (the surest of those readings'
    values on a tie; the first reading's on a tie of sureness too); arrays as the
    first reading has them."""
    for name, sub, kind in _properties(schema):
        path = f"{pointer}/{_escape(name)}"
        if kind == "object":
            nested: dict[str, Any] = {}
            parts: list[dict[str, Any]] = []
            for values in results:
                part = values.get(name)
                parts.append(part if isinstance(part, dict) else {})
            _agree(sub, path, parts, evidences, nested, evidence)
            if nested:
                result[name] = nested
            continue
        if kind == "array":
            if name in results[0]:
                result[name] = results[0][name]
                evidence.update({k: v for k, v in evidences[0].items() if k.startswith(path + "/")})
            continue
        groups: dict[str, list[tuple[float, int]]] = {}
        for index, values in enumerate(results):
            if name in values:
                sure = float(evidences[index].get(path, {}).get("confidence", 0.0))
                groups.setdefault(_vote_key(values[name]), []).append((sure, index))
        if not groups:
            continue
        members = max(groups.values(), key=lambda group: (len(group), max(group)[0], -min(i for _, i in group)))
        _, index = max(members, key=lambda member: (member[0], -member[1]))
        result[name] = results[index][name]
        if path in evidences[index]:
            evidence[path] = evidences[index][path]


def _properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """An object schema's properties with their type (a nullable type's other one)."""
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            kind = sub.get("type")
            if isinstance(kind, list):
                kind = next((k for k in kind if k != "null"), None)
            yield name, sub, kind


def _vote_key(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.upper().split())
    if isinstance(value, float):
        return repr(round(value, 2))
    return repr(value)


# --- helpers -------------------------------------------------------------------------

_CODES = frozenset(v for v in CURRENCY_SIGNS.values())
_CURRENCY_TOKEN = re.compile(
    r"(?<![A-Za-z])(" + "|".join(sorted(_CODES, key=len, reverse=True)) + r")(?![A-Za-z])|[$€£¥₹]|"
    r"(?<![A-Za-z])(?:Rs\.?|RM|zł|US\$|A\$|C\$|HK\$|S\$)(?=\s?-?\d)"
)
# A reference number (four digits or more) between a label and a date.
_REFERENCE = re.compile(r"\d{4,}")
_PHONE = re.compile(r"(?<![\w])\+?\(?\d[\d ()./\-]{6,}\d(?![\w])")
_PHONE_LINE = re.compile(r"(?<![a-z])(?:tel|phone|fax|hp|mobile|telefon)\b")


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


def _is_percent(text: str, value: Found) -> bool:
    """"6.00%" is a rate, not an amount."""
    return text[value.end : value.end + 2].lstrip().startswith("%")


def _reach_back(text: str, start: int, end: int) -> str:
    """``text[start:end]``, or only its last `_CELL_REACH` characters from a
    word boundary on (the words just before a label or value qualify it)."""
    if end - start <= _CELL_REACH:
        return text[start:end]
    cut = text[end - _CELL_REACH : end]
    return cut[cut.find(" ") + 1 :]


def _right_edge(word: Word) -> float:
    return word.x1


def _strip_spans(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> str:
    chars = list(text[start:end])
    for s, e in spans:
        for i in range(max(s, start), min(e, end)):
            chars[i - start] = " "
    return "".join(chars)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
