"""Parsers: every format to pages of positioned text; corrupt files, page limits
and a missing tesseract end as the SPEC §6 errorCodes, never as a crash."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from extraction_docs import write_turned_pdf
from PIL import Image

from daemon.errors import PermanentJobError
from daemon.extraction.document import Document, Word, group_lines
from daemon.extraction.parsers import ParseOptions, parse
from daemon.jobs import filetypes

MIME = {
    "pdf": filetypes.PDF, "png": filetypes.PNG, "jpeg": filetypes.JPEG, "tiff": filetypes.TIFF,
    "webp": filetypes.WEBP, "docx": filetypes.DOCX, "xlsx": filetypes.XLSX, "csv": filetypes.CSV,
    "txt": filetypes.TXT, "html": filetypes.HTML,
}
TEXT_KINDS = ["pdf", "docx", "xlsx", "csv", "html", "txt"]
IMAGE_KINDS = ["png", "jpeg", "tiff", "webp"]
OPTIONS = ParseOptions()


def lines_of(document: Document) -> list[str]:
    return [line.text for page in document.pages for line in page.lines]


@pytest.mark.parametrize("kind", TEXT_KINDS)
def test_text_formats_keep_labels_values_and_table_cells(make_doc: Callable[..., Path], kind: str) -> None:
    document = parse(make_doc(kind), MIME[kind], OPTIONS)
    text = "\n".join(lines_of(document))
    assert document.page_count == 1
    assert "INV-2024-0042" in text
    assert "Widget large" in text
    # A table row keeps its cells apart (a column gap), in order.
    row = next(line for page in document.pages for line in page.lines if line.text.startswith("Widget large"))
    assert [w.text for w in row.words][:2] == ["Widget large", "2"]
    assert all(a.x1 <= b.x0 for a, b in zip(row.words, row.words[1:], strict=False))


def test_pdf_words_have_their_positions_on_the_page(make_doc: Callable[..., Path]) -> None:
    document = parse(make_doc("pdf"), filetypes.PDF, OPTIONS)
    page = document.pages[0]
    assert (round(page.width), round(page.height)) == (595, 842)
    label_line = next(line for line in page.lines if line.text.startswith("Invoice No.:"))
    label, value = label_line.words
    # drawn at x=50 and x=160 on a baseline 78 pt from the top (y grows downwards)
    assert label.x0 == pytest.approx(50, abs=1.5)
    assert value.x0 == pytest.approx(160, abs=1.5)
    assert label.y0 < 78 < label.y1
    assert label.y1 - label.y0 == pytest.approx(11.5, abs=2)
    assert not page.ocr


@pytest.mark.parametrize("angle", [90, 180, 270])
def test_pdf_text_drawn_turned_is_read_in_its_own_direction(tmp_path: Path, angle: int) -> None:
    path = write_turned_pdf(tmp_path / f"turned-{angle}.pdf", angle)
    page = parse(path, filetypes.PDF, OPTIONS).pages[0]
    assert [[w.text for w in line.words] for line in page.lines] == [["Invoice No.:", "T-42"], ["Total Due", "12.50"]]


def test_pdf_pages_are_all_read(make_doc: Callable[..., Path]) -> None:
    document = parse(make_doc("pdf", pages=3), filetypes.PDF, OPTIONS)
    assert document.page_count == 3
    assert [p.number for p in document.pages] == [1, 2, 3]
    assert "Page 3 of 3" in document.pages[2].text


@pytest.mark.parametrize("kind", IMAGE_KINDS)
def test_images_are_read_by_ocr(make_doc: Callable[..., Path], kind: str, ocr_engine: str) -> None:
    path = make_doc(kind)
    document = parse(path, MIME[kind], ParseOptions(ocr_engine=ocr_engine))
    page = document.pages[0]
    assert page.ocr
    assert (page.width, page.height) == Image.open(path).size
    assert "INV-2024-0042" in page.text
    assert "Widget" in page.text
    word = next(w for line in page.lines for w in line.words if "INV-2024-0042" in w.text)
    assert 0 < word.conf <= 1
    assert 0 <= word.x0 < word.x1 <= page.width and 0 <= word.y0 < word.y1 <= page.height
    # Lines come top to bottom: the invoice number is printed above the table.
    texts = lines_of(document)
    number_line = next(i for i, text in enumerate(texts) if "INV-2024-0042" in text)
    assert number_line < next(i for i, text in enumerate(texts) if "Widget" in text)


def test_pdf_page_without_a_text_layer_is_read_by_ocr(make_doc: Callable[..., Path], tmp_path: Path,
                                                      ocr_engine: str) -> None:
    scanned = tmp_path / "scanned.pdf"
    Image.open(make_doc("png")).convert("RGB").save(scanned, format="PDF", resolution=200)
    document = parse(scanned, filetypes.PDF, ParseOptions(ocr_engine=ocr_engine))
    page = document.pages[0]
    assert page.ocr
    assert "INV-2024-0042" in page.text
    # Boxes are in PDF points like a text layer's, not in rendered pixels.
    assert page.width == pytest.approx(595, abs=2)
    assert all(w.x1 <= page.width + 1 for line in page.lines for w in line.words)


def test_multi_frame_tiff_has_a_page_per_frame(make_doc: Callable[..., Path]) -> None:
    document = parse(make_doc("tiff", frames=2), filetypes.TIFF, OPTIONS)
    assert document.page_count == 2


def test_docx_page_breaks_and_xlsx_sheets_are_pages(make_doc: Callable[..., Path]) -> None:
    assert parse(make_doc("docx", page_breaks=2), filetypes.DOCX, OPTIONS).page_count == 3
    assert parse(make_doc("xlsx", sheets=3), filetypes.XLSX, OPTIONS).page_count == 3


def test_txt_form_feeds_are_pages(tmp_path: Path) -> None:
    path = tmp_path / "pages.txt"
    path.write_text("one\fTotal   12.00\f")
    document = parse(path, filetypes.TXT, OPTIONS)
    assert document.page_count == 2
    assert [w.text for w in document.pages[1].lines[0].words] == ["Total", "12.00"]


def test_right_to_left_text_with_its_marks_is_read(tmp_path: Path) -> None:
    """Persian joins with zero-width non-joiners and Hebrew sets right-to-left marks: a file
    thick with them was refused as binary data (CORRUPTED_FILE)."""
    path = tmp_path / "rtl.txt"
    path.write_text("\u200fמספר חשבונית:   INV-42\u200f\n" * 20 + "فاکتور\u200cها:   12\n" * 20, encoding="utf-8")
    document = parse(path, filetypes.TXT, OPTIONS)
    assert "INV-42" in document.text


def test_html_skips_scripts_and_styles(make_doc: Callable[..., Path]) -> None:
    text = parse(make_doc("html"), filetypes.HTML, OPTIONS).text
    assert "99.99" not in text and "margin" not in text
    assert "Total Due" in text


def test_xlsx_dates_and_numbers_come_out_as_written(make_doc: Callable[..., Path]) -> None:
    text = parse(make_doc("xlsx"), filetypes.XLSX, OPTIONS).text
    assert "2024-03-12" in text
    assert "1234.56" in text
    assert "400.0" in text or "400" in text


# --- corrupt and truncated files -------------------------------------------------

GARBAGE = bytes(range(256)) * 16


def _truncated(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("kind", ["pdf", *IMAGE_KINDS, "docx", "xlsx"])
def test_truncated_files_are_corrupted(make_doc: Callable[..., Path], kind: str) -> None:
    path = _truncated(make_doc(kind))
    with pytest.raises(PermanentJobError) as caught:
        parse(path, MIME[kind], OPTIONS)
    assert caught.value.code == "CORRUPTED_FILE"


@pytest.mark.parametrize("kind", list(MIME))
def test_garbage_bytes_are_corrupted(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"garbage.{kind}"
    # Each format's magic bytes, then noise: what a broken upload looks like.
    magic = {"pdf": b"%PDF-1.7\n", "png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff\xe0",
             "tiff": b"II*\x00", "webp": b"RIFF\x00\x00\x00\x00WEBP", "docx": b"PK\x03\x04",
             "xlsx": b"PK\x03\x04"}.get(kind, b"")
    path.write_bytes(magic + GARBAGE)
    with pytest.raises(PermanentJobError) as caught:
        parse(path, MIME[kind], OPTIONS)
    assert caught.value.code == "CORRUPTED_FILE"


@pytest.mark.parametrize("kind", ["txt", "csv", "html"])
def test_truncated_text_is_still_text(make_doc: Callable[..., Path], kind: str) -> None:
    # Text has no end marker: a cut file reads as the text before the cut.
    path = make_doc(kind)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    if kind == "csv":
        path.write_bytes(b'a,b\n1,"unterminated')
        with pytest.raises(PermanentJobError) as caught:
            parse(path, MIME[kind], OPTIONS)
        assert caught.value.code == "CORRUPTED_FILE"
    else:
        assert "INV-2024-0042" in parse(path, MIME[kind], OPTIONS).text


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_utf16_text_cut_inside_a_character_is_still_text(tmp_path: Path, cut: int) -> None:
    # As UTF-8 is: the odd byte, or the half of a surrogate pair the file ends on, is dropped.
    # Before: CORRUPTED_FILE, "truncated data".
    path = tmp_path / "notepad.txt"
    data = "\ufeffInvoice Number: INV-2024-0042\nTotal 12.50 \U0001F600".encode("utf-16-le")
    path.write_bytes(data[: len(data) - cut])
    assert parse(path, filetypes.TXT, OPTIONS).text == "Invoice Number: INV-2024-0042\nTotal 12.50"
    # A character missing inside the text is no cut: the file is damaged.
    path.write_bytes(data[:6] + b"\x00\xdc" + data[6:])
    with pytest.raises(PermanentJobError) as caught:
        parse(path, filetypes.TXT, OPTIONS)
    assert caught.value.code == "CORRUPTED_FILE"


@pytest.mark.parametrize("options", [{"lossless": True}, {"lossless": False}, {"exif": b"Exif\x00\x00II*\x00"}],
                         ids=["VP8L", "VP8", "VP8X"])
def test_a_webp_too_large_is_refused_from_its_header(tmp_path: Path, options: dict[str, Any]) -> None:
    """Pillow allocates a WEBP's decoder for its whole canvas as it opens it: a valid one of
    268 megapixels failed CORRUPTED_FILE ("could not create decoder object")."""
    from daemon.extraction.parsers.ocr import webp_size

    path = tmp_path / "picture.webp"
    Image.new("RGB", (123, 45), "white").save(path, "WEBP", **options)
    data = bytearray(path.read_bytes())
    assert webp_size(bytes(data[:30])) == (123, 45)
    if data[12:16] == b"VP8X":
        data[24:30] = (16382).to_bytes(3, "little") * 2
    elif data[12:16] == b"VP8L":
        data[21:25] = (16382 | 16382 << 14 | (int.from_bytes(data[21:25], "little") & ~0xFFFFFFF)).to_bytes(4, "little")
    else:
        data[26:30] = (16383).to_bytes(2, "little") * 2
    path.write_bytes(bytes(data))
    with pytest.raises(PermanentJobError) as caught:
        parse(path, filetypes.WEBP, OPTIONS)
    assert caught.value.code == "DOCUMENT_TOO_LARGE"
    assert "16,383×16,383 px" in caught.value.message and "extraction.max_image_pixels" in caught.value.message


def test_an_archive_that_is_neither_docx_nor_xlsx_inside_is_corrupted(tmp_path: Path) -> None:
    path = tmp_path / "other.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<not-word")
    with pytest.raises(PermanentJobError) as caught:
        parse(path, filetypes.DOCX, OPTIONS)
    assert caught.value.code == "CORRUPTED_FILE"


def test_a_pdf_with_a_broken_body_but_an_end_marker_is_corrupted(tmp_path: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\n1 0 obj <</Type /Catalog /Pages 9 0 R>> endobj\ntrailer <</Root 1 0 R>>\n%%EOF\n")
    with pytest.raises(PermanentJobError) as caught:
        parse(path, filetypes.PDF, OPTIONS)
    assert caught.value.code == "CORRUPTED_FILE"


# --- limits ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kind", "options"),
    [("pdf", {"pages": 3}), ("tiff", {"frames": 3}), ("docx", {"page_breaks": 2}), ("xlsx", {"sheets": 3})],
)
def test_more_pages_than_the_limit_is_too_many_pages(
    make_doc: Callable[..., Path], kind: str, options: dict[str, int]
) -> None:
    path = make_doc(kind, **options)
    with pytest.raises(PermanentJobError) as caught:
        parse(path, MIME[kind], ParseOptions(max_pages=2))
    assert caught.value.code == "TOO_MANY_PAGES"
    # An image's frames are counted only one past the limit: it says no total it does not know
    # (a 10,000-frame TIFF "has 501 pages").
    says = "has more than 2 pages" if kind == "tiff" else "has 3 pages, more than the limit of 2"
    assert says in caught.value.message, caught.value.message
    assert parse(path, MIME[kind], ParseOptions(max_pages=3)).page_count == 3


def test_missing_tesseract_is_ocr_failed(make_doc: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import pytesseract

    path = make_doc("png")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "/nonexistent/tesseract")
    with pytest.raises(PermanentJobError) as caught:
        parse(path, filetypes.PNG, ParseOptions(ocr_engine="tesseract"))
    assert caught.value.code == "OCR_FAILED"
    assert "not installed" in caught.value.message


def test_unsupported_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"\x00")
    with pytest.raises(PermanentJobError) as caught:
        parse(path, "application/octet-stream", OPTIONS)
    assert caught.value.code == "UNSUPPORTED_FILE"


# --- layout -----------------------------------------------------------------------

def test_words_group_into_lines_and_cells_by_geometry() -> None:
    words = [
        Word("Total", 300, 100, 325, 110),
        Word("Invoice", 50, 50, 80, 60),
        Word("No.:", 82, 51, 98, 60),
        Word("$12.00", 400, 101, 430, 111),
        Word("A-1", 160, 50, 175, 59),
    ]
    lines = group_lines(words)
    assert [[w.text for w in line.words] for line in lines] == [["Invoice No.:", "A-1"], ["Total", "$12.00"]]


@pytest.mark.parametrize("kind", ["docx", "xlsx"])
def test_office_files_parse_from_a_path_without_an_extension(make_doc: Callable[..., Path], kind: str) -> None:
    # Blobs are stored under random keys with no extension; openpyxl refuses such paths.
    made = make_doc(kind)
    blob = made.rename(made.with_name("a3f9c0"))
    assert parse(blob, MIME[kind], OPTIONS).page_count >= 1
