"""daemon.jobs.filetypes: a document's type from its bytes, never its name (SPEC §6)."""

from __future__ import annotations

import io
import random
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from daemon.jobs import filetypes
from daemon.jobs.filetypes import SNIFF_BYTES, refine_zip, sniff


def _image(fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4), "white").save(out, format=fmt)
    return out.getvalue()


def _docx() -> bytes:
    import docx

    document = docx.Document()
    for i in range(40):
        document.add_paragraph(f"Invoice Number: INV-{i} — line {i} of a document long enough to matter")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _xlsx() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    for i in range(30):
        book.active.append(["Invoice Number", f"INV-{i}", i * 1.5])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def _write(tmp_path: Path, data: bytes, name: str = "upload") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- binary formats ------------------------------------------------------------------

@pytest.mark.parametrize(("head", "expected"), [
    (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", filetypes.PDF),
    (b"%PDF-2.0\n", filetypes.PDF),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", filetypes.PNG),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", filetypes.JPEG),
    (b"\xff\xd8\xff\xe1\x00\x18Exif\x00\x00", filetypes.JPEG),
    (b"II*\x00\x08\x00\x00\x00", filetypes.TIFF),
    (b"MM\x00*\x00\x00\x00\x08", filetypes.TIFF),
    (b"RIFF\x24\x00\x00\x00WEBPVP8 ", filetypes.WEBP),
    (b"PK\x03\x04\x14\x00\x06\x00", filetypes.ZIP),
], ids=["pdf", "pdf2", "png", "jfif", "exif", "tiff-le", "tiff-be", "webp", "zip"])
def test_magic_numbers(head: bytes, expected: str) -> None:
    assert sniff(head) == expected


@pytest.mark.parametrize(("fmt", "expected"), [
    ("PNG", filetypes.PNG), ("JPEG", filetypes.JPEG), ("TIFF", filetypes.TIFF), ("WEBP", filetypes.WEBP),
])
def test_real_images(fmt: str, expected: str) -> None:
    assert sniff(_image(fmt)[:SNIFF_BYTES]) == expected


def test_a_riff_that_is_not_webp_is_not_an_image() -> None:
    assert sniff(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(20)) is None


def test_every_supported_type_is_listed() -> None:
    assert set(filetypes.SUPPORTED) == {
        filetypes.PDF, filetypes.PNG, filetypes.JPEG, filetypes.TIFF, filetypes.WEBP, filetypes.DOCX,
        filetypes.XLSX, filetypes.CSV, filetypes.TXT, filetypes.HTML,
    }
    assert filetypes.ZIP not in filetypes.SUPPORTED


# --- Office files (ZIP) -----------------------------------------------------------------

def test_a_real_docx_and_xlsx(tmp_path: Path) -> None:
    for data, expected in ((_docx(), filetypes.DOCX), (_xlsx(), filetypes.XLSX)):
        head = data[:SNIFF_BYTES]
        assert sniff(head) == filetypes.ZIP
        assert refine_zip(_write(tmp_path, data, expected.rsplit(".", 1)[-1]), head) == expected


