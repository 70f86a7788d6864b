"""PDF: the text layer through pdfium, OCR for pages that have none.

Runs only in a worker process (pdfium is not thread-safe). Cost per page is
kept close to pdfium's own text extraction: the page text comes in one call,
and each word's box from two calls (its first and last character), not one
per character.

At a few hundred words a page those calls cost more than pdfium's own work,
and most of a call is ctypes converting its arguments: the per-word call goes
through a second prototype of the function taking `c_void_p` arguments,
given prebuilt `c_void_p` values (0.4 µs a call, against 1 µs through the
bindings' own pointer types), and pages are read through pdfium's C API
directly rather than pypdfium2's page objects. The pypdfium2 document still
opens the file (its error handling), and a page without a text layer is
rendered through it for OCR.

The word boxes, and so the lines and cells, are exactly those of one
`FPDFText_GetLooseCharBox` call per end of each word: cheaper geometry was
measured and refused (tests/unit/extraction/parsers/test_pdf_layout_speed_equivalence.py
holds the reference). pdfium's text runs (`FPDFText_CountRects`) come without
the characters they hold, and its line breaks join hyphenated lines and
reorder runs, so rows built from them differ from these on real invoices.
"""

from __future__ import annotations

import ctypes
import math
import re
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from daemon.extraction.document import CELL_GAP, Document, Page, Word, group_lines, word_of
from daemon.extraction.parsers.base import ParseOptions, check_pages, corrupted

# Rendering resolution for OCR of pages without a text layer (tesseract's sweet spot).
OCR_DPI = 300
# PDF's largest page side in points (ISO 32000-1, annex C: 200 inches; UserUnit,
# which could make it larger, is not applied by pdfium's sizes).
MAX_PAGE_POINTS = 14_400
# A page with fewer visible characters than this in its text layer is scanned.
MIN_TEXT_CHARS = 8
_WORD = re.compile(r"\S+")
# The page size pypdfium2 assumes when a page has neither a crop box nor a media box (US letter).
_DEFAULT_BOX = (0.0, 0.0, 612.0, 792.0)
_POINTER = ctypes.c_void_p


def _prototype(function: Any, restype: Any, *argtypes: Any) -> Any:
    """The same C function called with plain pointer arguments (ctypes converts a
    `c_void_p` it is given without the checks of the bindings' pointer types)."""
    address = ctypes.cast(function, _POINTER).value
    if address is None:
        raise ImportError("pdfium has no such function")
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


_LOOSE_CHAR_BOX = _prototype(pdfium_c.FPDFText_GetLooseCharBox, ctypes.c_int, _POINTER, ctypes.c_int, _POINTER)


def parse_pdf(path: Path, options: ParseOptions) -> Document:
    _check_complete(path)
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        raise corrupted("PDF", exc) from exc
    try:
        count = len(pdf)
        if count == 0:
            raise corrupted("PDF", "it has no pages")
        check_pages(count, options)
        pages = []
        for index in range(count):
            page = _text_page(pdf, index)
            if page is None:
                page = _ocr_page(pdf, index, options)
            pages.append(page)
        return Document(tuple(pages))
    finally:
        pdf.close()


def _check_complete(path: Path) -> None:
    # pdfium repairs a truncated file silently and returns what it can; a file
    # cut short has lost its end-of-file marker (PDF readers accept it anywhere
    # in the last KiB; some writers append a little junk after it).
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(1024)
        fh.seek(max(0, size - 4096))
        tail = fh.read()
    if not head.lstrip(b"\x00\r\n\t ").startswith(b"%PDF-"):
        raise corrupted("PDF", "it does not start with a PDF header")
    if b"%%EOF" not in tail:
        raise corrupted("PDF", "it is truncated (no end-of-file marker)")


