"""Watched inboxes (issue #17): the API, and the sweeper turning a folder's files into jobs
at most once, across restarts and processes. Runs on SQLite and PostgreSQL.

"Another process" here is a second `Services` over the same database (its own engine and
pool, its own sweeper and inotify watch); tests/e2e/test_inbox_processes.py runs real processes.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from fake_google import open_fake_google
from integrations_helpers import connect_drive, create_s3, private_networks, with_google
from jobs_helpers import (
    ERROR_KEYS,
    GARBAGE,
    INVOICE_TXT,
    bad_request,
    create_schema,
    events_of,
    register,
    running,
    running_workers,
    user_id_of,
    wait_for_run,
)

from daemon.clock import utcnow
from daemon.config import Config
from daemon.errors import BadRequest
from daemon.inboxes.models import After, InboxKind, identity
from daemon.inboxes.sweeper import run_inboxes
from daemon.services import Services, open_services
from daemon.storage.repos import inboxes as inboxes_repo
from daemon.storage.tables import inbox_items, job_runs, jobs, users

INBOX_KEYS = {"id", "kind", "schemaId", "integrationId", "path", "prefix", "folderId", "after", "paused",
              "createdAt", "updatedAt", "lastSweptAt", "lastError"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "inboxes"
    (path / "scans").mkdir(parents=True)
    return path


@pytest.fixture
def config(config: Config, root: Path) -> Config:
    """Local folders under `root`; an interval long enough that only the first sweep, a
    notification or a settling file can explain a pickup; S3 on loopback allowed."""
    inboxes = dataclasses.replace(config.inboxes, local_root=str(root), interval_s=600, settle_ms=50)
    return private_networks(dataclasses.replace(config, inboxes=inboxes))


def sweeping(services: Services) -> AbstractAsyncContextManager[None]:
    """The sweeper of `services`, for the duration of the block (then stopped as by SIGTERM)."""
    return running(services, run_inboxes)


async def create_inbox(client: Any, auth: dict[str, str], **body: Any) -> dict[str, Any]:
    r = await client.post("/api/inboxes", json=body, headers=auth)
    answer = await r.get_json()
    assert r.status_code == 201, answer
    return answer  # type: ignore[no-any-return]


async def job_rows(services: Services) -> list[Any]:
    def load(conn: sa.Connection) -> list[Any]:
        return list(conn.execute(sa.select(jobs).order_by(jobs.c.file_name)))

    return await services.db.read(load)


async def eventually(check: Callable[[], Awaitable[Any]], deadline_s: float = 10.0) -> Any:
    """Poll `check` until it answers something true, and return that."""
    with trio.fail_after(deadline_s):
        while True:
            if answer := await check():
                return answer
            await trio.sleep(0.02)


async def wait_for_jobs(services: Services, count: int, deadline_s: float = 30.0) -> list[Any]:
    async def enough() -> list[Any] | None:
        rows = await job_rows(services)
        return rows if len(rows) >= count else None

    rows: list[Any] = await eventually(enough, deadline_s)
    return rows


def drop(folder: Path, count: int, prefix: str = "invoice", data: bytes = INVOICE_TXT) -> list[str]:
    """Write `count` files into `folder` the way a scanner would: written aside, renamed in."""
    names = []
    for i in range(count):
        name = f"{prefix}-{i:03d}.txt"
        partial = folder / f".{name}.part"
        partial.write_bytes(data)
        os.replace(partial, folder / name)
        names.append(name)
    return names


# --- the API -----------------------------------------------------------------------------


async def test_an_admin_watches_a_folder_lists_pauses_and_deletes_it(client: Any, alice: dict[str, str],
                                                                     schema_id: str, root: Path) -> None:
    inbox = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans")
    assert set(inbox) == INBOX_KEYS
    assert inbox | {"id": "", "createdAt": "", "updatedAt": ""} == {
        "id": "", "kind": "local", "schemaId": schema_id, "integrationId": None, "path": "scans", "prefix": None,
        "folderId": None, "after": "move", "paused": False, "createdAt": "", "updatedAt": "", "lastSweptAt": None,
        "lastError": None}
    (root / "receipts").mkdir()
    kept = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="receipts/./", after="keep")
    assert kept["after"] == "keep" and kept["path"] == "receipts"  # one spelling a folder

    r = await client.get("/api/inboxes?limit=1", headers=alice)
    first = await r.get_json()
    assert r.status_code == 200 and [i["id"] for i in first["data"]] == [kept["id"]] and first["nextCursor"]
    r = await client.get(f"/api/inboxes?limit=1&cursor={first['nextCursor']}", headers=alice)
    second = await r.get_json()
    assert [i["id"] for i in second["data"]] == [inbox["id"]] and second["nextCursor"] is None

    r = await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": True}, headers=alice)
    assert r.status_code == 200 and (await r.get_json())["paused"] is True
    r = await client.get(f"/api/inboxes/{inbox['id']}", headers=alice)
    assert (await r.get_json())["paused"] is True
    r = await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": "soon"}, headers=alice)
    assert await bad_request(r) == ["paused must be a boolean value"]

    r = await client.delete(f"/api/inboxes/{inbox['id']}", headers=alice)
    assert r.status_code == 204
    r = await client.get(f"/api/inboxes/{inbox['id']}", headers=alice)
    body = await r.get_json()
    assert r.status_code == 404 and set(body) == ERROR_KEYS and body["message"] == "Inbox not found"


async def test_another_users_inbox_does_not_exist_for_the_caller(client: Any, alice: dict[str, str],
                                                                 schema_id: str) -> None:
    inbox = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans")
    bob = await register(client, "bob@example.com")
    for method, extra in (("get", {}), ("patch", {"json": {"paused": True}}), ("delete", {})):
        r = await getattr(client, method)(f"/api/inboxes/{inbox['id']}", headers=bob, **extra)
        assert r.status_code == 404, method
    r = await client.get("/api/inboxes", headers=bob)
    assert (await r.get_json())["data"] == []


async def test_a_user_may_not_watch_a_folder_on_the_server(client: Any, alice: dict[str, str]) -> None:
    bob = await register(client, "bob@example.com")  # the second account: a USER
    bob_schema = await create_schema(client, bob)
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": bob_schema, "path": "scans"},
                          headers=bob)
    body = await r.get_json()
    assert r.status_code == 403 and body["message"] == "Only an admin may watch a folder on the server"


@pytest.mark.parametrize(("path", "message"), [
    ("../outside", "path must not contain '..'"),
    ("scans/../../outside", "path must not contain '..'"),
    ("/etc", "path must be relative to inboxes.local_root, not absolute"),
    # Refused before the route sees it, for any JSON body (resolve_folder would refuse it too).
    ("scans\u0000x", "request body must not contain NUL characters (\\u0000)"),
    ("scans\ud800", "request body is not valid JSON: it has an unpaired surrogate escape"),
    ("", "path should not be empty"),
    ("link-out", "path must name a folder inside inboxes.local_root"),
    ("missing", "path 'missing' is not an existing folder under inboxes.local_root"),
])
async def test_path_escapes_are_refused(client: Any, alice: dict[str, str], schema_id: str, root: Path,
                                        tmp_path: Path, path: str, message: str) -> None:
    (tmp_path / "outside").mkdir()
    (root / "link-out").symlink_to(tmp_path / "outside")
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": path},
                          headers=alice)
    assert await bad_request(r) == [message]
    r = await client.get("/api/inboxes", headers=alice)
    assert (await r.get_json())["data"] == []


async def test_local_folders_are_off_without_a_root(client: Any, alice: dict[str, str], schema_id: str,
                                                    services: Services) -> None:
    services.config = dataclasses.replace(services.config, inboxes=dataclasses.replace(
        services.config.inboxes, local_root=""))
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": "scans"},
                          headers=alice)
    assert await bad_request(r) == ["local folders are disabled on this server (inboxes.local_root is empty)"]


async def test_a_remote_inbox_names_one_of_the_callers_integrations_of_its_kind(
        client: Any, alice: dict[str, str], schema_id: str, s3_server: Any) -> None:
    r = await client.post("/api/inboxes", json={"kind": "s3", "schemaId": "nope", "prefix": "in/", "path": "x",
                                                "after": "move"}, headers=alice)
    assert await bad_request(r) == [
        "schemaId must be the id of one of your schemas", "path does not apply to a s3 inbox (it takes prefix)",
        "after: move applies to local folders only (remote files are left in place)",
        "integrationId should not be empty"]
    integration = await create_s3(client, alice, s3_server, s3_server.new_bucket())
    r = await client.post("/api/inboxes", json={"kind": "google-drive", "schemaId": schema_id, "folderId": "f1",
                                                "integrationId": integration["id"]}, headers=alice)
    assert await bad_request(r) == ["integrationId must be a google-drive integration for a google-drive inbox"]
    bob = await register(client, "bob@example.com")
    r = await client.post("/api/inboxes", json={"kind": "s3", "schemaId": await create_schema(client, bob),
                                                "prefix": "", "integrationId": integration["id"]}, headers=bob)
    assert await bad_request(r) == ["integrationId must be the id of one of your integrations"]


async def test_an_inbox_whose_integration_is_deleted_before_it_is_inserted_is_a_400(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, s3_server: Any) -> None:
    """The request was checked while the integration was there; the insert comes after its
    delete. Before: the foreign key failed the insert, a 500."""
    integration = await create_s3(client, alice, s3_server, s3_server.new_bucket())
    user_id = await user_id_of(client, alice)
    assert (await client.delete(f"/api/integrations/{integration['id']}", headers=alice)).status_code == 204
    with pytest.raises(BadRequest) as refused:
        await services.db.run(inboxes_repo.create_inbox, user_id=user_id, schema_id=schema_id, kind=InboxKind.S3,
                              integration_id=integration["id"], path="in/", after=After.KEEP, now=utcnow())
    assert refused.value.message == ["integrationId must be the id of one of your integrations"]
    assert (await (await client.get("/api/inboxes", headers=alice)).get_json())["data"] == []


# --- sweeping a local folder ------------------------------------------------------------------


async def test_fifty_files_become_fifty_jobs_once_across_two_processes_and_a_restart(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, config: Config, root: Path) -> None:
    inbox = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans", after="keep")
    folder = root / "scans"
    first = drop(folder, 25, "a")
    async with open_services(config) as other:
        async with sweeping(services), sweeping(other):
            second = drop(folder, 25, "b")
            rows = await wait_for_jobs(services, 50)
            await trio.sleep(0.5)  # both processes have had time to sweep what they were told of
        # A restart: the memory of what was taken is in the database, not in the process.
        async with sweeping(services):
            await trio.sleep(0.5)
    rows = await job_rows(services)
    assert sorted(row.file_name for row in rows) == sorted(first + second)
    assert {row.status for row in rows} == {"QUEUED"} and all(row.blob_key for row in rows)
    runs = await services.db.read(lambda conn: list(conn.execute(sa.select(job_runs))))
    assert sum(run.total for run in runs) == 50
    # Each sweep that took files said so: the inbox.swept events name every job once.
    swept = await events_of(services, types=["inbox.swept"])
    taken = [item["jobId"] for event in swept for item in event.data["taken"]]
    assert sorted(taken) == sorted(row.id for row in rows)
    assert all(event.data["inbox"]["id"] == inbox["id"] for event in swept)
    assert all(path.exists() for path in folder.iterdir() if path.is_file())  # after: keep


async def test_a_file_added_later_is_picked_up_at_once(client: Any, alice: dict[str, str], schema_id: str,
                                                       services: Services, root: Path) -> None:
    await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans")
    async with sweeping(services):
        await trio.sleep(0.3)  # the first sweep found the folder empty; the next is 600 s away
        started = time.monotonic()
        drop(root / "scans", 1)
        await wait_for_jobs(services, 1, deadline_s=5)
        latency = time.monotonic() - started
    # inotify wakes the sweeper; the file then waits out settle_ms (50 ms) as written.
    assert latency < 2.0, latency


async def test_a_file_changed_in_place_is_a_new_file(client: Any, alice: dict[str, str], schema_id: str,
                                                     services: Services, root: Path) -> None:
    await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans", after="keep")
    path = root / "scans" / "invoice.txt"
    path.write_bytes(INVOICE_TXT)
    os.utime(path, (time.time() - 5, time.time() - 5))
    async with sweeping(services):
        await wait_for_jobs(services, 1)
        path.write_bytes(INVOICE_TXT + b"Note: corrected\n")
        rows = await wait_for_jobs(services, 2)
    # Both jobs have the file's name, which job_rows orders by: in the order they were made (ids).
    assert [row.file_size for row in sorted(rows, key=lambda row: row.id)] == [len(INVOICE_TXT),
                                                                                len(INVOICE_TXT) + 16]


async def test_processed_files_move_to_done_or_failed_beside_them(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, root: Path) -> None:
    inbox = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans")
    folder = root / "scans"
    drop(folder, 2)
    (folder / "junk.bin").write_bytes(GARBAGE)
    (folder / "sub").mkdir()
    (folder / "sub" / "ignored.txt").write_bytes(INVOICE_TXT)
    async with running_workers(services), sweeping(services):
        rows = await wait_for_jobs(services, 2)
        await wait_for_run(client, alice, rows[0].job_run_id, "COMPLETED")
        # The next sweep moves what ended; a paused-and-resumed inbox is swept at once.
        for paused in (True, False):
            await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": paused}, headers=alice)
        async def moved() -> bool:
            return sorted(p.name for p in folder.iterdir()) == ["done", "failed", "sub"]

        await eventually(moved)
    assert sorted(p.name for p in (folder / "done").iterdir()) == ["invoice-000.txt", "invoice-001.txt"]
    assert [p.name for p in (folder / "failed").iterdir()] == ["junk.bin"]
    assert (folder / "sub" / "ignored.txt").exists()
    swept = await events_of(services, types=["inbox.swept"])
    assert [event.data["refused"] for event in swept] == [[{
        "name": "junk.bin",
        "reason": "Unsupported file type: junk.bin (accepted: PDF, PNG, JPEG, TIFF, WEBP, DOCX, XLSX, CSV, TXT, HTML)",
    }]]
    assert len(await job_rows(services)) == 2


async def test_a_paused_inbox_takes_nothing_and_a_folder_gone_is_reported(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, root: Path) -> None:
    (root / "later").mkdir()
    inbox = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="later")
    await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": True}, headers=alice)
    drop(root / "later", 3)
    async with sweeping(services):
        await trio.sleep(0.5)
        assert await job_rows(services) == []
        (root / "later").rename(root / "elsewhere")
        await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": False}, headers=alice)
        async def failed() -> Any:
            body = await (await client.get(f"/api/inboxes/{inbox['id']}", headers=alice)).get_json()
            return body if body["lastError"] else None

        body = await eventually(failed)
    assert body["lastError"] == "path 'later' is not an existing folder under inboxes.local_root"
    assert await job_rows(services) == []


# --- an S3 prefix ----------------------------------------------------------------------------


async def test_fifty_objects_under_an_s3_prefix_become_fifty_jobs_once(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, config: Config,
        s3_server: Any) -> None:
    objects = {f"in/{i:03d}.txt": INVOICE_TXT for i in range(50)}
    bucket = s3_server.new_bucket({**objects, "other/x.txt": INVOICE_TXT})
    integration = await create_s3(client, alice, s3_server, bucket)
    inbox = await create_inbox(client, alice, kind="s3", schemaId=schema_id, prefix="in/",
                               integrationId=integration["id"])
    assert inbox["after"] == "keep" and inbox["prefix"] == "in/" and inbox["path"] is None
    async with open_services(config) as other, sweeping(services), sweeping(other):
        rows = await wait_for_jobs(services, 50)
        await trio.sleep(0.5)
    rows = await job_rows(services)
    assert len(rows) == 50 and {row.status for row in rows} == {"PENDING"}
    assert sorted(row.source["key"] for row in rows) == sorted(objects)
    # A new object, and one overwritten (a new ETag), are new files; the rest are not.
    s3_server.client().put_object(Bucket=bucket, Key="in/new.txt", Body=INVOICE_TXT)
    s3_server.client().put_object(Bucket=bucket, Key="in/007.txt", Body=INVOICE_TXT + b"Note: v2\n")
    for paused in (True, False):  # resumed: due at once, not in 600 s
        await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": paused}, headers=alice)
    async with sweeping(services):
        rows = await wait_for_jobs(services, 52)
        await trio.sleep(0.3)
    assert len(await job_rows(services)) == 52
    # The jobs fetch their objects as any job with a `source` does (the first run's are cancelled, to be quick).
    first_run = {row.job_run_id for row in rows if row.source["key"] == "in/000.txt"}.pop()
    assert (await client.post(f"/api/job-runs/{first_run}/cancel", headers=alice)).status_code == 200
    async with running_workers(services):
        new_run = {row.job_run_id for row in rows if row.source["key"] == "in/new.txt"}.pop()
        run = await wait_for_run(client, alice, new_run, "COMPLETED", "FAILED")
    assert run["status"] == "COMPLETED" and run["total"] == 2
    items = await services.db.read(lambda conn: conn.execute(sa.select(sa.func.count()).select_from(
        inbox_items)).scalar_one())
    assert items == 52


async def test_a_listing_cut_at_its_limit_says_so_on_the_inbox(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, s3_server: Any,
        monkeypatch: Any) -> None:
    """Past 10,000 objects under the prefix, objects sorting after the first 10,000 were never
    taken and the inbox said nothing (lastError null). Here the limit is 3."""
    import daemon.inboxes.sweeper as sweeper

    monkeypatch.setattr(sweeper, "MAX_LISTED", 3)
    bucket = s3_server.new_bucket({f"in/{i:03d}.txt": INVOICE_TXT for i in range(5)})
    integration = await create_s3(client, alice, s3_server, bucket)
    inbox = await create_inbox(client, alice, kind="s3", schemaId=schema_id, prefix="in/",
                               integrationId=integration["id"])
    async with sweeping(services):
        await wait_for_jobs(services, 3)
        for _ in range(100):  # the run is recorded with the sweep's lastError: at most a moment after the jobs
            shown = await (await client.get(f"/api/inboxes/{inbox['id']}", headers=alice)).get_json()
            if shown["lastError"]:
                break
            await trio.sleep(0.1)
    assert "more than 3 entries" in shown["lastError"] and "move the ones done out" in shown["lastError"]
    assert len(await job_rows(services)) == 3


# --- a Google Drive folder --------------------------------------------------------------------


async def test_fifty_files_of_a_drive_folder_become_fifty_jobs_once(
        client: Any, alice: dict[str, str], schema_id: str, services: Services) -> None:
    async with open_fake_google() as google:
        with_google(services, google.url)
        folder_id = google.add_folder("Scans")
        files = [google.add_file(f"Scans/{i:03d}.txt", INVOICE_TXT) for i in range(50)]
        google.add_file("Elsewhere/x.txt", INVOICE_TXT)
        google.add_folder("Scans/sub")
        integration = await connect_drive(client, alice, google)
        inbox = await create_inbox(client, alice, kind="google-drive", schemaId=schema_id, folderId=folder_id,
                                   integrationId=integration["id"])
        assert inbox["folderId"] == folder_id and inbox["after"] == "keep"
        async with open_services(services.config) as other, sweeping(services), sweeping(other):
            await wait_for_jobs(services, 50)
            await trio.sleep(0.5)
        rows = await job_rows(services)
        assert sorted(row.source["fileId"] for row in rows) == sorted(f.id for f in files)
        assert {row.status for row in rows} == {"PENDING"}
        # A new version of a file is a new file; the others are not taken again, nor one
        # renamed (Drive counts that a change of the file too, not of its content).
        files[3].content, files[3].version = INVOICE_TXT + b"Note: v2\n", 2
        files[4].name, files[4].version = "004 (renamed).txt", 2
        for paused in (True, False):
            await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": paused}, headers=alice)
        async with sweeping(services):
            rows = await wait_for_jobs(services, 51)
            await trio.sleep(0.3)
        assert len(await job_rows(services)) == 51
        assert [row.source["fileId"] for row in rows].count(files[3].id) == 2


async def test_drive_files_taken_under_their_former_identity_are_not_taken_again(
        client: Any, alice: dict[str, str], schema_id: str, services: Services) -> None:
    """Files an earlier release took (named by Drive's version, which a rename moves) are not
    taken again after an upgrade, nor when renamed after it."""
    async with open_fake_google() as google:
        with_google(services, google.url)
        folder_id = google.add_folder("Scans")
        files = [google.add_file(f"Scans/{i}.txt", INVOICE_TXT + f"No {i}\n".encode()) for i in range(3)]
        integration = await connect_drive(client, alice, google)
        inbox = await create_inbox(client, alice, kind="google-drive", schemaId=schema_id, folderId=folder_id,
                                   integrationId=integration["id"])
        # As an earlier release recorded the first two, before this one swept.
        await services.db.run(lambda conn: conn.execute(inbox_items.insert(), [
            {"inbox_id": inbox["id"], "identity": identity(InboxKind.GOOGLE_DRIVE, f.id, str(f.version)),
             "name": f.name, "taken_at": utcnow(), "settled_at": utcnow()} for f in files[:2]]))
        async with sweeping(services):
            rows = await wait_for_jobs(services, 1)
            await trio.sleep(0.5)
        assert [row.source["fileId"] for row in rows] == [files[2].id]
        files[0].name, files[0].version = "0 (renamed).txt", 2
        files[1].content, files[1].version = INVOICE_TXT + b"No 1, v2\n", 2
        for paused in (True, False):
            await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": paused}, headers=alice)
        async with sweeping(services):
            rows = await wait_for_jobs(services, 2)
            await trio.sleep(0.5)
        assert sorted(row.source["fileId"] for row in await job_rows(services)) == sorted([files[1].id, files[2].id])


async def test_a_denied_s3_listing_is_reported_on_the_inbox_and_its_integration_takes_it_along(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, s3_server: Any) -> None:
    bucket = s3_server.new_bucket({"in/a.txt": INVOICE_TXT})
    denied = await create_s3(client, alice, s3_server, bucket, credentials=s3_server.denied)
    inbox = await create_inbox(client, alice, kind="s3", schemaId=schema_id, prefix="in/",
                               integrationId=denied["id"])

    async def inbox_now() -> dict[str, Any]:
        r = await client.get(f"/api/inboxes/{inbox['id']}", headers=alice)
        return await r.get_json()  # type: ignore[no-any-return]

    async def failed() -> Any:
        body = await inbox_now()
        return body if body["lastError"] else None

    async with sweeping(services):
        body = await eventually(failed)
    assert "AccessDenied" in body["lastError"] and body["lastSweptAt"] is not None
    assert await job_rows(services) == []
    # Deleting the integration deletes its inboxes.
    assert (await client.delete(f"/api/integrations/{denied['id']}", headers=alice)).status_code == 204
    assert (await client.get(f"/api/inboxes/{inbox['id']}", headers=alice)).status_code == 404


async def test_a_disabled_account_or_a_demoted_admins_folder_takes_nothing(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, root: Path) -> None:
    others = {}
    for name in ("bob", "carol"):
        auth = await register(client, f"{name}@example.com")
        user_id = (await (await client.get("/api/auth/me", headers=auth)).get_json())["id"]
        r = await client.patch(f"/api/admin/users/{user_id}", json={"role": "ADMIN"}, headers=alice)
        assert r.status_code == 200
        (root / name).mkdir()
        await create_inbox(client, auth, kind="local", schemaId=await create_schema(client, auth), path=name)
        others[name] = user_id
    await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans")
    r = await client.patch(f"/api/admin/users/{others['bob']}", json={"role": "USER"}, headers=alice)
    assert r.status_code == 200
    r = await client.patch(f"/api/admin/users/{others['carol']}", json={"disabled": True}, headers=alice)
    assert r.status_code == 200
    drop(root / "bob", 2, "bob")
    drop(root / "carol", 2, "carol")
    drop(root / "scans", 1, "alice")
    async with sweeping(services):
        await wait_for_jobs(services, 1)
        await trio.sleep(0.5)
    assert [row.file_name for row in await job_rows(services)] == ["alice-000.txt"]


@pytest.mark.parametrize("spelling", ["scans", "scans/", "scans//", "scans/./", "./scans", "alias"])
async def test_a_folder_already_watched_is_409_whoever_asks(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, root: Path, spelling: str) -> None:
    """Two inboxes on one folder made each file a job once per inbox; an admin's inbox on
    another admin's folder copied that admin's documents into their own account."""
    (root / "alias").symlink_to(root / "scans")
    await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans")
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": spelling},
                          headers=alice)
    body = await r.get_json()
    assert r.status_code == 409 and body["message"].startswith("An inbox already watches this folder"), body

    bob = await register(client, "bob@example.com")
    await services.db.run(lambda conn: conn.execute(
        users.update().where(users.c.email == "bob@example.com").values(role="ADMIN")))
    bobs_schema = (await (await client.post("/api/schemas", json={"name": "B", "definition": {
        "type": "object", "properties": {"n": {"type": "string"}}}}, headers=bob)).get_json())["id"]
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": bobs_schema, "path": spelling},
                          headers=bob)
    assert r.status_code == 409, await r.get_json()


async def test_one_folder_asked_for_by_many_at_once_gets_one_inbox(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Before: each request checked the folder before any of them had inserted, and all got 201."""
    statuses: list[int] = []

    async def ask() -> None:
        r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": "scans"},
                              headers=alice)
        statuses.append(r.status_code)

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(ask)
    assert sorted(statuses) == [201] + [409] * 7, statuses
    listed = await (await client.get("/api/inboxes", headers=alice)).get_json()
    assert len(listed["data"]) == 1


async def test_a_folder_made_anothers_by_a_symlink_since_takes_nothing(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, root: Path) -> None:
    """One inbox a folder was checked at creation only: "other" replaced by a symlink to
    "scans" afterwards made every file two jobs; an inbox on scans/done took each file again
    once the first inbox had moved it there."""
    (root / "other").mkdir()
    first = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans", after="keep")
    second = await create_inbox(client, alice, kind="local", schemaId=schema_id, path="other", after="keep")
    (root / "other").rmdir()
    (root / "other").symlink_to(root / "scans")
    drop(root / "scans", 3)
    async with sweeping(services):
        await wait_for_jobs(services, 3)
        for _ in range(100):
            shown = await (await client.get(f"/api/inboxes/{second['id']}", headers=alice)).get_json()
            if shown["lastError"]:
                break
            await trio.sleep(0.1)
    assert "an older inbox watches this folder" in shown["lastError"]
    assert len(await job_rows(services)) == 3
    assert (await (await client.get(f"/api/inboxes/{first['id']}", headers=alice)).get_json())["lastError"] is None

    (root / "scans" / "done").mkdir()
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": "scans/done"},
                          headers=alice)
    assert r.status_code == 409, await r.get_json()
