"""OCR with RapidOCR: PaddleOCR's detection and recognition models run by
onnxruntime, the optional engine (`extraction.ocr_engine = "rapidocr"`,
installed with ``pip install 'docex[rapidocr]'``).

Why a second engine: on low-resolution receipt scans tesseract's small
English model misreads about one character in ten of a shop's name and
address; these models misread about a third as many (on the 60 sample
receipts the rules provider's mean field accuracy goes from 0.58 to 0.72, the
company's from 0.63 to 0.87, the total's from 0.83 to 0.95). They cost ~220 MB
installed, ~3.5 s a receipt on one core and a peak of 0.5 to 1.4 GB per worker
process (its detector's activations grow with the image, resized to at most
2000 px a side; 1280 px halves that peak but loses 0.02 of accuracy), so
tesseract stays the default.

Runs in a worker process like tesseract; the models load once per process,
on its first scan. Each text run RapidOCR finds (a phrase without a column
gap) becomes one `Word`, boxed by its detected quadrilateral. Unlike a
tesseract subprocess it cannot be killed on its own after a timeout: a stuck
reading ends with its job's worker process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import unicodedata
from typing import TYPE_CHECKING, Any

from daemon.errors import PermanentJobError
from daemon.extraction.document import Word

if TYPE_CHECKING:
    from PIL import Image

# One inference thread per worker process: workers are already one per CPU.
_PARAMS = {
    "Global.log_level": "error",
    "EngineConfig.onnxruntime.intra_op_num_threads": 1,
    "EngineConfig.onnxruntime.inter_op_num_threads": 1,
}
_engine: Any = None
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
        try:
            from rapidocr import RapidOCR
        except ImportError as exc:
            raise PermanentJobError(
                "OCR_FAILED", "OCR is unavailable: the rapidocr engine is not installed "
                "(pip install 'docex[rapidocr]')") from exc
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


def rapidocr_lines(image: Image.Image) -> list[list[Word]]:
    """The image's text runs, one `Word` each (in its own one-word list, so
    that line grouping puts runs side by side only where they do not overlap),
    boxes in `image`'s pixels.

    Raises:
        PermanentJobError: OCR_FAILED when the engine is missing or fails.
    """
    global _engine
    engine = _load()
    try:
        output = engine(image.convert("RGB"))
    except BaseException as exc:
        # A failed run can leave onnxruntime's sessions unusable (an allocation refused under
        # extraction.max_memory made every later document of the same worker fail): the next
        # document loads the engine afresh, and the memory of this one is given back.
        _engine = None
        if isinstance(exc, MemoryError):
            raise  # PARSE_OUT_OF_MEMORY, with the setting to raise (daemon.extraction.worker)
        if not isinstance(exc, Exception):
            raise
        raise PermanentJobError("OCR_FAILED", f"rapidocr failed ({type(exc).__name__})") from exc
    if output.txts is None or output.boxes is None or output.scores is None:
        return []  # no text found
    lines: list[list[Word]] = []
    for raw, quad, score in zip(output.txts, output.boxes, output.scores, strict=True):
        text = plain_text(str(raw))
        if not text:
            continue
        xs = [float(point[0]) for point in quad]
        ys = [float(point[1]) for point in quad]
        x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
        margin = (y1 - y0) * (1 - 1 / _PADDED) / 2
        if x1 - x0 > 2 * margin + 1:
            x0, x1 = x0 + margin, x1 - margin
        lines.append([Word(text, x0, y0 + margin, x1, y1 - margin, max(0.0, min(1.0, float(score))))])
    return lines
