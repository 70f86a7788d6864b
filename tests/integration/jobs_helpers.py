"""Helpers shared by the job, batch-run and idempotency tests (SPEC §6, §8).

A module of its own, not conftest, so the test modules import what they use:
``from jobs_helpers import ...`` (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import io
import secrets
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import trio

from daemon.clock import utcnow
from daemon.services import Services
from daemon.storage.repos import jobs as jobs_repo
from daemon.storage.repos.jobs import NewJob
from daemon.storage.tables import events, idempotency_keys, job_runs, jobs

PASSWORD = "correct horse 42"
ERROR_KEYS = {"statusCode", "message", "error"}
JOB_KEYS = {
    "id", "type", "status", "schemaId", "jobRunId", "fileName", "fileSize", "mimeType", "sha256", "pageCount",
    "attempts", "result", "resultMeta", "errorMessage", "errorCode", "createdAt", "updatedAt", "startedAt",
    "finishedAt", "reviewedAt", "reviewedBy",
}
RUN_KEYS = {"id", "status", "schemaId", "total", "counts", "createdAt", "finishedAt"}
COUNT_KEYS = {"queued", "running", "completed", "failed", "cancelled"}

# The reliable extraction path: a TXT document of "Label: value" lines and the rules provider.
INVOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"invoice_number": {"type": "string"}, "total": {"type": "number"}},
}
INVOICE_TXT = b"Invoice Number: INV-42\nTotal: 12.50\n"
INVOICE_RESULT = {"invoice_number": "INV-42", "total": 12.5}
# The resultMeta a worker records with a complete result, for tests that complete jobs by hand.
RESULT_META: dict[str, Any] = {"provider": "rules", "model": None, "durationMs": 1.0, "fields": {}, "complete": True,
                               "missing": []}
# A schema whose required field INVOICE_TXT does not have: the job completes with
# resultMeta.complete false (SPEC §7); with FAIL_SCHEMA's opt-in it fails RESULT_INVALID.
STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "iban": {"type": "string"},
    },
    "required": ["iban"],
}
FAIL_SCHEMA: dict[str, Any] = {**STRICT_SCHEMA, "x-docex-incomplete": "fail"}

PDF_BYTES = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
)
GARBAGE = bytes(range(256)) * 4


# --- accounts and schemas ---------------------------------------------------------------

async def register(client: Any, email: str = "alice@example.com") -> dict[str, str]:
    """Register an account and return its Authorization header."""
    r = await client.post("/api/auth/register", json={"name": "Someone", "email": email, "password": PASSWORD})
    body = await r.get_json()
    assert r.status_code == 201, body
    return {"Authorization": f"Bearer {body['accessToken']}"}


async def user_id_of(client: Any, auth: dict[str, str]) -> str:
    r = await client.get("/api/auth/me", headers=auth)
    assert r.status_code == 200
    return str((await r.get_json())["id"])


async def create_schema(client: Any, auth: dict[str, str], definition: dict[str, Any] | None = None,
                        name: str = "Invoice") -> str:
    r = await client.post("/api/schemas", json={"name": name, "definition": definition or INVOICE_SCHEMA},
                          headers=auth)
    body = await r.get_json()
    assert r.status_code == 201, body
    return str(body["id"])


# --- multipart ---------------------------------------------------------------------------

def multipart(fields: Iterable[tuple[str, str]] = (),
              files: Iterable[tuple[str, str, bytes]] = ()) -> tuple[bytes, dict[str, str]]:
    """A multipart/form-data body and its Content-Type; `files` are (part name, file name, bytes).

    Built by hand so one request can carry several parts of one name (`files`).
    """
    boundary = "docex" + secrets.token_hex(12)
    out = bytearray()
    for name, value in fields:
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode() + b"\r\n"
    for name, file_name, data in files:
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{file_name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n").encode()
        out += data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


async def post_job(client: Any, auth: dict[str, str], schema_id: str | None, data: bytes | None = INVOICE_TXT,
                   file_name: str = "invoice.txt", *, type_: str | None = "EXTRACTION",
                   headers: dict[str, str] | None = None) -> Any:
    fields = [(k, v) for k, v in (("type", type_), ("schemaId", schema_id)) if v is not None]
    files = [] if data is None else [("file", file_name, data)]
    body, content_type = multipart(fields, files)
    return await client.post("/api/jobs", data=body, headers={**auth, **content_type, **(headers or {})})


async def create_job(client: Any, auth: dict[str, str], schema_id: str, data: bytes = INVOICE_TXT,
                     file_name: str = "invoice.txt") -> dict[str, Any]:
    r = await post_job(client, auth, schema_id, data, file_name)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def post_run(client: Any, auth: dict[str, str], schema_id: str | None,
                   files: Iterable[tuple[str, bytes]], *, type_: str = "EXTRACTION",
                   headers: dict[str, str] | None = None) -> Any:
    fields = [("type", type_)] + ([("schemaId", schema_id)] if schema_id is not None else [])
    body, content_type = multipart(fields, [("files", name, data) for name, data in files])
    return await client.post("/api/job-runs", data=body, headers={**auth, **content_type, **(headers or {})})


async def bad_request(response: Any) -> list[str]:
    body = await response.get_json()
    assert response.status_code == 400, body
    assert set(body) >= ERROR_KEYS and body["error"] == "Bad Request" and isinstance(body["message"], list), body
    return body["message"]  # type: ignore[no-any-return]


async def error_of(response: Any, status: int) -> dict[str, Any]:
    body = await response.get_json()
    assert response.status_code == status, body
    assert set(body) >= ERROR_KEYS and body["statusCode"] == status, body
    return body  # type: ignore[no-any-return]


# --- documents of every type -------------------------------------------------------------

def docx_bytes(text: str = "Invoice Number: INV-42") -> bytes:
    import docx

    document = docx.Document()
    for line in text.splitlines():
        document.add_paragraph(line)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx_bytes() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["Invoice Number", "INV-42"])
    sheet.append(["Total", 12.5])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def image_bytes(fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), "white").save(out, format=fmt)
    return out.getvalue()


def plain_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes/readme.txt", "just a zip")
    return out.getvalue()


CSV_BYTES = b"invoice_number,total,currency\nINV-42,12.50,EUR\nINV-43,7.00,EUR\nINV-44,1.25,EUR\n"
HTML_BYTES = b"<!DOCTYPE html>\n<html><body><p>Invoice Number: INV-42</p></body></html>\n"


# --- the database ------------------------------------------------------------------------

async def job_row(services: Services, job_id: str) -> Any:
    def load(conn: sa.Connection) -> Any:
        return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()

    return await services.db.read(load)


async def count_rows(services: Services, table: sa.Table) -> int:
    def load(conn: sa.Connection) -> int:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())

    return await services.db.read(load)


async def count_jobs(services: Services) -> int:
    return await count_rows(services, jobs)


async def count_runs(services: Services) -> int:
    return await count_rows(services, job_runs)


async def events_of(services: Services, *, job_id: str | None = None, run_id: str | None = None,
                    types: Iterable[str] | None = None) -> list[Any]:
    """Outbox rows about a job or a run, oldest first."""

    def load(conn: sa.Connection) -> list[Any]:
        query = sa.select(events).order_by(events.c.occurred_at, events.c.id)
        if job_id is not None:
            query = query.where(events.c.job_id == job_id)
        if run_id is not None:
            query = query.where(events.c.job_run_id == run_id)
        if types is not None:
            query = query.where(events.c.type.in_(list(types)))
        return list(conn.execute(query))

    return await services.db.read(load)


async def event_types(services: Services, **kw: Any) -> list[str]:
    return [row.type for row in await events_of(services, **kw)]


async def expire_idempotency_keys(services: Services) -> None:
    past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)

    def expire(conn: sa.Connection) -> None:
        conn.execute(idempotency_keys.update().values(expires_at=past))

    await services.db.run(expire)


def blob_files(services: Services) -> list[Path]:
    """Every file under <data_dir>/blobs (partial uploads included)."""
    root = Path(services.config.data_dir) / "blobs"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def with_jobs_config(services: Services, **changes: Any) -> None:
    services.config = dataclasses.replace(services.config, jobs=dataclasses.replace(services.config.jobs, **changes))


# --- workers -----------------------------------------------------------------------------

@asynccontextmanager
async def running_workers(services: Services, workers: int = 2) -> AsyncIterator[None]:
    """The extraction worker pool, for the duration of the block."""
    from daemon.jobs.pool import run_workers

    with_jobs_config(services, workers=workers)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_workers, services)
        try:
            yield
        finally:
            services.stopping.set()
            nursery.cancel_scope.cancel()
    services.stopping = trio.Event()


async def completed_job(client: Any, services: Services, auth: dict[str, str], schema_id: str,
                        data: bytes = INVOICE_TXT, file_name: str = "invoice.txt") -> dict[str, Any]:
    """A job of `data`, read by one worker until COMPLETED (a test fails otherwise)."""
    job = await create_job(client, auth, schema_id, data, file_name)
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, auth, job["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done
    return done


@asynccontextmanager
async def running(services: Services, task: Callable[..., Awaitable[None]]) -> AsyncIterator[None]:
    """One of the daemon's tasks (`run_inboxes`, `run_dispatcher`) on `services`, for the
    duration of the block, then stopped as by SIGTERM."""
    async with trio.open_nursery() as nursery:
        await nursery.start(task, services)
        try:
            yield
        finally:
            services.stopping.set()
    services.stopping = trio.Event()


async def wait_for_status(client: Any, auth: dict[str, str], job_id: str, *statuses: str,
                          deadline_s: float = 30.0) -> dict[str, Any]:
    """Poll GET /api/jobs/:id until the job is in one of `statuses`."""
    return await wait_at(client, auth, f"/api/jobs/{job_id}", *statuses, deadline_s=deadline_s)


async def wait_for_run(client: Any, auth: dict[str, str], run_id: str, *statuses: str,
                       deadline_s: float = 30.0) -> dict[str, Any]:
    return await wait_at(client, auth, f"/api/job-runs/{run_id}", *statuses, deadline_s=deadline_s)


# Polls come every 20 ms for the first 2 s (a test often waits for a short-lived state), then
# every 250 ms: at 50 a second a slow job's wait met the user's rate limit (1,200 a minute)
# after half a minute, and the poll's 429 failed the test.
_QUICK_POLLS_S = 2.0


async def wait_at(client: Any, auth: dict[str, str], path: str, *statuses: str,
                  deadline_s: float = 30.0) -> dict[str, Any]:
    """Poll GET `path` until what it answers has a status among `statuses`."""
    started = trio.current_time()
    with trio.fail_after(deadline_s):
        while True:
            r = await client.get(path, headers=auth)
            body = await r.get_json()
            assert r.status_code == 200, body
            if body["status"] in statuses:
                return body  # type: ignore[no-any-return]
            await trio.sleep(0.02 if trio.current_time() - started < _QUICK_POLLS_S else 0.25)


async def completed_run(client: Any, services: Services, auth: dict[str, str], schema_id: str,
                        results: list[dict[str, Any]]) -> str:
    """A run of COMPLETED jobs with these results (as a worker or a correction stores them), made in
    the database; its id."""
    user_id = await user_id_of(client, auth)

    def fill(conn: sa.Connection) -> str:
        now = utcnow()
        files = [NewJob(file_name=f"{n}.pdf", file_size=3, mime_type="application/pdf", sha256="0" * 64,
                        blob_key=f"k{n}") for n in range(len(results))]
        run, _ = jobs_repo.create_run(conn, user_id=user_id, schema_id=schema_id, items=files, now=now)
        for result in results:
            job = jobs_repo.claim_next(conn, owner="w", now=now, lease_s=60)
            jobs_repo.complete_job(conn, job_id=job.id, owner="w", result=result, meta=RESULT_META, page_count=1,
                                   now=now)
        return str(run.id)

    return await services.db.run(fill)


async def streamed_get(client: Any, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """GET `path`, its body read as it is sent: the test client's own `get` reads a body only
    once the app has sent all of it, through a channel of 10 messages, and a body of more
    chunks (a large export) never ends."""
    body = bytearray()
    async with client.request(path, method="GET", headers=headers) as connection:
        await connection.send_complete()
        with contextlib.suppress(trio.EndOfChannel):
            while True:
                body += await connection.receive()
    return connection.status_code, bytes(body)
