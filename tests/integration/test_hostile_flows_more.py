"""Hostile flows (third pass): exports of results and schemas whose text a spreadsheet
cannot hold or would run, webhook settings and deliveries, inboxes and schemas, each
answered in the SPEC §3 shape or written whole, never a 500 or a half-written file."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openpyxl
import pytest
import sqlalchemy as sa
import trio
from jobs_helpers import (
    ERROR_KEYS,
    INVOICE_TXT,
    completed_run,
    docx_bytes,
    register,
    running,
    running_workers,
    wait_at,
)
from webhook_receiver import Received, Reply, open_receiver

from daemon.inboxes import local
from daemon.inboxes.sweeper import run_inboxes
from daemon.services import Services
from daemon.storage.tables import jobs
from daemon.webhooks.dispatcher import run_dispatcher


async def _bad_request(response: Any) -> list[str]:
    body = await response.get_json()
    assert response.status_code == 400, body
    assert set(body) >= ERROR_KEYS and body["error"] == "Bad Request" and body["statusCode"] == 400, body
    return body["message"]  # type: ignore[no-any-return]


async def _run_with_results(client: Any, services: Services, auth: dict[str, str], definition: dict[str, Any],
                            results: list[dict[str, Any]]) -> tuple[str, str]:
    """A schema and a run whose jobs COMPLETED with `results` (stored as a worker stores them)."""
    r = await client.post("/api/schemas", json={"name": "S", "definition": definition}, headers=auth)
    assert r.status_code == 201, await r.get_json()
    schema_id = (await r.get_json())["id"]
    return schema_id, await completed_run(client, services, auth, schema_id, results)


# --- exports -------------------------------------------------------------------------------

async def test_a_csv_export_neutralises_a_formula_in_a_property_name(client: Any, services: Services) -> None:
    """The header row comes from the schema's property names, which a user chooses: a name
    starting with "=" must not reach a spreadsheet as a formula any more than a value."""
    auth = await register(client)
    name = "=cmd|' /C calc'!A0"
    _, run_id = await _run_with_results(
        client, services, auth, {"type": "object", "properties": {name: {"type": "string"}}}, [{name: "x"}])
    r = await client.get(f"/api/job-runs/{run_id}/export?format=csv", headers=auth)
    assert r.status_code == 200
    header = next(csv.reader(io.StringIO((await r.get_data()).decode("utf-8").removeprefix("\ufeff"))))
    assert header[-1] == "'" + name



async def test_an_xlsx_export_of_text_with_control_characters_is_a_whole_workbook(
    client: Any, services: Services
) -> None:
    """XML 1.0 cannot carry most control characters, and openpyxl refuses them in a cell:
    a value holding one (extracted from a document, or a correction) must not end the
    export midway with a truncated body."""
    auth = await register(client)
    definition = {"type": "object", "properties": {
        "note\x01": {"type": "string"},
        "lines\x02": {"type": "array", "items": {"type": "object", "properties": {"d\x03": {"type": "string"}}}}}}
    results = [{"note\x01": "bell\x07 here", "lines\x02": [{"d\x03": "tab\x0b"}]}]
    _, run_id = await _run_with_results(client, services, auth, definition, results)
    for items in ("rows", "sheets"):
        r = await client.get(f"/api/job-runs/{run_id}/export?format=xlsx&items={items}", headers=auth)
        assert r.status_code == 200
        book = openpyxl.load_workbook(io.BytesIO(await r.get_data()))
        jobs = book["jobs"]
        header = [c.value for c in jobs[1]]
        assert "note\ufffd" in header, header
        assert "bell\ufffd here" in [c.value for c in jobs[2]]
        if items == "sheets":
            assert book.sheetnames == ["jobs", "lines\ufffd"]


# --- inboxes -------------------------------------------------------------------------------

def _local_inboxes(services: Services, root: Path) -> Path:
    """Local folders under `root` (with a folder `scans`), swept at start and on notifications."""
    (root / "scans").mkdir(parents=True)
    services.config = dataclasses.replace(services.config, inboxes=dataclasses.replace(
        services.config.inboxes, local_root=str(root), interval_s=600, settle_ms=50))
    return root / "scans"


async def _eventually(check: Callable[[], Awaitable[Any]], deadline_s: float = 15.0) -> Any:
    with trio.fail_after(deadline_s):
        while True:
            if answer := await check():
                return answer
            await trio.sleep(0.02)


async def _job_names(services: Services) -> list[str]:
    def load(conn: sa.Connection) -> list[str]:
        return [row.file_name for row in conn.execute(sa.select(jobs.c.file_name, jobs.c.status))
                if row.status == "COMPLETED"]

    return sorted(await services.db.read(load))


async def _local_inbox(client: Any, auth: dict[str, str]) -> dict[str, Any]:
    r = await client.post("/api/schemas", json={"name": "S", "definition": {
        "type": "object", "properties": {"invoiceNumber": {"type": "string"}}}}, headers=auth)
    schema_id = (await r.get_json())["id"]
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": "scans"},
                          headers=auth)
    assert r.status_code == 201, await r.get_json()
    return await r.get_json()  # type: ignore[no-any-return]


async def _nudge(client: Any, auth: dict[str, str], inbox: dict[str, Any]) -> None:
    """Sweep at once (a resumed inbox is swept when its change is seen)."""
    for paused in (True, False):
        await client.patch(f"/api/inboxes/{inbox['id']}", json={"paused": paused}, headers=auth)


async def test_a_file_named_done_does_not_stop_a_folder_from_being_swept(
    client: Any, services: Services, tmp_path: Path
) -> None:
    """A file called "done" (or "failed") is a file like any other; once its job ended it
    cannot move into a folder done/ (its own name is taken), and that must not keep the
    inbox from ever taking a file again: every sweep began by moving files aside, raised,
    and never listed the folder."""
    folder = _local_inboxes(services, tmp_path / "inboxes")
    auth = await register(client)
    inbox = await _local_inbox(client, auth)
    (folder / "done").write_bytes(INVOICE_TXT)
    async with running_workers(services, workers=1), running(services, run_inboxes):
        await _eventually(lambda: _is(_job_names(services), ["done"]))
        await _nudge(client, auth, inbox)  # the sweep that moves files aside
        (folder / ".later.txt.part").write_bytes(INVOICE_TXT)
        os.replace(folder / ".later.txt.part", folder / "later.txt")
        await _nudge(client, auth, inbox)
        await _eventually(lambda: _is(_job_names(services), ["done", "later.txt"]))


async def test_a_done_symlink_does_not_carry_files_out_of_the_inbox_root(
    client: Any, services: Services, tmp_path: Path
) -> None:
    """done/ is made by the daemon; a symlink called done (placed by whoever can write into
    the folder) leads anywhere the daemon may write: files must not be moved through it."""
    folder = _local_inboxes(services, tmp_path / "inboxes")
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "done").symlink_to(outside, target_is_directory=True)
    auth = await register(client)
    inbox = await _local_inbox(client, auth)
    (folder / "a.txt").write_bytes(INVOICE_TXT)
    async with running_workers(services, workers=1), running(services, run_inboxes):
        await _eventually(lambda: _is(_job_names(services), ["a.txt"]))
        await _nudge(client, auth, inbox)

        async def last_error() -> str | None:
            return (await (await client.get(f"/api/inboxes/{inbox['id']}", headers=auth)).get_json())["lastError"]

        # The file that stays is said on the inbox, not only in the log at every sweep.
        error = await _eventually(last_error)
        assert error.startswith("a.txt cannot be moved into done/"), error
    assert list(outside.iterdir()) == []
    assert (folder / "a.txt").exists()


async def test_a_file_swapped_for_a_symlink_after_the_listing_is_not_read_through_it(
    services: Services, tmp_path: Path
) -> None:
    """The listing takes regular files only, but the copy opened the name again and followed
    a symlink put there since: with its size and mtime made to match, whoever may write into
    the folder got any file the daemon can read (here a secret) back as a job's file."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"Invoice Number: SECRET-1\n")
    folder = tmp_path / "scans"
    folder.mkdir()
    bait = folder / "a.txt"
    bait.write_bytes(b"x" * secret.stat().st_size)
    os.utime(bait, ns=(secret.stat().st_atime_ns, secret.stat().st_mtime_ns))
    with local.open_folder(str(tmp_path), "scans") as opened:
        [candidate] = local.scan(opened, settle_s=0, now=secret.stat().st_mtime + 1).candidates
        bait.unlink()
        bait.symlink_to(secret)
        with pytest.raises(local.Changed):
            await local.copy_in(services.blobs, opened, candidate, 1 << 20)


