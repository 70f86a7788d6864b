"""What parsers produce and providers read: pages of lines of positioned words.

Coordinates are in the page's own units (PDF points, image pixels, or a
synthetic grid for formats without geometry), origin top-left, y growing
downwards. Only ratios matter to the providers: gaps are measured in line
heights, and boxes leave the daemon as fractions of the page (`Page.relative`).

Everything here is plain, frozen and picklable: documents cross the process
boundary between a parser worker and the trio thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

# A gap wider than this many line heights separates two cells of one line
# (table columns, "Label      value"). A normal word space is about 0.25 em,
# which is 0.2-0.3 of a line height.
CELL_GAP = 0.8


class Word(NamedTuple):
    """A run of text without a column gap; for grid formats a whole cell.

    A named tuple rather than a dataclass: pages hold hundreds of them and
    building one must cost next to nothing (`word_of` where it must cost less).
    """

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    conf: float = 1.0  # OCR confidence 0..1; 1 for text layers

    @property
    def height(self) -> float:
        return self.y1 - self.y0


# ``word_of(Word, (text, x0, y0, x1, y1, conf))`` is ``Word(text, x0, y0, x1, y1, conf)``
# without the Python frame of a named tuple's constructor: half the cost, for the
# loops that make one per phrase of a page.
word_of = tuple.__new__


@dataclass(frozen=True, slots=True)
class Line:
    """Words that share a baseline, left to right."""

    words: tuple[Word, ...]
    # (x1, y0, y1, height) of a line of several words, measured on first use: a
    # provider asks them once per label near the line, and a line of a thousand
    # cells must not be walked a thousand times.
    _extent: tuple[float, float, float, float] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def text(self) -> str:
        return " ".join([w.text for w in self.words])

    @property
    def x0(self) -> float:
        return self.words[0].x0

    @property
    def x1(self) -> float:
        words = self.words
        return words[0].x1 if len(words) == 1 else self._measure()[0]

    @property
    def y0(self) -> float:
        words = self.words
        return words[0].y0 if len(words) == 1 else self._measure()[1]

    @property
    def y1(self) -> float:
        words = self.words
        return words[0].y1 if len(words) == 1 else self._measure()[2]

    @property
    def height(self) -> float:
        words = self.words
        if len(words) == 1:
            only = words[0]
            return max(only.y1 - only.y0, 1e-6)
        return self._measure()[3]

    def _measure(self) -> tuple[float, float, float, float]:
        extent = self._extent
        if extent is None:
            words = self.words
            heights = sorted([w.y1 - w.y0 for w in words])
            extent = (max([w.x1 for w in words]), min([w.y0 for w in words]), max([w.y1 for w in words]),
                      max(heights[len(heights) // 2], 1e-6))
            object.__setattr__(self, "_extent", extent)  # frozen, but a cache of its own words
        return extent


@dataclass(frozen=True, slots=True)
class Page:
    """One page (a PDF page, an image frame, a sheet, a whole text file)."""

    number: int  # 1-based
    width: float
    height: float
    lines: tuple[Line, ...]
    ocr: bool = False  # text came from OCR (values deserve less confidence)

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def relative(self, x0: float, y0: float, x1: float, y1: float) -> list[float]:
        """A box as fractions of the page, rounded for JSON: [x0, y0, x1, y1]."""
        w, h = self.width or 1.0, self.height or 1.0
        # Each coordinate clamped to [0, 1] and rounded, written out: evidence makes one box per value found.
        a, b, c, d = x0 / w, y0 / h, x1 / w, y1 / h
        return [0.0 if a < 0 else 1.0 if a > 1 else _round4(a), 0.0 if b < 0 else 1.0 if b > 1 else _round4(b),
                0.0 if c < 0 else 1.0 if c > 1 else _round4(c), 0.0 if d < 0 else 1.0 if d > 1 else _round4(d)]


def _round4(value: float) -> float:
    """``round(value, 4)`` for a fraction of the page: the same float, in under half the time.

    `round` with digits goes through a decimal string; for 0 < value <= 1 the
    scaled value ``value * 10000`` is within 2e-12 of the exact product, so
    unless that product is next to a half (then `round` decides) its nearest
    integer k is the one `round` finds, and ``k / 10000`` (a correctly rounded
    integer division) is the float nearest to the decimal k/10^4 that `round`
    returns. Anything else (zeros and their sign, NaN) goes to `round`.
    """
    scaled = value * 10000.0
    if 0.0 < scaled <= 10000.0:
        nearest = round(scaled)
        if -0.4999 < scaled - nearest < 0.4999:
            return nearest / 10000
    return round(value, 4)


@dataclass(frozen=True, slots=True)
class Document:
    pages: tuple[Page, ...]

    @property
    def page_count(self) -> int:
        return len(self.pages)

    @property
    def text(self) -> str:
        return "\n\f".join(page.text for page in self.pages)


def group_lines(words: list[Word], segments: list[list[Word]] | None = None) -> tuple[Line, ...]:
    """Lines from loose words: a word joins the line whose vertical span covers
    its middle; lines come out top to bottom, words left to right.

    `segments` are runs of words already known to share a line (OCR lines):
    each joins a row as a whole, and only a row it does not overlap
    horizontally, so two skewed lines of a scan never interleave.

    Words are merged into one when the gap between them is a word space and
    kept apart when it is a column gap (`CELL_GAP`), so a line's words are its
    cells' phrases, separated by at least one line height.
    """
    if not segments:
        return _group_words(words)
    # (middle, top, bottom, left, right, words) per unit, sorted by middle.
    units: list[tuple[float, float, float, float, float, list[Word]]] = []
    for w in words:
        units.append(((w.y0 + w.y1) / 2, w.y0, w.y1, w.x0, w.x1, [w]))
    for segment in segments:
        if segment:
            top = min(w.y0 for w in segment)
            bottom = max(w.y1 for w in segment)
            units.append(((top + bottom) / 2, top, bottom, min(w.x0 for w in segment),
                          max(w.x1 for w in segment), list(segment)))
    if not units:
        return ()
    units.sort(key=lambda unit: unit[0])
    rows: list[list[Word]] = []
    tops: list[float] = []
    bottoms: list[float] = []
    for mid, top, bottom, left, right, members in units:
        placed = False
        # Only the last few rows can still hold this unit: they are sorted by middle.
        for index in range(len(rows) - 1, max(len(rows) - 4, -1), -1):
            row_top, row_bottom = tops[index], bottoms[index]
            if not row_top <= mid <= row_bottom:
                continue
            if len(members) > 1 and any(w.x0 < right and left < w.x1 for w in rows[index]):
                continue
            rows[index].extend(members)
            if bottom - top < 2 * (row_bottom - row_top):
                tops[index] = min(row_top, top)
                bottoms[index] = max(row_bottom, bottom)
            placed = True
            break
        if not placed:
            rows.append(members)
            tops.append(top)
            bottoms.append(bottom)
    return _lines_of(rows)


def _group_words(words: list[Word]) -> tuple[Line, ...]:
    """`group_lines` for loose words only (every text layer page): the same
    rows, without the bookkeeping of multi-word units."""
    if not words:
        return ()
    rows: list[list[Word]] = []
    spans: list[list[float]] = []  # [top, bottom] of each row
    # Sorting by y0 + y1 is sorting by the middle: halving is exact.
    for word in sorted(words, key=_middle2):
        top, bottom = word[2], word[4]
        mid = (top + bottom) / 2
        count = len(rows)
        # Only the last few rows can still hold this word: they are sorted by middle.
        for index in range(count - 1, count - 4 if count > 3 else -1, -1):
            span = spans[index]
            row_top, row_bottom = span
            if row_top <= mid <= row_bottom:
                rows[index].append(word)
                if bottom - top < 2 * (row_bottom - row_top):
                    if top < row_top:
                        span[0] = top
                    if bottom > row_bottom:
                        span[1] = bottom
                break
        else:
            rows.append([word])
            spans.append([top, bottom])
    return _lines_of(rows)


def _middle2(word: Word) -> float:
    return word[2] + word[4]


def _lines_of(rows: list[list[Word]]) -> tuple[Line, ...]:
    lines = [Line(_merge_phrases(sorted(row, key=_x0)) if len(row) > 1 else (row[0],)) for row in rows]
    lines.sort(key=_line_middle2)
    return tuple(lines)


def _line_middle2(line: Line) -> float:
    first = line.words[0]
    return first[2] + first[4]


_x0 = itemgetter(1)


def _merge_phrases(words: list[Word]) -> tuple[Word, ...]:
    if len(words) == 1:
        return (words[0],)
    heights = sorted([w[4] - w[2] for w in words])
    height = max(heights[len(heights) // 2], 1e-6)
    column_gap = CELL_GAP * height
    tight = 0.08 * height
    last = words[0]
    out: list[Word] = [last]
    for index in range(1, len(words)):
        word = words[index]
        gap = word[1] - last[3]
        if gap < column_gap:
            last = out[-1] = word_of(Word, (
                last[0] + ("" if gap < tight else " ") + word[0],
                last[1], min(last[2], word[2]), max(last[3], word[3]), max(last[4], word[4]), min(last[5], word[5]),
            ))
        else:
            out.append(word)
            last = word
    return tuple(out)


# Synthetic geometry for formats without any (TXT, CSV, XLSX, DOCX, HTML): a
# monospace grid whose character is half as wide as a line is high, as in
# ordinary fonts, so gap thresholds mean the same everywhere.
GRID_CHAR = 5.0
GRID_LINE = 12.0
GRID_HEIGHT = 10.0


def grid_line(row: int, cells: list[tuple[int, str]]) -> Line | None:
    """A line at text row `row` of cells starting at character columns."""
    words = [
        Word(text, col * GRID_CHAR, row * GRID_LINE, (col + len(text)) * GRID_CHAR, row * GRID_LINE + GRID_HEIGHT)
        for col, text in cells
        if text
    ]
    return Line(tuple(words)) if words else None


def grid_text_line(row: int, text: str) -> Line | None:
    """A line of plain text at `row`: runs of two or more spaces (or tabs) split cells."""
    cells: list[tuple[int, str]] = []
    col = 0
    text = text.expandtabs(8)
    n = len(text)
    while col < n:
        while col < n and text[col] == " ":
            col += 1
        if col >= n:
            break
        start = col
        while col < n and not (text[col] == " " and (col + 1 >= n or text[col + 1] == " ")):
            col += 1
        cells.append((start, text[start:col].rstrip()))
    return grid_line(row, cells)


def grid_table_lines(first_row: int, rows: list[list[str]]) -> list[Line]:
    """Lines for a table: each column as wide as its widest cell, two spaces apart."""
    widths: list[int] = []
    for cells in rows:
        for index, cell in enumerate(cells):
            length = max((len(part) for part in cell.splitlines()), default=0)
            if index >= len(widths):
                widths.append(length)
            else:
                widths[index] = max(widths[index], length)
    starts = [0]
    for width in widths[:-1]:
        starts.append(starts[-1] + width + 3)
    lines: list[Line] = []
    for offset, cells in enumerate(rows):
        line = grid_line(first_row + offset, [(starts[i], " ".join(c.split())) for i, c in enumerate(cells)])
        if line is not None:
            lines.append(line)
    return lines


def grid_page(number: int, lines: list[Line]) -> Page:
    width = max((line.x1 for line in lines), default=GRID_CHAR)
    height = max((line.y1 for line in lines), default=GRID_LINE)
    return Page(number=number, width=width, height=height, lines=tuple(lines))
