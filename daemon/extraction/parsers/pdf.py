"""PDF: the text layer through pdfium, OCR for pages that have none.

Runs only in a worker process (pdfium is not thread-safe). Cost per page is
kept close to pdfium's own text extraction: the page text comes in one call,
and each word's box from two calls (its first and last character), not one
per character.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from daemon.extraction.document import Document, Page, Word, group_lines
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
    try:
        words = _words(textpage, page.get_rotation(), width, height)
    finally:
        textpage.close()
    if sum(len(w.text) for w in words) >= MIN_TEXT_CHARS:
        return Page(number=number, width=width, height=height, lines=group_lines(words))
    return _ocr_page(page, number, width, height, options)


def _words(textpage: pdfium.PdfTextPage, rotation: int, width: float, height: float) -> list[Word]:
    handle = textpage.raw
    count = pdfium_c.FPDFText_CountChars(handle)
    if count <= 0:
        return []
    buffer = ctypes.create_string_buffer(2 * (count + 1))
    written = pdfium_c.FPDFText_GetText(handle, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    text = buffer.raw[: 2 * max(written - 1, 0)].decode("utf-16-le", errors="replace")
    if len(text) != count:
        # Characters outside the BMP: read them one by one to keep indices aligned.
        text = "".join(chr(pdfium_c.FPDFText_GetUnicode(handle, i) or 32) for i in range(count))
    rect = pdfium_c.FS_RECTF()
    ref = ctypes.byref(rect)
    loose_box = pdfium_c.FPDFText_GetLooseCharBox
    words: list[Word] = []
    append = words.append
    # pdfium boxes are in unrotated user space with y up; the page's size is
    # already rotated. Map each box to the displayed page, y down.
    unrotated_h = width if rotation in (90, 270) else height
    for match in _WORD.finditer(text):
        start, end = match.span()
        if not loose_box(handle, start, ref):
            continue
        left, top, bottom = rect.left, rect.top, rect.bottom
        if end - 1 != start and loose_box(handle, end - 1, ref):
            right = rect.right
            top, bottom = max(top, rect.top), min(bottom, rect.bottom)
        else:
            right = rect.right
        if rotation == 0:
            append(Word(match.group(), left, unrotated_h - top, right, unrotated_h - bottom))
        else:
            append(_rotated(match.group(), left, bottom, right, top, rotation, width, height))
    return words


def _rotated(text: str, left: float, bottom: float, right: float, top: float, rotation: int,
             width: float, height: float) -> Word:
    # Displayed page (width x height) from unrotated user space, clockwise rotation.
    if rotation == 90:
        return Word(text, bottom, left, top, right)
    if rotation == 180:
        return Word(text, width - right, bottom, width - left, top)
    # 270
    return Word(text, width - top, height - right, width - bottom, height - left)


def _ocr_page(page: pdfium.PdfPage, number: int, width: float, height: float, options: ParseOptions) -> Page:
    from daemon.extraction.parsers.ocr import ocr_words

    scale = OCR_DPI / 72
    bitmap = page.render(scale=scale, grayscale=True)
    try:
        image = bitmap.to_pil()
    finally:
        bitmap.close()
    words = ocr_words(image, options, already_sharp=True)
    words = [Word(w.text, w.x0 / scale, w.y0 / scale, w.x1 / scale, w.y1 / scale, w.conf) for w in words]
    return Page(number=number, width=width, height=height, lines=group_lines(words), ocr=True)
