"""What a bucket or a Drive folder can hand the daemon (SPEC §10): listings that never end,
keys and names no database column takes, answers of the wrong shape. The S3 side is a
loopback server speaking S3's XML (through the same boto3 stack as moto), the Drive side
the fake Google (tests/fake_google.py). Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from fake_google import FakeGoogle, google_error, open_fake_google
from integrations_helpers import (
    connect_drive,
    create_s3,
    post_source_job,
    post_source_run,
    private_networks,
    with_google,
)
from jobs_helpers import (
    GARBAGE,
    INVOICE_TXT,
    create_schema,
    error_of,
    job_row,
    post_job,
    register,
    running,
    running_workers,
    wait_for_status,
)
from webhook_receiver import Received, Reply, open_receiver

import daemon.integrations.base
from daemon.clock import utcnow
from daemon.config import Config
from daemon.inboxes.sweeper import run_inboxes
from daemon.services import Services
from daemon.storage.tables import inboxes, jobs


@pytest.fixture
def config(config: Config) -> Config:
    """The fake S3 servers listen on loopback: the operator's setting lets them in."""
    fast = dataclasses.replace(config, jobs=dataclasses.replace(config.jobs, retry_backoff_initial_ms=10))
    return private_networks(fast)


@pytest.fixture
async def google(services: Any) -> AsyncIterator[FakeGoogle]:
    async with open_fake_google() as fake:
        with_google(services, fake.url)
        yield fake


def _listing(bucket: str, keys: list[str], *, token: str | None = None, encoded: bool = False) -> Reply:
    """A ListObjectsV2 answer; `token` makes it truncated with that continuation token."""
    contents = "".join(f"<Contents><Key>{k}</Key><Size>3</Size><ETag>\"e{i}\"</ETag>"
                       "<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>"
                       for i, k in enumerate(keys))
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>" if token \
        else "<IsTruncated>false</IsTruncated>"
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{bucket}</Name><Prefix></Prefix><KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>"
            f"{'<EncodingType>url</EncodingType>' if encoded else ''}{more}{contents}</ListBucketResult>")
    return 200, {"Content-Type": "application/xml"}, body.encode()


# --- listings that never end --------------------------------------------------------------------


@pytest.mark.parametrize("fresh_tokens", [False, True])
async def test_an_s3_listing_that_never_ends_is_refused_not_followed_forever(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any,
        fresh_tokens: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon.integrations.base, "MAX_LIST_PAGES", 50)  # 1000 in production: a faster test
    pages: list[str] = []

    async def handler(request: Received) -> Reply:
        pages.append(request.path)
        # Truncated, nothing in it, and the same (or always a new) token: it never ends.
        return _listing("hostile", [], token=f"t{len(pages)}" if fresh_tokens else "again")

    async with open_receiver(handler) as fake:
        integration = await create_s3(client, alice, s3_server, "hostile", endpoint_url=fake.url(""))
        with trio.move_on_after(30) as hung:
            r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"],
                                                                  "prefix": "in/"}])
        assert not hung.cancelled_caught, f"the batch run was still listing after {len(pages)} pages"
    body = await error_of(r, 400)
    assert body["details"]["errorCode"] == "INTERNAL_ERROR", body
    assert "does not end" in " ".join(body["message"]), body
    assert len(pages) <= 50


@pytest.mark.parametrize("fresh_tokens", [False, True])
async def test_a_drive_listing_that_never_ends_is_refused_not_followed_forever(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle,
        monkeypatch: pytest.MonkeyPatch, fresh_tokens: bool) -> None:
    monkeypatch.setattr(daemon.integrations.base, "MAX_LIST_PAGES", 50)
    integration = await connect_drive(client, alice, google)
    google.add_folder("Loop")
    pages: list[int] = []
    real_list = google._list

    def endless(params: dict[str, str]) -> Reply:
        status, headers, body = real_list({k: v for k, v in params.items() if k != "pageToken"})
        if "in parents and trashed = false and mimeType !=" not in params.get("q", ""):
            return status, headers, body  # looking the folder up by name
        pages.append(1)
        token = f"t{len(pages)}" if fresh_tokens else "again"
        return 200, {"Content-Type": "application/json"}, b'{"files": [], "nextPageToken": "%s"}' % token.encode()

    monkeypatch.setattr(google, "_list", endless)
    with trio.move_on_after(30) as hung:
        r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"],
                                                              "folderPath": "Loop"}])
    assert not hung.cancelled_caught, f"the batch run was still listing after {len(pages)} pages"
    body = await error_of(r, 400)
    assert body["details"]["errorCode"] == "INTERNAL_ERROR", body
    assert "does not end" in " ".join(body["message"]), body
    assert len(pages) <= 50


