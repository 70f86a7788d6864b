"""Jobs survive the death of the process that runs them (SPEC §1, §6, §11).

A real `docex serve` processes scanned invoices (PNG images made with Pillow, read
by tesseract: a few seconds each, so several are RUNNING at any moment):

- SIGKILL with jobs RUNNING, then a new process on the same data directory and
  database: the new process's reaper re-queues the dead worker's jobs once their
  leases expire, and every job ends COMPLETED exactly once (at-least-once
  processing, exactly one job.completed event).
- SIGTERM with jobs RUNNING and a 1 s grace period: the process exits 0, the
  unfinished jobs are released to QUEUED with their attempt given back, and a
  restart completes them.

The events outbox and the jobs table are read with SQLAlchemy straight from the
test's database URL; everything else goes through the HTTP API.
"""

from __future__ import annotations

import io
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio
from e2e_helpers import QUICK_ENV, STARTUP, Api, event_counts, job_rows
from PIL import Image, ImageDraw, ImageFont
from system_requirements import needs_tesseract

FINAL = {"COMPLETED", "FAILED", "CANCELLED"}
JOBS = 6
WORKERS = 4
# Body text lines on each scanned page: about 1-2 s of OCR each on a 2-CPU machine (more when the
# workers share the CPUs), so a job is still running 1 s after SIGTERM.
FILLER_LINES = 25

# Read by tesseract, not the default engine: its readings of these pages take a predictable
# second or two, where RapidOCR's take 3 s of CPU each and would stretch every wait here.
BASE_ENV = {**QUICK_ENV, "DOCEX_JOBS_WORKERS": str(WORKERS), "DOCEX_EXTRACTION_OCR_ENGINE": "tesseract"}


# --- documents ----------------------------------------------------------------------


