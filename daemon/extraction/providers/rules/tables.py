"""Arrays of objects read from tables (line items).

A header row is a line where the labels of at least two of the item's
properties sit as column titles; each property's column is the horizontal
span of its title. Following lines are rows: each cell goes to the column it
overlaps most. A row with a number in a numeric column starts an item; a row
of text only continues the previous item's text column (descriptions written
over several lines). The table ends at a total or subtotal line, a gap much
taller than a row, or the end of the page; a repeated header on the next page
continues it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from daemon.extraction.providers.rules.candidates import Candidate, typed
from daemon.extraction.providers.rules.fields import FieldQuery, field_query
from daemon.extraction.providers.rules.label_reader import LabelReader
from daemon.extraction.providers.rules.labels import LabelIndex
from daemon.extraction.providers.rules.layout import LineRef
from daemon.extraction.providers.rules.values import Found

# Lines that end a table: totals and their relatives at the start of a cell.
_STOP = re.compile(
    r"^(?:sub[\s-]?total|total|totaal|summe|gesamt|montant total|razem|somme|grand total|tax|vat|tva|btw|"
    r"balance|amount due|net total|nett total|rounding|subtotaal|netto|brutto)\b"
)


@dataclass
class Column:
    prop: str
    query: FieldQuery
    x0: float
    x1: float


@dataclass
class Row:
    cells: dict[str, list[tuple[LineRef, int]]] = field(default_factory=dict)  # prop -> (line, cell index)


class _Values:
    """`LabelReader.values_in` for the columns of one table, each cell's text read once
    (a row's numbers are read to tell items from continuation lines, then again
    for their values)."""

    def __init__(self, reader: LabelReader) -> None:
        self.reader = reader
        self.seen: dict[tuple[str, str], list[Found]] = {}

    def __call__(self, query: FieldQuery, text: str) -> list[Found]:
        key = (query.name, text)
        found = self.seen.get(key)
        if found is None:
            found = self.seen[key] = self.reader.values_in(query, text)
        return found


def read_table(reader: LabelReader, items: dict[str, Any], pointer: str,
               evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of the table whose columns are the properties of `items` (an
    array's item schema), each with its evidence under `pointer`/row/property."""
    queries: dict[str, FieldQuery] = {}
    for prop, sub in (items.get("properties") or {}).items():
        if isinstance(sub, dict) and sub.get("type") not in ("object", "array"):
            queries[prop] = field_query(prop, sub, column=True)
    if len(queries) < 1:
        return []
    rows: list[Row] = []
    titles = header_index(queries)
    values = _Values(reader)
    for page in reader.layout.pages:
        index = 0
        lines = page.lines
        headers = [_header(ref, queries, titles) for ref in lines]
        while index < len(lines):
            columns = headers[index]
            if columns is None:
                index += 1
                continue
            index = _rows(values, lines, headers, index + 1, columns, rows)
    out: list[dict[str, Any]] = []
    pages = reader.layout.pages
    for row in rows:
        item: dict[str, Any] = {}
        prefix = f"{pointer}/{len(out)}/"
        for prop, cells in row.cells.items():
            query = queries[prop]
            value, text, ref, cell, start, end = _value(values, query, cells)
            if value is None:
                continue
            item[prop] = value
            where = pages[ref.page].page
            # The value lies in one cell: its box and confidence are that cell's (`LineRef.box`, `conf`).
            x0, y0, x1, y1 = ref.cell_box(cell, start, end)
            if len(cells) > 1:
                for other, other_cell in cells[1:]:
                    word = other.line.words[other_cell]
                    x0, y0, x1, y1 = min(x0, word.x0), min(y0, word.y0), max(x1, word.x1), max(y1, word.y1)
            conf = ref.line.words[cell].conf
            evidence[prefix + prop] = {
                "confidence": 0.8 if conf == 1.0 else round(0.8 * conf, 3),  # round(0.8 * 1.0, 3) is 0.8
                "page": where.number,
                "bbox": where.relative(x0, y0, x1, y1),
                "text": text,
            }
        if item:
            out.append(item)
    return out


