"""Red marks over the print (`daemon.extraction.parsers.stamps`): a "PAID" stamp or a
pen's stroke across a receipt's header is lifted and the lines it crosses read again,
while a header printed in red is read once, as printed. Pages are drawn here: black
print, and a stamp laid over it as ink is (multiplied, so print under it stays dark)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from extraction_docs import render_pdf
from PIL import Image, ImageChops

from daemon.extraction.document import Word
from daemon.extraction.parsers import ParseOptions, parse, stamps
from daemon.extraction.parsers import rapidocr as engine_module
from daemon.jobs import filetypes

RAPIDOCR = ParseOptions(ocr_engine="rapidocr")
HEADER = ["SRI MURNI TRADING SDN BHD", "NO. 12, JALAN BESAR 3/1", "TAMAN SEJATI INDAH",
          "45600 BESTARI JAYA, SELANGOR", "TEL: 03-3279 1851"]
STAMP_RED = (0.9, 0.15, 0.2)


def _layer(folder: Path, name: str, draw: Callable[..., None], colour: tuple[float, float, float]) -> Image.Image:
    from reportlab.pdfgen import canvas

    pdf = folder / f"{name}.pdf"
    page = canvas.Canvas(str(pdf), pagesize=(300, 220))
    page.setFillColorRGB(*colour)
    page.setStrokeColorRGB(*colour)
    draw(page)
    page.save()
    return Image.open(render_pdf(pdf, folder / f"{name}.png", dpi=150)).convert("RGB")


def _header(page: object) -> None:
    page.setFont("Courier", 11)  # type: ignore[attr-defined]
    for number, line in enumerate(HEADER):
        page.drawCentredString(150, 190 - 18 * number, line)  # type: ignore[attr-defined]


def _stamp(page: object) -> None:
    page.setLineWidth(2.5)  # type: ignore[attr-defined]
    page.ellipse(60, 70, 260, 200)  # type: ignore[attr-defined]
    page.line(40, 100, 280, 180)  # type: ignore[attr-defined]
    page.setFont("Helvetica-Bold", 34)  # type: ignore[attr-defined]
    page.drawString(85, 120, "PAID")  # type: ignore[attr-defined]


def _lines(path: Path) -> list[str]:
    return parse(path, filetypes.PNG, RAPIDOCR).pages[0].text.splitlines()


@pytest.fixture
def count_readings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times RapidOCR read a page, one entry per reading."""
    calls: list[int] = []
    read = engine_module._read

    def counted(*args: object) -> list[Word]:
        calls.append(1)
        return read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "_read", counted)
    return calls


def test_a_page_a_red_stamp_crosses_reads_as_without_it(tmp_path: Path, count_readings: list[int]) -> None:
    printed = _layer(tmp_path, "print", _header, (0, 0, 0))
    stamp = _layer(tmp_path, "stamp", _stamp, STAMP_RED)
    clean, stamped = tmp_path / "clean.png", tmp_path / "stamped.png"
    printed.save(clean)
    ImageChops.multiply(printed, stamp).save(stamped)

    as_printed = _lines(clean)
    assert as_printed[:4] == HEADER[:4]
    assert count_readings == [1]  # a page without red ink is read once
    # Read once, the stamp cut lines into pieces ("5600", "ES", "JAYA,") and hid "NO."
    assert _lines(stamped) == as_printed
    assert len(count_readings) == 3


def test_a_scanned_pdf_page_a_red_stamp_crosses_reads_as_without_it(tmp_path: Path) -> None:
    printed = _layer(tmp_path, "print", _header, (0, 0, 0))
    stamp = _layer(tmp_path, "stamp", _stamp, STAMP_RED)
    clean, stamped = tmp_path / "clean.pdf", tmp_path / "stamped.pdf"
    printed.save(clean, format="PDF", resolution=150)
    ImageChops.multiply(printed, stamp).save(stamped, format="PDF", resolution=150)

    def lines(path: Path) -> list[str]:
        """The page's lines without their spaces: the scan inside a PDF is a JPEG, and the
        recogniser's spacing of this monospaced print varies with its artefacts."""
        page = parse(path, filetypes.PDF, RAPIDOCR).pages[0]
        assert page.ocr
        return ["".join(line.split()) for line in page.text.splitlines()]

    as_printed = lines(clean)
    assert as_printed[:4] == ["".join(line.split()) for line in HEADER[:4]]
    # Rendered in colour for RapidOCR: read once, the stamp cut "45600" to "5600" and
    # hid the telephone's label and area code.
    assert lines(stamped) == as_printed