# --- slow stores and everyone else ----------------------------------------------------------------


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def test_a_silent_s3_endpoint_does_not_starve_other_users_uploads(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each S3 call waits in a thread for the endpoint (up to its read timeout, 60 s, per
    attempt). Threads for blocking work are shared: a user with an endpoint that accepts and
    never answers must not take all of them from everyone's uploads."""
    import daemon.integrations.s3
    import daemon.storage.s3

    # Far beyond the wait for every endpoint thread to be taken (the clients are built one at a
    # time, seconds for 60 on a loaded machine), so a starved upload would wait seconds more.
    monkeypatch.setattr(daemon.storage.s3, "_READ_TIMEOUT_S", 8)
    endpoint_threads = daemon.integrations.s3._ENDPOINT_THREADS
    bob = await register(client, "bob@example.com")
    bob_schema = await create_schema(client, bob)
    async with trio.open_nursery() as servers:
        listeners = await servers.start(functools.partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        integration = await create_s3(client, alice, s3_server, "some-bucket", endpoint_url=f"http://127.0.0.1:{port}")

        async def test_it() -> None:
            await client.post(f"/api/integrations/{integration['id']}/test", headers=alice)

        async with trio.open_nursery() as tests:
            for _ in range(60):
                tests.start_soon(test_it)
            with trio.fail_after(30):  # every thread for S3 calls is waiting on the endpoint now
                while True:
                    if endpoint_threads.statistics().borrowed_tokens == endpoint_threads.total_tokens:
                        break
                    await trio.sleep(0.02)
            started = time.monotonic()
            r = await post_job(client, bob, bob_schema)
            took = time.monotonic() - started
            tests.cancel_scope.cancel()
        servers.cancel_scope.cancel()
    assert r.status_code == 201, await r.get_json()
    assert took < 2.0, f"bob's upload waited {took:.1f} s for alice's S3 calls"


# --- answers of the wrong shape -------------------------------------------------------------------


def _drive_lists(google: FakeGoogle, monkeypatch: pytest.MonkeyPatch, query_holds: str, answer: bytes) -> None:
    """The fake Drive answers `answer` to each listing whose query holds `query_holds`."""
    real_list = google._list

    def odd(params: dict[str, str]) -> Reply:
        if query_holds not in params.get("q", ""):
            return real_list(params)
        return 200, {"Content-Type": "application/json"}, answer

    monkeypatch.setattr(google, "_list", odd)


# A folder's files, as the daemon lists them (its query on the folder's children).
_FILES_QUERY = "in parents and trashed = false and mimeType !="


@pytest.mark.parametrize("page", [
    b'{"files": "abc"}', b'{"files": [1, null, "x"]}', b'{"files": [{"name": "no id.txt"}]}',
    b'{"files": {"id": "x"}}', b'[1, 2]', b'{"files": [{"id": {"a": 1}, "name": ["x"], "size": "12"}]}',
    b'{"files": [], "nextPageToken": 12}',
])
async def test_a_drive_listing_of_the_wrong_shape_is_a_400_not_a_500(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle,
        monkeypatch: pytest.MonkeyPatch, page: bytes) -> None:
    integration = await connect_drive(client, alice, google)
    google.add_folder("Odd")
    _drive_lists(google, monkeypatch, _FILES_QUERY, page)
    r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"], "folderPath": "Odd"}])
    body = await error_of(r, 400)  # nothing in it is a file with an id
    assert body["message"][0].startswith("sources.0: "), body


async def test_drive_sizes_int_refuses_are_no_size_not_a_500(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle,
        monkeypatch: pytest.MonkeyPatch) -> None:
    integration = await connect_drive(client, alice, google)
    google.add_folder("Odd")
    # str.isdigit() says yes to both; int() refuses a superscript two and 5000 digits.
    page = ('{"files": [{"id": "a", "name": "sup.txt", "size": "\u00b2"}, {"id": "b", "name": "long.txt", "size": "'
            + "9" * 5000 + '"}]}').encode()
    _drive_lists(google, monkeypatch, _FILES_QUERY, page)
    r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"], "folderPath": "Odd"}])
    body = await r.get_json()
    assert r.status_code == 201 and body["total"] == 2, body


@pytest.mark.parametrize("answer", [b'{"files": [{"name": "Odd"}]}', b'{"files": [{"id": 7, "name": "Odd"}]}',
                                    b'{"files": [{"id": null}]}'])
async def test_a_drive_folder_lookup_of_the_wrong_shape_is_a_400_not_a_500(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle,
        monkeypatch: pytest.MonkeyPatch, answer: bytes) -> None:
    integration = await connect_drive(client, alice, google)
    _drive_lists(google, monkeypatch, "name = 'Odd'", answer)
    r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"], "folderPath": "Odd"}])
    body = await r.get_json()
    assert r.status_code == 400, body


@pytest.mark.parametrize("expires_in", [10**20, 1e300, -10**20, float("nan")])
async def test_a_token_lifetime_beyond_the_calendar_still_connects(
        client: Any, services: Any, alice: dict[str, str], google: FakeGoogle, expires_in: float) -> None:
    """The token endpoint's `expires_in` is a number of Google's choosing; docex computes the
    expiry from it (a datetime) at the callback and at each refresh."""
    real_access = google._access

    def lasting(scope: str, ttl_s: int) -> dict[str, Any]:
        return {**real_access(scope, 3600), "expires_in": expires_in}

    google._access = lasting  # type: ignore[method-assign]
    integration = await connect_drive(client, alice, google)
    assert integration["status"] == "connected", integration
    r = await client.post(f"/api/integrations/{integration['id']}/test", headers=alice)
    assert r.status_code == 200, await r.get_json()


async def _longest_stall(during: Any) -> tuple[Any, float]:
    """`await during()`'s result, and the longest the event loop went without running a 10 ms ticker."""
    longest = 0.0
    result: Any = None

    async def ticker() -> None:
        nonlocal longest
        last = time.monotonic()
        while True:
            await trio.sleep(0.01)
            now = time.monotonic()
            longest, last = max(longest, now - last), now

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        result = await during()
        nursery.cancel_scope.cancel()
    return result, longest


async def test_an_enormous_drive_answer_neither_stalls_the_loop_nor_is_read_whole(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle,
        monkeypatch: pytest.MonkeyPatch) -> None:
    integration = await connect_drive(client, alice, google)
    google.add_folder("Huge")
    real_list = google._list
    item = b'{"id": "%08d", "name": "invoice.txt", "mimeType": "text/plain", "size": "12", "version": "1"}'
    huge = b'{"files": [' + b", ".join(item % i for i in range(400_000)) + b"]}"  # 38 MB

    def enormous(params: dict[str, str]) -> Reply:
        if "in parents and trashed = false and mimeType !=" not in params.get("q", ""):
            return real_list(params)
        return 200, {"Content-Type": "application/json"}, huge

    monkeypatch.setattr(google, "_list", enormous)
    r, stall = await _longest_stall(lambda: post_source_run(
        client, alice, schema_id, [{"integrationId": integration["id"], "folderPath": "Huge"}]))
    assert stall < 0.5, f"the event loop stalled {stall:.2f} s"
    body = await error_of(r, 400)
    assert body["details"] == {"errorCode": "INTERNAL_ERROR"}, body
    assert "over" in body["message"][0], body


# --- names no database column takes -------------------------------------------------------------

# Keys S3 allows (any UTF-8) that a listing hands over URL-encoded (EncodingType=url, which
# botocore asks for and decodes): a NUL, other control characters, a lone surrogate's bytes.
HOSTILE_KEYS = ["in/nul%00.txt", "in/ctl%01%1B%7F.txt", "in/..%2F..%2Fetc%2Fpasswd", "in/" + "x" * 1000 + ".txt"]


async def test_hostile_s3_keys_in_a_listing_make_jobs_or_a_400_never_a_500(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any) -> None:
    async def handler(request: Received) -> Reply:
        return _listing("hostile", HOSTILE_KEYS, encoded=True)

    async with open_receiver(handler) as fake:
        integration = await create_s3(client, alice, s3_server, "hostile", endpoint_url=fake.url(""))
        r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"], "prefix": "in/"}])
    body = await r.get_json()
    assert r.status_code in (201, 400), body
    if r.status_code == 201:
        assert body["total"] == len(HOSTILE_KEYS)
        for job in body["jobs"]:
            assert "\x00" not in (job["fileName"] or "")


async def test_drive_names_that_are_not_text_make_jobs_that_run(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle) -> None:
    integration = await connect_drive(client, alice, google)
    google.add_file("Scans/a\x00b.txt", b"Invoice Number: INV-1\n")
    google.add_file("Scans/c\x01\ud800d.txt", b"Invoice Number: INV-2\n")
    google.add_file("Scans/e\udc80.bin", GARBAGE)
    r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"],
                                                          "folderPath": "Scans"}])
    body = await r.get_json()
    assert r.status_code == 201, body
    # Kept as text a database column and a JSON answer take: no NUL, no control character, no
    # lone surrogate (what Drive's JSON can spell as "\\ud800").
    assert sorted(job["fileName"] for job in body["jobs"]) == ["ab.txt", "c\ufffdd.txt", "e\ufffd.bin"], body
    # Fetched, the names come again from the file's metadata, into the job and its errorMessage.
    async with running_workers(services):
        done = {job["fileName"]: await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
                for job in body["jobs"]}
    assert [done[name]["status"] for name in ("ab.txt", "c\ufffdd.txt")] == ["COMPLETED"] * 2, done
    assert done["e\ufffd.bin"]["errorCode"] == "UNSUPPORTED_FILE", done


