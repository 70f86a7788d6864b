"""What an outsider's attack found at the edges of the API, each answered with a clear 4xx in
the SPEC §3 shape or made harmless: a wrong method on a fixed route beside an id route,
two credentials at once, a media type in capitals, webhook URLs no request can reach, a
picture too large to show, a file name that reverses itself on screen, a number no double
holds in an old result, and a failure's message naming the blob store's paths.
Runs on SQLite and, with DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

import openpyxl
import pytest
import sqlalchemy as sa
import trio
from jobs_helpers import (
    INVOICE_SCHEMA,
    blob_files,
    completed_job,
    create_job,
    error_of,
    multipart,
    register,
    running_workers,
    wait_for_status,
)
from PIL import Image
from werkzeug.datastructures import Headers

from daemon.config import Config
from daemon.http.app import create_app
from daemon.services import Services, open_services
from daemon.storage.migrate import upgrade
from daemon.storage.tables import jobs


@pytest.mark.parametrize(("method", "path"), [
    ("DELETE", "/api/jobs/export"),
    ("PATCH", "/api/webhooks/event-catalog"),
    ("DELETE", "/api/webhooks/event-catalog"),
])
async def test_a_wrong_method_on_a_fixed_route_beside_an_id_route_is_405(
        client: Any, alice: dict[str, str], method: str, path: str) -> None:
    """The id route beside it ("/api/jobs/<job_id>") took the request and answered 404
    "Job not found"; SPEC §3 says a wrong method is 405."""
    r = await client.open(path, method=method, headers=alice)
    body = await error_of(r, 405)
    assert body["error"] == "Method Not Allowed"
    assert "GET" in r.headers["Allow"]
    # An id that cannot exist is still 404, and a real route still answers.
    await error_of(await client.delete("/api/jobs/not-an-id", headers=alice), 404)
    assert (await client.get(path, headers=alice)).status_code not in (404, 405)


async def test_two_authorization_headers_are_refused(client: Any) -> None:
    """The first one acted: which one a proxy or a client meant is a guess."""
    alice = await register(client, "alice@example.com")
    bob = await register(client, "bob@example.com")
    headers = Headers()
    headers.add("Authorization", bob["Authorization"])
    headers.add("Authorization", alice["Authorization"])
    body = await error_of(await client.get("/api/auth/me", headers=headers), 401)
    assert body["message"] == "Send one Authorization header, not several"
    assert (await client.get("/api/auth/me", headers=alice)).status_code == 200


async def test_a_multipart_media_type_in_capitals_is_an_upload(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    """Media types and their parameter names are case-insensitive (RFC 9110 §8.3.1); the
    boundary itself is not."""
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                   [("file", "invoice.txt", b"Invoice Number: INV-1\nTotal: 10.00\n")])
    boundary = content_type["Content-Type"].split("boundary=")[1]
    r = await client.post("/api/jobs", data=body,
                          headers={**alice, "Content-Type": f"MULTIPART/FORM-DATA; BOUNDARY={boundary}"})
    assert r.status_code == 201, await r.get_json()


@pytest.mark.parametrize(("url", "problem"), [
    ("https://example.com:99999/hook", "url's port must be from 1 to 65535"),
    ("https://example.com:0/hook", "url's port must be from 1 to 65535"),
    ("https://exa mple.com/hook", "url must be a URL address"),
    ("https://example.com/a b", "url must be a URL address"),
    ('https://example.com/"onmouseover=x', "url must be a URL address"),
    ("https://example.com/?a=<img src=x>", "url must be a URL address"),
    ("https://exa_mple.example.com:8443/hook?a=%20&b=[1]", None),
    ("https://" + "a" * 64 + ".example.com/hook", "url's host must be a host name"),
    ("https://-leading.example.com/hook", "url's host must be a host name"),
])
async def test_a_webhook_url_no_request_can_reach_is_400(
        client: Any, alice: dict[str, str], url: str, problem: str | None) -> None:
    """Accepted before, its deliveries failed until they died, or it was listed as given."""
    r = await client.post("/api/webhooks", json={"url": url, "events": ["job.*"]}, headers=alice)
    if problem is None:  # a URL as it should be written still is one
        assert r.status_code == 201, await r.get_json()
        return
    body = await error_of(r, 400)
    assert any(message.startswith(problem) for message in body["message"]), body
    r = await client.post("/api/webhooks", json={"url": "https://hooks.example.com/in", "events": ["job.*"]},
                          headers=alice)
    assert r.status_code == 201
    r = await client.patch(f"/api/webhooks/{(await r.get_json())['id']}", json={"url": url}, headers=alice)
    await error_of(r, 400)


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header says `width` × `height` and whose one row of data is all there is."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 100))
            + chunk(b"IEND", b""))


async def test_a_stored_picture_too_large_to_show_is_422_and_a_small_one_is_served(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    """A PNG of 100,000 × 100,000 pixels is a few hundred bytes: served as stored, the
    console's browser tab would decode 40 GB."""
    job = await create_job(client, alice, schema_id, _png_claiming(100_000, 100_000), "bomb.png")
    body = await error_of(await client.get(f"/api/jobs/{job['id']}/pages/1", headers=alice), 422)
    assert body["details"]["errorCode"] == "DOCUMENT_TOO_LARGE", body
    assert "100,000×100,000 px" in body["message"] and "max_image_pixels" in body["message"]

    out = io.BytesIO()
    Image.new("RGB", (40, 30), "white").save(out, format="PNG")
    job = await create_job(client, alice, schema_id, out.getvalue(), "scan.png")
    r = await client.get(f"/api/jobs/{job['id']}/pages/1", headers=alice)
    assert r.status_code == 200 and await r.get_data() == out.getvalue()


