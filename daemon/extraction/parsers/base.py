"""The parser seam: a file on disk in, a `Document` out, in a worker process.

Parsers are plain synchronous functions (pdfium is not thread-safe and OCR is
CPU-bound, so they run in trio-parallel worker processes, never on the trio
thread). Every library error on a file's bytes is translated here into a
`PermanentJobError`:

- ``CORRUPTED_FILE``: the bytes are not a readable file of the type;
- ``TOO_MANY_PAGES``: more pages than ``jobs.max_pages``;
- ``DOCUMENT_TOO_LARGE``: over one of the size bounds of `ParseOptions`
  (cells, characters, pixels, inflated bytes), checked before the work they
  bound is done;
- ``OCR_FAILED``: the OCR engine is missing, failed or (tesseract) timed out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from daemon.config import ExtractionConfig
from daemon.errors import PermanentJobError
from daemon.extraction.document import Document


@dataclass(frozen=True, slots=True)
class ParseOptions:
    max_pages: int = 500
    # "rapidocr" or "tesseract" (`extraction.ocr_engine`).
    ocr_engine: str = ExtractionConfig.ocr_engine
    ocr_languages: str = "eng"
    # The folder of the OCR slots the daemon's parser processes share, and how many
    # readings may hold one at once (`slots`); "" reads without waiting for a slot.
    ocr_slots: str = ""
    ocr_concurrency: int = ExtractionConfig.ocr_concurrency
    # Per page (or image): tesseract is killed after this long.
    ocr_timeout_s: float = 120.0
    # The size bounds inside formats (`extraction.*`; defaults from the configuration's).
    max_render_pixels: int = ExtractionConfig.max_render_pixels
    max_image_pixels: int = ExtractionConfig.max_image_pixels
    max_cells: int = ExtractionConfig.max_cells
    max_text_chars: int = ExtractionConfig.max_text_chars
    max_part_size_bytes: int = ExtractionConfig.max_part_size_bytes
    # RLIMIT_AS of the parser process, set before each parse (`worker`).
    max_memory_bytes: int = ExtractionConfig.max_memory_bytes


class Parser(Protocol):
    def __call__(self, path: Path, options: ParseOptions) -> Document: ...


def corrupted(kind: str, exc: BaseException | str) -> PermanentJobError:
    """CORRUPTED_FILE, saying why in words fit for the job's owner: a library's message
    names the file by its path in the blob store (Pillow's "cannot identify image file
    '/var/lib/docex/blobs/…'"), and a library that trips over bytes it does not expect
    raises with Python's own words ("'_Element' object has no attribute 'overrides'")."""
    if isinstance(exc, str):
        detail = exc
    elif isinstance(exc, _LIBRARY_SLIPS):
        detail = "its structure is malformed"
    else:
        detail = " ".join(_PATH.sub("", str(exc)).split()) or type(exc).__name__
    return PermanentJobError("CORRUPTED_FILE", f"the file is not a readable {kind}: {detail}")


def refused_memory(exc: BaseException) -> bool:
    """Whether a library's error is an allocation refused under ``extraction.max_memory``,
    reported in its own words: libxml2 (lxml, under python-docx and openpyxl) fails
    with ERR_NO_MEMORY, "unknown error", which read as a damaged file. The same DOCX was
    ``CORRUPTED_FILE`` or ``PARSE_OUT_OF_MEMORY`` by where its parse ran short."""
    if isinstance(exc, MemoryError):
        return True
    from lxml import etree

    return isinstance(exc, etree.XMLSyntaxError) and exc.code == etree.ErrorTypes.ERR_NO_MEMORY


# What a library raises when bytes it reads break its own assumptions, not a format's rule.
_LIBRARY_SLIPS = (AttributeError, TypeError, LookupError, AssertionError, NameError)
# An absolute path, quoted or not: at least a folder and a name.
_PATH = re.compile(r"""(['"]?)(?<![\w.])/(?:[^\s'"/]+/)+[^\s'"]*\1""")


def check_pages(count: int, options: ParseOptions, *, counted_to: bool = False) -> None:
    """TOO_MANY_PAGES past ``jobs.max_pages``. `counted_to`: counting stopped at `count`, one
    past the limit (an image's frames are not counted to their end), so it is no total."""
    if count > options.max_pages:
        raise PermanentJobError("TOO_MANY_PAGES", (
            f"the document has more than {options.max_pages:,} pages, the limit" if counted_to
            else f"the document has {count:,} pages, more than the limit of {options.max_pages:,}"))


def too_large(what: str, setting: str, limit: int) -> PermanentJobError:
    """DOCUMENT_TOO_LARGE: `what` the document holds, over ``extraction.<setting>``."""
    return PermanentJobError(
        "DOCUMENT_TOO_LARGE",
        f"{what}, over extraction.{setting} ({limit:,}); raise it in the configuration to read this document",
    )
