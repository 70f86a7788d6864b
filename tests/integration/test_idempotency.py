"""Idempotency-Key on job creation (SPEC §6, §8): replays, conflicts, per-user keys,
concurrent requests, expiry, and refused requests that must not burn a key."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
import trio
from jobs_helpers import (
    GARBAGE,
    INVOICE_TXT,
    bad_request,
    blob_files,
    count_jobs,
    count_rows,
    count_runs,
    create_schema,
    error_of,
    events_of,
    expire_idempotency_keys,
    post_job,
    post_run,
    register,
    with_jobs_config,
)

from daemon.http import jobs as jobs_http
from daemon.storage.tables import idempotency_keys

OTHER_TXT = b"Invoice Number: INV-43\nTotal: 99.00\n"


def key(value: str = "order-42-upload") -> dict[str, str]:
    return {"Idempotency-Key": value}


async def test_the_same_request_with_the_same_key_replays_the_job(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    r = await post_job(client, alice, schema_id, headers=key())
    first = await r.get_json()
    assert r.status_code == 201, first
    assert "Idempotent-Replayed" not in r.headers

    for _ in range(2):
        r = await post_job(client, alice, schema_id, headers=key())
        again = await r.get_json()
        assert r.status_code == 200, again
        assert r.headers.get("Idempotent-Replayed") == "true"
        assert again == first
    assert await count_jobs(services) == 1
    assert len(blob_files(services)) == 1  # the repeats' uploads were dropped
    assert [row.type for row in await events_of(services)] == ["job.queued"]

    # The replay shows the job as it is now.
    r = await client.post(f"/api/jobs/{first['id']}/cancel", headers=alice)
    assert r.status_code == 200
    r = await post_job(client, alice, schema_id, headers=key())
    replayed = await r.get_json()
    assert r.status_code == 200 and replayed["id"] == first["id"] and replayed["status"] == "CANCELLED"

    # Without a key, the same request is a new job.
    r = await post_job(client, alice, schema_id)
    assert r.status_code == 201 and (await r.get_json())["id"] != first["id"]
    assert await count_jobs(services) == 2


async def test_the_same_key_with_another_payload_is_409(client: Any, services: Any, alice: dict[str, str],
                                                        schema_id: str) -> None:
    other_schema = await create_schema(client, alice, name="Other")
    r = await post_job(client, alice, schema_id, headers=key())
    first = await r.get_json()
    assert r.status_code == 201

    for response in (
        await post_job(client, alice, schema_id, OTHER_TXT, headers=key()),  # another file
        await post_job(client, alice, other_schema, headers=key()),  # another schema
        await post_run(client, alice, schema_id, [("invoice.txt", INVOICE_TXT)], headers=key()),  # a run
    ):
        body = await error_of(response, 409)
        assert body["error"] == "Conflict" and "Idempotent-Replayed" not in response.headers
    assert await count_jobs(services) == 1 and await count_runs(services) == 0
    assert len(blob_files(services)) == 1
    # The original still replays.
    r = await post_job(client, alice, schema_id, headers=key())
    assert r.status_code == 200 and (await r.get_json())["id"] == first["id"]


async def test_keys_are_per_user(client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    bob = await register(client, "bob@example.com")
    bobs_schema = await create_schema(client, bob)
    r = await post_job(client, alice, schema_id, headers=key())
    alices = await r.get_json()
    assert r.status_code == 201
    r = await post_job(client, bob, bobs_schema, headers=key())
    bobs = await r.get_json()
    assert r.status_code == 201, bobs
    assert bobs["id"] != alices["id"] and bobs["schemaId"] == bobs_schema
    # Bob's key never replays Alice's job, even with Alice's exact request (her schema is not his).
    await bad_request(await post_job(client, bob, schema_id, headers=key()))
    r = await post_job(client, bob, bobs_schema, headers=key())
    assert r.status_code == 200 and (await r.get_json())["id"] == bobs["id"]
    assert await count_jobs(services) == 2


async def test_two_concurrent_requests_with_one_key_create_one_job(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    responses: list[tuple[int, dict[str, Any], str | None]] = []

    async def send() -> None:
        r = await post_job(client, alice, schema_id, headers=key("concurrent"))
        responses.append((r.status_code, await r.get_json(), r.headers.get("Idempotent-Replayed")))

    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(send)
    assert sorted(status for status, _, _ in responses) == [200, 201], responses
    assert len({body["id"] for _, body, _ in responses}) == 1
    assert {status: replayed for status, _, replayed in responses} == {201: None, 200: "true"}
    assert await count_jobs(services) == 1
    assert len(blob_files(services)) == 1
    assert [row.type for row in await events_of(services)] == ["job.queued"]


async def test_many_concurrent_requests_with_one_key_create_one_job(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    statuses: list[int] = []
    ids: set[str] = set()

    async def send() -> None:
        r = await post_job(client, alice, schema_id, headers=key("stampede"))
        body = await r.get_json()
        statuses.append(r.status_code)
        ids.add(body.get("id", f"error {r.status_code}: {body}"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(send)
    assert sorted(statuses) == [200, 200, 200, 200, 201] and len(ids) == 1, (statuses, ids)
    assert await count_jobs(services) == 1 and len(blob_files(services)) == 1


async def test_a_repeat_whose_job_is_deleted_while_it_is_answered_creates_the_job_again(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, monkeypatch: Any) -> None:
    """The repeat reads the key, then the job (and its key) is deleted, then the repeat renders
    it. Before: 404 for a POST, and the repeat's upload deleted."""
    first = await (await post_job(client, alice, schema_id, headers=key())).get_json()
    render = jobs_http._job_body

    async def deleted_first(job_id: str) -> dict[str, Any]:
        if job_id == first["id"]:
            r = await client.delete(f"/api/jobs/{job_id}", headers=alice)
            assert r.status_code == 204
        return await render(job_id)

    monkeypatch.setattr(jobs_http, "_job_body", deleted_first)
    r = await post_job(client, alice, schema_id, headers=key())
    again = await r.get_json()
    assert r.status_code == 201, again
    assert "Idempotent-Replayed" not in r.headers and again["id"] != first["id"]
    assert await count_jobs(services) == 1 and len(blob_files(services)) == 1  # the repeat's file is kept
    r = await client.get(f"/api/jobs/{again['id']}/file", headers=alice)
    assert r.status_code == 200 and await r.get_data() == INVOICE_TXT
    monkeypatch.undo()
    r = await post_job(client, alice, schema_id, headers=key())
    assert r.status_code == 200 and (await r.get_json())["id"] == again["id"]