def test_a_header_printed_in_red_is_read_once_as_printed(tmp_path: Path, count_readings: list[int]) -> None:
    path = tmp_path / "red.png"
    _layer(tmp_path, "red", _header, STAMP_RED).save(path)
    assert _lines(path)[:4] == HEADER[:4]
    assert count_readings == [1]  # its letters are no taller than its lines: no mark to lift


def test_a_stamp_on_paper_alone_is_not_read_again(tmp_path: Path, count_readings: list[int]) -> None:
    printed = _layer(tmp_path, "print", _header, (0, 0, 0))
    stamp = _layer(tmp_path, "stamp", _stamp, STAMP_RED)
    # The stamp moved below the print: it crosses no line.
    page = Image.new("RGB", (printed.width, printed.height * 2), "white")
    page.paste(printed, (0, 0))
    page.paste(stamp, (0, printed.height))
    path = tmp_path / "apart.png"
    page.save(path)
    assert _lines(path)[:4] == HEADER[:4]
    assert count_readings == [1]


# --- the parts, on drawn masks and runs ---------------------------------------------------


def test_red_ink_is_where_red_stands_out_of_the_other_channels() -> None:
    bgr = np.full((4, 4, 3), 255, np.uint8)
    bgr[0, 0] = (40, 30, 220)  # a stamp's red
    bgr[1, 1] = (160, 80, 120)  # purple print: red does not stand out
    bgr[2, 2] = (30, 30, 30)  # black
    ink = stamps.red_ink(bgr)
    assert ink is not None and ink.sum() == 1 and ink[0, 0]
    assert stamps.red_ink(np.full((4, 4, 3), 255, np.uint8)) is None
    assert stamps.red_ink(np.zeros((4, 4), np.uint8)) is None  # grey: no colour at all


def test_marks_are_red_strokes_taller_than_a_line() -> None:
    ink = np.zeros((100, 100), bool)
    ink[10:20, 10:18] = True  # a letter, as tall as a line of 12 px
    ink[30:90, 50:53] = True  # a stroke five lines tall
    mark = stamps.marks(ink, line_height=12)
    assert mark is not None
    assert mark[30:90, 50:53].all() and not mark[10:20, 10:18].any()
    assert stamps.marks(ink[:25], line_height=12) is None


def test_a_line_is_crossed_where_a_mark_and_print_share_its_box() -> None:
    mark = np.zeros((40, 100), bool)
    printed = np.zeros((40, 100), bool)
    printed[10:20, 0:100:3] = True  # letters' strokes, a third of the box
    mark[0:40, 40:43] = True  # a stroke across the line
    line = Word("LINE", 0, 10, 99, 19)
    assert stamps.crossed(line, mark, printed)
    assert not stamps.crossed(line, np.zeros_like(mark), printed)
    assert not stamps.crossed(line, mark, np.zeros_like(printed))  # a mark on paper


def _run(text: str, x0: float, x1: float, y0: float = 0, conf: float = 0.95) -> Word:
    return Word(text, x0, y0, x1, y0 + 10, conf)


def test_a_crossed_line_is_taken_whole_from_the_second_reading() -> None:
    first = [_run("5600", 0, 40), _run("ES", 50, 70), _run("SELANGOR", 80, 160), _run("NEXT LINE", 0, 90, y0=30)]
    second = [_run("45600 BESTARI SELANGOR", 0, 160), _run("NEXT LINE", 0, 90, y0=30)]
    merged = stamps.merged(first, second, [False, True, False, False], [True, False])
    assert [w.text for w in merged] == ["45600 BESTARI SELANGOR", "NEXT LINE"]
    assert merged[1] is first[3]  # a line no mark crosses keeps its first reading


def test_a_crossed_line_keeps_its_first_reading_where_that_is_clearly_surer() -> None:
    first = [_run("TAMAN SEJATI", 0, 100, conf=0.99)]
    second = [_run("TAMAN SC,IATI", 0, 100, conf=0.86)]
    assert stamps.merged(first, second, [True], [True]) == first
    close = [_run("TAMAN SEJATL", 0, 100, conf=0.96)]
    assert stamps.merged(first, close, [True], [True]) == close


def test_a_line_only_the_second_reading_found_is_kept_where_a_mark_crosses_it() -> None:
    first = [_run("TAMAN", 0, 60)]
    second = [_run("TAMAN", 0, 60), _run("LOT 2811, JALAN ANGSA", 0, 160, y0=20), _run("stray", 0, 40, y0=50)]
    merged = stamps.merged(first, second, [False], [False, True, False])
    assert [w.text for w in merged] == ["TAMAN", "LOT 2811, JALAN ANGSA"]
