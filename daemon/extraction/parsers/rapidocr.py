"""OCR with RapidOCR: PaddleOCR's detection and recognition models run by
onnxruntime, the default engine (`extraction.ocr_engine = "rapidocr"`; the
models ship inside the `rapidocr` wheel, so nothing is downloaded at run time).

Why it is the default: on low-resolution receipt scans tesseract's small
English model misreads about one character in ten of a shop's name and
address; these models misread about a third as many (README "Extraction"
has the measured accuracy, CPU and memory of both engines).

Runs in a worker process; the models load once per process, on its first
scan. Each text run RapidOCR finds (a phrase without a column gap) becomes
one `Word`, boxed by its detected quadrilateral. Unlike a tesseract
subprocess it cannot be killed on its own after a timeout: a stuck reading
ends with its job's worker process.

Memory. The detector's activations for a page (shrunk to at most `MAX_SIDE`
px a side) take ~0.6 GB while it runs. What used to come on top of them:

- the page's full-size copies (PIL's RGB conversion, RapidOCR's numpy and
  BGR copies: ~0.5 GB for a 600 dpi A4 scan) lived through the detection:
  the page is shrunk here, once, exactly as RapidOCR would (`_model_input`),
  and only that goes in;
- what a reading freed stayed resident, and the worker's address space grew
  reading after reading toward ``extraction.max_memory`` (`heap`): it is
  given back after each reading, and by the worker after each document;
- every thread got a malloc arena, and OpenBLAS buffers, of its own: OCR
  workers have one arena and one BLAS thread (workers are one per CPU).

What it reads is unchanged: the same pixels reach the models.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import math
import os
import statistics
import unicodedata
from typing import TYPE_CHECKING, Any

from daemon.errors import PermanentJobError
from daemon.extraction.document import Word
from daemon.extraction.parsers import heap, stamps, trailing

if TYPE_CHECKING:
    import numpy
    from PIL import Image

# RapidOCR's own bound on the detector's input (its default): a larger page is
# shrunk so that its longer side is this many pixels, rounded to a multiple of 32.
MAX_SIDE = 2000
# An image longer than this many times its width is read in bands of at most that
# length (`rapidocr_lines`), overlapping by BAND_OVERLAP of its width: more than twice
# the height of a receipt's largest print, so that every line lies whole in one band's
# half of the overlap. At most MAX_BANDS bands (a till receipt of 2 m at 200 dpi);
# a longer strip is read padded (`_model_input`). The sample receipts are at most 3.6
# times as long as wide.
MAX_ASPECT = 4
BAND_OVERLAP = 0.5
MAX_BANDS = 8
# One inference thread per worker process: workers are already one per CPU.
# No angle classifier: it turns over each text run it judges upside down, and the
# documents docex reads are upright (the rules read a page top to bottom); it turned
# upright lines of the sample receipts over into nonsense ("SEL-LI S NO S H" for a
# shop's name), and reading without it lost no field (bench/receipts.py).
_PARAMS = {
    "Global.log_level": "error",
    "Global.max_side_len": MAX_SIDE,
    "Global.use_cls": False,
    "EngineConfig.onnxruntime.intra_op_num_threads": 1,
    "EngineConfig.onnxruntime.inter_op_num_threads": 1,
}
_engine: Any = None
# How onnxruntime reports an allocation refused (RapidOCR passes its error text on).
_REFUSED = ("std::bad_alloc", "Failed to allocate memory")
# The detector pads each text box on every side (its "unclip" step) so that the
# recogniser sees whole glyphs: its boxes are about twice as high as the text,
# and the boxes of neighbouring lines overlap, which would merge them into one
# line. Each box is shrunk back about its centre to 1/_PADDED of its height (the
# same margin off its ends); 1.6 to 2 read the sample receipts equally well.
_PADDED = 1.8


def rapidocr_version() -> str | None:
    """RapidOCR's version, or None when it (or onnxruntime) is not installed."""
    if importlib.util.find_spec("rapidocr") is None or importlib.util.find_spec("onnxruntime") is None:
        return None
    try:
        return importlib.metadata.version("rapidocr")
    except importlib.metadata.PackageNotFoundError:
        return None


