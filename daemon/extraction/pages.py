"""What a person sees of a job's document beside its values (the console, issue #15):
a page as a picture, or the lines of a document that has no pictures.

Both run in a trio-parallel worker process under the limits of extraction (pdfium is
not thread-safe; a hostile file must not take the daemon down), and return plain data
or a `Failure` as `daemon.extraction.worker` does.
"""

from __future__ import annotations

import io
import json
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.errors import JobError, PermanentJobError
from daemon.extraction.parsers.base import ParseOptions, corrupted, too_large
from daemon.extraction.worker import Failure, limit_memory, parse_document
from daemon.jobs import filetypes

# The formats a page of which is a picture; the others (DOCX, XLSX, CSV, TXT, HTML) are text.
PICTURED = (filetypes.PDF, filetypes.PNG, filetypes.JPEG, filetypes.TIFF, filetypes.WEBP)
# Stored as they are: a browser shows them (TIFF it does not, WEBP is converted for one frame).
SERVED_AS_STORED = (filetypes.PNG, filetypes.JPEG)


# Bytes of a stored PNG or JPEG read to find its size: its header and any metadata before it.
PICTURE_HEAD_BYTES = 256 * 1024


def stored_picture_refusal(head: bytes, max_image_pixels: int) -> PermanentJobError | None:
    """Why a PNG or JPEG served as stored must not be (DOCUMENT_TOO_LARGE: a picture of
    100,000 × 100,000 pixels in a few KB is a browser tab decoding 40 GB), from its first
    bytes `head`; None when it may be shown, or when its size cannot be read from them
    (then the browser finds it as broken as the parser did)."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None  # bounded below, by extraction.max_image_pixels
    try:
        with Image.open(io.BytesIO(head)) as image:  # reads the header, decodes no pixel
            width, height = image.size
    except Exception:  # a header cut short or unknown
        return None
    if width * height > max_image_pixels:
        return too_large(f"the image is {width:,}×{height:,} px ({width * height:,} pixels)",
                         "max_image_pixels", max_image_pixels)
    return None


@dataclass(frozen=True, slots=True)
class PageImage:
    png: bytes


class PageOutOfRange(Exception):
    pass


def render_page(path: str, mime_type: str, number: int, width: int,
                options: ParseOptions) -> PageImage | Failure:
    """Page `number` (from 1) of a PDF rendered `width` pixels wide, or frame `number` of a
    TIFF/WEBP, as PNG; a `Failure` with code PAGE_NOT_FOUND past the last page.

    The pixels stay under ``extraction.max_render_pixels`` (a PDF page is rendered
    narrower) and ``extraction.max_image_pixels`` (a frame larger is refused).
    """
    limit_memory(options.max_memory_bytes)
    try:
        if mime_type == filetypes.PDF:
            return _render_pdf(Path(path), number, width, options)
        return _image_frame(Path(path), number, options)
    except PageOutOfRange as exc:
        return Failure("PAGE_NOT_FOUND", str(exc))
    except JobError as exc:
        return Failure(exc.code, exc.message)
    except MemoryError:
        return Failure("PARSE_OUT_OF_MEMORY", "rendering the page needs more memory than extraction.max_memory")
    except Exception as exc:
        return Failure("PARSE_FAILED", f"the page could not be rendered ({type(exc).__name__})",
                       traceback.format_exc())


def _render_pdf(path: Path, number: int, width: int, options: ParseOptions) -> PageImage:
    import pypdfium2 as pdfium

    from daemon.extraction.parsers.pdf import render_scale

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        raise corrupted("PDF", exc) from exc
    try:
        count = len(pdf)
        if not 1 <= number <= count:
            raise PageOutOfRange(f"The document has {count} page(s); there is no page {number}")
        page = pdf[number - 1]
        try:
            page_width, page_height = page.get_size()
            # render_scale checks the page's size and bounds its pixels (and its resolution
            # to OCR's); the width asked for lowers the scale, never raises it past them.
            scale = min(width / page_width, render_scale(number, page_width, page_height, options))
            bitmap = page.render(scale=scale)
            try:
                image = bitmap.to_pil()
            finally:
                bitmap.close()
        finally:
            page.close()
    finally:
        pdf.close()
    return PageImage(_png(image))


def _image_frame(path: Path, number: int, options: ParseOptions) -> PageImage:
    from PIL import Image, ImageOps

    from daemon.extraction.parsers.ocr import page_count

    Image.MAX_IMAGE_PIXELS = None  # bounded below, by extraction.max_image_pixels
    with Image.open(path) as image:
        count = page_count(image, number)  # exact where page `number` is missing
        if not 1 <= number <= count:
            raise PageOutOfRange(f"The image has {count} page(s); there is no page {number}")
        image.seek(number - 1)
        pixels = image.width * image.height
        if pixels > options.max_image_pixels:
            raise too_large(f"image frame {number} is {image.width:,}×{image.height:,} px ({pixels:,} pixels)",
                            "max_image_pixels", options.max_image_pixels)
        frame = ImageOps.exif_transpose(image.copy())
    return PageImage(_png(_displayable(frame)))


# The modes a PNG stores (16-bit greys are made 8-bit first: a screen shows no more).
_PNG_MODES = ("1", "L", "LA", "P", "RGB", "RGBA")
# Modes with an alpha band, and the PNG mode that keeps it.
_WITH_ALPHA = {"PA": "RGBA", "RGBa": "RGBA", "La": "LA"}


def _displayable(frame: Any) -> Any:
    """`frame` in a mode PNG stores, as OCR reads it: a CMYK or LAB scan in RGB, wide
    greys (16-bit, 32-bit, float) scaled to 8 bits (saving them as they were raised
    OSError, and the console got a 422 for a page OCR had read)."""
    from daemon.extraction.parsers.ocr import eight_bit

    frame = eight_bit(frame)
    if frame.mode in _PNG_MODES:
        return frame
    return frame.convert(_WITH_ALPHA.get(frame.mode, "RGB"))


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False, compress_level=3)
    return buffer.getvalue()


# The lines GET /api/jobs/:id/text answers at most, the first in reading order. A TXT within
# extraction.max_text_chars can hold 2,400,000 lines: 105 MB of JSON, which a browser tab
# cannot lay out (200,000 lines froze the review screen for 10 to 25 s); a person reads
# ten thousand lines beside the values, and the answer says how many there were.
MAX_TEXT_LINES = 10_000


def document_text_json(path: str, mime_type: str, options: ParseOptions) -> bytes | Failure:
    """The parsed lines of a text document, page by page, as the JSON body of GET
    /api/jobs/:id/text: ``{"pages": [{number, lines: [{text, bbox}]}], lineCount, truncated}``
    with each bbox as fractions of its page (as resultMeta.fields give them); at most
    MAX_TEXT_LINES lines, the pages after the last one kept left out.

    Encoded here, in the worker process: handed back as objects, a long document's lines
    (200,000 of a 4.7 MB TXT) were unpickled and then JSON-encoded on the event loop, 2.9 s
    in which no request of anyone was answered; one bytes object crosses for free."""
    document = parse_document(path, mime_type, options)
    if isinstance(document, Failure):
        return document
    pages: list[dict[str, Any]] = []
    kept = 0
    for page in document.pages:
        if kept >= MAX_TEXT_LINES:
            break
        lines = page.lines[:MAX_TEXT_LINES - kept]
        kept += len(lines)
        pages.append({"number": page.number,
                      "lines": [{"text": line.text, "bbox": page.relative(line.x0, line.y0, line.x1, line.y1)}
                                for line in lines]})
    count = sum(len(page.lines) for page in document.pages)
    body = {"pages": pages, "lineCount": count, "truncated": count > kept}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

