"""Jobs over HTTP (SPEC §6): upload and file typing, the worker pool's lifecycle, the
events outbox, failure, restart, cancel, result patches, deletion, retries, the lease
reaper, listing and ownership. Runs on SQLite and, with DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import re
import urllib.parse
from typing import Any

import pytest
import sqlalchemy as sa
import trio
import trio.testing
from jobs_helpers import (
    CSV_BYTES,
    FAIL_SCHEMA,
    GARBAGE,
    HTML_BYTES,
    INVOICE_RESULT,
    INVOICE_TXT,
    JOB_KEYS,
    PDF_BYTES,
    RESULT_META,
    STRICT_SCHEMA,
    bad_request,
    blob_files,
    count_jobs,
    create_job,
    create_schema,
    docx_bytes,
    error_of,
    event_types,
    events_of,
    image_bytes,
    job_row,
    multipart,
    plain_zip,
    post_job,
    post_run,
    register,
    running_workers,
    user_id_of,
    wait_for_status,
    with_jobs_config,
    xlsx_bytes,
)

from daemon.clock import utcnow
from daemon.errors import PermanentJobError, TransientJobError
from daemon.jobs import filetypes
from daemon.jobs.pool import process_job
from daemon.jobs.retry import job_retry_at
from daemon.services import Services
from daemon.storage.repos import jobs as repo
from daemon.storage.tables import jobs as jobs_table

ISO_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


async def claim(services: Any, owner: str = "test-worker", lease_s: int = 60,
                now: dt.datetime | None = None) -> Any:
    return await services.db.run(repo.claim_next, owner=owner, now=now or utcnow(), lease_s=lease_s)


# --- creating a job --------------------------------------------------------------------

async def test_create_returns_the_whole_job_object_and_records_job_queued(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    r = await post_job(client, alice, schema_id, INVOICE_TXT, "invoice.txt")
    job = await r.get_json()
    assert r.status_code == 201, job
    assert set(job) == JOB_KEYS
    assert job["type"] == "EXTRACTION" and job["status"] == "QUEUED"
    assert job["schemaId"] == schema_id and job["jobRunId"] is None
    assert job["fileName"] == "invoice.txt" and job["fileSize"] == len(INVOICE_TXT)
    assert job["mimeType"] == "text/plain"
    assert job["sha256"] == hashlib.sha256(INVOICE_TXT).hexdigest()
    assert job["attempts"] == 0
    for unset in ("pageCount", "result", "resultMeta", "errorMessage", "errorCode", "startedAt", "finishedAt"):
        assert job[unset] is None, unset
    assert ISO_Z.fullmatch(job["createdAt"]) and job["updatedAt"] == job["createdAt"]
    assert "Idempotent-Replayed" not in r.headers

    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    assert r.status_code == 200 and await r.get_json() == job

    (event,) = await events_of(services, job_id=job["id"])
    assert event.type == "job.queued" and event.schema_id == schema_id and event.job_run_id is None
    assert event.user_id == await user_id_of(client, alice)
    assert event.data == {"job": job}
    assert len(blob_files(services)) == 1


async def test_the_file_type_is_told_from_the_bytes_not_the_name(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    cases = [
        ("invoice.txt", PDF_BYTES, filetypes.PDF),
        ("scan.pdf", image_bytes("PNG"), filetypes.PNG),
        ("photo.png", image_bytes("JPEG"), filetypes.JPEG),
        ("scan.jpg", image_bytes("TIFF"), filetypes.TIFF),
        ("image.tiff", image_bytes("WEBP"), filetypes.WEBP),
        ("report.xlsx", docx_bytes(), filetypes.DOCX),
        ("sheet.docx", xlsx_bytes(), filetypes.XLSX),
        ("data.txt", CSV_BYTES, filetypes.CSV),
        ("notes.csv", INVOICE_TXT, filetypes.TXT),
        ("page.txt", HTML_BYTES, filetypes.HTML),
        ("no-extension", INVOICE_TXT, filetypes.TXT),
    ]
    wrong = {}
    for name, data, expected in cases:
        r = await post_job(client, alice, schema_id, data, name)
        body = await r.get_json()
        assert r.status_code == 201, (name, body)
        assert body["fileName"] == name and body["fileSize"] == len(data)
        assert body["sha256"] == hashlib.sha256(data).hexdigest()
        if body["mimeType"] != expected:
            wrong[name] = (body["mimeType"], expected)
    assert wrong == {}


@pytest.mark.parametrize("data", [GARBAGE, b"", b"\x00\x01\x02 not text \x00", "zip"],
                         ids=["binary", "empty", "nul", "zip"])
async def test_an_unsupported_file_is_400_and_leaves_nothing_behind(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, data: Any) -> None:
    if data == "zip":
        data = plain_zip()
    r = await post_job(client, alice, schema_id, data, "invoice.pdf")
    (message,) = await bad_request(r)
    assert message.startswith("Unsupported file type"), message
    assert await count_jobs(services) == 0
    assert blob_files(services) == []
    assert await events_of(services) == []


async def test_missing_or_wrong_fields_are_400_and_leave_no_blob(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    bob = await register(client, "bob@example.com")
    bobs_schema = await create_schema(client, bob)
    deleted = await create_schema(client, alice, name="Old")
    assert (await client.delete(f"/api/schemas/{deleted}", headers=alice)).status_code == 204

    messages = await bad_request(await post_job(client, alice, schema_id, None))
    assert any("file" in m for m in messages), messages
    for type_ in ("OCR", "extraction", "", None):
        messages = await bad_request(await post_job(client, alice, schema_id, type_=type_))
        assert any(m.startswith("type") for m in messages), (type_, messages)
    for wrong in (None, "", "01m7y0wjbda0tq1qjfvjv4mj8f", "nope", bobs_schema, deleted):
        messages = await bad_request(await post_job(client, alice, wrong))
        assert any(m.startswith("schemaId") for m in messages), (wrong, messages)
    # Every problem at once.
    messages = await bad_request(await post_job(client, alice, None, type_="OCR"))
    assert len(messages) >= 2, messages

    # A file part under another name is not the file.
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                   [("document", "invoice.txt", INVOICE_TXT)])
    await bad_request(await client.post("/api/jobs", data=body, headers={**alice, **content_type}))
    # JSON naming a remote file: there are no integrations yet.
    r = await client.post("/api/jobs", json={"type": "EXTRACTION", "schemaId": schema_id,
                                             "source": {"integrationId": "int_1", "fileId": "f1"}}, headers=alice)
    assert any("integrationId" in m for m in await bad_request(r))
    # Not multipart at all.
    await bad_request(await client.post("/api/jobs", data=INVOICE_TXT,
                                        headers={**alice, "Content-Type": "text/plain"}))

    assert await count_jobs(services) == 0
    assert blob_files(services) == []


async def test_a_file_over_max_file_size_is_413_and_leaves_no_blob(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    with_jobs_config(services, max_file_size_bytes=1000)
    r = await post_job(client, alice, schema_id, b"Total: 1\n" * 200, "big.txt")
    body = await error_of(r, 413)
    assert body["message"] == "File exceeds the maximum size of 1,000 bytes (0.000953674 MiB, MAX_FILE_SIZE)"
    assert blob_files(services) == [] and await count_jobs(services) == 0

    # Exactly the limit is accepted.
    exact = (b"Total: 12.50\n" * 100)[:1000]
    job = await create_job(client, alice, schema_id, exact, "exact.txt")
    assert job["fileSize"] == 1000
    assert len(blob_files(services)) == 1


async def test_an_oversized_content_length_is_refused_with_413(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    with_jobs_config(services, max_file_size_bytes=1000)
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                   [("file", "big.txt", b"Total: 1\n" * 20_000)])
    r = await client.post("/api/jobs", data=body,
                          headers={**alice, **content_type, "Content-Length": str(len(body))})
    # The limit as it was set, not the file's plus the form's slack around it.
    assert (await error_of(r, 413))["message"].startswith("File exceeds the maximum size of 1,000 bytes")
    assert blob_files(services) == [] and await count_jobs(services) == 0


async def test_uploading_needs_a_credential(client: Any, services: Any, alice: dict[str, str],
                                            schema_id: str) -> None:
    r = await post_job(client, {}, schema_id)
    await error_of(r, 401)
    r = await post_job(client, {"Authorization": "Bearer not-a-token"}, schema_id)
    await error_of(r, 401)
    assert (await client.get("/api/jobs")).status_code == 401
    assert blob_files(services) == [] and await count_jobs(services) == 0


# --- the worker pool: success ---------------------------------------------------------

async def test_a_job_runs_to_completed_with_its_events_and_file(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done
    assert done["result"] == INVOICE_RESULT
    assert done["resultMeta"]["provider"] == "rules"
    assert set(done["resultMeta"]) >= {"provider", "model", "durationMs", "fields"}
    assert done["attempts"] == 1 and done["pageCount"] == 1
    assert done["errorCode"] is None and done["errorMessage"] is None
    assert ISO_Z.fullmatch(done["startedAt"]) and ISO_Z.fullmatch(done["finishedAt"])
    assert job["createdAt"] <= done["startedAt"] <= done["finishedAt"] == done["updatedAt"]
    assert "originalResult" not in done

    r = await client.get(f"/api/jobs/{job['id']}/file", headers=alice)
    assert r.status_code == 200
    assert await r.get_data() == INVOICE_TXT
    assert r.mimetype == "text/plain"
    assert "invoice.txt" in r.headers.get("Content-Disposition", "")

    rows = await events_of(services, job_id=job["id"])
    assert [row.type for row in rows] == ["job.queued", "job.started", "job.completed"]
    assert [row.data["job"]["status"] for row in rows] == ["QUEUED", "RUNNING", "COMPLETED"]
    for row in rows:
        assert set(row.data) == {"job"} and set(row.data["job"]) == JOB_KEYS
        assert row.data["job"]["id"] == job["id"] and row.schema_id == schema_id
    assert rows[0].data["job"]["result"] is None and rows[1].data["job"]["result"] is None
    assert rows[1].data["job"]["attempts"] == 1 and rows[1].data["job"]["startedAt"] is not None
    assert rows[2].data["job"] == done
    assert rows[0].occurred_at <= rows[1].occurred_at <= rows[2].occurred_at


async def test_a_corrupt_office_file_fails_as_corrupted_file(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    truncated = docx_bytes("Invoice Number: INV-42\n" * 200)[:2048]
    job = await create_job(client, alice, schema_id, truncated, "invoice.docx")
    assert job["mimeType"] == filetypes.DOCX
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED")
    assert failed["errorCode"] == "CORRUPTED_FILE" and failed["errorMessage"], failed
    assert failed["attempts"] == 1


async def test_shutdown_gives_a_running_job_back_to_the_queue(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, monkeypatch: Any) -> None:
    import daemon.jobs.pool as pool

    async def never_ends(*args: Any, **kwargs: Any) -> Any:
        await trio.sleep_forever()

    monkeypatch.setattr(pool, "extract", never_ends)
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        running = await wait_for_status(client, alice, job["id"], "RUNNING")
        assert running["attempts"] == 1
    row = await job_row(services, job["id"])
    assert row.status == "QUEUED" and row.attempts == 0 and row.lease_owner is None
    assert row.run_after is not None
    assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.started"]


# --- failure, restart, cancel ---------------------------------------------------------

async def test_a_result_lacking_a_required_value_fails_only_if_the_schema_says_so_and_restart_queues_it_again(
        client: Any, services: Any, alice: dict[str, str]) -> None:
    # By default the job completes with what was found, marked incomplete (SPEC §7).
    lenient = await create_schema(client, alice, STRICT_SCHEMA, name="Lenient")
    job = await create_job(client, alice, lenient)
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED")
    assert done["status"] == "COMPLETED" and done["errorCode"] is None, done
    assert done["result"] == {"invoice_number": "INV-42"}
    assert done["resultMeta"]["complete"] is False and done["resultMeta"]["missing"] == ["/iban"]

    strict = await create_schema(client, alice, FAIL_SCHEMA, name="Strict")
    job = await create_job(client, alice, strict)
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED")
    assert failed["status"] == "FAILED" and failed["errorCode"] == "RESULT_INVALID", failed
    assert failed["errorMessage"] and "/iban" in failed["errorMessage"]
    assert failed["result"] is None
    assert failed["attempts"] == 1  # a permanent error is not retried
    assert failed["finishedAt"] is not None
    rows = await events_of(services, job_id=job["id"])
    assert [row.type for row in rows] == ["job.queued", "job.started", "job.failed"]
    assert rows[-1].data == {"job": failed}

    r = await client.post(f"/api/jobs/{job['id']}/restart", headers=alice)
    restarted = await r.get_json()
    assert r.status_code == 200, restarted
    assert restarted["status"] == "QUEUED" and restarted["attempts"] == 0
    assert restarted["errorCode"] is None and restarted["errorMessage"] is None
    assert restarted["finishedAt"] is None
    rows = await events_of(services, job_id=job["id"])
    assert [row.type for row in rows] == ["job.queued", "job.started", "job.failed", "job.queued"]
    assert rows[-1].data == {"job": restarted}

    # Only a FAILED job can be restarted.
    r = await client.post(f"/api/jobs/{job['id']}/restart", headers=alice)
    assert (await error_of(r, 409))["error"] == "Conflict"
    assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.started", "job.failed",
                                                              "job.queued"]


async def test_cancel_a_queued_job(client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    r = await client.post(f"/api/jobs/{job['id']}/cancel", headers=alice)
    cancelled = await r.get_json()
    assert r.status_code == 200, cancelled
    assert cancelled["status"] == "CANCELLED" and cancelled["finishedAt"] is not None
    rows = await events_of(services, job_id=job["id"])
    assert [row.type for row in rows] == ["job.queued", "job.cancelled"]
    assert rows[-1].data == {"job": cancelled}

    for action in ("cancel", "restart"):
        r = await client.post(f"/api/jobs/{job['id']}/{action}", headers=alice)
        await error_of(r, 409)
    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": INVOICE_RESULT}, headers=alice)
    await error_of(r, 409)

    # A cancelled job never runs: a later job does, this one stays cancelled.
    later = await create_job(client, alice, schema_id)
    async with running_workers(services):
        await wait_for_status(client, alice, later["id"], "COMPLETED", "FAILED")
    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    assert (await r.get_json()) == cancelled
    assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.cancelled"]


async def test_a_completed_job_can_be_corrected_not_cancelled_nor_restarted(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done
    url = f"/api/jobs/{job['id']}"

    for action in ("cancel", "restart"):
        await error_of(await client.post(f"{url}/{action}", headers=alice), 409)

    corrected = {"invoice_number": "INV-43", "total": 13.75}
    r = await client.patch(f"{url}/result", json={"result": corrected}, headers=alice)
    patched = await r.get_json()
    assert r.status_code == 200, patched
    assert patched["result"] == corrected and patched["originalResult"] == INVOICE_RESULT
    assert patched["status"] == "COMPLETED" and patched["updatedAt"] >= done["updatedAt"]
    assert patched["finishedAt"] == done["finishedAt"]
    r = await client.get(url, headers=alice)
    assert await r.get_json() == patched
    rows = await events_of(services, job_id=job["id"])
    assert [row.type for row in rows] == ["job.queued", "job.started", "job.completed", "job.updated"]
    assert rows[-1].data["job"]["result"] == corrected
    assert rows[-1].data["job"]["status"] == "COMPLETED"

    # A second correction keeps the extracted original, not the first correction.
    r = await client.patch(f"{url}/result", json={"result": {"invoice_number": "INV-44", "total": 1}},
                           headers=alice)
    again = await r.get_json()
    assert r.status_code == 200, again
    assert again["originalResult"] == INVOICE_RESULT and again["result"] == {"invoice_number": "INV-44", "total": 1}

    # A result that does not match the schema is 400 naming the path; nothing changes.
    r = await client.patch(f"{url}/result", json={"result": {"invoice_number": "INV-45", "total": "a lot"}},
                           headers=alice)
    messages = await bad_request(r)
    assert any("/total" in m for m in messages), messages
    r = await client.patch(f"{url}/result", json={"result": {"invoice_number": 42}}, headers=alice)
    messages = await bad_request(r)
    assert any("/invoice_number" in m for m in messages), messages
    for body in ({}, {"result": "INV-42"}, {"result": [1, 2]}):
        await bad_request(await client.patch(f"{url}/result", json=body, headers=alice))
    r = await client.get(url, headers=alice)
    assert await r.get_json() == again
    assert (await event_types(services, job_id=job["id"])).count("job.updated") == 2


async def test_patching_the_result_of_a_job_that_is_not_completed_is_409(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    url = f"/api/jobs/{job['id']}/result"
    await error_of(await client.patch(url, json={"result": INVOICE_RESULT}, headers=alice), 409)
    running = await claim(services)
    assert running.id == job["id"]
    await error_of(await client.patch(url, json={"result": INVOICE_RESULT}, headers=alice), 409)
    await services.db.run(repo.fail_job, job_id=job["id"], owner="test-worker", code="PARSE_FAILED",
                          message="could not parse", now=utcnow(), retry_at=None)
    await error_of(await client.patch(url, json={"result": INVOICE_RESULT}, headers=alice), 409)
    assert "job.updated" not in await event_types(services, job_id=job["id"])


async def test_delete_removes_the_job_and_its_file_but_not_while_running(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    first = await create_job(client, alice, schema_id)
    running = await claim(services)
    assert running.id == first["id"] and running.status == "RUNNING"
    r = await client.delete(f"/api/jobs/{first['id']}", headers=alice)
    await error_of(r, 409)
    assert len(blob_files(services)) == 1
    assert (await client.get(f"/api/jobs/{first['id']}", headers=alice)).status_code == 200

    await services.db.run(repo.complete_job, job_id=first["id"], owner="test-worker", result=INVOICE_RESULT,
                          meta=RESULT_META, page_count=1, now=utcnow())
    second = await create_job(client, alice, schema_id, b"Invoice Number: INV-7\n", "other.txt")
    assert len(blob_files(services)) == 2

    for job in (first, second):  # COMPLETED, then QUEUED
        r = await client.delete(f"/api/jobs/{job['id']}", headers=alice)
        assert r.status_code == 204 and await r.get_data() == b""
        for path in ("", "/file"):
            r = await client.get(f"/api/jobs/{job['id']}{path}", headers=alice)
            assert (await error_of(r, 404))["message"] == "Job not found"
        await error_of(await client.delete(f"/api/jobs/{job['id']}", headers=alice), 404)
    assert blob_files(services) == []
    assert await count_jobs(services) == 0


async def test_a_job_whose_schema_was_deleted_fails_with_schema_not_found(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    assert (await client.delete(f"/api/schemas/{schema_id}", headers=alice)).status_code == 204
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED")
    assert failed["errorCode"] == "SCHEMA_NOT_FOUND" and failed["errorMessage"], failed
    assert failed["attempts"] == 1
    assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.started", "job.failed"]
    # ...and a new job on it is refused.
    await bad_request(await post_job(client, alice, schema_id))


# --- retries --------------------------------------------------------------------------

async def test_a_retryable_failure_is_retried_with_backoff_then_fails(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    """The queue side of retries, step by step through the repo functions."""
    job = await create_job(client, alice, schema_id)
    max_attempts = services.config.jobs.max_attempts
    assert max_attempts == 3
    now = utcnow()
    for attempt in range(1, max_attempts + 1):
        claimed = await claim(services, now=now)
        assert claimed is not None and claimed.id == job["id"] and claimed.attempts == attempt
        retry_at = job_retry_at(attempts=claimed.attempts, max_attempts=max_attempts, retryable=True, now=now,
                                   initial_delay_s=5.0)
        if attempt < max_attempts:
            assert retry_at is not None
            assert 0.9 * 5 * 2 ** (attempt - 1) <= (retry_at - now).total_seconds() <= 1.1 * 5 * 2 ** (attempt - 1)
        else:
            assert retry_at is None
        row = await services.db.run(repo.fail_job, job_id=job["id"], owner="test-worker",
                                    code="AI_PROVIDER_TIMEOUT", message="provider timed out", now=now,
                                    retry_at=retry_at)
        assert row is not None
        r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
        body = await r.get_json()
        assert body["attempts"] == attempt
        if retry_at is not None:
            assert body["status"] == "QUEUED" and body["finishedAt"] is None
            # Not claimable before its time, claimable once it is due.
            assert await claim(services, now=retry_at - dt.timedelta(milliseconds=100)) is None
            assert await services.db.read(repo.next_due) == retry_at
            now = retry_at + dt.timedelta(milliseconds=1)
        else:
            assert body["status"] == "FAILED" and body["errorCode"] == "AI_PROVIDER_TIMEOUT"
            assert body["errorMessage"] == "provider timed out" and body["finishedAt"] is not None
    assert await event_types(services, job_id=job["id"]) == (
        ["job.queued"] + ["job.started"] * max_attempts + ["job.failed"])


def _extract_failing(monkeypatch: Any, times: int, error: Exception) -> list[int]:
    """The worker pool's extraction, raising `error` its first `times` calls; how many it
    raised, counted in the list returned."""
    import daemon.jobs.pool as pool

    real_extract = pool.extract
    raised = [0]

    async def extract(*args: Any, **kwargs: Any) -> Any:
        if raised[0] < times:
            raised[0] += 1
            raise error
        return await real_extract(*args, **kwargs)

    monkeypatch.setattr(pool, "extract", extract)
    return raised


def _lost_connection(statement: str) -> Any:
    """What SQLAlchemy raises when the server ends the connection (a restart, a failover,
    pg_terminate_backend): an OperationalError whose connection was invalidated."""
    return sa.exc.OperationalError(statement, {}, Exception("terminating connection due to administrator command"),
                                   connection_invalidated=True)


@pytest.mark.parametrize(("error", "raised", "max_attempts", "attempts"), [
    # A lock held past SQLite's busy timeout: an attempt, counted.
    (sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked")), 1, 3, 2),
    # A lost connection (a flapping failover) used up the attempts and failed the job for
    # good, with "the job will be tried again" as its message: not counted now.
    (_lost_connection("SELECT learned_examples"), 3, 1, 1),
])
async def test_a_database_error_during_an_attempt_retries_the_job(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, monkeypatch: Any, error: Exception,
        raised: int, max_attempts: int, attempts: int) -> None:
    """A database error in the middle of an attempt failed the job as INTERNAL_ERROR, like a
    bug in docex; the document was never at fault."""
    count = _extract_failing(monkeypatch, raised, error)
    with_jobs_config(services, retry_backoff_initial_ms=50, max_attempts=max_attempts)
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED", deadline_s=20)
    assert done["status"] == "COMPLETED" and done["attempts"] == attempts and done["errorCode"] is None, done
    assert count == [raised]
    started = ["job.started"] * (raised + 1)
    assert await event_types(services, job_id=job["id"]) == ["job.queued", *started, "job.completed"]


async def test_an_outcome_written_as_the_connection_drops_is_written_again(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, monkeypatch: Any) -> None:
    """The write of a finished attempt's result met a lost connection: the worker dropped
    the outcome, the lease expired and the reaper counted a lost worker ("stopped
    responding"), though the worker was alive and held the result."""
    from daemon.storage.repos import jobs as jobs_repo

    real_complete = jobs_repo.complete_job
    lost = 0

    def complete_after_two_drops(*args: Any, **kwargs: Any) -> Any:
        nonlocal lost
        if lost < 2:
            lost += 1
            raise _lost_connection("UPDATE jobs")
        return real_complete(*args, **kwargs)

    monkeypatch.setattr(jobs_repo, "complete_job", complete_after_two_drops)
    with_jobs_config(services, max_attempts=1)
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED", deadline_s=20)
    assert done["status"] == "COMPLETED" and done["attempts"] == 1, done
    assert lost == 2


async def test_a_lease_renewal_the_database_refuses_briefly_keeps_the_work(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, monkeypatch: Any) -> None:
    """One failed renewal threw the attempt's work away and left the job to the reaper, which
    counted an attempt: three short outages of the database failed a healthy job."""
    import sqlalchemy as sa
    import trio

    import daemon.jobs.pool as pool
    from daemon.storage.repos import jobs as jobs_repo

    real_extract, real_renew = pool.extract, jobs_repo.renew_lease
    refused = 0

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await trio.sleep(2.5)  # several renewals of a 1.5 s lease
        return await real_extract(*args, **kwargs)

    def renew_refused_twice(*args: Any, **kwargs: Any) -> Any:
        nonlocal refused
        if refused < 2:
            refused += 1
            raise sa.exc.OperationalError("UPDATE jobs", {}, Exception("the database system is starting up"))
        return real_renew(*args, **kwargs)

    monkeypatch.setattr(pool, "extract", slow)
    monkeypatch.setattr(jobs_repo, "renew_lease", renew_refused_twice)
    with_jobs_config(services, lease_s=1.5, max_attempts=3)
    job = await create_job(client, alice, schema_id)
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED", deadline_s=20)
    assert done["status"] == "COMPLETED" and done["attempts"] == 1, done
    assert refused == 2


async def test_the_pool_retries_a_transient_provider_error_up_to_max_attempts(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, monkeypatch: Any) -> None:
    """End to end through the worker pool, with the provider replaced by one that times out."""
    import daemon.jobs.pool as pool

    calls: list[float] = []

    async def timing_out(*args: Any, **kwargs: Any) -> Any:
        calls.append(trio.current_time())
        raise TransientJobError("AI_PROVIDER_TIMEOUT", "the provider did not answer in time")

    monkeypatch.setattr(pool, "extract", timing_out)
    with_jobs_config(services, retry_backoff_initial_ms=100, max_attempts=3)
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED", deadline_s=20)
    assert failed["status"] == "FAILED" and failed["errorCode"] == "AI_PROVIDER_TIMEOUT", failed
    assert failed["attempts"] == 3 and len(calls) == 3
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.18, gaps  # 100 ms, then 200 ms (±10 %)
    assert await event_types(services, job_id=job["id"]) == (
        ["job.queued", "job.started", "job.started", "job.started", "job.failed"])


async def test_the_pool_does_not_retry_a_permanent_error_and_honours_retry_after(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, monkeypatch: Any) -> None:
    import daemon.jobs.pool as pool

    calls: list[float] = []

    async def rate_limited_once_then_broken(*args: Any, **kwargs: Any) -> Any:
        calls.append(trio.current_time())
        if len(calls) == 1:
            raise TransientJobError("AI_PROVIDER_RATE_LIMIT", "slow down", retry_after_s=0.5)
        raise PermanentJobError("AI_PROVIDER_ERROR", "the provider refused the request")

    monkeypatch.setattr(pool, "extract", rate_limited_once_then_broken)
    with_jobs_config(services, retry_backoff_initial_ms=10, max_attempts=5)
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED", deadline_s=20)
    assert failed["errorCode"] == "AI_PROVIDER_ERROR" and failed["attempts"] == 2, failed
    assert calls[1] - calls[0] >= 0.45  # Retry-After beats the 10 ms backoff


# --- the lease reaper -----------------------------------------------------------------

async def test_the_reaper_requeues_a_job_whose_worker_died(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    then = utcnow()
    claimed = await claim(services, owner="dead-worker", lease_s=1, now=then)
    assert claimed.id == job["id"] and claimed.lease_owner == "dead-worker"
    max_attempts = services.config.jobs.max_attempts

    # Not before the lease expires.
    assert await services.db.run(repo.reap_expired, now=then + dt.timedelta(milliseconds=500),
                                 max_attempts=max_attempts) == 0
    assert (await job_row(services, job["id"])).status == "RUNNING"

    assert await services.db.run(repo.reap_expired, now=then + dt.timedelta(seconds=2),
                                 max_attempts=max_attempts) == 1
    row = await job_row(services, job["id"])
    assert row.status == "QUEUED" and row.lease_owner is None and row.lease_expires_at is None
    assert row.attempts == 1
    # The dead worker's late answer is not recorded: the job is no longer its.
    assert await services.db.run(repo.complete_job, job_id=job["id"], owner="dead-worker", result=INVOICE_RESULT,
                                 meta=RESULT_META, page_count=1, now=utcnow()) is None
    assert not await services.db.run(repo.renew_lease, job_id=job["id"], owner="dead-worker", now=utcnow(),
                                     lease_s=60)
    assert (await job_row(services, job["id"])).status == "QUEUED"

    # It runs again, to completion (the reaper made it due at its own `now`).
    again = await claim(services, owner="live-worker", now=then + dt.timedelta(seconds=2))
    assert again is not None and again.id == job["id"] and again.attempts == 2
    await process_job(services, again, "live-worker")
    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    done = await r.get_json()
    assert done["status"] == "COMPLETED" and done["attempts"] == 2 and done["result"] == INVOICE_RESULT
    # (sorted: the second claim was stamped two seconds ahead of the real clock)
    assert sorted(await event_types(services, job_id=job["id"])) == [
        "job.completed", "job.queued", "job.started", "job.started"]


async def test_the_reaper_fails_a_job_out_of_attempts(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    now = utcnow()
    for attempt in range(1, 4):
        claimed = await claim(services, owner="dead-worker", lease_s=1, now=now)
        assert claimed.id == job["id"] and claimed.attempts == attempt
        now += dt.timedelta(seconds=2)
        assert await services.db.run(repo.reap_expired, now=now, max_attempts=3) == 1
    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    failed = await r.get_json()
    assert failed["status"] == "FAILED" and failed["errorCode"] == "INTERNAL_ERROR", failed
    assert failed["errorMessage"] and failed["attempts"] == 3 and failed["finishedAt"] is not None
    rows = await events_of(services, job_id=job["id"])
    assert [row.type for row in rows] == ["job.queued"] + ["job.started"] * 3 + ["job.failed"]
    assert rows[-1].data["job"]["errorCode"] == "INTERNAL_ERROR"
    assert await claim(services, now=now + dt.timedelta(hours=1)) is None


# --- listing ---------------------------------------------------------------------------

async def _create_spaced(client: Any, auth: dict[str, str], schema_id: str, n: int) -> list[dict[str, Any]]:
    """`n` jobs, each in a millisecond of its own (ids sort by millisecond)."""
    created = []
    for i in range(n):
        created.append(await create_job(client, auth, schema_id, f"Invoice Number: INV-{i}\n".encode(),
                                        f"invoice-{i}.txt"))
        await trio.sleep(0.003)
    return created


async def test_list_shape_order_and_filters(client: Any, services: Any, alice: dict[str, str],
                                            schema_id: str) -> None:
    other_schema = await create_schema(client, alice, name="Other")
    early = await _create_spaced(client, alice, schema_id, 2)
    await trio.sleep(0.05)
    boundary = utcnow()
    await trio.sleep(0.05)
    late = await _create_spaced(client, alice, other_schema, 2)
    r = await post_run(client, alice, schema_id, [("a.txt", INVOICE_TXT), ("b.txt", INVOICE_TXT)])
    run = await r.get_json()
    assert r.status_code == 201, run
    cancelled = await client.post(f"/api/jobs/{early[0]['id']}/cancel", headers=alice)
    assert cancelled.status_code == 200
    everything = [*early, *late]

    async def ids(query: str) -> list[str]:
        r = await client.get(f"/api/jobs{query}", headers=alice)
        body = await r.get_json()
        assert r.status_code == 200, (query, body)
        assert set(body) == {"data", "nextCursor"}, body
        for job in body["data"]:
            assert set(job) == JOB_KEYS, job
        return [job["id"] for job in body["data"]]

    run_ids = {job["id"] for job in run["jobs"]}
    listed = await ids("")
    assert len(listed) == 6 and set(listed[:2]) == run_ids
    assert listed[2:] == [job["id"] for job in reversed(everything)]
    r = await client.get("/api/jobs", headers=alice)
    first = (await r.get_json())["data"][-1]
    assert first["id"] == early[0]["id"] and first["status"] == "CANCELLED"

    assert await ids("?status=CANCELLED") == [early[0]["id"]]
    assert set(await ids("?status=QUEUED")) == {early[1]["id"], *run_ids, *(j["id"] for j in late)}
    assert await ids("?status=COMPLETED") == []
    assert await ids(f"?schemaId={other_schema}") == [job["id"] for job in reversed(late)]
    assert set(await ids(f"?jobRunId={run['id']}")) == run_ids
    assert await ids(f"?jobRunId={run['id']}&schemaId={other_schema}") == []
    assert await ids(f"?schemaId={other_schema}&status=CANCELLED") == []

    def q(value: dt.datetime) -> str:
        return urllib.parse.quote(value.isoformat())

    stamp_z = boundary.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert await ids(f"?createdBefore={stamp_z}") == [job["id"] for job in reversed(early)]
    assert await ids(f"?createdBefore={q(boundary)}") == [job["id"] for job in reversed(early)]
    after = await ids(f"?createdAfter={stamp_z}")
    assert after[2:] == [job["id"] for job in reversed(late)] and set(after[:2]) == run_ids
    assert await ids(f"?createdAfter={q(boundary - dt.timedelta(days=1))}&createdBefore={stamp_z}"
                     f"&status=QUEUED") == [early[1]["id"]]
    # Another offset, same instant.
    plus_two = boundary.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert await ids(f"?createdBefore={q(plus_two)}") == [job["id"] for job in reversed(early)]
    assert await ids(f"?createdAfter={q(utcnow() + dt.timedelta(minutes=1))}") == []

    for query in ("?status=DONE", "?status=queued", "?createdAfter=yesterday", "?createdBefore=2024-13-45",
                  "?limit=0", "?limit=101", "?limit=-1", "?limit=ten", "?cursor=nope"):
        r = await client.get(f"/api/jobs{query}", headers=alice)
        await bad_request(r)
    assert len(await ids("?limit=100")) == 6
    assert len(await ids("?limit=1")) == 1


async def test_walking_every_page_returns_every_job_once(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    created = await _create_spaced(client, alice, schema_id, 7)
    r = await client.get("/api/jobs", headers=alice)
    body = await r.get_json()
    assert len(body["data"]) == 7 and body["nextCursor"] is None  # default limit 20
    for limit in (1, 2, 3, 7):
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
            r = await client.get(f"/api/jobs{query}", headers=alice)
            body = await r.get_json()
            assert r.status_code == 200, body
            assert len(body["data"]) <= limit
            seen += [job["id"] for job in body["data"]]
            pages += 1
            cursor = body["nextCursor"]
            if cursor is None:
                break
            assert pages < 20
        assert seen == [job["id"] for job in reversed(created)], limit
    # Filters hold across pages.
    r = await client.get("/api/jobs?limit=2&status=QUEUED", headers=alice)
    body = await r.get_json()
    r = await client.get(f"/api/jobs?limit=10&status=QUEUED&cursor={body['nextCursor']}", headers=alice)
    assert [j["id"] for j in (await r.get_json())["data"]] == [job["id"] for job in reversed(created[:5])]


async def test_another_users_jobs_are_invisible(client: Any, services: Any, alice: dict[str, str],
                                                schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    bob = await register(client, "bob@example.com")
    bobs_schema = await create_schema(client, bob)
    bobs_job = await create_job(client, bob, bobs_schema)

    r = await client.get("/api/jobs", headers=bob)
    assert [j["id"] for j in (await r.get_json())["data"]] == [bobs_job["id"]]
    for query in (f"?schemaId={schema_id}", "?status=QUEUED&limit=100"):
        r = await client.get(f"/api/jobs{query}", headers=bob)
        assert job["id"] not in [j["id"] for j in (await r.get_json())["data"]]

    url = f"/api/jobs/{job['id']}"
    attempts = [
        client.get(url, headers=bob),
        client.get(f"{url}/file", headers=bob),
        client.post(f"{url}/restart", headers=bob),
        client.post(f"{url}/cancel", headers=bob),
        client.patch(f"{url}/result", json={"result": INVOICE_RESULT}, headers=bob),
        client.delete(url, headers=bob),
    ]
    for attempt in attempts:
        body = await error_of(await attempt, 404)
        assert body["message"] == "Job not found"
    # Alice's job is untouched and still hers.
    r = await client.get(url, headers=alice)
    assert await r.get_json() == job
    assert await event_types(services, job_id=job["id"]) == ["job.queued"]
    # Even a completed one cannot be patched by someone else.
    await services.db.run(_force_completed, job["id"])
    r = await client.patch(f"{url}/result", json={"result": INVOICE_RESULT}, headers=bob)
    await error_of(r, 404)


def _force_completed(conn: sa.Connection, job_id: str) -> None:
    conn.execute(jobs_table.update().where(jobs_table.c.id == job_id).values(status="COMPLETED",
                                                                             result=INVOICE_RESULT))


async def test_unknown_job_ids_are_404(client: Any, alice: dict[str, str]) -> None:
    for path in ("/api/jobs/01m7y0wjbda0tq1qjfvjv4mj8f", "/api/jobs/nope", "/api/jobs/nope/file"):
        await error_of(await client.get(path, headers=alice), 404)
    await error_of(await client.post("/api/jobs/nope/restart", headers=alice), 404)
    await error_of(await client.delete("/api/jobs/nope", headers=alice), 404)



# --- a create transaction that fails ------------------------------------------------------


def _refuse_new_jobs(conn: sa.Connection) -> None:
    """Make every insert into jobs fail inside the database, as a real failing commit would."""
    if conn.dialect.name == "sqlite":
        conn.execute(sa.text("CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs "
                             "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"))
        return
    conn.execute(sa.text("CREATE FUNCTION refuse_jobs() RETURNS trigger AS $$ BEGIN "
                         "RAISE EXCEPTION 'refused by the test'; END $$ LANGUAGE plpgsql"))
    conn.execute(sa.text("CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs "
                         "FOR EACH ROW EXECUTE FUNCTION refuse_jobs()"))


@pytest.mark.parametrize("idempotency_key", [None, "k-1"])
async def test_an_upload_whose_create_transaction_fails_leaves_no_blob(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, idempotency_key: str | None) -> None:
    await services.db.run(_refuse_new_jobs)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    r = await post_job(client, alice, schema_id, headers=headers)
    assert r.status_code == 500, await r.get_json()
    r = await post_run(client, alice, schema_id, [("a.txt", INVOICE_TXT), ("b.txt", INVOICE_TXT)], headers=headers)
    assert r.status_code == 500, await r.get_json()
    assert blob_files(services) == [] and await count_jobs(services) == 0


# --- what the worker logs when its loop fails ------------------------------------------------


async def test_the_worker_logs_a_bug_as_a_bug_not_as_a_database_error(
        client: Any, services: Services, alice: dict[str, str], schema_id: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    called = trio.Event()

    async def broken(*_: Any) -> None:
        called.set()
        raise KeyError("a bug")

    monkeypatch.setattr("daemon.jobs.pool.process_job", broken)
    await create_job(client, alice, schema_id)
    with caplog.at_level("ERROR", logger="daemon.jobs.pool"):
        async with running_workers(services, workers=1):
            with trio.fail_after(10):
                await called.wait()
            await trio.testing.wait_all_tasks_blocked()  # the worker logged, and sleeps before it tries again
    record = caplog.records[0]
    assert record.getMessage() == "worker failed: KeyError" and record.action == "worker.crashed"  # type: ignore[attr-defined]
    assert "database" not in record.getMessage()