def _header(ref: LineRef, queries: dict[str, FieldQuery], index: LabelIndex) -> list[Column] | None:
    """The columns when `ref` is a header row of the table, else None."""
    if len(ref.tokens) < 2:
        return None
    # Each title found starts at a word that starts a title: fewer than two such words, no header.
    first_words = index.by_first
    if sum(1 for token in ref.tokens if token[2] in first_words) < 2:
        return None
    used: set[str] = set()

    def fresh(start: int, end: int, prop: str) -> bool:
        if prop in used or ref.cell_at(start) != ref.cell_at(end - 1):
            return False
        used.add(prop)
        return True

    taken = [(start, end, prop) for start, end, _, prop, _ in index.find(ref.folded, ref.tokens, fresh)]
    if len(taken) < 2:
        return None
    folded = ref.folded
    if sum(map(str.isdigit, folded)) > 0.3 * sum(map(str.isalnum, folded)):
        return None  # a row of values, not of titles
    letters = sum(map(str.isalpha, folded))
    covered = sum(sum(map(str.isalpha, folded[s:e])) for s, e, _ in taken)
    if covered < 0.5 * letters:
        return None  # a sentence that happens to name two columns
    columns = [Column(prop, queries[prop], ref.x_of(start), ref.x_of(end)) for start, end, prop in taken]
    # A title alone in its cell spans the whole cell (right-aligned numbers sit under it).
    for column, (start, _, _) in zip(columns, taken, strict=True):
        cell = ref.cell_at(start)
        cell_start, cell_end = ref.cell_span(cell)
        if sum(1 for s, _, _ in taken if cell_start <= s < cell_end) == 1:
            word = ref.line.words[cell]
            column.x0, column.x1 = min(column.x0, word.x0), max(column.x1, word.x1)
    columns.sort(key=lambda c: c.x0)
    return columns


def header_index(queries: dict[str, FieldQuery]) -> LabelIndex:
    """One index of every column's titles, whose values are the property names."""
    titles: dict[str, str] = {}
    # Stronger titles first, so a title shared by two columns goes to the one it names best.
    ranked = sorted(((w, label, prop) for prop, query in queries.items() for label, w in query.labels.labels.items()),
                    key=lambda item: -item[0])
    for _, label, prop in ranked:
        titles.setdefault(label, prop)
    return LabelIndex(titles)


def _rows(values: _Values, lines: list[LineRef], headers: list[list[Column] | None], start: int,
          columns: list[Column], rows: list[Row]) -> int:
    numeric = [c for c in columns if c.query.kind.numeric]
    text_columns = [c for c in columns if not c.query.kind.numeric]
    previous = lines[start - 1]
    pitch = max(previous.line.height * 1.2, 1e-6)
    current: Row | None = None
    count = 0
    index = start
    while index < len(lines):
        ref = lines[index]
        gap = ref.line.y0 - previous.line.y1
        if gap > 3.0 * pitch:
            break
        if _STOP.match(ref.folded.lstrip()) or (current is not None and _STOP.match(ref.line.words[0].text.lower())):
            break
        if headers[index] is not None:
            break
        assigned = _assign(ref, columns)
        if not assigned:
            break
        has_number = any(
            values(c.query, ref.line.words[i].text) for c in numeric for i in assigned.get(c.prop, [])
        )
        if has_number or not numeric:
            current = Row({prop: [(ref, i) for i in cells] for prop, cells in assigned.items()})
            rows.append(current)
            count += 1
        elif current is not None and text_columns and gap < 1.2 * pitch:
            for column in text_columns:
                for i in assigned.get(column.prop, []):
                    current.cells.setdefault(column.prop, []).append((ref, i))
        elif current is not None:
            break
        previous = ref
        index += 1
    return index


def _assign(ref: LineRef, columns: list[Column]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for index, word in enumerate(ref.line.words):
        _, x0, _, x1, _, _ = word
        best, best_overlap = None, 0.0
        for column in columns:
            # min(x1, column.x1) - max(x0, column.x0), without the calls
            right, left = column.x1, column.x0
            overlap = (right if right < x1 else x1) - (left if left > x0 else x0)
            if overlap > best_overlap:
                best, best_overlap = column, overlap
        if best is None:
            # No overlap: the nearest column within two line heights (the first of equals).
            distance, nearest = min(
                ((min(abs(x0 - c.x1), abs(c.x0 - x1)), c) for c in columns), key=_first
            ) if columns else (0.0, None)
            if nearest is not None and distance <= 2 * ref.line.height:
                best = nearest
        if best is not None:
            out.setdefault(best.prop, []).append(index)
    return out


def _first(pair: tuple[float, Column]) -> float:
    return pair[0]


def _value(values_in: _Values, query: FieldQuery,
           cells: list[tuple[LineRef, int]]) -> tuple[Any, str, LineRef, int, int, int]:
    """A column's value in its cells: (value, text, line, cell, start, end), the
    span in the line's text and inside that one cell."""
    ref, first = cells[0]
    start, end = ref.cell_span(first)
    if query.kind.written:
        text = " ".join(r.line.words[i].text for r, i in cells)
        return (" ".join(text.split()) or None), text, ref, first, start, end
    for cell_ref, cell in cells:
        s = cell_ref.starts[cell]
        values = values_in(query, cell_ref.line.words[cell].text)
        if values:
            value = values[0]
            candidate = Candidate(value.value, 1.0, cell_ref, s + value.start, s + value.end,
                                  cell_ref.text[s + value.start : s + value.end])
            return typed(query, candidate), candidate.text, cell_ref, cell, candidate.start, candidate.end
    return None, "", ref, first, start, end
