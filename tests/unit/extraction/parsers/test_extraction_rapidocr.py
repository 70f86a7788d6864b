"""The optional OCR engine (`extraction.ocr_engine = "rapidocr"`): images and
scanned PDF pages read by RapidOCR, the same fields out of them, and a clear
OCR_FAILED or configuration error where it cannot run."""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from extraction_docs import INVOICE, SCHEMA
from PIL import Image

from daemon.config import ConfigError, load_config
from daemon.errors import PermanentJobError
from daemon.extraction import pipeline
from daemon.extraction.parsers import ParseOptions, parse
from daemon.extraction.parsers import rapidocr as engine_module
from daemon.extraction.pipeline import extract
from daemon.jobs import filetypes

RAPIDOCR = ParseOptions(ocr_engine="rapidocr")


def test_an_image_is_read_with_boxes_and_confidences(make_doc: Callable[..., Path]) -> None:
    path = make_doc("png")
    document = parse(path, filetypes.PNG, RAPIDOCR)
    page = document.pages[0]
    assert page.ocr
    assert "INV-2024-0042" in page.text
    assert "Widget" in page.text
    assert (page.width, page.height) == Image.open(path).size
    word = next(w for line in page.lines for w in line.words if "INV-2024-0042" in w.text)
    assert 0 < word.conf <= 1
    assert 0 <= word.x0 < word.x1 <= page.width and 0 <= word.y0 < word.y1 <= page.height
    # Lines come top to bottom: the invoice number is printed above the table.
    texts = [line.text for line in page.lines]
    number_line = next(i for i, text in enumerate(texts) if "INV-2024-0042" in text)
    assert number_line < next(i for i, text in enumerate(texts) if "Widget" in text)


def test_a_scanned_pdf_page_keeps_pdf_points(make_doc: Callable[..., Path], tmp_path: Path) -> None:
    scanned = tmp_path / "scanned.pdf"
    Image.open(make_doc("png")).convert("RGB").save(scanned, format="PDF", resolution=200)
    page = parse(scanned, filetypes.PDF, RAPIDOCR).pages[0]
    assert page.ocr
    assert "INV-2024-0042" in page.text
    assert page.width == pytest.approx(595, abs=2)
    assert all(w.x1 <= page.width + 1 for line in page.lines for w in line.words)


def test_full_width_forms_are_read_as_ascii() -> None:
    assert engine_module.plain_text(" S.H.H.MOTOR（SUNGAI RENGIT）SDN.BHD. ") == "S.H.H.MOTOR(SUNGAI RENGIT)SDN.BHD."
    assert engine_module.plain_text("Code：300-C0001 ＲＭ１２．５０") == "Code:300-C0001 RM12.50"
    assert engine_module.plain_text("Café Straße") == "Café Straße"  # letters of other scripts stay


def test_a_blank_image_has_no_text(tmp_path: Path) -> None:
    path = tmp_path / "blank.png"
    Image.new("L", (600, 400), 255).save(path)
    document = parse(path, filetypes.PNG, RAPIDOCR)
    assert document.page_count == 1
    assert document.pages[0].text == ""


async def test_the_configured_engine_extracts_the_fields(make_doc: Callable[..., Path]) -> None:
    config = load_config(environ={"DOCEX_EXTRACTION_OCR_ENGINE": "rapidocr"})
    extraction = await extract(make_doc("jpeg"), filetypes.JPEG, SCHEMA, config)
    assert extraction.result == INVOICE  # header fields and every line item, typed
    evidence = extraction.meta["fields"]["/total"]
    assert evidence["page"] == 1 and 0 < evidence["confidence"] <= 1


def test_a_missing_engine_is_ocr_failed(make_doc: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rapidocr", None)  # `import rapidocr` raises ImportError
    monkeypatch.setattr(engine_module, "_engine", None)
    with pytest.raises(PermanentJobError) as caught:
        parse(make_doc("png"), filetypes.PNG, RAPIDOCR)
    assert caught.value.code == "OCR_FAILED"
    assert "not installed" in caught.value.message and "docex[rapidocr]" in caught.value.message


def test_a_missing_engine_is_a_startup_warning(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(engine_module.importlib.util, "find_spec", lambda name: None)
    with caplog.at_level(logging.WARNING):
        assert pipeline.warn_if_ocr_missing("rapidocr") is False
    warnings = [r for r in caplog.records if getattr(r, "action", None) == "extraction.ocr_missing"]
    assert len(warnings) == 1
    assert "rapidocr" in warnings[0].getMessage() and "docex[rapidocr]" in warnings[0].getMessage()


def test_the_installed_engine_is_no_warning() -> None:
    assert pipeline.ocr_available("rapidocr") is True


def test_an_unknown_engine_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"DOCEX_EXTRACTION_OCR_ENGINE": "easyocr"})
    assert "extraction.ocr_engine" in str(caught.value) and "easyocr" in str(caught.value)


def test_tesseract_stays_the_default() -> None:
    assert load_config(environ={}).extraction.ocr_engine == "tesseract"
    assert dataclasses.replace(RAPIDOCR, ocr_engine="tesseract") == ParseOptions()


def test_an_allocation_refused_mid_run_is_out_of_memory_and_the_next_document_gets_a_fresh_engine(
    make_doc: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What onnxruntime does under extraction.max_memory, stood in for: the run's allocation fails.
    class Refusing:
        def __call__(self, image: object) -> object:
            raise MemoryError

    monkeypatch.setattr(engine_module, "_engine", Refusing())
    with pytest.raises(MemoryError):
        engine_module.rapidocr_lines(Image.new("RGB", (200, 50), "white"))
    # The broken engine is dropped: the next document of the same worker is read by a new one.
    assert "INV-2024-0042" in parse(make_doc("png"), filetypes.PNG, RAPIDOCR).pages[0].text