@pytest.mark.parametrize("retry_after", ["999999999999", "99999999999999999999999"])
async def test_a_retry_after_beyond_the_calendar_does_not_crash_the_worker(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle,
        retry_after: str) -> None:
    integration = await connect_drive(client, alice, google)
    file = google.add_file("Scans/a.txt", INVOICE_TXT)
    status, headers, body = google_error(429, "rateLimitExceeded")
    google.fail_next.append((status, {**headers, "Retry-After": retry_after}, body))
    r = await post_source_job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": file.id})
    job = await r.get_json()
    assert r.status_code == 201, job
    async with running_workers(services):
        with trio.fail_after(10):
            while True:
                row = await job_row(services, job["id"])
                if row.error_code is not None:
                    break
                await trio.sleep(0.05)
    # Retried (throttling is transient), at a time a datetime can hold, not years from now.
    assert row.status == "PENDING" and row.error_code == "INTERNAL_ERROR", row
    assert row.run_after < utcnow() + dt.timedelta(days=2), row.run_after


def _write_settled(path: bytes, data: bytes) -> None:
    """A file written a while ago (settled for the sweeper)."""
    with open(path, "wb") as f:
        f.write(data)
    old = time.time() - 5
    os.utime(path, (old, old))


async def test_a_file_name_that_is_not_utf8_does_not_stop_a_local_inbox(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    """Linux file names are bytes: a scanner or an SMB share may write one that is not UTF-8
    (Latin-1 "Rechnung-M\xe4rz.txt"). Python hands it over with lone surrogates."""
    root = tmp_path / "inboxes"
    (root / "scans").mkdir(parents=True)
    services.config = dataclasses.replace(services.config, inboxes=dataclasses.replace(
        services.config.inboxes, local_root=str(root), interval_s=600, settle_ms=50))
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": "scans",
                                                 "after": "keep"}, headers=alice)
    assert r.status_code == 201, await r.get_json()
    for name in (b"Rechnung-M\xe4rz.txt", b"good.txt"):
        _write_settled(os.path.join(os.fsencode(root / "scans"), name), INVOICE_TXT)

    async def job_names() -> list[str]:
        return await services.db.read(lambda conn: sorted(
            row.file_name for row in conn.execute(sa.select(jobs.c.file_name))))

    async with running(services, run_inboxes):
        with trio.move_on_after(10):
            while True:
                if await job_names():
                    break
                await trio.sleep(0.05)
        await trio.sleep(0.3)
    names = await job_names()
    errors = await services.db.read(lambda conn: [row.last_error for row in conn.execute(sa.select(inboxes))])
    # The name that is not text is left for a person to rename (and logged); the others are taken.
    assert names == ["good.txt"], (names, errors)


@pytest.mark.parametrize("file_id", ["../about", "x?alt=media", "a/export"])
async def test_a_drive_file_id_is_one_path_segment(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle, file_id: str) -> None:
    integration = await connect_drive(client, alice, google)
    connected = len(google.requests)
    r = await post_source_job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": file_id})
    job = await r.get_json()
    assert r.status_code == 201, job
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
    # Drive was asked for a file of that id, which it does not have, not for another of its paths.
    assert done["errorCode"] == "REMOTE_FILE_NOT_FOUND", done
    asked = {request.path.partition("?")[0] for request in google.requests[connected:]}
    assert asked == {"/drive/v3/files/" + urllib.parse.quote(file_id, safe="")}, asked
