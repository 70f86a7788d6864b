"""`docex extract FILE --schema S`: the pipeline from the command line, no daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from extraction_docs import INVOICE, SCHEMA


def docex(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DOCEX_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "daemon.cli", "extract", *args], capture_output=True, text=True,
                          env=environ, timeout=120, check=False)


def schema_file(tmp_path: Path, schema: dict[str, object] = SCHEMA) -> str:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    return str(path)


def test_extract_prints_result_and_meta(make_doc: Callable[..., Path], tmp_path: Path) -> None:
    # Named .bin: the type comes from the bytes (a DOCX is told apart from other ZIPs by its parts).
    docx = make_doc("docx")
    renamed = docx.rename(tmp_path / "upload.bin")
    run = docex(str(renamed), "--schema", schema_file(tmp_path))
    assert run.returncode == 0, run.stderr
    body = json.loads(run.stdout)
    assert body["result"] == INVOICE
    assert body["resultMeta"]["provider"] == "rules"
    assert body["resultMeta"]["complete"] is True and body["resultMeta"]["missing"] == []
    assert body["resultMeta"]["fields"]["/invoice_number"]["text"] == "INV-2024-0042"


def test_a_schema_saved_as_the_api_shows_it_is_read_by_its_definition(tmp_path: Path) -> None:
    """`{"id", "name", "definition"}` from GET /api/schemas/:id said "schema.type must be object"."""
    document = tmp_path / "invoice.txt"
    document.write_text("Invoice Number: INV-9\nTotal: 12.50\n")
    shown = {"id": "01aaaaaaaaaaaaaaaaaaaaaaaa", "name": "Invoice", "description": None, "definition": SCHEMA}
    run = docex(str(document), "--schema", schema_file(tmp_path, shown))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["result"]["invoice_number"] == "INV-9"


def test_extract_errors_are_json_with_a_non_zero_exit(tmp_path: Path) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n" + os.urandom(2000))
    run = docex(str(broken), "--schema", schema_file(tmp_path))
    assert run.returncode == 1
    assert json.loads(run.stdout)["errorCode"] == "CORRUPTED_FILE"

    unknown = tmp_path / "noise.bin"
    unknown.write_bytes(bytes(range(256)))
    run = docex(str(unknown), "--schema", schema_file(tmp_path))
    assert run.returncode == 1
    assert json.loads(run.stdout) == {"errorCode": "UNSUPPORTED_FILE", "errorMessage": "Unsupported file type"}


def test_a_result_that_misses_a_required_field_is_printed_incomplete(tmp_path: Path) -> None:
    text = tmp_path / "note.txt"
    text.write_text("Just a note without any invoice data in it.\nNothing else.\n")
    run = docex(str(text), "--schema", schema_file(tmp_path))
    assert run.returncode == 0, run.stdout
    body = json.loads(run.stdout)
    assert "date" not in body["result"] and "total" not in body["result"]
    assert body["resultMeta"]["complete"] is False
    assert body["resultMeta"]["missing"] == ["/date", "/total"]

    # A schema that opts into failing makes it RESULT_INVALID, naming what is missing.
    run = docex(str(text), "--schema", schema_file(tmp_path, {**SCHEMA, "x-docex-incomplete": "fail"}))
    assert run.returncode == 1
    body = json.loads(run.stdout)
    assert body["errorCode"] == "RESULT_INVALID"
    assert "/date" in body["errorMessage"] and "/total" in body["errorMessage"]


def test_the_provider_flag_and_configuration_reach_the_pipeline(tmp_path: Path) -> None:
    text = tmp_path / "invoice.txt"
    text.write_text("Invoice No:   A-1\nTotal:   12.00\n")
    # Nothing listens on port 9 of loopback: the openai provider fails as a retryable provider error.
    run = docex(str(text), "--schema", schema_file(tmp_path), "--provider", "openai",
                env={"DOCEX_OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "DOCEX_OPENAI_API_KEY": "sk-secret-cli"})
    assert run.returncode == 1
    body = json.loads(run.stdout)
    assert body["errorCode"] == "AI_PROVIDER_ERROR"
    assert "sk-secret-cli" not in run.stdout + run.stderr


def test_the_ocr_engine_flag_reaches_the_parser(make_doc: Callable[..., Path], tmp_path: Path) -> None:
    image = make_doc("png")
    # Without tesseract on PATH the configured engine cannot read the image...
    no_tesseract = {"PATH": str(tmp_path), "DOCEX_EXTRACTION_OCR_ENGINE": "tesseract"}
    run = docex(str(image), "--schema", schema_file(tmp_path), env=no_tesseract)
    assert run.returncode == 1
    assert json.loads(run.stdout)["errorCode"] == "OCR_FAILED"
    # ...and the flag's engine (the default one), which wins over the configuration, can.
    run = docex(str(image), "--schema", schema_file(tmp_path), "--ocr-engine", "rapidocr", env=no_tesseract)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["result"] == INVOICE
    assert docex(str(image), "--schema", schema_file(tmp_path), "--ocr-engine", "easyocr").returncode == 2


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert docex(str(tmp_path / "missing.pdf"), "--schema", schema_file(tmp_path)).returncode == 2
    text = tmp_path / "a.txt"
    text.write_text("x")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    run = docex(str(text), "--schema", str(bad))
    assert run.returncode == 2 and "schema" in run.stderr
    for root, problem in (([], "schema must be an object"),
                          ({"type": "array"}, "schema.type must be object (the root of a schema is an object)")):
        bad.write_text(json.dumps(root))
        run = docex(str(text), "--schema", str(bad))
        assert run.returncode == 2 and run.stderr == f"docex: {bad}: {problem}\n", run.stderr