def _load() -> Any:
    global _engine
    if _engine is None:
        # Before numpy, OpenCV and onnxruntime load and start their threads.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        heap.one_arena()
        try:
            from rapidocr import RapidOCR
        except ImportError as exc:
            raise PermanentJobError(
                "OCR_FAILED", "OCR is unavailable: the rapidocr engine is not installed "
                "(a dependency of docex: reinstall it)") from exc
        try:
            _engine = RapidOCR(params=_PARAMS)
        except Exception as exc:  # its models missing or damaged: it would try to download them
            raise PermanentJobError("OCR_FAILED", f"rapidocr failed to load its models ({type(exc).__name__})") from exc
        logging.getLogger("RapidOCR").setLevel(logging.ERROR)
    return _engine


def plain_text(text: str) -> str:
    """A run's text with the full-width forms the recogniser also knows (it reads Chinese
    too: "（M）", "：") written as their ASCII letters and signs (NFKC), trimmed."""
    return unicodedata.normalize("NFKC", text).strip()


def reading_scale(width: float, height: float) -> float:
    """The largest scale of a page `width` × `height` that RapidOCR reads whole, not shrunk
    first (`_model_input`): its longer side at `MAX_SIDE` px; a page more than
    `MAX_ASPECT` times as tall as wide, read in bands (`rapidocr_lines`), at
    MAX_SIDE / MAX_ASPECT px wide. A PDF page rendered for OCR larger than that would
    only be shrunk again."""
    if height > MAX_ASPECT * width:
        return MAX_SIDE / MAX_ASPECT / width
    return MAX_SIDE / max(width, height)


def rapidocr_lines(image: Image.Image) -> list[list[Word]]:
    """The image's text runs, one `Word` each (in its own one-word list, so
    that line grouping puts runs side by side only where they do not overlap),
    boxes in `image`'s pixels.

    An image more than `MAX_ASPECT` times as long as it is wide (a till receipt scanned
    whole) is read in bands across its length: shrunk whole to `MAX_SIDE` its text became
    illegible, and the detector, which enlarges a page's shorter side to 736 px, then made
    it huge (576×8,000 px came out empty after 73 s at 1.5 GB; 576×16,000 ran out of
    memory).

    Raises:
        PermanentJobError: OCR_FAILED when the engine is missing or fails.
    """
    width, height = image.size
    if height <= MAX_ASPECT * width:
        return _runs(image)
    count = min(MAX_BANDS, math.ceil((height - width * BAND_OVERLAP) / (width * (MAX_ASPECT - BAND_OVERLAP))))
    step = (height - width * BAND_OVERLAP) / count
    lines: list[list[Word]] = []
    for index in range(count):
        top, bottom = round(index * step), min(height, round((index + 1) * step + width * BAND_OVERLAP))
        # A run in the overlap of two bands is kept by the one whose half of the overlap holds its centre.
        own_top = 0 if index == 0 else top + width * BAND_OVERLAP / 2
        own_bottom = height if index == count - 1 else bottom - width * BAND_OVERLAP / 2
        for (word,) in _runs(image.crop((0, top, width, bottom))):
            if own_top <= top + (word.y0 + word.y1) / 2 < own_bottom:
                lines.append([Word(word.text, word.x0, word.y0 + top, word.x1, word.y1 + top, word.conf)])
    return lines


def _runs(image: Image.Image) -> list[list[Word]]:
    """`rapidocr_lines` of an image read whole; where red ink crosses the print, those
    lines read again from the page with the stamp lifted (`stamps`); where a line's last
    comma or stop was left out, that line read again with it (`trailing`)."""
    pixels, scale_x, scale_y = _model_input(image)
    try:
        runs = _read(pixels, scale_x, scale_y, image)
        if runs:
            runs = _restamped(runs, pixels, scale_x, scale_y, image)
            runs = _with_trailing_marks(runs, pixels, scale_x, scale_y)
    finally:
        del pixels
        heap.give_back()  # the activations' pages, before the next reading takes an OCR slot
    return [[word] for word in runs]


