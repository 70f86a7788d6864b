"""Fixtures of the extraction tests: documents of every type (see `extraction_docs`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from extraction_docs import (
    invoice_csv,
    invoice_html,
    invoice_txt,
    render_pdf,
    write_invoice_docx,
    write_invoice_pdf,
    write_invoice_xlsx,
)
from system_requirements import require_tesseract

from daemon.config import OCR_ENGINES


@pytest.fixture(params=OCR_ENGINES)
def ocr_engine(request: pytest.FixtureRequest) -> str:
    """Each OCR engine in turn: RapidOCR (the default, installed with docex) and tesseract,
    which skips (fails in CI) where the tesseract-ocr package is missing."""
    if request.param == "tesseract":
        require_tesseract()  # here, not in an async test: pytest-trio drops a skip's reason
    engine: str = request.param
    return engine


@pytest.fixture
def make_doc(tmp_path: Path) -> Callable[..., Path]:
    """``make_doc(kind, **options)`` writes the invoice as `kind` and returns its path.

    Kinds: pdf, png, jpeg, tiff, webp, docx, xlsx, csv, html, txt.
    """

    def make(kind: str, **options: int) -> Path:
        path = tmp_path / f"invoice-{kind}-{len(list(tmp_path.iterdir()))}.{kind}"
        if kind == "pdf":
            return write_invoice_pdf(path, **options)
        if kind in ("png", "jpeg", "tiff", "webp"):
            pdf = write_invoice_pdf(tmp_path / "source.pdf")
            return render_pdf(pdf, path, fmt=kind.upper(), **options)
        if kind == "docx":
            return write_invoice_docx(path, **options)
        if kind == "xlsx":
            return write_invoice_xlsx(path, **options)
        text = {"csv": invoice_csv, "html": invoice_html, "txt": invoice_txt}[kind]()
        path.write_text(text, encoding="utf-8")
        return path

    return make