async def test_a_file_swapped_for_a_fifo_after_the_listing_does_not_hang_the_sweep(
    services: Services, tmp_path: Path
) -> None:
    """Opening a FIFO for reading waits for a writer, in a thread no cancellation reaches:
    the sweeper (and the drain at SIGTERM) would wait for ever."""
    folder = tmp_path / "scans"
    folder.mkdir()
    bait = folder / "a.txt"
    bait.write_bytes(INVOICE_TXT)
    with local.open_folder(str(tmp_path), "scans") as opened:
        [candidate] = local.scan(opened, settle_s=0, now=bait.stat().st_mtime + 1).candidates
        bait.unlink()
        os.mkfifo(bait)
        with trio.fail_after(5), pytest.raises(local.Changed):
            await local.copy_in(services.blobs, opened, candidate, 1 << 20)


async def test_a_docx_is_still_told_from_the_file_copied(services: Services, tmp_path: Path) -> None:
    """The ZIP's members are read from the file opened for the copy, not from its name again."""
    folder = tmp_path / "scans"
    folder.mkdir()
    doc = folder / "a.docx"
    doc.write_bytes(docx_bytes())
    with local.open_folder(str(tmp_path), "scans") as opened:
        [candidate] = local.scan(opened, settle_s=0, now=doc.stat().st_mtime + 1).candidates
        job = await local.copy_in(services.blobs, opened, candidate, 1 << 20)
    assert job.mime_type == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


