"""The fast PDF text path reads exactly what the straightforward one read.

`parsers.pdf`, `document.group_lines`, `rules.layout` and `Page.relative` were
rewritten for speed (pdfium's C API with plain-pointer prototypes, fewer
Python objects per word, offsets of tokens without match objects, rounding
without a decimal string). The reference implementations below are the code
they replaced, kept here verbatim in substance; every word box, line, cell,
token and rounded fraction must come out the same, float for float, on PDFs
made to hit the corner cases (gaps inside one text object, runs of spaces,
wide word spacing, raised text, mixed fonts, columns drawn out of order,
glyphs drawn one by one, offset baselines, non-ASCII text, turned text).
"""

from __future__ import annotations

import ctypes
import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
import pytest
from extraction_docs import write_invoice_pdf, write_table_pdf, write_turned_pdf

from daemon.extraction.document import CELL_GAP, Line, Page, Word, _round4, group_lines
from daemon.extraction.parsers import ParseOptions, parse
from daemon.extraction.parsers import pdf as pdf_parser
from daemon.extraction.providers.rules import values
from daemon.extraction.providers.rules.labels import tokens
from daemon.extraction.providers.rules.layout import Layout, _token_set, _with_offsets
from daemon.extraction.providers.rules.values import fold
from daemon.jobs import filetypes

_WORD = re.compile(r"\S+")


# --- the code the fast path replaced ---------------------------------------------------


