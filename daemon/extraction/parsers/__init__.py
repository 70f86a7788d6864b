"""Parsers by mime type (one module per format); see `base` for the contract."""

from __future__ import annotations

from pathlib import Path

from daemon.errors import PermanentJobError
from daemon.extraction.document import Document
from daemon.extraction.parsers.base import ParseOptions, Parser, too_large
from daemon.jobs import filetypes


def parser_for(mime_type: str) -> Parser:
    """The parser of a SPEC §6 file type.

    Raises:
        PermanentJobError: UNSUPPORTED_FILE for any other type.
    """
    # Imported here: a worker process loads only the libraries its format needs.
    if mime_type == filetypes.PDF:
        from daemon.extraction.parsers.pdf import parse_pdf

        return parse_pdf
    if mime_type in (filetypes.PNG, filetypes.JPEG, filetypes.TIFF, filetypes.WEBP):
        from daemon.extraction.parsers.ocr import parse_image

        return parse_image
    if mime_type == filetypes.DOCX:
        from daemon.extraction.parsers.office import parse_docx

        return parse_docx
    if mime_type == filetypes.XLSX:
        from daemon.extraction.parsers.office import parse_xlsx

        return parse_xlsx
    if mime_type == filetypes.CSV:
        from daemon.extraction.parsers.text import parse_csv

        return parse_csv
    if mime_type == filetypes.TXT:
        from daemon.extraction.parsers.text import parse_txt

        return parse_txt
    if mime_type == filetypes.HTML:
        from daemon.extraction.parsers.html import parse_html

        return parse_html
    raise PermanentJobError("UNSUPPORTED_FILE", f"{mime_type} documents are not supported")


def parse(path: Path, mime_type: str, options: ParseOptions) -> Document:
    """Parse `path` as `mime_type` (synchronous: call it in a worker process).

    Raises:
        PermanentJobError: DOCUMENT_TOO_LARGE for a document of more characters than
            ``extraction.max_text_chars``, whatever its type: a 3.7 KB XLSX of ten 1 MiB
            cells held a worker for 169 s of the rules.
    """
    document = parser_for(mime_type)(path, options)
    limit = options.max_text_chars
    characters = 0
    for page in document.pages:
        for line in page.lines:
            for word in line.words:
                characters += len(word.text)
            if characters > limit:
                raise too_large(f"the document has more than {limit:,} characters", "max_text_chars", limit)
    return document


__all__ = ["ParseOptions", "Parser", "parse", "parser_for"]
