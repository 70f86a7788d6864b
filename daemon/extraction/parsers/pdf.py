"""PDF: the text layer through pdfium, OCR for pages that have none.

Runs only in a worker process (pdfium is not thread-safe). Cost per page is
kept close to pdfium's own text extraction: the page text comes in one call,
and each word's box from two calls (its first and last character), not one
per character.
"""

from __future__ import annotations

import ctypes
import math
import re
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from daemon.extraction.document import CELL_GAP, Document, Page, Word, group_lines
from daemon.extraction.parsers.base import ParseOptions, check_pages, corrupted

# Rendering resolution for OCR of pages without a text layer (tesseract's sweet spot).
OCR_DPI = 300
# A page with fewer visible characters than this in its text layer is scanned.
MIN_TEXT_CHARS = 8
_WORD = re.compile(r"\S+")


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
            try:
                page = pdf[index]
            except pdfium.PdfiumError as exc:
                raise corrupted("PDF", f"page {index + 1}: {exc}") from exc
            try:
                pages.append(_read_page(page, index + 1, options))
            finally:
                page.close()
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


def _read_page(page: pdfium.PdfPage, number: int, options: ParseOptions) -> Page:
    width, height = page.get_size()
    try:
        textpage = page.get_textpage()
    except pdfium.PdfiumError as exc:
        raise corrupted("PDF", f"page {number}: {exc}") from exc
    # pdfium's boxes are in the page's unrotated user space (the crop box);
    # the text is read in its own direction there, whatever /Rotate says about
    # displaying it.
    try:
        box = page.get_cropbox()
    except pdfium.PdfiumError:
        box = (0.0, 0.0, height, width) if page.get_rotation() in (90, 270) else (0.0, 0.0, width, height)
    try:
        words, frame = _words(textpage, box)
    finally:
        textpage.close()
    if sum(len(w.text) for w in words) >= MIN_TEXT_CHARS:
        return Page(number=number, width=frame[0], height=frame[1], lines=group_lines(words))
    return _ocr_page(page, number, width, height, options)


def _words(textpage: pdfium.PdfTextPage,
           box: tuple[float, float, float, float]) -> tuple[list[Word], tuple[float, float]]:
    """Phrases with boxes, y down, in the frame where the text reads left to
    right, and that frame's size (the crop box's, turned by the text's angle)."""
    handle = textpage.raw
    origin_x, origin_y, right_edge, top_edge = box
    width, height = right_edge - origin_x, top_edge - origin_y
    count = pdfium_c.FPDFText_CountChars(handle)
    if count <= 0:
        return [], (width, height)
    buffer = ctypes.create_string_buffer(2 * (count + 1))
    written = pdfium_c.FPDFText_GetText(handle, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    text = buffer.raw[: 2 * max(written - 1, 0)].decode("utf-16-le", errors="replace")
    if len(text) != count:
        # Characters outside the BMP: read them one by one to keep indices aligned.
        text = "".join(chr(pdfium_c.FPDFText_GetUnicode(handle, i) or 32) for i in range(count))
    rect = pdfium_c.FS_RECTF()
    ref = ctypes.byref(rect)
    loose_box = pdfium_c.FPDFText_GetLooseCharBox
    turn = _text_turn(handle, text)
    if turn:
        return _turned_words(handle, text, turn, box)
    flip = top_edge  # pdfium's y grows upwards
    # Words that follow each other on a baseline with no column gap are one
    # phrase already here (pdfium gives them in reading order): fewer, larger
    # units for the line grouping.
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
    return phrases, (width, height)


def _text_turn(handle: object, text: str) -> int:
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


def _turned_words(handle: object, text: str, turn: int,
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


def _ocr_page(page: pdfium.PdfPage, number: int, width: float, height: float, options: ParseOptions) -> Page:
    from daemon.extraction.parsers.ocr import ocr_lines

    scale = OCR_DPI / 72
    bitmap = page.render(scale=scale, grayscale=True)
    try:
        image = bitmap.to_pil()
    finally:
        bitmap.close()
    lines = [
        [Word(w.text, w.x0 / scale, w.y0 / scale, w.x1 / scale, w.y1 / scale, w.conf) for w in line]
        for line in ocr_lines(image, options, already_sharp=True)
    ]
    return Page(number=number, width=width, height=height, lines=group_lines([], lines), ocr=True)