def test_minimal_office_zips(tmp_path: Path) -> None:
    docx = _zip({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w:document/>"})
    xlsx = _zip({"[Content_Types].xml": b"<Types/>", "xl/workbook.xml": b"<workbook/>"})
    assert refine_zip(_write(tmp_path, docx, "a"), docx[:SNIFF_BYTES]) == filetypes.DOCX
    assert refine_zip(_write(tmp_path, xlsx, "b"), xlsx[:SNIFF_BYTES]) == filetypes.XLSX


@pytest.mark.parametrize("members", [
    {"notes/readme.txt": b"just a zip"},
    {"word/document.xml": b"<w:document/>"},  # no [Content_Types].xml: not an OOXML package
    {"[Content_Types].xml": b"<Types/>", "ppt/presentation.xml": b"<p/>"},  # PPTX: not supported
    {"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": b"<office/>"},  # ODT
], ids=["plain", "no-content-types", "pptx", "odt"])
def test_other_archives_are_unsupported(tmp_path: Path, members: dict[str, bytes]) -> None:
    data = _zip(members)
    assert sniff(data[:SNIFF_BYTES]) == filetypes.ZIP
    assert refine_zip(_write(tmp_path, data), data[:SNIFF_BYTES]) is None


def test_a_truncated_docx_is_still_a_docx(tmp_path: Path) -> None:
    """It fails later as CORRUPTED_FILE, like a corrupt PDF, rather than as an unsupported type."""
    data = _docx()[:2048]
    assert sniff(data) == filetypes.ZIP
    assert refine_zip(_write(tmp_path, data), data) == filetypes.DOCX


def test_a_truncated_xlsx_is_still_an_xlsx(tmp_path: Path) -> None:
    data = _xlsx()[:2048]
    assert refine_zip(_write(tmp_path, data), data) == filetypes.XLSX


def test_a_truncated_unknown_zip_is_unsupported(tmp_path: Path) -> None:
    data = _zip({f"photos/img-{i}.bin": random.Random(i).randbytes(2000) for i in range(4)})[:2048]
    assert refine_zip(_write(tmp_path, data), data) is None


def _peak_bytes(fn: Any, *args: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        return fn(*args), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_archive_of_more_entries_than_a_document_has_is_told_by_its_first_parts(tmp_path: Path) -> None:
    """Its directory is not read in the daemon's process (480,000 entries took 1.4 GB there):
    the first parts say what it claims to be, and its parser, under extraction's limits, decides."""
    members = {"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w:document/>",
               **{f"word/media/{i}.bin": b"" for i in range(filetypes.MAX_ZIP_ENTRIES)}}
    data = _zip(members)
    other = _zip({"notes/readme.txt": b"a zip", **{f"n/{i}": b"" for i in range(filetypes.MAX_ZIP_ENTRIES)}})
    small = _zip({"[Content_Types].xml": b"<Types/>", "xl/workbook.xml": b"<workbook/>"})
    assert refine_zip(_write(tmp_path, data, "docx"), data[:SNIFF_BYTES]) == filetypes.DOCX
    assert refine_zip(_write(tmp_path, other, "zip"), other[:SNIFF_BYTES]) is None
    assert refine_zip(_write(tmp_path, small, "xlsx"), small[:SNIFF_BYTES]) == filetypes.XLSX


def _lying_zip(entries: int) -> bytes:
    """A DOCX whose end record claims its 2 real parts while its directory holds `entries` more."""
    local, directory = b"", b""
    for name, body in ((b"[Content_Types].xml", b"<Types/>"), (b"word/document.xml", b"<w:document/>")):
        crc = zlib.crc32(body)
        directory += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, len(body), len(body),
                                 len(name), 0, 0, 0, 0, 0, len(local)) + name
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(body), len(body), len(name),
                             0) + name + body
    filler = b"".join(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0,
                                  0, 0) + b"%06x" % i for i in range(entries))
    directory += filler
    return local + directory + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 2, 2, len(directory), len(local), 0)


def test_an_archive_whose_end_record_hides_its_entries_is_told_in_bounded_memory(tmp_path: Path) -> None:
    """zipfile reads every entry of the directory whatever the end record claims: eight 50 MB
    uploads claiming 2 entries and holding a million took the daemon to 2.8 GB."""
    data = _lying_zip(300_000)
    path = _write(tmp_path, data, "docx")
    told, peak = _peak_bytes(refine_zip, path, data[:SNIFF_BYTES])
    assert told == filetypes.DOCX
    assert peak < 1024 * 1024, peak
    # The same parts with an honest directory: told from it.
    honest = _lying_zip(0)
    assert refine_zip(_write(tmp_path, honest, "small.docx"), honest[:SNIFF_BYTES]) == filetypes.DOCX


def test_a_missing_file_is_not_a_crash(tmp_path: Path) -> None:
    assert refine_zip(tmp_path / "gone.zip", b"PK\x03\x04") is None


# --- text --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "Invoice Number: INV-42\nTotal: 12.50\n",
    "just one line without a newline",
    "Dear customer,\nthank you, we received your order.\nBest regards\n",
    "\ufeffInvoice Number: INV-42\r\nTotal: 12.50\r\n",
    "Größe: 12 €\nStraße: Hauptstraße 1\n日本語のテキスト\n",
    # Persian with zero-width non-joiners, Hebrew with right-to-left marks: refused as binary.
    "فاکتور\u200cها\u200c: ۱۲\u200cهزار\n\u200fמספר חשבונית: 42\u200f\nסה\"כ: 12.50\u200f\n" * 3,
], ids=["labels", "one-line", "prose-with-commas", "bom-crlf", "utf8", "rtl-marks"])
def test_plain_text(text: str) -> None:
    assert sniff(text.encode("utf-8")) == filetypes.TXT


