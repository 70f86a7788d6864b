"""OCR of images and scanned PDF pages, by RapidOCR (the default engine:
`parsers.rapidocr`) or by tesseract (through pytesseract) when
`ParseOptions.ocr_engine` says so; either holds an OCR slot while it reads
(`parsers.slots`).

Runs in a worker process. Tesseract is an external binary: when it is
missing the daemon still starts (`tesseract_version` lets the service warn
once at startup) and each job that needs OCR fails with ``OCR_FAILED``.

With tesseract, an image whose first reading is unsure is read twice more:
the part of it that holds text, at two other scales (its text lines about 20
and 30 pixels high). Tesseract's misreads on a low-resolution scan (a receipt
at 150 dpi) change with the scale; the rules provider reads its fields in
each reading and keeps what they agree on (`scanned.ScannedDocument`). Each
re-read costs about as much as the first reading (recognition dominates;
cropping the margins saves little), so an unsure scan costs about 2.5
readings.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

from daemon.errors import PermanentJobError
from daemon.extraction.document import Document, Page, Word, group_lines
from daemon.extraction.parsers.base import ParseOptions, check_pages, corrupted, too_large
from daemon.extraction.parsers.rapidocr import rapidocr_lines
from daemon.extraction.parsers.scanned import ScannedDocument
from daemon.extraction.parsers.slots import ocr_slot

# Text smaller than this many pixels high is upscaled before OCR: tesseract
# reads best with capital letters 20-40 px high (its documentation's advice
# of about 300 dpi for 10 pt text).
_MIN_WIDTH_PX = 1200
_MAX_SCALE = 3.0
# Page segmentation "single column of text of variable sizes": it keeps a
# label and a value printed far apart on the same line together.
_PSM = 4
# The re-reads of an image: the height in pixels its text lines are scaled to.
# A re-read whose scale is within `_SAME_SCALE` of the first reading's would
# read the same; its target is moved up by `_AWAY`.
_REREAD_LINE_HEIGHTS = (20.0, 30.0)
_SAME_SCALE = 0.12
_AWAY = 1.4
_REREAD_SCALES = (0.3, 4.0)
_MAX_REREAD_PIXELS = 24_000_000
# Words this sure (0..1) show where the text is and how high its lines are.
_SURE = 0.6
# A first reading this sure on average (per character) is not read again: a
# clean scan or a rendered page reads the same at any scale (a 200 dpi print
# scores 0.94, receipts scanned at 150 dpi 0.5 to 0.87).
_SURE_ENOUGH = 0.9

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
    """Every page of a PNG, JPEG, TIFF or WEBP (`page_count`), read by OCR (a `ScannedDocument`).

    A frame of more than ``extraction.max_image_pixels`` is refused from its
    header, before it is decoded (DOCUMENT_TOO_LARGE).
    """
    # Pillow's own bomb check is replaced by `_check_pixels`, which reads the same
    # header size before decoding and names the setting in its message.
    Image.MAX_IMAGE_PIXELS = None
    with warnings.catch_warnings():
        # Pillow warns about damaged metadata (EXIF) of images it can still read.
        warnings.simplefilter("ignore")
        return _parse_image(path, options)


def page_count(image: Image.Image, limit: int) -> int:
    """How many pages `image` has, or `limit` + 1 where it has more.

    A TIFF's frames are its pages (a scanner's or a fax's multi-page file). An animated
    PNG, WEBP or JPEG (MPO) has frames of one picture, not pages: it is read as its
    first frame, the one a viewer shows first (reading each frame of a 500-frame
    animation took minutes of OCR for one picture).

    A TIFF's frames are counted by stepping through them: Pillow's `n_frames` walks
    every frame's header in time quadratic in their number (a 4 MB file of 40,000
    one-pixel frames took 8 s before the page limit was checked), and after a seek past
    the last frame it counts up to the frame asked for."""
    if image.format != "TIFF":
        return 1
    count = 1
    try:
        while count <= limit:
            image.seek(count)
            count += 1
    except EOFError:
        pass
    image.seek(0)
    return count


def _parse_image(path: Path, options: ParseOptions) -> Document:
    with path.open("rb") as file:
        size = webp_size(file.read(30))
    if size is not None:
        # Pillow allocates a WEBP's decoder for the whole canvas in `Image.open`, before
        # any size can be checked: a valid 268-megapixel WEBP failed there, CORRUPTED_FILE.
        _check_size(*size, 1, options)
    try:
        image = Image.open(path)
        frames = page_count(image, options.max_pages)
        check_pages(frames, options, counted_to=True)
        pages: list[Page] = []
        rereads: list[list[Page | None]] = []
        for index in range(frames):
            image.seek(index)
            _check_pixels(image, index + 1, options)
            frame = ImageOps.exif_transpose(image.copy())
            frame.load()
            first, others = _read_page(eight_bit(frame), index + 1, options)
            pages.append(first)
            rereads.append(others)
    except PermanentJobError:
        raise
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        # Pillow's errors for unreadable, truncated or oversized images.
        raise corrupted("image", exc) from exc
    readings: list[Document] = []
    for number in range(max((len(others) for others in rereads), default=0)):
        made = [others[number] if number < len(others) else None for others in rereads]
        if all(reread is None for reread in made):
            continue
        # A page without this re-read (no text found, no time left) keeps its first reading.
        readings.append(Document(tuple(reread or page for page, reread in zip(pages, made, strict=True))))
    return ScannedDocument(tuple(pages), tuple(readings))


def webp_size(head: bytes) -> tuple[int, int] | None:
    """The canvas of a WEBP from its first 30 bytes (its first chunk: VP8X, VP8L or VP8);
    None for any other file or a header too short to tell."""
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    chunk = head[12:16]
    if chunk == b"VP8X":
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    if chunk == b"VP8L" and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(head[26:28], "little") & 0x3FFF, int.from_bytes(head[28:30], "little") & 0x3FFF
    return None


def _check_pixels(image: Image.Image, number: int, options: ParseOptions) -> None:
    _check_size(*image.size, number, options)


def _check_size(width: int, height: int, number: int, options: ParseOptions) -> None:
    if width * height > options.max_image_pixels:
        raise too_large(f"image frame {number} is {width:,}×{height:,} px ({width * height:,} pixels)",
                        "max_image_pixels", options.max_image_pixels)


def eight_bit(frame: Image.Image) -> Image.Image:
    """`frame` with 8-bit pixels, its greys scaled to them.

    Pillow's conversions of 16-bit and 32-bit greys (modes I;16, I, F: a scanner's
    "16-bit gray" PNG or TIFF) to L or RGB clamp at 255: every grey but the darkest
    became white, and a scanned page read as blank. A 16-bit frame is scaled from its
    depth; an integer or float one, whose depth its mode does not say, from its lightest
    pixel (up to 255 it is already in range).
    """
    if frame.mode not in ("I", "F") and not frame.mode.startswith("I;16"):
        return frame
    extrema: Any = frame.getextrema()  # (lowest, highest) for a one-band image
    top = 65535.0 if frame.mode.startswith("I;16") else float(extrema[1])
    wide = frame.convert("F")
    if top > 255:
        wide = wide.point(lambda value: value * (255 / top))
    return wide.convert("L")


def _read_page(image: Image.Image, number: int, options: ParseOptions) -> tuple[Page, list[Page | None]]:
    """The page's first reading and its re-reads (None where one was not made)."""
    first, *others = ocr_readings(image, options)
    assert first is not None
    return _page(first, number, image), [None if lines is None else _page(lines, number, image) for lines in others]