def _restamped(runs: list[Word], pixels: numpy.ndarray, scale_x: float, scale_y: float,
               image: Image.Image) -> list[Word]:
    """`runs` with the lines a red mark crosses read again from the page with its marks
    lifted (`stamps`)."""

    def in_pixels(word: Word) -> Word:
        return _in_input(word, scale_x, scale_y)

    ink = stamps.red_ink(pixels)
    if ink is None:
        return runs
    mark = stamps.marks(ink, statistics.median((word.y1 - word.y0) / scale_y for word in runs))
    if mark is None:
        return runs
    printed = stamps.print_ink(pixels)
    crossed = [stamps.crossed(in_pixels(word), mark, printed) for word in runs]
    if not any(crossed):
        return runs
    # Only the band from the first crossed line to the last, a line's height beyond each (a
    # line the stamp hid from the first reading lies between or beside them), is read again,
    # on a page of the same size made paper elsewhere: the detector sees its lines at the
    # same scale (it enlarges a short page), and the recogniser reads only them.
    boxes = [in_pixels(word) for word, is_crossed in zip(runs, crossed, strict=True) if is_crossed]
    margin = max(word.y1 - word.y0 for word in boxes)
    top = max(0, int(min(word.y0 for word in boxes) - margin))
    bottom = int(max(word.y1 for word in boxes) + margin) + 1
    lifted = stamps.lifted(pixels, ink)
    lifted[:top] = 255
    lifted[bottom:] = 255
    again = _read(lifted, scale_x, scale_y, image)
    del lifted
    again_crossed = [stamps.crossed(in_pixels(word), mark, printed) for word in again]
    return stamps.merged(runs, again, crossed, again_crossed)


def _with_trailing_marks(runs: list[Word], pixels: numpy.ndarray, scale_x: float, scale_y: float) -> list[Word]:
    """`runs` with the comma or stop after a line's last word that the detector left out
    (`trailing`), read again from `pixels` (RapidOCR's input) where one lies beside it."""
    again: list[int] = []
    crops = []
    for index, run in enumerate(runs):
        box = _in_input(run, scale_x, scale_y)
        # The pixels first: a blot beside a run is rare, and the look at its line walks every run.
        if trailing.mark_beside(pixels, box) and trailing.room_after(run, runs):
            x0, y0, x1, y1 = trailing.crop_box(pixels, box)
            again.append(index)
            crops.append(pixels[y0:y1, x0:x1])
    if not crops:
        return runs
    try:
        output = _load().recognize_txt(crops)
    except Exception as exc:
        if isinstance(exc, MemoryError) or any(words in str(exc) for words in _REFUSED):
            raise MemoryError from exc  # PARSE_OUT_OF_MEMORY, as for the first reading
        return runs  # a second reading that fails is only left out
    out = list(runs)
    for index, raw in zip(again, output.txts or (), strict=False):
        run = runs[index]
        mark = trailing.added_mark(run.text, plain_text(str(raw)))
        if mark is not None:
            height = run.y1 - run.y0  # the box reaches over the mark: about a third of a height
            out[index] = Word(run.text + mark, run.x0, run.y0, run.x1 + 0.3 * height, run.y1, run.conf)
    return out


def _in_input(word: Word, scale_x: float, scale_y: float) -> Word:
    """`word`'s box in RapidOCR's input (`_model_input`), from the image's pixels."""
    return Word(word.text, word.x0 / scale_x, word.y0 / scale_y, word.x1 / scale_x, word.y1 / scale_y)


