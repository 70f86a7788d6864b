"""The default OCR engine (`extraction.ocr_engine = "rapidocr"`): what it reads
of a page (tests/unit/extraction/parsers/test_extraction_parsers.py reads
images and scanned pages with both engines), the memory a reading leaves
behind, and a clear OCR_FAILED or configuration error where it cannot run."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio_parallel
from extraction_docs import INVOICE, SCHEMA, render_pdf
from PIL import Image

from daemon.config import ConfigError, load_config
from daemon.errors import PermanentJobError
from daemon.extraction import pipeline
from daemon.extraction.parsers import ParseOptions, parse
from daemon.extraction.parsers import rapidocr as engine_module
from daemon.extraction.pipeline import extract
from daemon.jobs import filetypes

RAPIDOCR = ParseOptions(ocr_engine="rapidocr")


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


def test_a_line_is_read_as_printed_even_where_it_reads_as_text_upside_down(tmp_path: Path) -> None:
    from reportlab.pdfgen import canvas

    pdf = tmp_path / "upright.pdf"
    page = canvas.Canvas(str(pdf), pagesize=(300, 200))
    page.setFont("Helvetica", 14)
    page.drawString(20, 150, "pdq bud")  # upside down: "pnq bpd"
    page.drawString(20, 100, "SOS NOON")
    page.save()
    document = parse(render_pdf(pdf, tmp_path / "upright.png"), filetypes.PNG, RAPIDOCR)
    assert document.pages[0].text.splitlines() == ["pdq bud", "SOS NOON"]


async def test_the_default_engine_extracts_every_field(make_doc: Callable[..., Path]) -> None:
    config = load_config(environ={})
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
    assert "not installed" in caught.value.message and "reinstall" in caught.value.message


def test_a_missing_engine_is_a_startup_warning(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(engine_module.importlib.util, "find_spec", lambda name: None)
    with caplog.at_level(logging.WARNING):
        assert pipeline.warn_if_ocr_missing("rapidocr") is False
    warnings = [r for r in caplog.records if getattr(r, "action", None) == "extraction.ocr_missing"]
    assert len(warnings) == 1
    assert "rapidocr" in warnings[0].getMessage() and "reinstall docex" in warnings[0].getMessage()


def test_the_installed_engine_is_no_warning() -> None:
    assert pipeline.ocr_available("rapidocr") is True


def test_an_unknown_engine_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"DOCEX_EXTRACTION_OCR_ENGINE": "easyocr"})
    assert "extraction.ocr_engine" in str(caught.value) and "easyocr" in str(caught.value)


def test_rapidocr_is_the_default_and_tesseract_the_option() -> None:
    assert load_config(environ={}).extraction.ocr_engine == "rapidocr"
    assert ParseOptions().ocr_engine == "rapidocr"
    assert load_config(environ={"DOCEX_EXTRACTION_OCR_ENGINE": "tesseract"}).extraction.ocr_engine == "tesseract"


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


async def test_a_page_past_the_memory_limit_is_out_of_memory_and_the_worker_reads_the_next(
    make_doc: Callable[..., Path]
) -> None:
    # A 600 dpi A4 page needs ~1.4 GiB of address space to read: under 900 MiB it is refused,
    # by numpy or by onnxruntime (which says std::bad_alloc), and either way the job is told so.
    base = load_config(environ={})
    config = dataclasses.replace(base, extraction=dataclasses.replace(base.extraction,
                                                                      max_memory_bytes=900 * 1024**2))
    async with trio_parallel.cache_scope():
        with pytest.raises(PermanentJobError) as caught:
            await extract(make_doc("png", dpi=600), filetypes.PNG, SCHEMA, config)
        assert caught.value.code == "PARSE_OUT_OF_MEMORY", caught.value.message
        assert "extraction.max_memory (943,718,400 bytes)" in caught.value.message
        # A smaller page fits: the same worker reads it, with an engine loaded afresh.
        extraction = await extract(make_doc("png", dpi=100), filetypes.PNG, SCHEMA, config)
    assert extraction.result["invoice_number"] == INVOICE["invoice_number"]


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_a_page_larger_than_the_detector_is_read_as_rapidocr_reads_it(make_doc: Callable[..., Path],
                                                                        mode: str) -> None:
    # A4 at 300 dpi is 2481×3508 px: shrunk for the detector here, before RapidOCR sees it.
    image = Image.open(make_doc("png", dpi=300)).convert(mode)
    assert max(image.size) > engine_module.MAX_SIDE
    ours = [word for line in engine_module.rapidocr_lines(image) for word in line]
    own = engine_module._load()(image.convert("RGB"))  # RapidOCR shrinking the full page itself
    assert [word.text for word in ours] == [engine_module.plain_text(text) for text in own.txts]
    for word, quad in zip(ours, own.boxes, strict=True):
        assert word.x0 >= float(quad[:, 0].min()) - 0.01 and word.x1 <= float(quad[:, 0].max()) + 0.01
        assert word.y0 >= float(quad[:, 1].min()) - 0.01 and word.y1 <= float(quad[:, 1].max()) + 0.01


MEASURE = """
import json, sys
from pathlib import Path
from daemon.extraction.parsers import ParseOptions
from daemon.extraction.worker import parse_document
from daemon.jobs import filetypes

