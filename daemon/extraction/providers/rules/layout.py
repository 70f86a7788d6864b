"""A document indexed for label search: each line's folded text and words with
offsets back to its cells, which lines hold each word, and the few document-wide facts values depend on (decimal
separator, day-first or month-first dates, read by OCR or not)."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass, field

from daemon.extraction.document import Document, Line, Page
from daemon.extraction.providers.rules.labels import TOKEN, Token
from daemon.extraction.providers.rules.values import DateOrder, decimal_hint, fold, numeric_date_orders

_DOLLARS = re.compile(r"\$\s?\d|\bUSD\b")
_OTHER_CURRENCIES = re.compile(r"[€£]|\b(?:EUR|GBP|RM|MYR|INR|Rs)\b")
_find_tokens = TOKEN.findall
# Fewer accented letters than this share of a read page's Latin letters were put there by
# the recogniser, not printed: a language written with accents uses more (French about
# one letter in thirty), one written without them ("SETIA ÁLAM") none.
_STRAY_ACCENTS = 0.01
# ASCII text's words as `TOKEN` finds them, by a byte translation and a split (five times
# faster than the regex): letters, digits and "_" kept, every other character a space,
# and the signs that are words by themselves ("#%&@") marked, to leave those lines to TOKEN.
_SIGN = 1
_ASCII_WORDS = bytes.maketrans(bytes(range(128)), bytes(
    c if chr(c).isalnum() or c == ord("_") else _SIGN if chr(c) in "#%&@" else ord(" ") for c in range(128)))


# Not frozen, and equal only to itself: a frozen dataclass costs four times as
# much to build, and a layout builds one per line of the document (no two
# lines of a layout are the same line, so identity is the right equality).
@dataclass(slots=True, eq=False)
class LineRef:
    page: int  # index into Layout.pages
    index: int  # index of the line in its page
    order: int  # position in the whole document
    line: Line
    text: str  # the line's cells joined by single spaces
    folded: str
    starts: tuple[int, ...]  # offset of each cell in `text`
    token_set: frozenset[str]  # the texts of `tokens`
    # `tokens` found on first use: only the lines a label is searched in need their offsets.
    _tokens: tuple[Token, ...] | None = field(default=None, init=False, repr=False)

    @property
    def tokens(self) -> tuple[Token, ...]:
        """Words of `folded` (see labels.TOKEN) with their offsets."""
        found = self._tokens
        if found is None:
            folded = self.folded
            found = self._tokens = _with_offsets(folded, _find_tokens(folded))
        return found

    def cell_at(self, offset: int) -> int:
        """Index of the cell holding character `offset` (a space belongs to the cell after it)."""
        starts = self.starts
        if len(starts) < 2:
            return 0
        return max(0, bisect.bisect_right(starts, offset) - 1)

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
            return self.cell_box(first, start, end)
        words = self.line.words[first : last + 1]
        return (self.x_of(start), min(w.y0 for w in words), self.x_of(end) if end > start else self.x_of(start),
                max(w.y1 for w in words))

    def cell_box(self, cell: int, start: int, end: int) -> tuple[float, float, float, float]:
        """The box of characters [start, end) of the line, all in cell `cell`."""
        text, x0, y0, x1, y1, _ = self.line.words[cell]
        cell_start = self.starts[cell]
        length = max(len(text), 1)
        if start <= cell_start and end >= cell_start + length:
            return x0, y0, x1, y1
        per_char = (x1 - x0) / length
        return (x0 + per_char * max(start - cell_start, 0), y0,
                x0 + per_char * min(max(end - cell_start, 0), length), y1)

    def conf(self, start: int, end: int) -> float:
        first, last = self.cell_at(start), self.cell_at(max(start, end - 1))
        if first == last:
            return self.line.words[first].conf
        return min(w.conf for w in self.line.words[first : last + 1])


@dataclass
class PageText:
    page: Page
    text: str  # the lines' texts, one a line
    lines: list[LineRef]


class Layout:
    """The document as the rules engine reads it."""

    def __init__(self, document: Document) -> None:
        self.document = document
        # Read by OCR: values may hold misread characters and are repaired where their shape is sure.
        self.ocr = any(page.ocr for page in document.pages)
        unaccent = self.ocr and _stray_accents(document)
        self.pages: list[PageText] = []
        word_lines: defaultdict[str, list[LineRef]] = defaultdict(list)
        order = 0
        for page_index, page in enumerate(document.pages):
            refs: list[LineRef] = []
            for line_index, line in enumerate(page.lines):
                words = line.words
                if len(words) == 1:
                    text = words[0].text
                    starts: tuple[int, ...] = (0,)
                else:
                    cells = [w.text for w in words]
                    text = " ".join(cells)
                    first = 0
                    offsets: list[int] = []
                    for cell in cells:
                        offsets.append(first)
                        first += len(cell) + 1
                    starts = tuple(offsets)
                if unaccent and not text.isascii():
                    text = _unaccented(text)
                folded = fold(text)
                token_set = _token_set(folded)
                ref = LineRef(page_index, line_index, order, line, text, folded, starts, token_set)
                refs.append(ref)
                for token in token_set:
                    word_lines[token].append(ref)
                order += 1
            self.pages.append(PageText(page, "\n".join([r.text for r in refs]), refs))
        # Which lines hold each word: label search visits only lines that hold a label's first word.
        self.word_lines: dict[str, list[LineRef]] = dict(word_lines)
        self.line_count = order
        self._lines = [ref for page in self.pages for ref in page.lines]
        whole = "\n".join([p.text for p in self.pages])
        self.decimal = decimal_hint(whole)
        dmy, mdy = numeric_date_orders(whole)
        if mdy > dmy:
            self.date_order = DateOrder.MDY
        elif dmy > mdy:
            self.date_order = DateOrder.DMY
        else:
            # Undecided by the dates themselves: month-first only where dollars are
            # clearly the currency (a stray "$" in OCR noise is not enough).
            dollars = len(_DOLLARS.findall(whole)) if "$" in whole or "USD" in whole else 0
            mdy_money = dollars >= 2 and dollars > len(_OTHER_CURRENCIES.findall(whole))
            self.date_order = DateOrder.MDY if mdy_money else DateOrder.DMY

    def lines(self) -> list[LineRef]:
        return self._lines

    def below(self, ref: LineRef, count: int) -> list[LineRef]:
        """Up to `count` lines after `ref` on its page."""
        page = self.pages[ref.page]
        return page.lines[ref.index + 1 : ref.index + 1 + count]


def _stray_accents(document: Document) -> bool:
    """Accented Latin letters in OCR text too few to have been printed (`_STRAY_ACCENTS`)."""
    text = "".join([word.text for page in document.pages for line in page.lines for word in line.words])
    if text.isascii():
        return False
    accented = sum(1 for ch in text if not ch.isascii() and _is_accented_latin(ch))
    latin = sum(1 for ch in text if ch.isascii() and ch.isalpha()) + accented
    return 0 < accented < _STRAY_ACCENTS * latin


def _is_accented_latin(ch: str) -> bool:
    decomposed = unicodedata.normalize("NFD", ch)
    return len(decomposed) > 1 and decomposed[0].isascii() and decomposed[0].isalpha()


def _unaccented(text: str) -> str:
    """`text` with its accented Latin letters plain, one character per character (offsets hold)."""
    return "".join(unicodedata.normalize("NFD", ch)[0] if _is_accented_latin(ch) else ch for ch in text)


def _token_set(folded: str) -> frozenset[str]:
    """The texts of `labels.tokens(folded)`."""
    if folded.isascii():
        kept = folded.encode("ascii").translate(_ASCII_WORDS)
        if _SIGN not in kept:
            return frozenset(kept.decode("ascii").split())
    return frozenset(_find_tokens(folded))


def _with_offsets(folded: str, found: list[str]) -> tuple[Token, ...]:
    """`labels.tokens(folded)` from the token texts `TOKEN.findall` gave: each is
    the first occurrence of its text after the previous one (what lies between
    two tokens cannot start one), so a substring search finds its offset
    without a match object per token."""
    out: list[Token] = []
    position = 0
    find = folded.find
    for token in found:
        position = find(token, position)
        end = position + len(token)
        out.append((position, end, token))
        position = end
    return tuple(out)
