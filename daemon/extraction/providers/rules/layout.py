"""A document indexed for label search: folded page text with offsets back to
lines and cells, and the few document-wide facts values depend on (decimal
separator, day-first or month-first dates)."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from daemon.extraction.document import Document, Line, Page, Word
from daemon.extraction.providers.rules.labels import Token, tokens
from daemon.extraction.providers.rules.values import DateOrder, decimal_hint, fold, numeric_date_orders


@dataclass(frozen=True, slots=True)
class LineRef:
    page: int  # index into Layout.pages
    index: int  # index of the line in its page
    order: int  # position in the whole document
    line: Line
    text: str  # the line's cells joined by single spaces
    folded: str
    starts: tuple[int, ...]  # offset of each cell in `text`
    start: int  # offset of the line in its page's text
    tokens: tuple[Token, ...] = ()  # words of `folded` (see labels.TOKEN)

    def cell_at(self, offset: int) -> int:
        """Index of the cell holding character `offset` (a space belongs to the cell after it)."""
        return max(0, bisect.bisect_right(self.starts, offset) - 1)

    def cell_span(self, cell: int) -> tuple[int, int]:
        start = self.starts[cell]
        return start, start + len(self.line.words[cell].text)

    def x_of(self, offset: int) -> float:
        """Horizontal position of a character, interpolated inside its cell."""
        cell = self.cell_at(offset)
        word = self.line.words[cell]
        start, end = self.cell_span(cell)
        fraction = min(max((offset - start) / max(end - start, 1), 0.0), 1.0)
        return word.x0 + (word.x1 - word.x0) * fraction

    def box(self, start: int, end: int) -> tuple[float, float, float, float]:
        """The box of characters [start, end) of the line."""
        first, last = self.cell_at(start), self.cell_at(max(start, end - 1))
        if first == last:  # the usual case, without interpolating twice
            word = self.line.words[first]
            cell_start = self.starts[first]
            length = max(len(word.text), 1)
            if start <= cell_start and end >= cell_start + length:
                return word.x0, word.y0, word.x1, word.y1
            per_char = (word.x1 - word.x0) / length
            return (word.x0 + per_char * max(start - cell_start, 0), word.y0,
                    word.x0 + per_char * min(max(end - cell_start, 0), length), word.y1)
        words = self.line.words[first : last + 1]
        return (self.x_of(start), min(w.y0 for w in words), self.x_of(end) if end > start else self.x_of(start),
                max(w.y1 for w in words))

    def conf(self, start: int, end: int) -> float:
        first, last = self.cell_at(start), self.cell_at(max(start, end - 1))
        return min(w.conf for w in self.line.words[first : last + 1])


@dataclass
class PageText:
    page: Page
    text: str
    folded: str
    lines: list[LineRef]
    line_starts: list[int]

    def line_at(self, offset: int) -> LineRef:
        return self.lines[max(0, bisect.bisect_right(self.line_starts, offset) - 1)]


class Layout:
    """The document as the rules engine reads it."""

    def __init__(self, document: Document) -> None:
        self.document = document
        self.pages: list[PageText] = []
        order = 0
        for page_index, page in enumerate(document.pages):
            refs: list[LineRef] = []
            offset = 0
            for line_index, line in enumerate(page.lines):
                starts = []
                cell_offset = 0
                for word in line.words:
                    starts.append(cell_offset)
                    cell_offset += len(word.text) + 1
                text = " ".join(w.text for w in line.words)
                folded = fold(text)
                refs.append(LineRef(page_index, line_index, order, line, text, folded, tuple(starts), offset,
                                    tokens(folded)))
                offset += len(text) + 1
                order += 1
            text = "\n".join(r.text for r in refs)
            self.pages.append(PageText(page, text, "\n".join(r.folded for r in refs), refs, [r.start for r in refs]))
        self.line_count = order
        # Which lines hold each word: label search visits only lines that hold a label's first word.
        self.word_lines: dict[str, list[LineRef]] = {}
        for page_text in self.pages:
            for ref in page_text.lines:
                for token in {t[2] for t in ref.tokens}:
                    self.word_lines.setdefault(token, []).append(ref)
        self._lines = [ref for page in self.pages for ref in page.lines]
        whole = "\n".join(p.text for p in self.pages)
        self.decimal = decimal_hint(whole)
        dmy, mdy = numeric_date_orders(whole)
        if mdy > dmy:
            self.date_order = DateOrder.MDY
        elif dmy > mdy:
            self.date_order = DateOrder.DMY
        else:
            # Undecided by the dates themselves: month-first only where dollars are
            # clearly the currency (a stray "$" in OCR noise is not enough).
            dollars = len(re.findall(r"\$\s?\d|\bUSD\b", whole))
            others = len(re.findall(r"[€£]|\b(?:EUR|GBP|RM|MYR|INR|Rs)\b", whole))
            self.date_order = DateOrder.MDY if dollars >= 2 and dollars > others else DateOrder.DMY

    def lines(self) -> list[LineRef]:
        return self._lines

    def below(self, ref: LineRef, count: int) -> list[LineRef]:
        """Up to `count` lines after `ref` on its page."""
        page = self.pages[ref.page]
        return page.lines[ref.index + 1 : ref.index + 1 + count]


def words_box(words: list[Word]) -> tuple[float, float, float, float]:
    return (min(w.x0 for w in words), min(w.y0 for w in words), max(w.x1 for w in words), max(w.y1 for w in words))