def reference_words(handle: Any, box: tuple[float, float, float, float]) -> list[Word]:
    """Phrases of a page read left to right, one ctypes call per word end."""
    origin_x, _, _, top_edge = box
    count = pdfium_c.FPDFText_CountChars(handle)
    if count <= 0:
        return []
    buffer = ctypes.create_string_buffer(2 * (count + 1))
    written = pdfium_c.FPDFText_GetText(handle, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    text = buffer.raw[: 2 * max(written - 1, 0)].decode("utf-16-le", errors="replace")
    if len(text) != count:
        text = "".join(chr(pdfium_c.FPDFText_GetUnicode(handle, i) or 32) for i in range(count))
    rect = pdfium_c.FS_RECTF()
    ref = ctypes.byref(rect)
    loose_box = pdfium_c.FPDFText_GetLooseCharBox
    flip = top_edge
    phrases: list[Word] = []
    text_parts: list[str] = []
    x0 = y0 = x1 = y1 = 0.0
    for match in _WORD.finditer(text):
        start, end = match.span()
        if not loose_box(handle, start, ref):
            continue
        left, top, bottom = rect.left - origin_x, rect.top, rect.bottom
        if end - 1 != start and loose_box(handle, end - 1, ref):
            top = max(top, rect.top)
            bottom = min(bottom, rect.bottom)
        right = rect.right - origin_x
        wy0, wy1 = flip - top, flip - bottom
        if text_parts:
            h = y1 - y0
            gap = left - x1
            if -0.2 * h < gap < CELL_GAP * h and abs((wy0 + wy1) - (y0 + y1)) < 0.6 * h:
                text_parts.append(" " if gap >= 0.08 * h else "")
                text_parts.append(match.group())
                x1 = max(x1, right)
                y0, y1 = min(y0, wy0), max(y1, wy1)
                continue
            phrases.append(Word("".join(text_parts), x0, y0, x1, y1))
        text_parts = [match.group()]
        x0, y0, x1, y1 = left, wy0, right, wy1
    if text_parts:
        phrases.append(Word("".join(text_parts), x0, y0, x1, y1))
    return phrases


def reference_group_lines(words: list[Word], segments: list[list[Word]] | None = None) -> tuple[Line, ...]:
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
    lines = [Line(_reference_merge(sorted(row, key=lambda w: w.x0))) for row in rows]
    lines.sort(key=lambda line: line.words[0].y0 + line.words[0].y1)
    return tuple(lines)


def _reference_merge(words: list[Word]) -> tuple[Word, ...]:
    if len(words) == 1:
        return (words[0],)
    heights = sorted(w.y1 - w.y0 for w in words)
    height = max(heights[len(heights) // 2], 1e-6)
    out: list[Word] = [words[0]]
    for word in words[1:]:
        last = out[-1]
        gap = word.x0 - last.x1
        if gap < CELL_GAP * height:
            out[-1] = Word(last.text + ("" if gap < 0.08 * height else " ") + word.text, last.x0,
                           min(last.y0, word.y0), max(last.x1, word.x1), max(last.y1, word.y1),
                           min(last.conf, word.conf))
        else:
            out.append(word)
    return tuple(out)


# --- documents ------------------------------------------------------------------------


def write_tricky_pdf(path: Path, pages: int = 2) -> Path:
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    rng = random.Random(7)
    c = canvas.Canvas(str(path), pagesize=letter)
    _, height = letter
    for page in range(pages):
        y = height - 60
        t = c.beginText(50, y)  # a column gap inside one text object
        t.setFont("Helvetica", 10)
        t.textOut("Invoice Number:")
        t.moveCursor(150, 0)
        t.textOut(f"A-{page}77")
        c.drawText(t)
        y -= 18
        c.setFont("Courier", 9)
        c.drawString(50, y, "Total        1,234.50    EUR")  # a run of spaces
        y -= 16
        t = c.beginText(50, y)  # wide word spacing
        t.setFont("Times-Roman", 11)
        t.setWordSpace(6)
        t.textOut("Justified words with wide spacing here")
        c.drawText(t)
        y -= 18
        t = c.beginText(50, y)  # raised text in another size
        t.setFont("Helvetica", 10)
        t.textOut("Area 12 m")
        t.setRise(4)
        t.setFont("Helvetica", 6)
        t.textOut("2")
        t.setRise(0)
        t.setFont("Helvetica", 10)
        t.textOut(" and more")
        c.drawText(t)
        y -= 20
        c.setFont("Helvetica-Bold", 12)
        c.drawString(50, y, "Due Date:")
        c.setFont("Helvetica", 9)
        c.drawString(120, y, "03/04/2024")
        y -= 20
        rows = [(f"Row {i}", f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d}") for i in range(8)]
        for i, (_, amount) in enumerate(rows):  # the right column drawn first
            c.drawRightString(520, y - 14 * i, amount)
        for i, (label, _) in enumerate(rows):
            c.drawString(60, y - 14 * i, label)
        y -= 14 * 8 + 10
        c.setFont("Helvetica", 10)
        x = 50.0
        for ch in "Subtotal:":  # glyphs drawn one by one
            c.drawString(x, y, ch)
            x += c.stringWidth(ch, "Helvetica", 10)
        c.drawString(x + 3, y, "99.10")
        y -= 18
        c.drawString(50, y, "Left cell")  # baselines a little apart in one row
        c.drawString(200, y - 1.5, "offset cell")
        c.drawString(350, y + 2, "raised cell")
        y -= 20
        c.drawString(50, y, "AB")  # a hairline gap, then a column gap
        c.drawString(50 + c.stringWidth("AB", "Helvetica", 10) + 0.3, y, "CD")
        c.drawString(150, y, "EF")
        y -= 20
        c.drawString(50, y, "— … • Straße Ünïcödé € 12,50")
        y -= 20
        c.setFont("Helvetica", 7)
        c.drawString(50, y, "small print line")
        c.setFont("Helvetica", 16)
        c.drawString(200, y, "BIG")
        y -= 24
        while y > 60:
            c.setFont("Helvetica", rng.choice([8, 9, 10, 12]))
            c.drawString(rng.randint(40, 300), y, " ".join(
                rng.choice(["alpha", "beta", "12.00", "x", "Qty", "Amount"]) for _ in range(rng.randint(1, 6))))
            if rng.random() < 0.5:
                c.drawRightString(560, y + rng.choice([0, 0.5, -0.5, 3]), f"{rng.randint(1, 9999)}.00")
            y -= rng.choice([9, 12, 14, 20])
        c.showPage()
    c.save()
    return path


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("speed-equivalence")
    made = [
        write_tricky_pdf(folder / "tricky.pdf"),
        write_table_pdf(folder / "table.pdf", pages=2),
        write_invoice_pdf(folder / "invoice.pdf", pages=2),
    ]
    made += [write_turned_pdf(folder / f"turned-{angle}.pdf", angle) for angle in (90, 180, 270)]
    return made


def text_pages(path: Path) -> Iterator[tuple[Any, tuple[float, float, float, float]]]:
    """Each page's raw text page handle and crop box, as the parser sees them."""
    pdf = pdfium.PdfDocument(str(path))
    try:
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            try:
                yield textpage.raw, page.get_cropbox()
            finally:
                textpage.close()
                page.close()
    finally:
        pdf.close()


# --- the checks -----------------------------------------------------------------------


def test_word_boxes_are_the_same_floats(pdfs: list[Path]) -> None:
    compared = 0
    for path in pdfs:
        for handle, box in text_pages(path):
            text = pdf_parser._page_text(handle)
            if pdf_parser._text_turn(handle, text):
                continue  # turned text has its own (unchanged) reader
            fast, _ = pdf_parser._words(handle, box)
            assert fast == reference_words(handle, box), path.name
            compared += len(fast)
    assert compared > 500


def test_pages_have_the_same_lines_and_cells(pdfs: list[Path]) -> None:
    for path in pdfs:
        document = parse(path, filetypes.PDF, ParseOptions())
        for page, (handle, box) in zip(document.pages, text_pages(path), strict=True):
            text = pdf_parser._page_text(handle)
            turn = pdf_parser._text_turn(handle, text)
            if turn:
                words, _ = pdf_parser._turned_words(handle, text, turn, box)
            else:
                words = reference_words(handle, box)
            assert page.lines == reference_group_lines(words), f"{path.name} page {page.number}"


def test_a_table_row_keeps_its_four_cells(pdfs: list[Path]) -> None:
    page = parse(pdfs[1], filetypes.PDF, ParseOptions()).pages[0]
    rows = [line for line in page.lines if line.text.startswith("Item 7:")]
    assert len(rows) == 1
    assert len(rows[0].words) == 4
    assert rows[0].words[0].text.startswith("Item 7: Widget model")


def test_grouping_with_segments_is_unchanged() -> None:
    rng = random.Random(11)
    for _ in range(300):
        words = []
        for _ in range(rng.randint(0, 30)):
            x0, y0 = rng.uniform(0, 500), rng.uniform(0, 700)
            words.append(Word(rng.choice(["a", "bb", "12.50", "Total"]), x0, y0, x0 + rng.uniform(2, 60),
                              y0 + rng.choice([8.0, 10.0, 11.5, 14.0]), rng.choice([1.0, 0.9, 0.55])))
        segments = [words[i : i + 3] for i in range(0, len(words) // 2, 3)] if rng.random() < 0.5 else None
        loose = words[len(words) // 2 :] if segments else words
        assert group_lines(loose, segments) == reference_group_lines(loose, segments)


def test_layout_tokens_and_cells_are_unchanged(pdfs: list[Path]) -> None:
    for path in pdfs:
        layout = Layout(parse(path, filetypes.PDF, ParseOptions()))
        expected_words: dict[str, list[int]] = {}
        for ref in layout.lines():
            words = ref.line.words
            assert ref.text == " ".join(w.text for w in words)
            assert ref.folded == fold(ref.text)
            assert ref.tokens == tokens(ref.folded)
            assert ref.token_set == {t[2] for t in ref.tokens}
            starts, offset = [], 0
            for word in words:
                starts.append(offset)
                offset += len(word.text) + 1
            assert ref.starts == tuple(starts)
            for token in {t[2] for t in ref.tokens}:
                expected_words.setdefault(token, []).append(ref.order)
            for cell, word in enumerate(words):
                start, end = ref.cell_span(cell)
                assert ref.box(start, end) == ref.cell_box(cell, start, end) == (word.x0, word.y0, word.x1, word.y1)
                assert ref.conf(start, end) == word.conf
        assert {k: [r.order for r in v] for k, v in layout.word_lines.items()} == expected_words


@pytest.mark.parametrize("text", [
    "invoice no.: inv-0003-012 invoice date: 12/03/2024",
    "n° 12 # 7 % @ & №5 °c",
    "straße  ünïcödé €12,50 — … •",
    "a__b c-d e.f 3,50%",
    "",
    "   ",
    "日本語 テキスト 123",
])
def test_token_offsets_match_the_tokens_of_labels(text: str) -> None:
    folded = fold(text)
    assert _with_offsets(folded, re.findall(r"\w+|[#°№%&@]", folded)) == tokens(folded)


def test_token_offsets_on_random_text() -> None:
    rng = random.Random(5)
    alphabet = "ab1 .,:-#%@°№é_ \t/()'€"
    for _ in range(2000):
        folded = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert _with_offsets(folded, re.findall(r"\w+|[#°№%&@]", folded)) == tokens(folded)


def test_token_sets_are_the_tokens_texts() -> None:
    # The ASCII fast path (a byte translation) against the regex, on every ASCII
    # character and some that are not.
    rng = random.Random(6)
    alphabet = [chr(c) for c in range(128)] + list("°№é€ß\u00a0\u2009日")
    for _ in range(20_000):
        folded = "".join(rng.choice(alphabet) if rng.random() < 0.4 else rng.choice("ab1 _")
                         for _ in range(rng.randint(0, 30)))
        assert _token_set(folded) == {t[2] for t in tokens(folded)}, repr(folded)


def test_decimal_endings_are_counted_like_the_patterns_matches() -> None:
    rng = random.Random(8)
    alphabet = "0123456789,. \n-a"
    texts = ["1,23,45,678.90", "1.23.45.67", "12,50 3.20 1,234.56", "9,99,99", ""]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(50_000)]
    for text in texts:
        for pattern, at, chained in (
            (values._COMMA_DECIMALS, values._COMMA_DECIMALS_AT, values._COMMA_DECIMALS_CHAINED),
            (values._DOT_DECIMALS, values._DOT_DECIMALS_AT, values._DOT_DECIMALS_CHAINED),
        ):
            assert values._count(pattern, at, chained, text) == len(pattern.findall(text)), repr(text)


def test_fractions_are_rounded_like_round() -> None:
    rng = random.Random(2)
    values = [rng.random() for _ in range(200_000)]
    for k in range(0, 20_001):  # every half step of the fourth decimal, and its neighbours
        tie = k / 20_000
        values += [tie, math.nextafter(tie, 0.0), math.nextafter(tie, 1.0)]
    values += [0.0, -0.0, 1.0, 5e-324, 1e-300, 0.00005, 0.99995, 1 / 32]
    for value in values:
        fast, slow = _round4(value), round(value, 4)
        assert fast == slow and math.copysign(1.0, fast) == math.copysign(1.0, slow), value
    assert math.isnan(_round4(float("nan")))
    page = Page(1, 595.0, 842.0, ())
    for _ in range(20_000):
        box = [rng.uniform(-20, 620) for _ in range(4)]
        expected = [0.0 if v < 0 else 1.0 if v > 1 else round(v, 4)
                    for v in (box[0] / 595.0, box[1] / 842.0, box[2] / 595.0, box[3] / 842.0)]
        assert page.relative(*box) == expected