def scanned_invoice(number: str, filler_lines: int = FILLER_LINES) -> bytes:
    """A greyscale PNG 'scan' of an invoice: the two labelled fields, then body text."""
    font = ImageFont.load_default(size=36)
    lines = [f"Invoice Number: {number}", "Total: 12.50", ""] + [
        f"Line {i}: delivery of goods and services as agreed, item {i * 7} of the order"
        for i in range(1, filler_lines + 1)
    ]
    image = Image.new("L", (2000, 120 + 56 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((80, 60 + 56 * i), line, fill=0, font=font)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


# --- talking to the daemon ------------------------------------------------------------


async def connect(daemon: Any, headers: dict[str, str] | None = None) -> Api:
    """Wait for `daemon` to answer, and return a client for it (signed in with `headers`)."""
    await daemon.wait_http_ready(timeout=STARTUP)
    fresh = Api(daemon.url(""))
    if headers is not None:
        fresh.headers = headers  # the same signing secret lives in the shared data directory
    return fresh


async def wait_until(check: Callable[[], Any], what: str, timeout: float, daemon: Any) -> Any:  # noqa: ASYNC109
    """Poll the async `check` until it returns something truthy; fail with the daemon's log tail."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if daemon.proc.poll() is not None:
            pytest.fail(f"docex exited while waiting for {what}\n{daemon.describe()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s\n{daemon.describe()}")
        await trio.sleep(0.1)


# --- shared steps ----------------------------------------------------------------------------


async def queue_invoices(api: Api, count: int = JOBS) -> tuple[str, dict[str, str]]:
    """A schema and `count` scanned invoices queued against it: (schema id, {job id: number})."""
    await api.sign_up()
    schema_id = await api.create_schema()
    numbers = {}
    for i in range(count):
        number = f"INV-{4711 + i * 13}"
        job = await api.upload(schema_id, f"scan-{i}.png", scanned_invoice(number), "image/png")
        assert job["mimeType"] == "image/png", job
        numbers[job["id"]] = number
    return schema_id, numbers


async def wait_running(api: Api, daemon: Any, at_least: int) -> list[dict[str, Any]]:
    async def running() -> list[dict[str, Any]] | None:
        jobs = await api.jobs("RUNNING")
        return jobs if len(jobs) >= at_least else None

    result: list[dict[str, Any]] = await wait_until(
        running, f"{at_least} jobs RUNNING", timeout=30, daemon=daemon)
    return result


async def wait_all_final(api: Api, daemon: Any, ids: set[str], timeout: float) -> dict[str, dict[str, Any]]:  # noqa: ASYNC109
    async def final() -> dict[str, dict[str, Any]] | None:
        jobs = {j["id"]: j for j in await api.jobs()}
        return jobs if set(jobs) == ids and all(j["status"] in FINAL for j in jobs.values()) else None

    result: dict[str, dict[str, Any]] = await wait_until(
        final, "every job in a final state", timeout=timeout, daemon=daemon)
    return result


async def start_with_jobs_running(
    start_daemon: Callable[..., Any], env: dict[str, str]
) -> tuple[Any, dict[str, str], dict[str, str], list[dict[str, Any]]]:
    """A daemon with JOBS scanned invoices queued, 3 or more of them RUNNING:
    (the daemon, the user's auth headers, {job id: number}, the RUNNING jobs)."""
    first = start_daemon(env=env)
    async with await connect(first) as api:
        _, numbers = await queue_invoices(api)
        running = await wait_running(api, first, at_least=3)
    return first, api.headers, numbers, running


async def restart_until_final(
    start_daemon: Callable[..., Any], env: dict[str, str], headers: dict[str, str], numbers: dict[str, str],
    timeout: float,  # noqa: ASYNC109
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """A new daemon on the same data directory and database, once every job has ended:
    (the daemon, the jobs by id)."""
    second = start_daemon(env=env)
    async with await connect(second, headers) as api:
        jobs = await wait_all_final(api, second, set(numbers), timeout=timeout)
    return second, jobs


def assert_completed(jobs: dict[str, dict[str, Any]], numbers: dict[str, str]) -> None:
    assert set(jobs) == set(numbers), "a job was lost or one appeared"
    for job_id, job in jobs.items():
        assert job["status"] == "COMPLETED", job
        assert job["errorCode"] is None, job
        assert job["result"] == {"invoice_number": numbers[job_id], "total": 12.5}, job
        assert job["finishedAt"] and job["startedAt"], job


# --- SIGKILL ---------------------------------------------------------------------------------


@needs_tesseract
async def test_jobs_running_when_the_process_is_killed_complete_after_a_restart(
    start_daemon, database_url
) -> None:
    env = {**BASE_ENV, "DOCEX_JOBS_LEASE": "5s"}
    first, headers, numbers, _ = await start_with_jobs_running(start_daemon, env)

    first.proc.send_signal(signal.SIGKILL)
    assert await first.wait_exit(timeout=10) == -signal.SIGKILL
    killed_at = time.monotonic()

    # What the dead process left behind: jobs RUNNING under its leases, nothing lost.
    left = await job_rows(database_url)
    assert set(left) == set(numbers)
    orphaned = {job_id for job_id, row in left.items() if row.status == "RUNNING"}
    assert len(orphaned) >= 3, left
    assert all(left[j].lease_owner and left[j].attempts == 1 for j in orphaned), left

    second, jobs = await restart_until_final(start_daemon, env, headers, numbers, timeout=45)
    recovered_s = time.monotonic() - killed_at

    assert_completed(jobs, numbers)
    rows = await job_rows(database_url)
    assert not [r for r in rows.values() if r.status == "RUNNING" or r.lease_owner], rows
    for job_id, job in jobs.items():
        # The killed attempt counts (the process died mid-way); the rest ran once.
        assert job["attempts"] == (2 if job_id in orphaned else 1), (job_id in orphaned, job)

    events = await event_counts(database_url)
    for job_id in numbers:
        seen = events[job_id]
        assert seen["job.queued"] == 1, (job_id, seen)
        assert seen["job.completed"] == 1, (job_id, seen)
        assert seen["job.failed"] == 0, (job_id, seen)
        assert seen["job.started"] == jobs[job_id]["attempts"], (job_id, seen)
    assert set(events) == set(numbers)

    # The new process's reaper took the dead process's jobs back, all of them, once.
    reaped = [r for r in second.records if r.get("action") == "jobs.reaped"]
    assert sum(r["count"] for r in reaped) == len(orphaned), second.describe()
    assert recovered_s < 45
    await second.stop(timeout=15)


# --- SIGTERM ---------------------------------------------------------------------------------


@needs_tesseract
async def test_sigterm_releases_running_jobs_within_the_grace_period_and_a_restart_completes_them(
    start_daemon, database_url
) -> None:
    # A long lease: if a job were left RUNNING instead of released, the restart would not
    # get it back within this test's time (the reaper waits for the lease to expire).
    env = {**BASE_ENV, "DOCEX_JOBS_LEASE": "120s", "DOCEX_SERVER_GRACE_PERIOD": "1s"}
    first, headers, numbers, running = await start_with_jobs_running(start_daemon, env)
    assert all(j["attempts"] == 1 for j in running), running

    mark = first.mark()
    signalled = time.monotonic()
    await first.stop(timeout=15)
    stopped_s = time.monotonic() - signalled
    assert stopped_s < 1 + 5, f"the drain took {stopped_s:.1f}s with a 1s grace period"
    actions = first.actions(mark)
    assert actions[-1] == "service.stopped", first.describe()

    rows = await job_rows(database_url)
    assert set(rows) == set(numbers)
    left_running = [r for r in rows.values() if r.status == "RUNNING" or r.lease_owner]
    assert not left_running, f"left RUNNING by a clean stop: {left_running}\n{first.describe()}"
    released = {r["job_id"] for r in first.records_since(mark) if r.get("action") == "job.released"}
    assert released, f"no job was still running after the 1s grace period\n{first.describe()}"
    events = await event_counts(database_url)
    for job_id in released:
        # Released: back in the queue, its attempt given back, no job.failed.
        assert rows[job_id].status == "QUEUED" and rows[job_id].attempts == 0, rows[job_id]
        assert events[job_id]["job.started"] == 1 and events[job_id]["job.failed"] == 0, events[job_id]
    for row in rows.values():
        assert row.status in ("QUEUED", "COMPLETED"), row
        assert row.attempts == (1 if row.status == "COMPLETED" else 0), row

    second, jobs = await restart_until_final(start_daemon, env, headers, numbers, timeout=40)
    assert_completed(jobs, numbers)
    assert all(j["attempts"] == 1 for j in jobs.values()), [j["attempts"] for j in jobs.values()]
    assert [r for r in second.records if r.get("action") == "jobs.reaped"] == [], second.describe()

    events = await event_counts(database_url)
    for job_id in numbers:
        seen = events[job_id]
        assert seen["job.queued"] == 1 and seen["job.completed"] == 1 and seen["job.failed"] == 0, (job_id, seen)
        assert seen["job.started"] == (2 if job_id in released else 1), (job_id, seen)
    await second.stop(timeout=15)
