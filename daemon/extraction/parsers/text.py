"""Plain text and CSV: decoded, laid out on the synthetic grid.

Text keeps its own columns (runs of two or more spaces or a tab split cells),
so a fixed-width invoice reads as a table; a form feed starts a new page.
CSV rows become table lines. Bytes that are not text at all (NULs, binary
noise) are ``CORRUPTED_FILE``; text has no way to be "truncated". More than
``extraction.max_text_chars`` characters, or ``extraction.max_cells`` cells
of a CSV file, are ``DOCUMENT_TOO_LARGE`` (each cell costs about 1 KB and
0.1 ms on its way through the rules provider).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from daemon.extraction.document import Document, Line, grid_page, grid_table_lines, grid_text_line
from daemon.extraction.parsers.base import ParseOptions, check_pages, corrupted, too_large
from daemon.jobs.filetypes import in_text

# Above this share of unprintable characters, the bytes are not text.
_MAX_CONTROL = 0.05


def decode_text(raw: bytes, kind: str) -> str:
    """UTF-8 (with or without BOM), UTF-16 with BOM, else cp1252; refuses binary."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            # A NUL is no character a person sees or types, and no request may send one back.
            # A file cut inside a character is still text, as in UTF-8: its odd byte, or the
            # half of a surrogate pair it ends on, is dropped.
            text = _utf16_cut_short(raw).replace("\x00", "")
        except UnicodeDecodeError as exc:
            raise corrupted(kind, exc) from exc
    else:
        if b"\x00" in raw:
            raise corrupted(kind, "it contains binary data")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            # A file cut inside a multi-byte character is still text.
            if exc.start >= len(raw) - 3:
                text = raw[: exc.start].decode("utf-8-sig")
            else:
                text = raw.decode("cp1252", errors="replace")
    if text:
        control = len(text) - sum(map(in_text, text))
        if control > _MAX_CONTROL * len(text):
            raise corrupted(kind, "it contains binary data")
    return text


def _utf16_cut_short(raw: bytes) -> str:
    """UTF-16 with a BOM, its last character dropped if the file ends inside it."""
    try:
        return raw.decode("utf-16")
    except UnicodeDecodeError as exc:
        if exc.start < len(raw) - 4:
            raise
        return raw[: exc.start].decode("utf-16")


# The most bytes a character takes in the encodings `decode_text` reads.
_MAX_BYTES_PER_CHAR = 4


def read_text(path: Path, kind: str, options: ParseOptions) -> str:
    """The decoded text of `path`, refused past ``extraction.max_text_chars``
    (before reading when even its bytes say so)."""
    limit = options.max_text_chars
    if path.stat().st_size > _MAX_BYTES_PER_CHAR * limit:
        raise too_large(f"the {kind} has more than {limit:,} characters", "max_text_chars", limit)
    text = decode_text(path.read_bytes(), kind)
    if len(text) > limit:
        raise too_large(f"the {kind} has {len(text):,} characters", "max_text_chars", limit)
    return text


def parse_txt(path: Path, options: ParseOptions) -> Document:
    text = read_text(path, "text file", options)
    chunks = text.split("\f")
    if chunks and not chunks[-1].strip() and len(chunks) > 1:
        chunks.pop()
    check_pages(len(chunks), options)
    pages = []
    for number, chunk in enumerate(chunks, start=1):
        lines = [line for row, raw in enumerate(chunk.splitlines()) if (line := grid_text_line(row, raw))]
        pages.append(grid_page(number, lines))
    return Document(tuple(pages))


def parse_csv(path: Path, options: ParseOptions) -> Document:
    text = read_text(path, "CSV file", options)
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows: list[list[str]] = []
    cells = 0
    try:
        for row in csv.reader(io.StringIO(text), dialect, strict=True):
            cells += len(row)
            if cells > options.max_cells:
                raise too_large(f"the CSV file has more than {options.max_cells:,} cells", "max_cells",
                                options.max_cells)
            rows.append(row)
    except csv.Error as exc:
        raise corrupted("CSV file", exc) from exc
    check_pages(1, options)
    lines: list[Line] = grid_table_lines(0, [[cell.strip() for cell in row] for row in rows])
    return Document((grid_page(1, lines),))
