"""What parsers produce and providers read: pages of lines of positioned words.

Coordinates are in the page's own units (PDF points, image pixels, or a
synthetic grid for formats without geometry), origin top-left, y growing
downwards. Only ratios matter to the providers: gaps are measured in line
heights, and boxes leave the daemon as fractions of the page (`Page.relative`).

Everything here is plain, frozen and picklable: documents cross the process
boundary between a parser worker and the trio thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# A gap wider than this many line heights separates two cells of one line
# (table columns, "Label      value"). A normal word space is about 0.25 em,
# which is 0.2-0.3 of a line height.
CELL_GAP = 0.8


class Word(NamedTuple):
    """A run of text without a column gap; for grid formats a whole cell.

    A named tuple rather than a dataclass: pages hold hundreds of them and
    building one must cost next to nothing.
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


@dataclass(frozen=True, slots=True)
class Line:
    """Words that share a baseline, left to right."""

    words: tuple[Word, ...]

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)

    @property
    def x0(self) -> float:
        return self.words[0].x0

    @property
    def x1(self) -> float:
        return max(w.x1 for w in self.words)

    @property
    def y0(self) -> float:
        return min(w.y0 for w in self.words)

    @property
    def y1(self) -> float:
        return max(w.y1 for w in self.words)

    @property
    def height(self) -> float:
        heights = sorted(w.height for w in self.words)
        return max(heights[len(heights) // 2], 1e-6)


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
        return [_fraction(x0 / w), _fraction(y0 / h), _fraction(x1 / w), _fraction(y1 / h)]


def _fraction(value: float) -> float:
    return 0.0 if value < 0 else 1.0 if value > 1 else round(value, 4)


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
    # (middle, top, bottom, left, right, words) per unit, sorted by middle.
    units: list[tuple[float, float, float, float, float, list[Word]]] = []
    for w in words:
        units.append(((w.y0 + w.y1) / 2, w.y0, w.y1, w.x0, w.x1, [w]))
    for segment in segments or ():
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
    lines = [Line(_merge_phrases(sorted(row, key=_x0))) for row in rows]
    lines.sort(key=lambda line: line.words[0].y0 + line.words[0].y1)
    return tuple(lines)


def _x0(word: Word) -> float:
    return word.x0


def _merge_phrases(words: list[Word]) -> tuple[Word, ...]:
    if len(words) == 1:
        return (words[0],)
    heights = sorted(w.y1 - w.y0 for w in words)
    height = max(heights[len(heights) // 2], 1e-6)
    column_gap = CELL_GAP * height
    tight = 0.08 * height
    out: list[Word] = [words[0]]
    for word in words[1:]:
        last = out[-1]
        gap = word.x0 - last.x1
        if gap < column_gap:
            out[-1] = Word(
                last.text + ("" if gap < tight else " ") + word.text,
                last.x0, min(last.y0, word.y0), max(last.x1, word.x1), max(last.y1, word.y1),
                min(last.conf, word.conf),
            )
        else:
            out.append(word)
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
