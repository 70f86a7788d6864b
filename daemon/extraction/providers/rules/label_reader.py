"""Values read beside their labels: a field's candidates in one document.

A field's labels (`labels.field_labels`) are searched in every line; from each
label the value is read to the right on the same line (the rest of the
label's cell, then the next cells), else in the cell below the label. Words
between label and value that qualify the label the wrong way ("Total *HT*",
"Date *limite*") refuse it, other words lower its score.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator
from typing import Any

from daemon.extraction.document import Word
from daemon.extraction.providers.rules.candidates import Candidate, found_at
from daemon.extraction.providers.rules.fields import FieldQuery, read_values
from daemon.extraction.providers.rules.labels import FieldLabels, LabelIndex, one_edit, word_set
from daemon.extraction.providers.rules.layout import Layout, LineRef
from daemon.extraction.providers.rules.values import CURRENCY_SIGNS, Found, ValueKind, find_dates, fold, words

# Words that may sit between a label and its value without meaning anything.
_FILLERS = word_set(
    "on of du le la de des the is in at for no nr n° # : - = ( ) rm eur usd gbp $ € £ rs ttc incl inc "
    "(rm) (eur) (usd) amount total"
)
# How far below a label its value may be, in lines.
_BELOW_LINES = 4
# How far to the right of a label its value may be: this many cells, and this
# many characters of the label's own cell on either side of it. Without a
# reach, every label of a line would read the whole rest of its line: a table
# row of a thousand "Total" cells (a 60 KB HTML page) took minutes, growing with
# the square of its length. A row of amounts after a total label has a handful.
_CELLS_RIGHT = 16
_CELL_REACH = 200
# Labels of one field read per line: a line has a handful; one of hundreds ("Total 1.00"
# five hundred times, 900 such lines in a 14 KB PDF) is no document's, and each costs a read.
_LABELS_PER_LINE = 20
# A reference number (four digits or more) between a label and a date.
_REFERENCE = re.compile(r"\d{4,}")
# A word followed by 's names its owner, not a value: "the Company's approval".
_POSSESSIVE = re.compile(r"['’`]s(?![a-z])")
_PHONE_LINE = re.compile(r"(?<![a-z])(?:tel|phone|fax|hp|mobile|telefon)\b")


class LabelReader:
    """Reads the fields of one document beside their labels."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        # Per line (by document order): its dates' spans, their starts and their ends.
        self._dates: dict[int, tuple[list[tuple[int, int]], list[int], list[int]]] = {}

    def values_in(self, query: FieldQuery, text: str) -> list[Found]:
        return read_values(query, text, self.layout)

    def candidates(self, query: FieldQuery) -> list[Candidate]:
        """A candidate for each of the field's labels that has a value beside or below it."""
        labels = query.labels
        out: list[Candidate] = []
        for ref, start, end, weight in self.label_matches(labels):
            if self._refused_before(ref, start, labels) or _POSSESSIVE.match(ref.folded, end):
                continue
            right = self._right_of(query, ref, start, end, weight)
            below = self._below(query, ref, start, end, weight) if right is None or right.score < 0.9 else None
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
            found = labels.index.find(ref.folded, ref.tokens, one_cell, fuzzy=ocr)
            for start, end, _, weight, exact in itertools.islice(found, _LABELS_PER_LINE):
                yield ref, start, end, weight if exact else 0.9 * weight

    def _lines_with(self, index: LabelIndex) -> list[LineRef]:
        """The lines that may hold one of the index's labels, in document order
        (every line of an OCR page: a misread first word may still match)."""
        word_lines = self.layout.word_lines
        hit: dict[int, LineRef] = {}
        for word in index.by_first:
            for ref in word_lines.get(word, ()):
                hit[ref.order] = ref
        if self.layout.ocr:
            for ref in self.layout.lines():
                if ref.token_set and self.layout.pages[ref.page].page.ocr:
                    hit[ref.order] = ref
        return [hit[order] for order in sorted(hit)]

    def _refused_before(self, ref: LineRef, start: int, labels: FieldLabels) -> bool:
        """Qualifiers in the label's cell before the label ("Sub total", "Due date")."""
        cell = ref.cell_at(start)
        cell_start, _ = ref.cell_span(cell)
        before = words(_reach_back(ref.folded, cell_start, start))[-3:]
        if labels.positives and self._any_positive(before, labels):
            return False
        return any(w in labels.negatives for w in before)

    def _any_positive(self, found: list[str], labels: FieldLabels) -> bool:
        """Whether a word cancels the label's negatives ("Total *incl* GST"); read by OCR,
        also a word one letter off ("Inci", "Inch")."""
        if any(w in labels.positives for w in found):
            return True
        return self.layout.ocr and any(len(w) >= 4 and one_edit(w, p) for w in found for p in labels.positives)

    def _gap_factor(self, gap: str, labels: FieldLabels, label: str = "") -> float | None:
        """None when the words between label and value refuse the label, else a factor."""
        between = words(gap)
        if labels.positives and self._any_positive(between + words(label), labels):
            between = [w for w in between if w not in labels.negatives]
        if any(w in labels.negatives for w in between):
            return None
        extra = [w for w in between if w not in _FILLERS and w not in CURRENCY_SIGNS]
        if len(extra) > 4:
            return None
        return 1.0 - 0.08 * len(extra)

    # --- to the right -------------------------------------------------------------------

    def _right_of(self, query: FieldQuery, ref: LineRef, start: int, end: int, weight: float) -> Candidate | None:
        kind = query.kind
        cell = ref.cell_at(start)
        _, cell_end = ref.cell_span(cell)
        cells = len(ref.line.words)
        # The rest of the label's cell, then the following cells (within reach), each with
        # the space before it: a value may need to be seen starting a word (" .02").
        segments: list[tuple[int, int]] = [(end, max(end, min(cell_end, end + _CELL_REACH)))]
        first = ref.cell_at(end) + 1 if end < cell_end else cell + 1
        for index in range(first, min(cells, first + _CELLS_RIGHT)):
            s, e = ref.cell_span(index)
            segments.append((s - 1, e))
        if kind.numeric:
            found = self._amount_right(query, ref, start, end, segments, weight)
            if found is None and len(segments) == 1 and self.layout.pages[ref.page].page.ocr:
                found = self._amount_askew(query, ref, start, end, weight)
            return found
        for number, (s, e) in enumerate(segments[:3]):
            chunk = ref.text[s:e]
            if not chunk.strip(" :.#-–|"):
                continue
            if number == 0 and chunk.rstrip().endswith(":") and len(segments) > 1:
                continue  # "Vendor Address:": the cell is one longer label, its words qualify this one
            values = self.values_in(query, chunk)
            if kind is ValueKind.DATE:
                values = [v for v in values if self.date_context_ok(query, ref, s + v.start)]
            if not values:
                if kind.written or kind is ValueKind.ID:
                    return None  # the next cell says something else: not this label's value
                continue
            value = values[0]
            factor = self._gap_factor(ref.folded[end : s + value.start], query.labels, ref.folded[start:end])
            if factor is None:
                return None
            position = 1.0 if number == 0 else 0.95 - 0.05 * (number - 1)
            return found_at(ref, s + value.start, s + value.end, value, weight * position * factor)
        return None

    def _amount_right(self, query: FieldQuery, ref: LineRef, start: int, end: int, segments: list[tuple[int, int]],
                      weight: float) -> Candidate | None:
        values: list[tuple[int, Found]] = []
        dates = self._dates_between(ref, start, segments[-1][1])
        # OCR misreads a currency or a colon between label and amount ("Total  Ri  =86.00"):
        # one short unknown word there is let through.
        stray = 1 if self.layout.pages[ref.page].page.ocr else 0
        for number, (s, e) in enumerate(segments):
            chunk = ref.text[s:e]
            found = [v for v in self.values_in(query, chunk)
                     if not any(ds <= s + v.start < de for ds, de in dates) and not _is_percent(chunk, v)]
            letters = [w for w in words(fold(chunk)) if w not in _FILLERS and w not in CURRENCY_SIGNS]
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
        factor = self._gap_factor(_strip_spans(ref.folded, end, gap_end, dates), query.labels, ref.folded[start:end])
        if factor is None:
            return None
        if query.labels.concept == "total" and len(values) > 1:
            # A row of amounts after a total label (net, tax, gross): the gross is the
            # largest. Such a row is a table's, a little less sure than a total alone.
            s, value = max(values, key=lambda item: float(item[1].value))
            # On a scanned receipt, "TOTAL  26.00  1.56" is the tax summary's row (amount, tax).
            factor *= 0.75 if self.layout.ocr else 0.93
        else:
            s, value = values[-1] if query.labels.last else values[0]
        return found_at(ref, s + value.start, s + value.end, value, weight * factor)

    def _amount_askew(self, query: FieldQuery, ref: LineRef, start: int, end: int, weight: float) -> Candidate | None:
        """The amount of a label that ends its line, read as the next line: a scan
        printed askew splits "Total ....... 5.00" in two lines when the amount sits
        lower than its label. That line is the amount alone, to the right of the
        label, its top above the label's bottom."""
        below = self.layout.below(ref, 1)
        if not below:
            return None
        line = below[0]
        if line.line.y0 >= ref.line.y1 or line.line.x0 <= ref.x_of(end):
            return None
        values = [v for v in self.values_in(query, line.text) if not _is_percent(line.text, v)]
        if len(values) != 1:
            return None
        value = values[0]
        rest = fold(line.text[: value.start] + " " + line.text[value.end :])
        if any(w not in _FILLERS and w not in CURRENCY_SIGNS for w in words(rest)):
            return None
        factor = self._gap_factor(ref.folded[end:], query.labels, ref.folded[start:end])
        if factor is None:
            return None
        return found_at(line, value.start, value.end, value, 0.9 * weight * factor)

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

    # --- below --------------------------------------------------------------------------

    def _below(self, query: FieldQuery, ref: LineRef, start: int, end: int, weight: float) -> Candidate | None:
        kind = query.kind
        cell = ref.cell_at(start)
        _, cell_end = ref.cell_span(cell)
        rest = ref.text[end : min(cell_end, end + _CELL_REACH)].strip(" :.#-–|")
        word = ref.line.words[cell]
        if rest and words(fold(rest)):
            if self._gap_factor(fold(rest), query.labels) is None:
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
            line_words = below.line.words
            # A line's words run left to right without overlapping (closer ones are one
            # phrase), so their right edges are sorted: skip those left of the label at once.
            for index in range(bisect.bisect_left(line_words, x0 - slack, key=_right_edge), len(line_words)):
                other = line_words[index]
                if other.x0 > x1 + slack:
                    break
                s, e = _under(below, index, other, x0)
                values = self.values_in(query, below.text[s:e])
                if kind is ValueKind.DATE:
                    values = [v for v in values if self.date_context_ok(query, below, s + v.start)]
                if kind is ValueKind.AMOUNT:
                    values = [v for v in values if not _is_percent(below.text[s:e], v)]
                if values:
                    value = values[0]
                    distance = 0.9 if skipped == 0 else 0.8
                    if kind is ValueKind.AMOUNT and self.layout.pages[ref.page].page.ocr:
                        # A receipt writes its amounts beside their labels; one below a
                        # label is an item under a column header ("Qty  Amount").
                        distance *= 0.6
                    candidate = found_at(below, s + value.start, s + value.end, value, weight * distance)
                    if kind is ValueKind.ADDRESS:
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

    def date_context_ok(self, query: FieldQuery, ref: LineRef, offset: int) -> bool:
        """Whether the date at `offset` of `ref` may be the field's: not a date whose own
        cell says "due" or "delivery" when the field is the document's date."""
        # Unless a reference number stands between: in "Order No. 1000219 11/03/2018"
        # "order" names the number ("due in 30 days 11/03/2018" is still due).
        cell = ref.cell_at(offset)
        cell_start, _ = ref.cell_span(cell)
        text = _reach_back(ref.folded, cell_start, offset)
        references = list(_REFERENCE.finditer(text))
        if references:
            text = text[references[-1].end() :]
        return not any(w in query.labels.negatives for w in words(text)[-4:])


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


def _under(below: LineRef, index: int, cell: Word, x: float) -> tuple[int, int]:
    """The span of cell `index` of `below` a label at `x` reads: the whole cell, or of a cell
    longer than _CELL_REACH (a paragraph, a line of a thousand amounts) only the part under
    the label, widened to whole words. Every label of the line above read all of it: two
    lines of 500 "Total 1.00" each (14 KB of PDF) held a parser for its whole timeout."""
    s, e = below.cell_span(index)
    if e - s <= _CELL_REACH:
        return s, e
    share = min(1.0, max(0.0, (x - cell.x0) / max(cell.x1 - cell.x0, 1e-9)))
    middle = s + round(share * (e - s))
    start, end = max(s, middle - _CELL_REACH // 2), min(e, middle + _CELL_REACH // 2)
    text = below.text
    while start > s and not text[start - 1].isspace() and middle - start < _CELL_REACH:
        start -= 1
    while end < e and not text[end].isspace() and end - middle < _CELL_REACH:
        end += 1
    return start, end