def _text_page(pdf: pdfium.PdfDocument, index: int) -> Page | None:
    """Page `index` from its text layer, or None when it has none (a scan)."""
    number = index + 1
    page = pdfium_c.FPDF_LoadPage(pdf.raw, index)
    if not page:
        raise corrupted("PDF", f"page {number}: Failed to load page.")
    try:
        textpage = pdfium_c.FPDFText_LoadPage(page)
        if not textpage:
            raise corrupted("PDF", f"page {number}: Failed to load text page.")
        # pdfium's boxes are in the page's unrotated user space (the crop box);
        # the text is read in its own direction there, whatever /Rotate says about
        # displaying it.
        box = _box(page, pdfium_c.FPDFPage_GetCropBox) or _box(page, pdfium_c.FPDFPage_GetMediaBox) or _DEFAULT_BOX
        try:
            words, frame = _words(textpage, box)
        finally:
            pdfium_c.FPDFText_ClosePage(textpage)
    finally:
        pdfium_c.FPDF_ClosePage(page)
    visible = 0
    for word in words:
        visible += len(word.text)
        if visible >= MIN_TEXT_CHARS:
            return Page(number=number, width=frame[0], height=frame[1], lines=group_lines(words))
    return None


def _box(page: Any, getter: Any) -> tuple[float, float, float, float] | None:
    left, bottom, right, top = ctypes.c_float(), ctypes.c_float(), ctypes.c_float(), ctypes.c_float()
    if not getter(page, left, bottom, right, top):
        return None
    return (left.value, bottom.value, right.value, top.value)


