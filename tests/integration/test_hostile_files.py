"""Hostile files through the HTTP API and the worker pool (SPEC §6, §7; issue 12):
each job ends COMPLETED or FAILED with its specific errorCode under the limits
of ``extraction.*`` (applied by the running pool, as a SIGHUP would), and a
normal job submitted alongside them completes. The full corpus runs through
the worker path in tests/unit/extraction/parsers/test_extraction_hostile_files.py; these are the
ones whose upload or errorCode a client sees differently."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import trio
from hostile_docs import (
    TEST_LIMITS,
    csv_huge,
    docx_bomb,
    html_quadratic,
    pdf_huge_mediabox,
    png_huge,
    utf16_text,
)
from jobs_helpers import INVOICE_RESULT, INVOICE_TXT, create_job, running_workers, wait_for_status

from daemon.jobs import filetypes


def with_limits(services: Any, **changes: Any) -> None:
    config = services.config
    services.config = dataclasses.replace(
        config, extraction=dataclasses.replace(config.extraction, **{**TEST_LIMITS, **changes}))


async def test_hostile_files_fail_with_their_own_error_codes_and_a_normal_job_completes(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    with_limits(services)
    files = {
        "tall.pdf": (pdf_huge_mediabox, "CORRUPTED_FILE"),
        "bomb.docx": (docx_bomb, "DOCUMENT_TOO_LARGE"),
        "poster.png": (png_huge, "DOCUMENT_TOO_LARGE"),
        "labels.html": (html_quadratic, None),
    }
    jobs = {name: await create_job(client, alice, schema_id, build(tmp_path / name).read_bytes(), name)
            for name, (build, _) in files.items()}
    normal = await create_job(client, alice, schema_id)
    async with running_workers(services, workers=2):
        done = {name: await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED", deadline_s=60)
                for name, job in jobs.items()}
        finished = await wait_for_status(client, alice, normal["id"], "COMPLETED", "FAILED")
    for name, (_, code) in files.items():
        job = done[name]
        assert (job["status"], job["errorCode"]) == ("FAILED" if code else "COMPLETED", code), job
        assert job["attempts"] == 1  # a limit is permanent: the same file would meet it again
    assert "over extraction.max_part_size" in done["bomb.docx"]["errorMessage"]
    assert "over extraction.max_image_pixels" in done["poster.png"]["errorMessage"]
    assert finished["status"] == "COMPLETED" and finished["result"] == INVOICE_RESULT


async def test_utf16_text_is_accepted_at_upload_and_read(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    data = utf16_text(tmp_path / "notepad.txt").read_bytes()
    job = await create_job(client, alice, schema_id, data, "notepad.txt")
    assert job["mimeType"] == filetypes.TXT
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done
    assert done["result"] == {"invoice_number": "INV-77", "total": 123.45}


async def test_a_parse_past_its_time_fails_and_the_next_job_runs(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    with_limits(services, parse_timeout_s=1, max_cells=10**7, max_text_chars=10**8)
    slow = await create_job(client, alice, schema_id, csv_huge(tmp_path / "ledger.csv", 25_000).read_bytes(),
                            "ledger.csv")
    async with running_workers(services, workers=1):
        failed = await wait_for_status(client, alice, slow["id"], "FAILED", "COMPLETED", deadline_s=10)
        with trio.fail_after(10):
            after = await create_job(client, alice, schema_id, INVOICE_TXT)
            done = await wait_for_status(client, alice, after["id"], "COMPLETED", "FAILED")
    assert failed["errorCode"] == "PARSE_TIMEOUT" and "extraction.parse_timeout (1s)" in failed["errorMessage"]
    assert done["status"] == "COMPLETED" and done["result"] == INVOICE_RESULT
