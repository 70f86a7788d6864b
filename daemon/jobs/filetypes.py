"""Tell a document's type from its bytes, never from its name (SPEC §6).

`sniff` looks at the first bytes for binary formats and, for text, at
whether it decodes and how it is shaped. DOCX and XLSX are both ZIP files:
`refine_zip` tells them apart from the archive's members once the whole file
is on disk.
"""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path
from typing import BinaryIO

PDF = "application/pdf"
PNG = "image/png"
JPEG = "image/jpeg"
TIFF = "image/tiff"
WEBP = "image/webp"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
CSV = "text/csv"
TXT = "text/plain"
HTML = "text/html"
ZIP = "application/zip"  # provisional: DOCX or XLSX, decided by refine_zip

SUPPORTED = (PDF, PNG, JPEG, TIFF, WEBP, DOCX, XLSX, CSV, TXT, HTML)
# How many leading bytes `sniff` wants.
SNIFF_BYTES = 8192


def sniff(head: bytes) -> str | None:
    """The type of a file starting with `head`, ZIP for Office files, or None if unsupported."""
    if head.startswith(b"%PDF-"):
        return PDF
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return TIFF
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    if head.startswith(b"PK\x03\x04"):
        return ZIP
    return _sniff_text(head)


def in_text(ch: str) -> bool:
    """Whether text holds `ch`: a printable character, a line or page break, or a format
    character (a right-to-left mark, a zero-width joiner or non-joiner, a soft hyphen), which
    Persian, Arabic and Hebrew text holds as a matter of course (it was refused as binary)."""
    return ch.isprintable() or ch in "\r\n\t\f" or unicodedata.category(ch) == "Cf"


def _sniff_text(head: bytes) -> str | None:
    if not head:
        return None
    text = _decode(head)
    if text is None:
        return None
    printable = sum(map(in_text, text))
    if printable < 0.95 * len(text):
        return None
    start = text.lstrip("\ufeff \t\r\n").lower()
    if start.startswith(("<!doctype html", "<html", "<head", "<body")) or (
        start.startswith("<") and "<html" in start[:1024]
    ):
        return HTML
    return CSV if _looks_like_csv(text) else TXT