async def _is(names: Awaitable[list[str]], wanted: list[str]) -> bool:
    return await names == wanted


# --- webhooks ------------------------------------------------------------------------------

def _webhooks(services: Services, **changes: Any) -> None:
    """Webhook settings of the running process, as a SIGHUP would change them; loopback
    receivers over plain http allowed unless said otherwise."""
    services.config = dataclasses.replace(services.config, webhooks=dataclasses.replace(
        services.config.webhooks, **{"allow_http": True, "allow_private_networks": True, "backoff_initial_ms": 50,
                                     "max_attempts": 1, "timeout_ms": 2000, **changes}))


async def _settled(client: Any, auth: dict[str, str], delivery_id: str, *statuses: str) -> dict[str, Any]:
    return await wait_at(client, auth, f"/api/webhooks/deliveries/{delivery_id}", *statuses, deadline_s=10)


async def _ping_answered(client: Any, services: Services, reply: Reply) -> dict[str, Any]:
    """The delivery of a webhook.ping to a receiver answering `reply`, once it ended."""
    _webhooks(services)
    auth = await register(client)

    async def answer(request: Received) -> Reply:
        return reply

    async with open_receiver(answer) as receiver, running(services, run_dispatcher):
        r = await client.post("/api/webhooks", json={"url": receiver.url(), "events": ["*"]}, headers=auth)
        assert r.status_code == 201, await r.get_json()
        r = await client.post(f"/api/webhooks/{(await r.get_json())['id']}/test", headers=auth)
        assert r.status_code == 202, await r.get_json()
        return await _settled(client, auth, (await r.get_json())["id"], "SUCCEEDED", "DEAD")


async def test_a_nul_in_a_receivers_answer_is_not_stored_as_text(client: Any, services: Services) -> None:
    """The start of the answer is kept as text; PostgreSQL refuses NUL in text, so the
    attempt could not be recorded: the delivery was sent again and again (each time its
    lease ran out), never RETRYING nor DEAD, and its log stayed empty."""
    detail = await _ping_answered(client, services, (500, {}, b"bad\x00news"))
    assert detail["status"] == "DEAD"
    assert detail["attemptLog"][0]["responseBody"] == "bad\ufffdnews"


