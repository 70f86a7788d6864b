"""Hostile files, third round (SPEC §6, §7; issue 12), beyond test_hostile_files.py and
test_hostile_files_more.py: what a client sees of each, through the HTTP API and the
worker pool under the limits of ``extraction.*``.

- text whose first 8 KiB make csv.Sniffer's quote patterns backtrack: type detection runs
  on the event loop for every uploaded file, and took 1.4 s of it per file (a batch run
  of 1,000 such files: over 20 minutes of a stalled daemon);
- a 16-bit grayscale scan (Pillow's mode I;16): its pixels were cut to 8 bits by clamping,
  every grey above 255 of 65,535 white, and the page read as blank (COMPLETED, nothing found);
- a TIFF in CMYK, LAB, 32-bit integer or float greys, read by OCR, but its page for the
  console a 422 "could not be rendered (OSError)": PNG stores none of these modes.
"""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio
from hostile_docs import TEST_LIMITS, png_gray16, text_quote_backtracking, tiff_in_mode
from jobs_helpers import INVOICE_RESULT, create_job, post_run, running_workers, wait_for_status

from daemon.jobs import filetypes


def with_limits(services: Any, **changes: Any) -> None:
    """`TEST_LIMITS` and `changes` for the pool (as a SIGHUP would apply them)."""
    config = services.config
    services.config = dataclasses.replace(
        config, extraction=dataclasses.replace(config.extraction, **{**TEST_LIMITS, **changes}))


class _LongestStep(trio.abc.Instrument):
    """The longest a task ran on the event loop without yielding, in seconds."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._started: float | None = None  # None in the step that added the instrument

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._started is not None:
            self.longest = max(self.longest, time.perf_counter() - self._started)
        self._started = None


@contextmanager
def longest_step() -> Iterator[_LongestStep]:
    instrument = _LongestStep()
    trio.lowlevel.add_instrument(instrument)
    try:
        yield instrument
    finally:
        trio.lowlevel.remove_instrument(instrument)


async def test_type_detection_of_text_does_not_stall_the_event_loop(
        client: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    # Before: 1.4 s on the event loop per file (csv.Sniffer), 4 files 5.6 s in one request.
    data = text_quote_backtracking(tmp_path / "notes.txt").read_bytes()
    with longest_step() as steps:
        started = time.monotonic()
        r = await post_run(client, alice, schema_id, [(f"notes{i}.txt", data) for i in range(4)])
        took = time.monotonic() - started
    body = await r.get_json()
    assert r.status_code == 201, body
    assert steps.longest < 0.2, f"a task ran {steps.longest:.2f}s on the event loop"
    assert took < 2, took
    job = await create_job(client, alice, schema_id, data, "notes.txt")
    assert job["mimeType"] == filetypes.TXT


async def test_a_16_bit_grayscale_scan_is_read_not_blank(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    # Before: COMPLETED with an empty result: every pixel above 255 (of 65,535) became white.
    with_limits(services, parse_timeout_s=60)
    job = await create_job(client, alice, schema_id, png_gray16(tmp_path / "scan.png").read_bytes(), "scan.png")
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED", deadline_s=90)
    assert (done["status"], done["result"]) == ("COMPLETED", INVOICE_RESULT), (done["errorCode"], done["result"])


async def test_the_page_of_a_cmyk_lab_or_wide_grey_tiff_is_shown(
        client: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    # Before: 422 "the page could not be rendered (OSError)" (and a traceback in the log) for each.
    from PIL import Image

    for mode in ("CMYK", "LAB", "F", "I"):
        data = tiff_in_mode(tmp_path / f"{mode}.tiff", mode).read_bytes()
        job = await create_job(client, alice, schema_id, data, f"{mode}.tiff")
        r = await client.get(f"/api/jobs/{job['id']}/pages/1", headers=alice)
        body = await r.get_data()
        assert r.status_code == 200, (mode, body[:300])
        assert r.headers["Content-Type"] == "image/png"
        with Image.open(io.BytesIO(body)) as picture:
            assert picture.size == (700, 200)
            assert picture.convert("L").getextrema() == (0, 255), mode  # black ink on white, not blank