def _decode(head: bytes) -> str | None:
    """The head as text the parsers' `decode_text` would read: UTF-16 with a BOM,
    else (without NUL bytes, which text in any 8-bit encoding has not) UTF-8 or
    cp1252. The head may end inside a character: a broken tail is ignored."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        whole = head[: len(head) // 2 * 2]
        try:
            return whole.decode("utf-16")
        except UnicodeDecodeError as exc:
            if exc.start >= len(whole) - 2:  # cut between the halves of a surrogate pair
                return whole[: exc.start].decode("utf-16")
            return None
    if b"\x00" in head:
        return None
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 3:
            return head[: exc.start].decode("utf-8")
    try:
        return head.decode("cp1252")
    except UnicodeDecodeError:
        return None


# The delimiters of a CSV file.
_DELIMITERS = (",", ";", "\t", "|")


def _looks_like_csv(text: str) -> bool:
    """Whether the first lines of `text` are rows of one width, of two fields or more,
    for one of `_DELIMITERS` (fields in double quotes may hold it, as the CSV parser reads them).

    One pass of the C csv reader per delimiter, not csv.Sniffer: its quote patterns
    scan to the end of the sample from every delimiter followed by a quote, and
    8 KiB of `, "x` took it 1.4 s, on the event loop, for each file of an upload.
    """
    all_lines = text.splitlines()
    lines = [line for line in all_lines[:20] if line.strip()]
    if len(lines) < 2:
        return False
    rows = lines[:-1] if len(lines) > 2 else lines
    # A last line of another width is prose after a table ("Dear customer,\nthank you,
    # we received it.\nBest regards") unless the head ends inside it and cut it short.
    # Among ten lines or more, or after quoted fields, it may differ (as csv.Sniffer let it).
    last = lines[-1] if 2 < len(lines) < 10 and '"' not in text else None
    last_cut = len(all_lines) <= 20 and not text.endswith(("\n", "\r"))
    for delimiter in _DELIMITERS:
        widths = {len(row) for row in csv.reader(rows, delimiter=delimiter)}
        if len(widths) != 1 or (width := widths.pop()) < 2:
            continue
        if last is None:
            return True
        last_width = len(next(csv.reader([last], delimiter=delimiter), []))
        if last_width == width or (last_cut and last_width < width):
            return True
    return False


# A DOCX or XLSX has tens of parts, a large one a few thousand. The type is told here, in
# the daemon's own process, from the archive's central directory read as bytes, never
# through zipfile: reading the directory of an archive of 480,000 entries took 1.4 GB, and
# zipfile reads every entry whatever the end record claims (eight 50 MB uploads claiming 2
# entries and holding a million took the daemon to 2.8 GB). An archive whose directory is
# larger, or that claims more entries, is told by its first parts, as a truncated one is,
# and its parser (in a worker process, under extraction's limits) decides.
MAX_ZIP_ENTRIES = 20_000
MAX_DIRECTORY_BYTES = 4 * 1024 * 1024
# The end-of-central-directory record: its signature, and where it may lie (22 bytes, after
# a comment of at most 65,535); a central directory entry's signature and fixed size.
_END_OF_DIRECTORY = b"PK\x05\x06"
_END_SEARCH = 22 + 65_535
_DIRECTORY_ENTRY = b"PK\x01\x02"
_ENTRY_BYTES = 46
# The parts that tell a document's type.
_TELLING_PARTS = frozenset((b"[Content_Types].xml", b"word/document.xml", b"xl/workbook.xml"))


def _telling_parts(source: Path | BinaryIO) -> set[bytes] | None:
    """The parts of `_TELLING_PARTS` a ZIP's central directory names; None when it has no
    directory that can be read in bounded memory (none, ZIP64, over MAX_ZIP_ENTRIES entries
    or MAX_DIRECTORY_BYTES, or not where its end record says)."""
    handle = source.open("rb") if isinstance(source, Path) else source
    try:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - _END_SEARCH))
        tail = handle.read()
        at = tail.rfind(_END_OF_DIRECTORY)
        if at < 0 or at + 22 > len(tail):
            return None
        total = int.from_bytes(tail[at + 10 : at + 12], "little")
        length = int.from_bytes(tail[at + 12 : at + 16], "little")
        offset = int.from_bytes(tail[at + 16 : at + 20], "little")
        if total > MAX_ZIP_ENTRIES or length > MAX_DIRECTORY_BYTES:  # ZIP64 (0xFFFF...) among them
            return None
        handle.seek(offset)
        directory = handle.read(length)
    finally:
        if isinstance(source, Path):
            handle.close()
        else:
            handle.seek(0)
    found: set[bytes] = set()
    position = 0
    for _ in range(total):
        if directory[position : position + 4] != _DIRECTORY_ENTRY or position + _ENTRY_BYTES > len(directory):
            return None
        name_length, extra_length, comment_length = (
            int.from_bytes(directory[position + i : position + i + 2], "little") for i in (28, 30, 32))
        name = directory[position + _ENTRY_BYTES : position + _ENTRY_BYTES + name_length]
        if name in _TELLING_PARTS:
            found.add(name)
        position += _ENTRY_BYTES + name_length + extra_length + comment_length
    return found


def refine_zip(path: Path | BinaryIO, head: bytes) -> str | None:
    """DOCX or XLSX from a ZIP's members (`path`, or a file open on it); None for any other archive.

    A truncated archive has no central directory; its first local headers (in
    `head`) still name the parts, so it is accepted as what it claims to be and
    fails later as CORRUPTED_FILE, as a corrupt PDF does.
    """
    try:
        parts = _telling_parts(path)
    except OSError:
        parts = None
    if parts is None:
        if b"word/" in head:
            return DOCX
        if b"xl/" in head:
            return XLSX
        return None
    if b"[Content_Types].xml" not in parts:
        return None
    if b"word/document.xml" in parts:
        return DOCX
    if b"xl/workbook.xml" in parts:
        return XLSX
    return None
