"""OCR with tesseract (through pytesseract), for images and scanned PDF pages.

Runs in a worker process. Tesseract is an external binary: when it is
missing the daemon still starts (`tesseract_version` lets the service warn
once at startup) and each job that needs OCR fails with ``OCR_FAILED``.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path

from PIL import Image, ImageOps

from daemon.errors import PermanentJobError
from daemon.extraction.document import Document, Page, Word, group_lines
from daemon.extraction.parsers.base import ParseOptions, check_pages, corrupted

# Text smaller than this many pixels high is upscaled before OCR: tesseract
# reads best with capital letters 20-40 px high (its documentation's advice
# of about 300 dpi for 10 pt text).
_MIN_WIDTH_PX = 1200
_MAX_SCALE = 3.0
# Scans larger than this are refused rather than exhausting the worker.
MAX_PIXELS = 12_000 * 12_000
# Page segmentation "single column of text of variable sizes": it keeps a
# label and a value printed far apart on the same line together.
_PSM = 4

# One tesseract thread per process: workers are already one per CPU, and
# OpenMP inside tesseract only adds contention.
os.environ.setdefault("OMP_THREAD_LIMIT", "1")


def tesseract_version() -> str | None:
    """Tesseract's version, or None when the binary is not installed."""
    if shutil.which("tesseract") is None:
        return None
    import pytesseract

    try:
        return str(pytesseract.get_tesseract_version())
    except (pytesseract.TesseractNotFoundError, OSError):
        return None


def parse_image(path: Path, options: ParseOptions) -> Document:
    """Every frame of a PNG, JPEG, TIFF or WEBP, read by OCR."""
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    with warnings.catch_warnings():
        # Pillow warns about damaged metadata (EXIF) of images it can still read.
        warnings.simplefilter("ignore")
        return _parse_image(path, options)


def _parse_image(path: Path, options: ParseOptions) -> Document:
    try:
        image = Image.open(path)
        frames = getattr(image, "n_frames", 1)
        check_pages(frames, options)
        pages = []
        for index in range(frames):
            image.seek(index)
            frame = ImageOps.exif_transpose(image.copy())
            frame.load()
            pages.append(_ocr_page(frame, index + 1, options))
    except PermanentJobError:
        raise
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as exc:
        # Pillow's errors for unreadable, truncated or oversized images.
        raise corrupted("image", exc) from exc
    return Document(tuple(pages))


def _ocr_page(image: Image.Image, number: int, options: ParseOptions) -> Page:
    lines = ocr_lines(image, options)
    return Page(number=number, width=float(image.width), height=float(image.height),
                lines=group_lines([], lines), ocr=True)


def ocr_lines(image: Image.Image, options: ParseOptions, *, already_sharp: bool = False) -> list[list[Word]]:
    """Tesseract's lines of words, with boxes in `image`'s pixels.

    Raises:
        PermanentJobError: OCR_FAILED when tesseract is missing, fails or times out.
    """
    import pytesseract

    gray = image.convert("L")
    scale = 1.0
    if not already_sharp and gray.width < _MIN_WIDTH_PX:
        scale = min(_MAX_SCALE, _MIN_WIDTH_PX / max(gray.width, 1))
        gray = gray.resize((round(gray.width * scale), round(gray.height * scale)), Image.Resampling.LANCZOS)
    try:
        data = pytesseract.image_to_data(
            gray,
            lang=options.ocr_languages,
            config=f"--psm {_PSM}",
            output_type=pytesseract.Output.DICT,
            timeout=options.ocr_timeout_s,
        )
    except pytesseract.TesseractNotFoundError as exc:
        raise PermanentJobError("OCR_FAILED", "OCR is unavailable: the tesseract binary is not installed") from exc
    except pytesseract.TesseractError as exc:
        raise PermanentJobError("OCR_FAILED", f"tesseract failed: {exc.message}".strip()) from exc
    except RuntimeError as exc:  # pytesseract's timeout
        raise PermanentJobError("OCR_FAILED", f"tesseract took longer than {options.ocr_timeout_s:g}s") from exc
    # Tesseract's boxes are tight around each word's glyphs ("a" is shorter
    # than "A"); give every word its tesseract line's height so lines group
    # by baseline.
    rows: dict[tuple[int, int, int, int], list[tuple[str, float, float, float, float, float]]] = {}
    for i, raw_text in enumerate(data["text"]):
        text = str(raw_text).strip()
        if not text:
            continue
        conf = float(data["conf"][i])
        key = (data["page_num"][i], data["block_num"][i], data["par_num"][i], data["line_num"][i])
        left, top = float(data["left"][i]), float(data["top"][i])
        rows.setdefault(key, []).append((
            text, left, top, left + float(data["width"][i]), top + float(data["height"][i]),
            max(0.0, min(1.0, conf / 100)) if conf >= 0 else 0.5,
        ))
    lines: list[list[Word]] = []
    for row in rows.values():
        top = min(r[2] for r in row)
        bottom = max(r[4] for r in row)
        lines.append(_rejoin_numbers([Word(text, x0 / scale, top / scale, x1 / scale, bottom / scale, conf)
                                      for text, x0, _, x1, _, conf in row]))
    return lines


def _rejoin_numbers(words: list[Word]) -> list[Word]:
    """Tesseract splits an amount after its separator ("73." "00", "33," "92"): join
    a word ending in a digit and a separator with the two digits that follow it."""
    out: list[Word] = []
    for word in words:
        last = out[-1] if out else None
        if (last is not None and _CUT_AMOUNT.search(last.text) and _CENTS.match(word.text)
                and word.x0 - last.x1 < 1.5 * (word.y1 - word.y0)):
            out[-1] = Word(last.text + word.text, last.x0, last.y0, word.x1, max(last.y1, word.y1),
                           min(last.conf, word.conf))
        else:
            out.append(word)
    return out


_CUT_AMOUNT = re.compile(r"\d[.,]$")
_CENTS = re.compile(r"^\d{2}(?!\d)")