def ocr_readings(image: Image.Image, options: ParseOptions, *,
                 already_sharp: bool = False) -> list[list[list[Word]] | None]:
    """`ocr_lines`, then the lines of each re-read (None where one was not made:
    the first reading was sure, found no text, or left no time), boxes in
    `image`'s pixels.

    Raises:
        PermanentJobError: OCR_FAILED when the first reading fails (a re-read
            that fails is only left out).
    """
    with ocr_slot(options):
        if options.ocr_engine == "rapidocr":
            return [rapidocr_lines(image)]  # one reading: its misreads are too few to vote on
        started = time.monotonic()
        gray = image.convert("L")
        first = _first_reading(gray, options, already_sharp=already_sharp)
        out: list[list[list[Word]] | None] = [first.lines]
        done = [first.scale]
        for height in _REREAD_LINE_HEIGHTS:
            out.append(_reread(gray, first, height, done, options, started))
        return out


def _page(lines: list[list[Word]], number: int, image: Image.Image) -> Page:
    return Page(number=number, width=float(image.width), height=float(image.height),
                lines=group_lines([], lines), ocr=True)


@dataclass(frozen=True)
class _Reading:
    lines: list[list[Word]]  # in the image's own pixels
    scale: float
    line_height: float | None  # the text's usual line height in the image's pixels
    text_box: tuple[float, float, float, float] | None  # where the sure words are
    conf: float  # the mean confidence of its characters (0..1)