async def test_a_2xx_with_a_retry_after_of_other_digits_is_a_success(client: Any, services: Services) -> None:
    """"²".isdigit() is true but float("²") raises: the ValueError was taken for an invalid
    URL, and a receiver's 200 became a failed attempt ("invalid URL: could not convert…")."""
    detail = await _ping_answered(client, services, (200, {"Retry-After": "²".encode()}, b"ok"))  # type: ignore[dict-item]
    assert detail["status"] == "SUCCEEDED", detail
    assert detail["attemptLog"][0]["error"] is None


# --- schemas -------------------------------------------------------------------------------

@pytest.mark.parametrize("place", ["required", "type", "dependentRequired"])
async def test_a_definition_with_thousands_of_objects_in_a_unique_list_is_refused_at_once(
    client: Any, place: str
) -> None:
    """The draft 2020-12 meta-schema asks uniqueItems of "required" and "type" (and of
    dependentRequired's lists, a keyword the subset refuses but still meta-validates);
    jsonschema compares items that do not sort (objects) pairwise: 8,000 of them (90 KB)
    took a minute of CPU on the event loop, the whole daemon frozen, through the public
    /api/schema/convert as well as /api/schemas."""
    objects = [{"k": i} for i in range(8000)]
    definition: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    if place == "dependentRequired":
        definition["dependentRequired"] = {"a": objects}
    else:
        definition["properties"]["a"][place] = objects
    auth = await register(client)
    started = time.monotonic()
    where = "properties.a." + place if place != "dependentRequired" else "dependentRequired.a"
    for r in (await client.post("/api/schemas", json={"name": "S", "definition": definition}, headers=auth),
              await client.post("/api/schema/convert", json={"jsonSchema": definition})):
        assert any(f".{where} must not hold objects, arrays" in m for m in await _bad_request(r))
    assert time.monotonic() - started < 5


async def test_an_example_of_thousands_of_objects_with_different_members_is_refused_at_once(client: Any) -> None:
    """Inferring a schema from an example looked at every element of an array once per member
    name found in any of them: 30,000 one-member objects (400 KB, no account needed) were
    900 million look-ups on the event loop before the limit of 200 properties said no."""
    example = {"lines": [{f"k{i}": 1} for i in range(30_000)]}
    started = time.monotonic()
    messages = await _bad_request(await client.post("/api/schema/convert", json={"example": example}))
    assert time.monotonic() - started < 5
    assert any("more than 200" in m for m in messages), messages[:3]


async def test_a_definition_of_four_mib_is_checked_off_the_event_loop_and_answered_in_brief(client: Any) -> None:
    """250,000 undeclared names in `required` (4 MB, under the body limit): the check costs
    seconds of CPU, which ran on the event loop (every other request waited), and its 400
    listed a problem per name (25 MB). (The public convert route reads at most 1 MiB.)"""
    auth = await register(client)
    definition = {"type": "object", "properties": {"a": {"type": "string"}},
                  "required": [f"name-{i:07d}" for i in range(250_000)]}
    order: list[str] = []

    async def convert() -> None:
        r = await client.post("/api/schemas", json={"name": "Huge", "definition": definition}, headers=auth)
        messages = await _bad_request(r)
        assert len(messages) == 101 and messages[-1] == "definition has 249900 more problems", messages[-2:]
        order.append("convert")

    async def health() -> None:
        await trio.sleep(0.5)  # the definition is being checked by now
        r = await client.get("/api/health")
        assert r.status_code == 200
        order.append("health")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(convert)
        nursery.start_soon(health)
    assert order == ["health", "convert"]


async def test_a_file_docex_may_not_read_is_refused_not_retried_for_ever(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file docex's user may not read was taken as "changed since the listing" and tried
    again every half second, for ever, with nothing said (300 of them: 17 % of a core).
    (As root every file is readable: the denial is the open's, as on a root-squashed share.)"""
    folder = tmp_path / "scans"
    folder.mkdir()
    doc = folder / "a.txt"
    doc.write_bytes(INVOICE_TXT)

    def denied(*args: object) -> object:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(local, "_open_regular", denied)
    with local.open_folder(str(tmp_path), "scans") as opened:
        [candidate] = local.scan(opened, settle_s=0, now=doc.stat().st_mtime + 1).candidates
        with pytest.raises(local.Refused, match="permission denied"):
            await local.copy_in(services.blobs, opened, candidate, 1 << 20)