@pytest.mark.parametrize("text", [
    "invoice_number,total,currency\nINV-42,12.50,EUR\nINV-43,7.00,EUR\n",
    "invoice_number;total\nINV-42;12,50\nINV-43;7,00\n",
    "invoice_number\ttotal\nINV-42\t12.50\nINV-43\t7.00\n",
    '"name","note"\n"Alice","says ""hi"", twice"\n"Bob","ok"\n',
    "a,b\n1,2\n",
], ids=["comma", "semicolon", "tab", "quoted", "two-lines"])
def test_csv(text: str) -> None:
    assert sniff(text.encode("utf-8")) == filetypes.CSV


@pytest.mark.parametrize("text", [
    "<!DOCTYPE html>\n<html><body>x</body></html>",
    "<!doctype html><title>x</title>",
    "<html lang='en'><head></head><body></body></html>",
    "\ufeff  \n<!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 4.01//EN\">\n<html></html>",
    "<head><meta charset='utf-8'></head>",
    "<!-- generated -->\n<html><body>x</body></html>",
    "<?xml version='1.0'?>\n<html xmlns='http://www.w3.org/1999/xhtml'><body/></html>",
], ids=["doctype", "lower", "html", "bom-space-legacy", "head", "comment-first", "xhtml"])
def test_html(text: str) -> None:
    assert sniff(text.encode("utf-8")) == filetypes.HTML


def test_text_that_mentions_html_is_not_html() -> None:
    assert sniff(b"Please send the invoice as <html> or PDF.\nThanks\n") == filetypes.TXT


def test_utf8_cut_inside_a_multibyte_character_is_still_text() -> None:
    for char in ("é", "€", "𝄞"):  # 2, 3 and 4 bytes
        data = ("Total: 12.50 " + char + "\n").encode("utf-8") * 2000
        for cut in range(1, len(char.encode("utf-8"))):
            # The head ends `cut` bytes into the character.
            end = data.index(char.encode("utf-8"), SNIFF_BYTES - 40) + cut
            assert sniff(data[:end]) == filetypes.TXT, (char, cut)
    # ...as the upload path cuts it: the first SNIFF_BYTES of a longer file.
    data = "Straße Größe Übermaß 12 €\n".encode() * 1000
    assert sniff(data[:SNIFF_BYTES]) == filetypes.TXT


def test_cp1252_text() -> None:
    text = "Café Müller – Rechnung Nr. 42\nSumme: 12,50 €\n“Zahlbar” sofort\n"
    assert sniff(text.encode("cp1252")) == filetypes.TXT
    assert sniff("naïve, café, crème\nbrûlée, déjà, vu\nà, la, carte\n".encode("cp1252")) == filetypes.CSV


# --- not supported -----------------------------------------------------------------------

def test_empty_is_unsupported() -> None:
    assert sniff(b"") is None


@pytest.mark.parametrize("data", [
    b"Invoice Number: INV-42\x00\nTotal: 12.50\n",
    "Invoice Number: INV-42\n".encode("utf-16-le"),
    b"\x00" * 100,
], ids=["one-nul", "utf16-without-bom", "zeros"])
def test_text_with_nul_bytes_is_unsupported(data: bytes) -> None:
    assert sniff(data) is None


@pytest.mark.parametrize("seed", range(5))
def test_random_binary_is_unsupported(seed: int) -> None:
    data = random.Random(seed).randbytes(4096)
    assert sniff(data) is None
    assert sniff(data.replace(b"\x00", b"\x01")) is None  # even without NULs


@pytest.mark.parametrize("head", [
    b"\x7fELF\x02\x01\x01\x00" + bytes(56),  # an executable
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00",  # GIF: not a supported image
    b"\x1f\x8b\x08\x00\x00\x00\x00\x00",  # gzip
    b"BM6\x00\x00\x00\x00\x00\x00\x006\x00\x00\x00",  # BMP
    b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(24),  # legacy .doc/.xls
    b"\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f" * 20,  # control characters
], ids=["elf", "gif", "gzip", "bmp", "ole2", "controls"])
def test_other_binary_formats_are_unsupported(head: bytes) -> None:
    assert sniff(head) is None