def _page_text(handle: Any) -> str:
    count = pdfium_c.FPDFText_CountChars(handle)
    if count <= 0:
        return ""
    buffer = ctypes.create_string_buffer(2 * (count + 1))
    written = pdfium_c.FPDFText_GetText(handle, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    text = buffer.raw[: 2 * max(written - 1, 0)].decode("utf-16-le", errors="replace")
    if len(text) != count:
        # Characters outside the BMP: read them one by one to keep indices aligned.
        text = "".join(chr(pdfium_c.FPDFText_GetUnicode(handle, i) or 32) for i in range(count))
    return text


def _words(handle: Any, box: tuple[float, float, float, float]) -> tuple[list[Word], tuple[float, float]]:
    """Phrases with boxes, y down, in the frame where the text reads left to
    right, and that frame's size (the crop box's, turned by the text's angle)."""
    origin_x, origin_y, right_edge, top_edge = box
    width, height = right_edge - origin_x, top_edge - origin_y
    text = _page_text(handle)
    if not text:
        return [], (width, height)
    turn = _text_turn(handle, text)
    if turn:
        return _turned_words(handle, text, turn, box)
    flip = top_edge  # pdfium's y grows upwards
    rect = pdfium_c.FS_RECTF()
    into = _POINTER(ctypes.addressof(rect))
    page = _POINTER(ctypes.cast(handle, _POINTER).value)
    loose_box = _LOOSE_CHAR_BOX
    # Words that follow each other on a baseline with no column gap are one
    # phrase already here (pdfium gives them in reading order): fewer, larger
    # units for the line grouping.
    phrases: list[Word] = []
    append = phrases.append
    parts: list[str] | None = None  # the phrase being read
    x0 = y0 = x1 = y1 = 0.0
    # The words are `_WORD` matches; split() and a substring search find them
    # without a match object each (only whitespace lies between two words).
    position = 0
    find = text.find
    for word in text.split():
        start = find(word, position)
        position = end = start + len(word)
        if not loose_box(page, start, into):
            continue
        left, top, bottom = rect.left - origin_x, rect.top, rect.bottom
        if end - 1 != start and loose_box(page, end - 1, into):
            if rect.top > top:
                top = rect.top
            if rect.bottom < bottom:
                bottom = rect.bottom
        right = rect.right - origin_x
        wy0, wy1 = flip - top, flip - bottom
        if parts is not None:
            h = y1 - y0
            gap = left - x1
            if -0.2 * h < gap < CELL_GAP * h and abs((wy0 + wy1) - (y0 + y1)) < 0.6 * h:
                if gap >= 0.08 * h:
                    parts.append(" ")
                parts.append(word)
                if right > x1:
                    x1 = right
                if wy0 < y0:
                    y0 = wy0
                if wy1 > y1:
                    y1 = wy1
                continue
            append(word_of(Word, ("".join(parts), x0, y0, x1, y1, 1.0)))
        parts = [word]
        x0, y0, x1, y1 = left, wy0, right, wy1
    if parts is not None:
        append(word_of(Word, ("".join(parts), x0, y0, x1, y1, 1.0)))
    return phrases, (width, height)


def _text_turn(handle: Any, text: str) -> int:
    """The text's direction in quarter turns counterclockwise (0: left to right),
    from the angle of a few words' first characters."""
    votes = [0, 0, 0, 0]
    for sampled, match in enumerate(_WORD.finditer(text)):
        if sampled >= 12:
            break
        angle = pdfium_c.FPDFText_GetCharAngle(handle, match.start())
        if angle >= 0:  # pdfium measures it clockwise
            votes[(4 - round(math.degrees(angle) / 90)) % 4] += 1
    return max(range(4), key=lambda turn: (votes[turn], turn == 0))


def _turned_words(handle: Any, text: str, turn: int,
                  box: tuple[float, float, float, float]) -> tuple[list[Word], tuple[float, float]]:
    """Words of text turned by `turn` quarter turns, in a frame where they read
    left to right (the slow path: vertical and upside-down text is rare)."""
    origin_x, origin_y, right_edge, top_edge = box
    width, height = right_edge - origin_x, top_edge - origin_y
    rect = pdfium_c.FS_RECTF()
    ref = ctypes.byref(rect)
    words: list[Word] = []
    for match in _WORD.finditer(text):
        start, end = match.span()
        if not pdfium_c.FPDFText_GetLooseCharBox(handle, start, ref):
            continue
        left, right, bottom, top = rect.left, rect.right, rect.bottom, rect.top
        if pdfium_c.FPDFText_GetLooseCharBox(handle, end - 1, ref):
            left, right = min(left, rect.left), max(right, rect.right)
            bottom, top = min(bottom, rect.bottom), max(top, rect.top)
        left, right, bottom, top = left - origin_x, right - origin_x, bottom - origin_y, top - origin_y
        if turn == 1:  # reading upwards: lines follow each other to the right
            words.append(Word(match.group(), bottom, left, top, right))
        elif turn == 3:  # reading downwards: lines follow each other to the left
            words.append(Word(match.group(), height - top, width - right, height - bottom, width - left))
        else:  # upside down: lines follow each other upwards
            words.append(Word(match.group(), width - right, bottom, width - left, top))
    frame = (height, width) if turn in (1, 3) else (width, height)
    return words, frame


def render_scale(number: int, width: float, height: float, options: ParseOptions) -> float:
    """Pixels per point to render a page for OCR: `OCR_DPI`, or less when that
    would make more than ``extraction.max_render_pixels`` (a poster's letters
    are large: a 100-inch page still reads at ~90 dpi under the default).

    Raises:
        PermanentJobError: CORRUPTED_FILE for a page outside PDF's own size
            limit (pdfium would try to allocate what it says).
    """
    if not (0 < width <= MAX_PAGE_POINTS and 0 < height <= MAX_PAGE_POINTS):
        raise corrupted("PDF", f"page {number} is {width:g}×{height:g} points, outside the PDF page size "
                               f"limit of {MAX_PAGE_POINTS:,} points")
    scale = OCR_DPI / 72
    return min(scale, math.sqrt(options.max_render_pixels / (width * height)))


def _ocr_page(pdf: pdfium.PdfDocument, index: int, options: ParseOptions) -> Page:
    from daemon.extraction.parsers.ocr import ocr_lines
    from daemon.extraction.parsers.rapidocr import reading_scale

    try:
        page = pdf[index]
    except pdfium.PdfiumError as exc:
        raise corrupted("PDF", f"page {index + 1}: {exc}") from exc
    try:
        width, height = page.get_size()
        scale = render_scale(index + 1, width, height, options)
        # RapidOCR reads colour (a red stamp over the print is lifted: `stamps`) at its own
        # input size; tesseract reads grey at 300 dpi.
        colour = options.ocr_engine == "rapidocr"
        if colour:
            scale = min(scale, reading_scale(width, height))
        try:
            bitmap = page.render(scale=scale, grayscale=not colour)
        except pdfium.PdfiumError as exc:
            raise corrupted("PDF", f"page {index + 1}: {exc}") from exc
        try:
            image = bitmap.to_pil()
        finally:
            bitmap.close()
    finally:
        page.close()
    lines = [
        [Word(w.text, w.x0 / scale, w.y0 / scale, w.x1 / scale, w.y1 / scale, w.conf) for w in line]
        for line in ocr_lines(image, options, already_sharp=True)
    ]
    return Page(number=index + 1, width=width, height=height, lines=group_lines([], lines), ocr=True)