def status():
    lines = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {key: int(lines[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM", "VmPeak")}

small, large = map(Path, sys.argv[1:])
parse_document(str(small), filetypes.PNG, ParseOptions())  # loads the models
loaded = status()
for _ in range(2):
    parse_document(str(large), filetypes.PNG, ParseOptions())  # as a parser process does
print(json.dumps({"loaded": loaded, "after": status()}))
"""


def test_a_worker_gives_back_the_memory_of_a_reading(make_doc: Callable[..., Path]) -> None:
    # A4 at 600 dpi (4961×7016 px, as scanners save receipts): the largest page the detector
    # gets, and the full-size copies that used to live through its run.
    small, large = make_doc("png", dpi=100), make_doc("png", dpi=600)
    run = subprocess.run([sys.executable, "-c", MEASURE, str(small), str(large)], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[4])
    figures = json.loads(run.stdout)
    loaded, after = figures["loaded"], figures["after"]
    assert after["VmHWM"] - after["VmRSS"] > 300 * 1024**2  # the readings did take memory...
    assert after["VmRSS"] - loaded["VmRSS"] < 150 * 1024**2  # ...and gave it back
    # Under the default extraction.max_memory (address space), with room to spare.
    assert after["VmPeak"] < 0.85 * load_config(environ={}).extraction.max_memory_bytes


def test_a_till_receipt_far_longer_than_wide_is_read_in_bands(tmp_path: Path) -> None:
    # 576×8,000 px at 200 dpi, a line of print every 60 px: shrunk whole to the detector's
    # 2,000 px it was 144 px wide, and read nothing after 73 s at 1.5 GB.
    from reportlab.pdfgen import canvas

    pdf = tmp_path / "till.pdf"
    width, height = 576 * 72 / 200, 8000 * 72 / 200
    page = canvas.Canvas(str(pdf), pagesize=(width, height))
    page.setFont("Helvetica", 9)
    printed = [f"ITEM {n:03d} COFFEE {n}.50" for n in range(130)]
    for n, text in enumerate(printed):
        page.drawString(12, height - 30 - n * 21.6, text)  # a line every 60 px
    page.save()
    image = Image.open(render_pdf(pdf, tmp_path / "till.png"))
    assert image.height == 8000 and image.width in (576, 577)
    runs = [word for line in engine_module.rapidocr_lines(image) for word in line]
    # Every line once (the bands overlap: a line there is kept by one of them), in place.
    assert sorted(word.text for word in runs) == sorted(printed)
    for word in runs:
        n = printed.index(word.text)
        assert abs((word.y0 + word.y1) / 2 - (83 + n * 60)) < 15, (word, n)


def test_a_strip_too_long_for_the_bands_is_read_padded_within_memory(tmp_path: Path) -> None:
    # 4×60,000 px, as a PDF page of 1×14,400 points renders: the detector enlarged it to
    # 736×46,000 px and ran out of memory; read padded, it is a blank strip.
    assert engine_module.rapidocr_lines(Image.new("L", (4, 60_000), 255)) == []
    pixels, _, _ = engine_module._model_input(Image.new("L", (4, 60_000), 255))
    assert max(pixels.shape[:2]) <= engine_module.MAX_ASPECT * min(pixels.shape[:2])