def _read(pixels: numpy.ndarray, scale_x: float, scale_y: float, image: Image.Image) -> list[Word]:
    """The text runs RapidOCR finds in `pixels` (its input: `_model_input`), boxes in `image`'s pixels."""
    global _engine
    engine = _load()
    try:
        output = engine(pixels)
    except BaseException as exc:
        # A failed run can leave onnxruntime's sessions unusable (an allocation refused under
        # extraction.max_memory made every later document of the same worker fail): the next
        # document loads the engine afresh, and the memory of this one is given back.
        _engine = None
        if isinstance(exc, MemoryError):
            raise  # PARSE_OUT_OF_MEMORY, with the setting to raise (daemon.extraction.worker)
        if not isinstance(exc, Exception):
            raise
        if any(words in str(exc) for words in _REFUSED):
            raise MemoryError from exc  # onnxruntime's own words for it
        raise PermanentJobError("OCR_FAILED", f"rapidocr failed ({type(exc).__name__})") from exc
    if output.txts is None or output.boxes is None or output.scores is None:
        return []  # no text found
    runs: list[Word] = []
    for raw, quad, score in zip(output.txts, _in_image(output.boxes, scale_x, scale_y, image), output.scores,
                                strict=True):
        text = plain_text(str(raw))
        if not text:
            continue
        xs = [float(point[0]) for point in quad]
        ys = [float(point[1]) for point in quad]
        x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
        margin = (y1 - y0) * (1 - 1 / _PADDED) / 2
        if x1 - x0 > 2 * margin + 1:
            x0, x1 = x0 + margin, x1 - margin
        runs.append(Word(text, x0, y0 + margin, x1, y1 - margin, max(0.0, min(1.0, float(score)))))
    return runs


def _model_input(image: Image.Image) -> tuple[numpy.ndarray, float, float]:
    """The BGR pixels RapidOCR would make of `image` (its longer side shrunk to
    `MAX_SIDE`, rounded to multiples of 32, by OpenCV's bilinear resize; then, if
    it is still more than `MAX_ASPECT` times as long as wide, paper added along its
    shorter side), and the scale of `image`'s pixels to them; made without a
    full-size BGR copy."""
    import cv2
    import numpy as np

    if image.mode not in ("L", "RGB"):
        image = image.convert("RGB")
    pixels = np.asarray(image)
    height, width = pixels.shape[:2]
    if max(height, width) <= MAX_SIDE:
        scale_x = scale_y = 1.0
    else:
        ratio = MAX_SIDE / max(height, width)
        new_width = max(32, round(int(width * ratio) / 32) * 32)
        new_height = max(32, round(int(height * ratio) / 32) * 32)
        # Channel by channel, so grey pixels shrunk and then made BGR equal RGB ones shrunk.
        pixels = cv2.resize(pixels, (new_width, new_height))
        scale_x, scale_y = width / new_width, height / new_height
    height, width = pixels.shape[:2]
    if max(height, width) > MAX_ASPECT * min(height, width):
        # Paper added along the shorter side: the detector enlarges that side to 736 px,
        # and a strip 4 px wide and 60,000 long (a PDF page of 1×14,400 points), shrunk
        # to 32×2,000, grew to 736×46,000 px: out of memory. Strips longer than the bands
        # of `rapidocr_lines` hold, and wide ones, are read so.
        short_side = math.ceil(max(height, width) / MAX_ASPECT)
        pixels = cv2.copyMakeBorder(pixels, 0, max(0, short_side - height), 0, max(0, short_side - width),
                                    cv2.BORDER_CONSTANT, value=(255, 255, 255))
    code = cv2.COLOR_GRAY2BGR if pixels.ndim == 2 else cv2.COLOR_RGB2BGR
    return cv2.cvtColor(pixels, code), scale_x, scale_y


def _in_image(boxes: numpy.ndarray, scale_x: float, scale_y: float, image: Image.Image) -> numpy.ndarray:
    """RapidOCR's boxes, in the pixels of its input, in `image`'s (as it maps its own shrinking back)."""
    if scale_x == scale_y == 1.0:
        return boxes
    boxes = boxes.copy()
    boxes[..., 0] *= scale_x
    boxes[..., 1] *= scale_y
    boxes[..., 0] = boxes[..., 0].clip(max=image.width)
    boxes[..., 1] = boxes[..., 1].clip(max=image.height)
    return boxes
