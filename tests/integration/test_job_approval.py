"""A person's approval of a job's result (the console, issue #15): POST /api/jobs/:id/approve
records reviewedAt and reviewedBy, emits job.updated, and a later correction clears it.
Jobs run through the worker pool and the rules provider. Runs on SQLite and, with
DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

from typing import Any

from jobs_helpers import (
    INVOICE_RESULT,
    STRICT_SCHEMA,
    create_job,
    create_schema,
    error_of,
    events_of,
    register,
    running_workers,
    user_id_of,
    wait_for_status,
)

from daemon.services import Services


async def _completed(client: Any, services: Services, auth: dict[str, str], schema_id: str) -> dict[str, Any]:
    job = await create_job(client, auth, schema_id)
    async with running_workers(services, workers=1):
        return await wait_for_status(client, auth, job["id"], "COMPLETED", "FAILED")


async def test_the_owner_approves_a_completed_job_and_every_answer_shows_it(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    bob = await register(client, "bob@example.com")  # a USER (alice, the first account, is ADMIN)
    schema_id = await create_schema(client, bob)
    job = await _completed(client, services, bob, schema_id)
    assert job["status"] == "COMPLETED" and job["reviewedAt"] is None and job["reviewedBy"] is None

    r = await client.post(f"/api/jobs/{job['id']}/approve", headers=bob)
    approved = await r.get_json()
    assert r.status_code == 200, approved
    bob_id = await user_id_of(client, bob)
    assert approved["reviewedBy"] == bob_id and approved["reviewedAt"].endswith("Z")
    assert approved["result"] == INVOICE_RESULT

    shown = await (await client.get(f"/api/jobs/{job['id']}", headers=bob)).get_json()
    listed = await (await client.get("/api/jobs", headers=bob)).get_json()
    assert shown["reviewedAt"] == approved["reviewedAt"] == listed["data"][0]["reviewedAt"]

    [event] = await events_of(services, job_id=job["id"], types=["job.updated"])
    assert event.data["job"]["reviewedBy"] == bob_id
    assert event.data["job"]["reviewedAt"] == approved["reviewedAt"]
    assert event.data["job"]["result"] == INVOICE_RESULT


async def test_an_admin_approves_any_job_and_another_user_cannot(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    bob = await register(client, "bob@example.com")
    carol = await register(client, "carol@example.com")
    job = await _completed(client, services, bob, await create_schema(client, bob))

    await error_of(await client.post(f"/api/jobs/{job['id']}/approve", headers=carol), 404)
    r = await client.post(f"/api/jobs/{job['id']}/approve", headers=alice)
    body = await r.get_json()
    assert r.status_code == 200, body
    assert body["reviewedBy"] == await user_id_of(client, alice)


async def test_only_a_completed_and_complete_result_can_be_approved(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    queued = await create_job(client, alice, schema_id)
    body = await error_of(await client.post(f"/api/jobs/{queued['id']}/approve", headers=alice), 409)
    assert "COMPLETED" in body["message"]

    incomplete = await _completed(client, services, alice, await create_schema(client, alice, STRICT_SCHEMA))
    assert incomplete["resultMeta"]["complete"] is False
    body = await error_of(await client.post(f"/api/jobs/{incomplete['id']}/approve", headers=alice), 409)
    assert "lacks required values" in body["message"]

    finished = {**incomplete["result"], "iban": "DE89370400440532013000"}
    r = await client.patch(f"/api/jobs/{incomplete['id']}/result", json={"result": finished}, headers=alice)
    assert r.status_code == 200
    r = await client.post(f"/api/jobs/{incomplete['id']}/approve", headers=alice)
    assert r.status_code == 200 and (await r.get_json())["reviewedAt"] is not None


async def test_a_correction_after_approval_clears_it(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    job = await _completed(client, services, alice, schema_id)
    assert (await client.post(f"/api/jobs/{job['id']}/approve", headers=alice)).status_code == 200

    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": {**INVOICE_RESULT, "total": 13.0}},
                           headers=alice)
    corrected = await r.get_json()
    assert r.status_code == 200, corrected
    assert corrected["reviewedAt"] is None and corrected["reviewedBy"] is None
    updates = await events_of(services, job_id=job["id"], types=["job.updated"])
    assert [e.data["job"]["reviewedAt"] is None for e in updates] == [False, True]


async def test_a_result_its_edited_schema_refuses_is_not_approved_until_corrected(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Before: approve trusted the resultMeta of when the job ran, and kept a total of the wrong
    type and a newly required value missing as a complete, approved result."""
    job = await _completed(client, services, alice, schema_id)
    assert job["resultMeta"]["complete"] is True
    edited = {"type": "object", "required": ["iban"], "properties": {
        "invoice_number": {"type": "string"}, "total": {"type": "string"}, "iban": {"type": "string"}}}
    r = await client.patch(f"/api/schemas/{schema_id}", json={"definition": edited}, headers=alice)
    assert r.status_code == 200, await r.get_json()

    body = await error_of(await client.post(f"/api/jobs/{job['id']}/approve", headers=alice), 409)
    assert body["message"].startswith("The result does not match its schema as it is now (result/total: ")
    assert "result/iban is required" in body["message"] and body["message"].endswith(
        "correct it with PATCH /result, then approve")
    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    assert (await r.get_json())["reviewedAt"] is None

    fixed = {**job["result"], "total": "12.50", "iban": "DE89370400440532013000"}
    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": fixed}, headers=alice)
    assert r.status_code == 200, await r.get_json()
    r = await client.post(f"/api/jobs/{job['id']}/approve", headers=alice)
    assert r.status_code == 200 and (await r.get_json())["reviewedAt"] is not None
