"""extraction.ocr_concurrency: at most that many OCR readings at once across the
parser processes, whatever the number of workers, and the other parses not
held back.

The readings are made by a stand-in `tesseract` program on PATH (the
tesseract engine runs whatever `tesseract` is there) that logs when it starts
and ends and takes half a second: real worker processes, real OCR calls, and
a clock outside of docex to tell how many overlapped.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio_parallel
from extraction_docs import INVOICE, SCHEMA
from PIL import Image

from daemon.config import Config, ConfigError, hot_reload, load_config
from daemon.extraction.pipeline import extract, parse_options
from daemon.jobs import filetypes

FAKE_TESSERACT = """#!{python}
import os, sys, time
if sys.argv[1:] == ["--version"]:
    print("tesseract 5.3.0")
    sys.exit(0)
with open({log!r}, "a") as log:
    log.write(f"start {{time.time()}}\\n")
time.sleep(0.5)
with open(sys.argv[2] + ".tsv", "w") as out:
    out.write("level\\tpage_num\\tblock_num\\tpar_num\\tline_num\\tword_num\\tleft\\ttop\\twidth\\theight\\tconf\\ttext\\n"
              "1\\t1\\t0\\t0\\t0\\t0\\t0\\t0\\t1300\\t200\\t-1\\t\\n")  # a page without words
with open({log!r}, "a") as log:
    log.write(f"end {{time.time()}}\\n")
"""
WORKERS = 5
SCANS = 4


@pytest.fixture
def logged_ocr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The log of the stand-in tesseract, first on PATH (workers started from now on see it)."""
    log = tmp_path / "ocr.log"
    program = tmp_path / "bin" / "tesseract"
    program.parent.mkdir()
    program.write_text(FAKE_TESSERACT.format(python=sys.executable, log=str(log)))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}{os.environ['PATH']}")
    return log


def readings(log: Path) -> list[tuple[str, float]]:
    return [(kind, float(at)) for kind, at in (line.split() for line in log.read_text().splitlines())]


def most_at_once(log: Path) -> int:
    running = peak = 0
    # An end and a start at the same instant: the end first.
    for _, step in sorted((at, -1 if kind == "end" else 1) for kind, at in readings(log)):
        running += step
        peak = max(peak, running)
    return peak


def scans(folder: Path, kind: str = "png") -> list[Path]:
    paths = []
    for index in range(SCANS):
        path = folder / f"scan-{index}.{kind}"
        Image.new("RGB", (1300, 200), "white").save(path, resolution=150)  # a page without text
        paths.append(path)
    return paths


def with_ocr(ocr_concurrency: int) -> Config:
    base = load_config(environ={})
    return dataclasses.replace(base, extraction=dataclasses.replace(
        base.extraction, ocr_engine="tesseract", ocr_concurrency=ocr_concurrency))


@asynccontextmanager
async def workers() -> AsyncIterator[None]:
    """`WORKERS` fresh parser processes, all started before the test's clock runs."""
    trio_parallel.current_default_worker_limiter().total_tokens = WORKERS
    async with trio_parallel.cache_scope():
        async with trio.open_nursery() as nursery:
            for _ in range(WORKERS):
                nursery.start_soon(trio_parallel.run_sync, time.sleep, 0.3)
        yield


async def started(log: Path) -> None:
    """Once the first reading has started."""
    while True:
        if await trio.Path(log).exists():
            return
        await trio.sleep(0.02)


async def extract_all(paths: list[Path], mime: str, config: Config) -> None:
    async with trio.open_nursery() as nursery:
        for path in paths:
            nursery.start_soon(extract, path, mime, SCHEMA, config)


@pytest.mark.parametrize("limit", [1, 2])
async def test_no_more_ocr_readings_at_once_than_the_setting(tmp_path: Path, logged_ocr: Path, limit: int) -> None:
    async with workers():
        await extract_all(scans(tmp_path), filetypes.PNG, with_ocr(limit))
    assert len(readings(logged_ocr)) == 2 * SCANS  # every scan was read, once
    assert most_at_once(logged_ocr) == limit  # never more, and as many as allowed


async def test_the_pdf_pages_without_text_take_slots_too(tmp_path: Path, logged_ocr: Path) -> None:
    async with workers():
        await extract_all(scans(tmp_path, "pdf"), filetypes.PDF, with_ocr(1))
    assert len(readings(logged_ocr)) == 2 * SCANS
    assert most_at_once(logged_ocr) == 1


async def test_a_document_without_ocr_is_not_held_back(tmp_path: Path, logged_ocr: Path,
                                                       make_doc: Callable[..., Path]) -> None:
    pdf = make_doc("pdf")
    async with workers(), trio.open_nursery() as nursery:
        nursery.start_soon(extract_all, scans(tmp_path), filetypes.PNG, with_ocr(1))
        await started(logged_ocr)  # the one OCR slot is taken
        extraction = await extract(pdf, filetypes.PDF, SCHEMA, with_ocr(1))
        done = time.time()
    assert extraction.result["total"] == INVOICE["total"]
    # Read while the scans still queued for the slot, one after another.
    assert done < max(at for kind, at in readings(logged_ocr) if kind == "start")


def test_the_setting_is_validated_and_applied_on_reload() -> None:
    old = load_config(environ={})
    assert old.extraction.ocr_concurrency == 2
    for bad in ("0", "-1", "257"):
        with pytest.raises(ConfigError) as caught:
            load_config(environ={"DOCEX_EXTRACTION_OCR_CONCURRENCY": bad})
        assert "extraction.ocr_concurrency: must be 1-256" in str(caught.value)
    merged, cold = hot_reload(old, load_config(environ={"DOCEX_EXTRACTION_OCR_CONCURRENCY": "1"}))
    assert cold == []
    assert parse_options(merged).ocr_concurrency == 1  # the next reading's
