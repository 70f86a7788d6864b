"""extract(): parsers in trio-parallel worker processes, errors as errorCodes,
the provider chosen per schema, cancellation that kills the worker."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from extraction_docs import INVOICE, SCHEMA

from daemon.config import Config, load_config
from daemon.errors import PermanentJobError
from daemon.extraction import pipeline
from daemon.extraction.pipeline import extract, in_worker
from daemon.jobs import filetypes


def config(max_pages: int = 500, **extraction: object) -> Config:
    base = load_config(environ={})
    return dataclasses.replace(base, jobs=dataclasses.replace(base.jobs, max_pages=max_pages),
                               extraction=dataclasses.replace(base.extraction, **extraction))


async def test_a_native_pdf_through_the_worker(make_doc: Callable[..., Path]) -> None:
    extraction = await extract(make_doc("pdf", pages=2), filetypes.PDF, SCHEMA, config())
    assert extraction.page_count == 2
    # Two identical pages: the header fields once, the table rows of both pages.
    assert extraction.result["invoice_number"] == INVOICE["invoice_number"]
    assert extraction.result["items"] == INVOICE["items"] * 2
    meta = extraction.meta
    assert meta["provider"] == "rules" and meta["model"] is None
    assert meta["durationMs"] > 0
    assert meta["fields"]["/items/3/description"]["page"] == 2
    assert "usage" not in meta


async def test_an_image_is_read_by_ocr_in_the_worker(make_doc: Callable[..., Path], ocr_engine: str) -> None:
    extraction = await extract(make_doc("png"), filetypes.PNG, SCHEMA, config(ocr_engine=ocr_engine))
    assert extraction.result["total"] == INVOICE["total"]
    assert 0 < extraction.meta["fields"]["/total"]["confidence"] <= 1


@pytest.mark.parametrize(("data", "code"), [(b"%PDF-1.4\n" + b"\x00garbage" * 100, "CORRUPTED_FILE")])
async def test_parser_errors_cross_the_process_boundary(tmp_path: Path, data: bytes, code: str) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(data)
    with pytest.raises(PermanentJobError) as caught:
        await extract(path, filetypes.PDF, SCHEMA, config())
    assert caught.value.code == code


async def test_the_page_limit_comes_from_the_configuration(make_doc: Callable[..., Path]) -> None:
    path = make_doc("pdf", pages=3)
    with pytest.raises(PermanentJobError) as caught:
        await extract(path, filetypes.PDF, SCHEMA, config(max_pages=2))
    assert caught.value.code == "TOO_MANY_PAGES"


async def test_an_unsupported_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"\x00\x01")
    with pytest.raises(PermanentJobError) as caught:
        await extract(path, "application/octet-stream", SCHEMA, config())
    assert caught.value.code == "UNSUPPORTED_FILE"


def _die() -> None:
    os._exit(3)


async def test_a_worker_that_dies_fails_the_job_not_the_daemon() -> None:
    with pytest.raises(PermanentJobError) as caught:
        await in_worker(_die)
    assert caught.value.code == "PARSE_FAILED"


def _slow() -> None:
    time.sleep(30)


async def test_cancelling_a_job_kills_its_worker() -> None:
    started = time.monotonic()
    with trio.move_on_after(1.0) as scope:
        await in_worker(_slow)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 10


def _quick() -> str:
    return "read"


async def test_waiting_for_a_parser_process_is_not_reading_time() -> None:
    """The deadline ran while the call waited for a process behind slow documents: a file
    read in a moment failed PARSE_TIMEOUT ("took longer than parse_timeout") unread."""
    import trio_parallel

    limiter = trio_parallel.current_default_worker_limiter()
    holders_done = trio.Event()

    async def hold_every_slot() -> None:  # as documents being read do
        async with trio.open_nursery() as holders:
            for _ in range(int(limiter.total_tokens)):
                holders.start_soon(_hold, limiter, holders_done)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold_every_slot)
        await trio.sleep(0.1)
        assert limiter.available_tokens == 0
        nursery.start_soon(_release_after, holders_done, 1.5)
        assert await in_worker(_quick, timeout_s=1.0) == "read"


async def _hold(limiter: trio.CapacityLimiter, done: trio.Event) -> None:
    async with limiter:
        await done.wait()


async def _release_after(done: trio.Event, seconds: float) -> None:
    await trio.sleep(seconds)
    done.set()


async def test_a_job_does_not_look_for_the_ocr_engine(make_doc: Callable[..., Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon looks at start and on SIGHUP (tests/unit/test_reload.py), not once per job.
    looked: list[str] = []
    available = pipeline.ocr_available

    def counted(engine: str) -> bool:
        looked.append(engine)
        return available(engine)

    monkeypatch.setattr(pipeline, "ocr_available", counted)
    for _ in range(2):
        extraction = await extract(make_doc("txt"), filetypes.TXT, SCHEMA, config())
        assert extraction.result["invoice_number"] == INVOICE["invoice_number"]
    assert looked == []


def test_a_missing_tesseract_is_a_warning(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with caplog.at_level(logging.WARNING):
        assert pipeline.warn_if_ocr_missing("tesseract") is False
    warnings = [r for r in caplog.records if getattr(r, "action", None) == "extraction.ocr_missing"]
    assert len(warnings) == 1
    assert "tesseract" in warnings[0].getMessage()