async def test_an_expired_key_can_be_used_again(client: Any, services: Any, alice: dict[str, str],
                                                schema_id: str) -> None:
    r = await post_job(client, alice, schema_id, headers=key())
    first = await r.get_json()
    assert r.status_code == 201
    await expire_idempotency_keys(services)
    r = await post_job(client, alice, schema_id, headers=key())
    second = await r.get_json()
    assert r.status_code == 201, second
    assert second["id"] != first["id"] and "Idempotent-Replayed" not in r.headers
    # ...and is live again, for the new job.
    r = await post_job(client, alice, schema_id, headers=key())
    assert r.status_code == 200 and (await r.get_json())["id"] == second["id"]
    # An expired key takes another payload too.
    await expire_idempotency_keys(services)
    r = await post_job(client, alice, schema_id, OTHER_TXT, headers=key())
    assert r.status_code == 201
    assert await count_jobs(services) == 3
    assert await count_rows(services, idempotency_keys) == 1


async def test_the_key_lives_idempotency_ttl(client: Any, services: Any, alice: dict[str, str],
                                             schema_id: str) -> None:
    # 3 s, not 1: the replay must come within the TTL of the first request's commit, and two
    # uploads on a loaded machine can take a second.
    with_jobs_config(services, idempotency_ttl_s=3)
    r = await post_job(client, alice, schema_id, headers=key())
    assert r.status_code == 201
    r = await post_job(client, alice, schema_id, headers=key())
    assert r.status_code == 200
    (row,) = await services.db.read(lambda conn: list(conn.execute(sa.select(idempotency_keys))))
    assert row.expires_at - row.created_at == dt.timedelta(seconds=3)
    await trio.sleep((row.expires_at - dt.datetime.now(dt.UTC)).total_seconds() + 0.1)
    r = await post_job(client, alice, schema_id, headers=key())
    assert r.status_code == 201
    assert await count_jobs(services) == 2


async def test_key_length(client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    messages = await bad_request(await post_job(client, alice, schema_id, headers=key("k" * 256)))
    assert any("Idempotency-Key" in m for m in messages), messages
    assert await count_jobs(services) == 0 and blob_files(services) == []
    r = await post_job(client, alice, schema_id, headers=key("k" * 255))
    assert r.status_code == 201, await r.get_json()


async def test_a_refused_request_does_not_burn_its_key(client: Any, services: Any, alice: dict[str, str],
                                                       schema_id: str) -> None:
    # 400s: an unsupported file, an unknown schema, a missing file.
    await bad_request(await post_job(client, alice, schema_id, GARBAGE, "junk.bin", headers=key()))
    await bad_request(await post_job(client, alice, "01m7y0wjbda0tq1qjfvjv4mj8f", headers=key()))
    await bad_request(await post_job(client, alice, schema_id, None, headers=key()))
    # 413: a file over the limit.
    with_jobs_config(services, max_file_size_bytes=10)
    await error_of(await post_job(client, alice, schema_id, headers=key()), 413)
    with_jobs_config(services, max_file_size_bytes=50 * 1024 * 1024)
    assert await count_rows(services, idempotency_keys) == 0

    r = await post_job(client, alice, schema_id, headers=key())
    assert r.status_code == 201, await r.get_json()
    assert "Idempotent-Replayed" not in r.headers
    assert await count_jobs(services) == 1 and len(blob_files(services)) == 1


async def test_runs_replay_too(client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    files = [("a.txt", INVOICE_TXT), ("b.txt", OTHER_TXT)]
    r = await post_run(client, alice, schema_id, files, headers=key("run-1"))
    first = await r.get_json()
    assert r.status_code == 201, first
    r = await post_run(client, alice, schema_id, files, headers=key("run-1"))
    again = await r.get_json()
    assert r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true"
    assert again["id"] == first["id"]
    assert {job["id"] for job in again["jobs"]} == {job["id"] for job in first["jobs"]}
    assert await count_runs(services) == 1 and await count_jobs(services) == 2
    assert len(blob_files(services)) == 2
    # Other files with that key: 409; a job with that key: 409.
    await error_of(await post_run(client, alice, schema_id, files[:1], headers=key("run-1")), 409)
    await error_of(await post_job(client, alice, schema_id, headers=key("run-1")), 409)
    assert await count_runs(services) == 1 and await count_jobs(services) == 2
    assert [row.type for row in await events_of(services, types=["job_run.created"])] == ["job_run.created"]
