"""The comma or stop after a line's last word that RapidOCR's detector leaves out
(`daemon.extraction.parsers.trailing`): read again where a mark lies beside the line's
end, and only the mark taken. Pages are drawn here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from extraction_docs import render_pdf
from PIL import Image

from daemon.extraction.document import Word
from daemon.extraction.parsers import rapidocr as engine_module
from daemon.extraction.parsers import trailing

ADDRESS = ["NO. 12, JALAN BESAR 3/1,", "KAWASAN PERINDUSTRIAN BALAKONG", "43300 SERI KEMBANGAN, SELANGOR"]


def _address_page(folder: Path, *, faint_stop: bool) -> Image.Image:
    """The address in black, the second line with a faint stop a little apart after its
    last letter (a worn till ribbon): the detector boxes the letters and leaves it out."""
    from reportlab.pdfbase.pdfmetrics import stringWidth
    from reportlab.pdfgen import canvas

    pdf = folder / "address.pdf"
    page = canvas.Canvas(str(pdf), pagesize=(300, 120))
    page.setFont("Helvetica", 10)
    for number, line in enumerate(ADDRESS):
        page.drawString(20, 95 - 18 * number, line)
    if faint_stop:
        page.setFillGray(0.75)
        page.drawString(20 + stringWidth(ADDRESS[1], "Helvetica", 10) + 1, 95 - 18, ".")
    page.save()
    return Image.open(render_pdf(pdf, folder / "address.png", dpi=150)).convert("RGB")


def _texts(image: Image.Image) -> list[str]:
    return [line[0].text for line in engine_module.rapidocr_lines(image)]


def test_a_stop_the_detector_left_out_after_a_line_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = _address_page(tmp_path, faint_stop=True)
    assert _texts(page)[:3] == [ADDRESS[0], ADDRESS[1] + ".", ADDRESS[2]]

    # What the detector alone gives: the line without its stop.
    monkeypatch.setattr(engine_module, "_with_trailing_marks", lambda runs, *_: runs)
    assert _texts(page)[1] == ADDRESS[1]


def test_lines_with_paper_beside_them_are_not_read_again(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    page = _address_page(tmp_path, faint_stop=False)
    read_again: list[Word] = []
    crop_box = trailing.crop_box

    def counted(pixels: np.ndarray, run: Word) -> tuple[int, int, int, int]:
        read_again.append(run)
        return crop_box(pixels, run)

    monkeypatch.setattr(trailing, "crop_box", counted)
    assert _texts(page)[:3] == ADDRESS
    assert read_again == []
    _texts(_address_page(tmp_path, faint_stop=True))
    assert [run.text for run in read_again] == [ADDRESS[1]]


# --- the parts, on drawn pixels and runs -------------------------------------------------


def _paper(width: int = 200, height: int = 40) -> np.ndarray:
    return np.full((height, width, 3), 250, np.uint8)


RUN = Word("BALAKONG", 10, 10, 100, 30)  # 20 px high: the blank beside it is x 102-112, y 18-35


def test_a_mark_beside_a_run_is_a_dark_blot_the_size_of_a_comma() -> None:
    page = _paper()
    assert not trailing.mark_beside(page, RUN)
    page[26:31, 105:108] = 40  # a comma's blot, apart from the last letter
    assert trailing.mark_beside(page, RUN)


def test_specks_and_the_last_letters_edge_are_no_mark() -> None:
    specks = _paper()
    for x, y in ((103, 20), (106, 27), (110, 24), (108, 33)):
        specks[y, x] = 40  # a halftone background's dots, a pixel each
    assert not trailing.mark_beside(specks, RUN)

    edge = _paper()
    edge[18:35, 102:104] = 40  # the last letter's stroke, past the box the detector drew
    assert not trailing.mark_beside(edge, RUN)

    tall = _paper()
    tall[12:36, 105:108] = 40  # a stroke as tall as the line: a letter, not a comma
    assert not trailing.mark_beside(tall, RUN)


def test_a_faint_mark_on_grey_paper_is_a_mark() -> None:
    page = np.full((40, 200, 3), 200, np.uint8)  # a grey scan
    page[27:31, 105:108] = 155  # 45 darker: a worn ribbon's stop
    assert trailing.mark_beside(page, RUN)


def test_a_run_with_another_just_after_it_on_its_line_has_no_room_for_a_mark() -> None:
    label, value = Word("Total", 10, 10, 60, 30), Word("12.50", 80, 11, 120, 29)
    far = Word("RM", 300, 10, 330, 30)  # four line heights on, past the blank a mark lies in
    below = Word("Cash", 10, 40, 50, 60)
    runs = [label, value, far, below]
    assert not trailing.room_after(label, runs)
    assert trailing.room_after(value, runs)
    assert trailing.room_after(far, runs)
    assert trailing.room_after(below, runs)


def test_only_a_mark_the_second_reading_adds_is_taken() -> None:
    assert trailing.added_mark("BALAKONG", "BALAKONG,") == ","
    assert trailing.added_mark("LUMPUR", "LUMPUR.") == "."
    assert trailing.added_mark("BALAKONG", "BALAKONG") is None
    assert trailing.added_mark("SHAH ALAN,", "SHAH ALAM.") is None  # letters read otherwise: the first stands
    assert trailing.added_mark("BALAKONG", "BALAKONG'") is None  # a speck's tick, not a comma
    assert trailing.added_mark("BALAKONG", "BALAKONG.,") is None


def test_the_crop_read_again_reaches_the_blank_beside_the_run() -> None:
    x0, y0, x1, y1 = trailing.crop_box(_paper(), RUN)
    assert x0 < RUN.x0 and y0 < RUN.y0 and y1 > RUN.y1
    assert x1 >= RUN.x1 + 0.6 * (RUN.y1 - RUN.y0)
    assert trailing.crop_box(_paper(width=105), RUN)[2] == 105  # within the page
