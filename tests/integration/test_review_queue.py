"""The review queue (the console, issue #15): GET /api/jobs?review=pending lists, oldest first,
the COMPLETED jobs nobody approved whose result has a value under
review.confidence_threshold or lacks a required value. Runs on SQLite and, with
DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa
from jobs_helpers import create_job, create_schema, register

from daemon.clock import utcnow
from daemon.jobs.models import completeness
from daemon.services import Services
from daemon.storage.repos import jobs as repo


def _meta(confidences: dict[str, float], missing: tuple[str, ...] = ()) -> dict[str, Any]:
    fields = {pointer: {"confidence": c, "page": 1, "text": "x"} for pointer, c in confidences.items()}
    return {"provider": "rules", "model": None, "durationMs": 1.0, "fields": fields, **completeness(missing)}


async def _completed(client: Any, services: Services, auth: dict[str, str], schema_id: str,
                     confidences: dict[str, float], missing: tuple[str, ...] = ()) -> str:
    """A job completed by a worker with values of these confidences."""
    job_id = str((await create_job(client, auth, schema_id))["id"])

    def complete(conn: sa.Connection) -> None:
        claimed = repo.claim_next(conn, owner="w", now=utcnow(), lease_s=60)
        assert claimed is not None and claimed.id == job_id
        repo.complete_job(conn, job_id=job_id, owner="w", result={"invoice_number": "INV-42", "total": 12.5},
                          meta=_meta(confidences, missing), page_count=1, now=utcnow())

    await services.db.run(complete)
    return job_id


async def _queue(client: Any, auth: dict[str, str], **query: str) -> tuple[list[str], str | None]:
    r = await client.get("/api/jobs", query_string={"review": "pending", **query}, headers=auth)
    body = await r.get_json()
    assert r.status_code == 200, body
    return [job["id"] for job in body["data"]], body["nextCursor"]


async def test_the_queue_holds_doubtful_and_incomplete_unapproved_jobs_oldest_first(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    sure = await _completed(client, services, alice, schema_id, {"/invoice_number": 0.97, "/total": 0.95})
    doubtful = await _completed(client, services, alice, schema_id, {"/invoice_number": 0.97, "/total": 0.5})
    incomplete = await _completed(client, services, alice, schema_id, {"/invoice_number": 0.99}, ("/iban",))
    unlocated = await _completed(client, services, alice, schema_id, {})  # no evidence at all
    approved = await _completed(client, services, alice, schema_id, {"/total": 0.3})
    assert (await client.post(f"/api/jobs/{approved}/approve", headers=alice)).status_code == 200
    bob = await register(client, "bob@example.com")
    bobs = await _completed(client, services, bob, await create_schema(client, bob), {"/total": 0.2})
    await create_job(client, alice, schema_id)  # QUEUED: nothing to review yet

    assert (await _queue(client, alice))[0] == [doubtful, incomplete, unlocated]
    assert sure not in (await _queue(client, alice))[0]
    assert (await _queue(client, bob))[0] == [bobs]

    first, cursor = await _queue(client, alice, limit="2")
    assert first == [doubtful, incomplete] and cursor is not None
    assert await _queue(client, alice, limit="2", cursor=cursor) == ([unlocated], None)


async def test_the_threshold_is_a_setting_applied_at_once(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    doubtful = await _completed(client, services, alice, schema_id, {"/total": 0.5})
    assert (await _queue(client, alice))[0] == [doubtful]
    services.config = dataclasses.replace(
        services.config, review=dataclasses.replace(services.config.review, confidence_threshold=0.4))
    assert (await _queue(client, alice))[0] == []


async def test_a_value_a_person_corrected_is_certain_and_the_others_keep_their_doubt(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    one_doubt = await _completed(client, services, alice, schema_id, {"/invoice_number": 0.97, "/total": 0.5})
    two_doubts = await _completed(client, services, alice, schema_id, {"/invoice_number": 0.6, "/total": 0.5})
    corrected = {"invoice_number": "INV-42", "total": 13.0}
    for job_id in (one_doubt, two_doubts):
        r = await client.patch(f"/api/jobs/{job_id}/result", json={"result": corrected}, headers=alice)
        assert r.status_code == 200
    # The doubtful total was corrected: one_doubt is sure now; two_doubts' number is still doubtful.
    assert (await _queue(client, alice))[0] == [two_doubts]
