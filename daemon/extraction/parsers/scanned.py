"""A document read by OCR, with the other readings OCR made of it.

Tesseract misreads a digit or a letter here and there on a scanned receipt,
rarely the same way at two image scales. A scan is therefore read more than
once; the first reading is the document, the others ride along so that the
rules provider can read its fields in each and keep what the readings agree
on. Every reading has the same pages, in the same coordinates.

Plain, frozen and picklable like `Document` (whose consumers see only the
first reading).
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.extraction.document import Document


@dataclass(frozen=True, slots=True)
class ScannedDocument(Document):
    # Further readings of the same pages (at other scales); may be empty.
    readings: tuple[Document, ...] = ()


def readings_of(document: Document) -> tuple[Document, ...]:
    """Every reading of `document`, its own first."""
    if isinstance(document, ScannedDocument) and document.readings:
        return (Document(document.pages), *document.readings)
    return (document,)