async def test_a_file_name_keeps_no_direction_override(client: Any, alice: dict[str, str], schema_id: str) -> None:
    """U+202E shows "\u202egpj.exe" as "exe.jpg": in the console's list and a download dialog."""
    job = await create_job(client, alice, schema_id, b"Invoice Number: INV-1\n", "\u202etxt.exe\u2066.txt")
    assert job["fileName"] == "txt.exe.txt"
    r = await client.get(f"/api/jobs/{job['id']}/file", headers=alice)
    assert "\u202e" not in r.headers["Content-Disposition"] and "%E2%80%AE" not in r.headers["Content-Disposition"]


async def test_an_old_result_with_an_integer_no_double_holds_still_exports_to_xlsx(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Kept before such a number was refused, it broke the workbook midway (openpyxl raised
    OverflowError after the 200 had gone): it is written as text."""
    job = await completed_job(client, services, alice, schema_id)
    huge = 10**400

    def keep(conn: sa.Connection) -> None:
        conn.execute(jobs.update().where(jobs.c.id == job["id"])
                     .values(result={"invoice_number": "INV-42", "total": huge}))

    await services.db.run(keep)
    r = await client.get("/api/jobs/export", query_string={"format": "xlsx", "schemaId": schema_id}, headers=alice)
    assert r.status_code == 200
    sheet = openpyxl.load_workbook(io.BytesIO(await r.get_data()))["jobs"]
    header = [cell.value for cell in sheet[1]]
    row = dict(zip(header, (cell.value for cell in sheet[2]), strict=True))
    assert row["total"] == str(huge) and row["invoice_number"] == "INV-42"


async def test_a_failure_message_names_no_path_of_the_blob_store(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Pillow's "cannot identify image file '/…/blobs/b1/b1aa…'" went into the job's
    errorMessage, which its owner and every webhook receiver read."""
    job = await create_job(client, alice, schema_id, b"\x89PNG\r\n\x1a\n" + b"\x00" * 32, "cut.png")
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
    assert done["status"] == "FAILED" and done["errorCode"] == "CORRUPTED_FILE", done
    assert "/" not in done["errorMessage"] and "blobs" not in done["errorMessage"], done["errorMessage"]
    assert done["errorMessage"].startswith("the file is not a readable image")


async def test_every_answer_tells_browsers_not_to_sniff_nor_frame_and_a_download_runs_no_script(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    for path in ("/api/health", "/api/docs", "/api/openapi.json"):
        r = await client.get(path)
        assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["X-Frame-Options"] == "DENY", path
    job = await create_job(client, alice, schema_id, b"<html><script>alert(1)</script>Invoice</html>", "evil.html")
    r = await client.get(f"/api/jobs/{job['id']}/file", headers=alice)
    assert r.status_code == 200 and r.headers["Content-Security-Policy"] == "sandbox"
    assert r.headers["X-Content-Type-Options"] == "nosniff"


async def test_a_request_that_meets_a_lost_database_connection_is_503_to_send_again(
        client: Any, alice: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A PostgreSQL restart under load answered 500s "Internal server error", which a client
    must not send again; the request can be, and 503 with Retry-After says so."""
    import daemon.http.jobs as routes

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise sa.exc.OperationalError("SELECT", {}, Exception("terminating connection due to administrator command"))

    monkeypatch.setattr(routes.repo, "list_jobs", lost)
    r = await client.get("/api/jobs", headers=alice)
    body = await error_of(r, 503)
    assert body["message"].startswith("The database is unreachable; try again (request id ")
    assert r.headers["Retry-After"] == "1"
    assert "terminating" not in json.dumps(body)


async def test_concurrent_corrections_are_stamped_in_the_order_they_were_written(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Each took its time before it queued for the job's row: the one written last could carry
    an older updatedAt than one before it, so the job's final result was not the newest-stamped
    answer, and a receiver ordering job.updated by time kept a stale value."""
    import trio

    job = await completed_job(client, services, alice, schema_id)
    answers: list[dict[str, Any]] = []

    async def correct(n: int) -> None:
        r = await client.patch(f"/api/jobs/{job['id']}/result",
                               json={"result": {"invoice_number": f"V{n}", "total": n}}, headers=alice)
        assert r.status_code == 200
        answers.append(await r.get_json())

    async def approve() -> None:
        r = await client.post(f"/api/jobs/{job['id']}/approve", headers=alice)
        if r.status_code == 200:
            answers.append(await r.get_json())

    async with trio.open_nursery() as nursery:
        for n in range(20):
            nursery.start_soon(correct, n)
            if n % 5 == 0:
                nursery.start_soon(approve)
    final = await (await client.get(f"/api/jobs/{job['id']}", headers=alice)).get_json()
    stamps = sorted(answer["updatedAt"] for answer in answers)
    assert len(set(stamps)) == len(stamps), "two writes carry one time"
    newest = max(answers, key=lambda answer: answer["updatedAt"])
    assert final["updatedAt"] == newest["updatedAt"] and final["result"] == newest["result"]


async def test_concurrent_schema_changes_are_stamped_in_the_order_they_were_written(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    """As with a job's corrections: of 20 PATCHes at once, the stored schema was not always
    the answer with the newest updatedAt (4 of 20 rounds over three processes)."""
    import trio

    answers: list[dict[str, Any]] = []

    async def rename(n: int) -> None:
        r = await client.patch(f"/api/schemas/{schema_id}", json={"name": f"Invoice {n}"}, headers=alice)
        assert r.status_code == 200
        answers.append(await r.get_json())

    async with trio.open_nursery() as nursery:
        for n in range(20):
            nursery.start_soon(rename, n)
    final = await (await client.get(f"/api/schemas/{schema_id}", headers=alice)).get_json()
    stamps = [answer["updatedAt"] for answer in answers]
    assert len(set(stamps)) == len(stamps), "two writes carry one time"
    newest = max(answers, key=lambda answer: answer["updatedAt"])
    assert final["updatedAt"] == newest["updatedAt"] and final["name"] == newest["name"]


async def test_an_upload_repeated_after_its_job_was_deleted_makes_a_new_job(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    """The key replayed a job that no longer was: a 404 for a create, for the key's 24 h, and
    `docex submit` of that file failed until then."""
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                   [("file", "invoice.txt", b"Invoice Number: INV-9\n")])
    headers = {**alice, **content_type, "Idempotency-Key": "upload-invoice-9"}
    first = await (await client.post("/api/jobs", data=body, headers=headers)).get_json()
    r = await client.post(f"/api/jobs/{first['id']}/cancel", headers=alice)
    assert r.status_code == 200
    assert (await client.delete(f"/api/jobs/{first['id']}", headers=alice)).status_code == 204
    again = await client.post("/api/jobs", data=body, headers=headers)
    assert again.status_code == 201, await again.get_json()
    assert (await again.get_json())["id"] != first["id"]
    replay = await client.post("/api/jobs", data=body, headers=headers)
    assert replay.status_code == 200 and (await replay.get_json())["id"] == (await again.get_json())["id"]


async def test_idempotency_keys_are_per_principal(client: Any, alice: dict[str, str], schema_id: str) -> None:
    """SPEC §6: two API keys of one account that make keys alike (a file's hash) got a 409,
    or the other one's job; the user's own sign-ins still share the user's keys."""
    keys = []
    for name in ("scanner", "mailroom"):
        r = await client.post("/api/auth/api-keys", json={"name": name}, headers=alice)
        keys.append({"Authorization": f"Bearer {(await r.get_json())['apiKey']}"})
    jobs_made = []
    for n, auth in enumerate(keys):
        body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                       [("file", f"{n}.txt", f"Invoice Number: INV-{n}\n".encode())])
        r = await client.post("/api/jobs", data=body, headers={**auth, **content_type, "Idempotency-Key": "batch-1"})
        assert r.status_code == 201, await r.get_json()
        jobs_made.append((await r.get_json())["id"])
        replay = await client.post("/api/jobs", data=body,
                                   headers={**auth, **content_type, "Idempotency-Key": "batch-1"})
        assert replay.status_code == 200 and (await replay.get_json())["id"] == jobs_made[-1]
    assert jobs_made[0] != jobs_made[1]
    # An access token of the same user is another principal than either key.
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                   [("file", "0.txt", b"Invoice Number: INV-0\n")])
    r = await client.post("/api/jobs", data=body, headers={**alice, **content_type, "Idempotency-Key": "batch-1"})
    assert r.status_code == 201 and (await r.get_json())["id"] not in jobs_made


async def test_created_after_a_shown_time_leaves_out_the_job_shown_at_it(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    """Times are shown to the millisecond and kept to the microsecond: polling with the newest
    createdAt seen got that job again every time."""
    import trio

    first = await create_job(client, alice, schema_id)
    await trio.sleep(0.005)  # shown apart
    second = await create_job(client, alice, schema_id)
    r = await client.get("/api/jobs", query_string={"createdAfter": first["createdAt"]}, headers=alice)
    assert [job["id"] for job in (await r.get_json())["data"]] == [second["id"]]
    r = await client.get("/api/jobs", query_string={"createdAfter": second["createdAt"]}, headers=alice)
    assert (await r.get_json())["data"] == []
    r = await client.get("/api/jobs", query_string={"createdBefore": second["createdAt"]}, headers=alice)
    assert [job["id"] for job in (await r.get_json())["data"]] == [first["id"]]


async def test_a_full_disk_is_507_naming_the_storage_not_a_500(client: Any, alice: dict[str, str], schema_id: str,
                                                              monkeypatch: Any) -> None:
    """An upload on a full data volume was a 500 with a traceback; a login there said the
    database was unreachable (503), which sent operators looking at the wrong thing."""
    import errno

    from jobs_helpers import post_job

    from daemon.storage import blobs

    async def no_space(self: Any, chunk: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(blobs._LocalWriter, "write", no_space)
    r = await post_job(client, alice, schema_id, b"Total: 1.00\n", "a.txt")
    body = await r.get_json()
    assert r.status_code == 507 and "storage is full" in body["message"] and r.headers["Retry-After"], body
    assert body["error"] == "Insufficient Storage"

    def full(*args: Any, **kwargs: Any) -> Any:
        raise sa.exc.OperationalError("INSERT", {}, Exception("database or disk is full"))

    from daemon.storage.repos import jobs as jobs_repo

    monkeypatch.setattr(jobs_repo, "list_jobs", full)
    r = await client.get("/api/jobs", headers=alice)
    assert r.status_code == 507, await r.get_json()


async def test_an_upload_too_slow_to_be_real_is_ended_with_a_408_and_leaves_no_partial_file(
        client: Any, alice: dict[str, str], schema_id: str, services: Services,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client sending a byte every 20 s kept an upload, its socket and its partial file open
    for ever (JSON bodies end after 60 s): an upload gets a minute, and a second more for each
    KiB it sends (here a tenth of a second and 1 KiB/s)."""
    import trio

    import daemon.jobs.upload as upload

    monkeypatch.setattr(upload, "UPLOAD_GRACE_S", 0.1)
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)], [("file", "a.txt", b"x" * 5000)])

    async def trickle(connection: Any) -> None:
        for start in range(0, 1000, 100):  # 1 KiB in 0.25 s (4 KiB/s): on time, whatever the grace
            await connection.send(body[start:start + 100])
            await trio.sleep(0.025)
        for start in range(1000, len(body), 10):  # then 10 bytes every 0.05 s: 200 B/s
            await connection.send(body[start:start + 10])
            await trio.sleep(0.05)

    async with (client.request("/api/jobs", method="POST", headers={**alice, **content_type}) as connection,
                trio.open_nursery() as nursery):
        nursery.start_soon(trickle, connection)
        with trio.fail_after(5):
            response = await connection.as_response()
        nursery.cancel_scope.cancel()
    assert response.status_code == 408
    answer = await response.get_json()
    assert answer["error"] == "Request Timeout" and "the upload is too slow: under 1 KiB/s" in answer["message"]
    assert blob_files(services) == []
    assert await services.db.read(lambda conn: conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar()) == 0


async def test_an_upload_that_sent_much_then_stops_is_ended_after_the_grace_without_data(
        client: Any, alice: dict[str, str], schema_id: str, services: Services,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The credit of a second a KiB is no licence to stop: 50 MiB sent at once bought 14 h
    of silence. Nothing for the grace (60 s; here 0.2 s) ends an upload too."""
    import trio

    import daemon.jobs.upload as upload

    monkeypatch.setattr(upload, "UPLOAD_GRACE_S", 0.2)
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                   [("file", "a.txt", b"x" * 200_000)])
    async with client.request("/api/jobs", method="POST", headers={**alice, **content_type}) as connection:
        await connection.send(body[:150_000])  # 146 s of credit at 1 KiB/s, then nothing
        with trio.fail_after(3):
            response = await connection.as_response()
    assert response.status_code == 408
    assert "0.2 s without data" in (await response.get_json())["message"]
    assert blob_files(services) == []


async def test_a_result_read_from_a_document_with_nul_characters_can_be_saved_back(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """A UTF-16 text with a NUL in a value: the result held it, invisible in the console, and
    every save of the job's own result was refused (a request body may hold no NUL)."""
    text = "\ufeffInvoice Number: INV\x00-42\nTotal: 12.50\n".encode("utf-16-le")
    job = await completed_job(client, services, alice, schema_id, text, "invoice.txt")
    assert job["result"]["invoice_number"] == "INV-42"
    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": {**job["result"], "total": 13}},
                           headers=alice)
    assert r.status_code == 200, await r.get_json()


async def test_a_write_that_waits_past_the_busy_timeout_is_503_to_send_again(config: Config,
                                                                            tmp_path: Path) -> None:
    """SQLite's "database is locked" came from the driver raw, past the 503 handler: 500s for
    ordinary writes while batch runs of 1,000 files were stored, and worker.crashed.

    On SQLite whatever the suite's backend: SQLite's one write lock is what times out, while
    PostgreSQL locks rows and waits without a timeout."""
    config = dataclasses.replace(config, database=dataclasses.replace(
        config.database, url=f"sqlite:///{tmp_path / 'locked.db'}", busy_timeout_ms=200))
    async with open_services(config) as services:
        await trio.to_thread.run_sync(upgrade, services.db.engine)
        client = create_app(services).test_client()
        alice = await register(client)
        holder = sqlite3.connect(sa.make_url(config.database.url).database, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # another writer, holding the lock past the timeout
            r = await client.post("/api/schemas", json={"name": "Invoice", "definition": INVOICE_SCHEMA},
                                  headers=alice)
            body = await error_of(r, 503)
            assert body["message"].startswith("The database is unreachable; try again (request id ")
            assert r.headers["Retry-After"] == "1"
        finally:
            holder.rollback()
            holder.close()
        r = await client.post("/api/schemas", json={"name": "Invoice", "definition": INVOICE_SCHEMA}, headers=alice)
        assert r.status_code == 201  # sent again, it is written