def ocr_lines(image: Image.Image, options: ParseOptions, *, already_sharp: bool = False) -> list[list[Word]]:
    """The engine's lines of words, with boxes in `image`'s pixels (one reading).

    Raises:
        PermanentJobError: OCR_FAILED when the engine is missing or fails (or tesseract times out).
    """
    with ocr_slot(options):
        if options.ocr_engine == "rapidocr":
            return rapidocr_lines(image)
        return _first_reading(image.convert("L"), options, already_sharp=already_sharp).lines


def _first_reading(gray: Image.Image, options: ParseOptions, *, already_sharp: bool = False) -> _Reading:
    scale = 1.0
    if not already_sharp and gray.width < _MIN_WIDTH_PX:
        scale = min(_MAX_SCALE, _MIN_WIDTH_PX / max(gray.width, 1))
    data = _tesseract(_scaled(gray, scale), options, options.ocr_timeout_s)
    lines = _lines(data, scale, 0.0, 0.0)
    sure = [w for line in lines for w in line if w.conf >= _SURE]
    heights = [w.height for w in sure if len(w.text) >= 3]
    height = statistics.median(heights) if heights else None
    box = None
    if sure:
        box = (min(w.x0 for w in sure), min(w.y0 for w in sure), max(w.x1 for w in sure), max(w.y1 for w in sure))
    words = [w for line in lines for w in line]
    chars = sum(len(w.text) for w in words)
    conf = sum(w.conf * len(w.text) for w in words) / chars if chars else 0.0
    return _Reading(lines, scale, height, box, conf)


def _reread(gray: Image.Image, first: _Reading, line_height: float, done: list[float], options: ParseOptions,
            started: float) -> list[list[Word]] | None:
    """The text of the page read again with its lines `line_height` pixels high
    (None when there is no text, no time left, or tesseract fails: the first
    reading stands on its own)."""
    if first.line_height is None or first.text_box is None or first.conf >= _SURE_ENOUGH:
        return None
    low, high = _REREAD_SCALES
    scale = min(high, max(low, line_height / first.line_height))
    if any(abs(scale / other - 1) < _SAME_SCALE for other in done):
        scale = min(high, scale * _AWAY)
        if any(abs(scale / other - 1) < _SAME_SCALE for other in done):
            return None
    margin = 2 * first.line_height
    x0, y0, x1, y1 = first.text_box
    left, top = max(0, int(x0 - margin)), max(0, int(y0 - margin))
    right, bottom = min(gray.width, int(x1 + margin) + 1), min(gray.height, int(y1 + margin) + 1)
    if right - left < 8 or bottom - top < 8:
        return None
    scale = min(scale, (_MAX_REREAD_PIXELS / ((right - left) * (bottom - top))) ** 0.5)
    remaining = options.ocr_timeout_s - (time.monotonic() - started)
    if remaining < 1:
        return None
    try:
        data = _tesseract(_scaled(gray.crop((left, top, right, bottom)), scale), options, remaining)
    except PermanentJobError:
        return None
    done.append(scale)
    return _lines(data, scale, float(left), float(top))


def _scaled(gray: Image.Image, scale: float) -> Image.Image:
    if scale != 1.0:
        gray = gray.resize((max(1, round(gray.width * scale)), max(1, round(gray.height * scale))),
                           Image.Resampling.LANCZOS)
    return gray


def _tesseract(gray: Image.Image, options: ParseOptions, timeout: float) -> dict[str, list[Any]]:
    import pytesseract

    try:
        data: dict[str, list[Any]] = pytesseract.image_to_data(
            gray,
            lang=options.ocr_languages,
            config=f"--psm {_PSM}",
            output_type=pytesseract.Output.DICT,
            timeout=timeout,
        )
    except pytesseract.TesseractNotFoundError as exc:
        raise PermanentJobError("OCR_FAILED", "OCR is unavailable: the tesseract binary is not installed") from exc
    except pytesseract.TesseractError as exc:
        raise PermanentJobError("OCR_FAILED", f"tesseract failed: {exc.message}".strip()) from exc
    except RuntimeError as exc:  # pytesseract's timeout
        raise PermanentJobError("OCR_FAILED", f"tesseract took longer than {timeout:g}s") from exc
    return data


def _lines(data: dict[str, list[Any]], scale: float, dx: float, dy: float) -> list[list[Word]]:
    """Tesseract's lines from its TSV data, boxes in the original image's pixels
    (the read image was scaled by `scale` and cut at `dx`, `dy`)."""
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
        top = dy + min(r[2] for r in row) / scale
        bottom = dy + max(r[4] for r in row) / scale
        lines.append(_rejoin_numbers([Word(text, dx + x0 / scale, top, dx + x1 / scale, bottom, conf)
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
