"""Incomplete results over HTTP (SPEC §7): a result that only lacks required values completes
with the values found, `resultMeta.complete` false and `resultMeta.missing` naming them, for a
person to finish with PATCH /result; `"x-docex-incomplete": "fail"` opts a schema back into
RESULT_INVALID. The jobs run through the worker pool and the rules provider, the events reach
a real HTTP receiver, and the rows are read back through the API. Runs on SQLite and, with
DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from jobs_helpers import (
    FAIL_SCHEMA,
    INVOICE_RESULT,
    INVOICE_TXT,
    STRICT_SCHEMA,
    bad_request,
    create_job,
    create_schema,
    events_of,
    post_run,
    running_workers,
    wait_for_run,
    wait_for_status,
)
from webhook_receiver import Received, open_receiver

from daemon.config import Config
from daemon.services import Services
from daemon.storage.database import Database
from daemon.storage.migrate import upgrade
from daemon.storage.tables import jobs, users
from daemon.webhooks.dispatcher import run_dispatcher

# Required values at every depth: a member of an object (vendor.vat_id), a column of a table
# (items[].sku), a whole object (ship_to) and a scalar (iban).
NESTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "vendor": {"type": "object", "properties": {"name": {"type": "string"}, "vat_id": {"type": "string"}},
                   "required": ["name", "vat_id"]},
        "ship_to": {"type": "object", "properties": {"address": {"type": "string"}, "city": {"type": "string"}},
                    "required": ["address", "city"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "amount": {"type": "number"}, "sku": {"type": "string"}},
            "required": ["description", "sku"]}},
        "iban": {"type": "string"},
    },
    "required": ["invoice_number", "vendor", "ship_to", "items", "iban"],
}
NESTED_TXT = (b"Invoice Number: INV-42\nVendor: ACME Ltd\n\n"
              b"Description      Qty    Amount\nWidget           2      10.00\nGadget           1      5.50\n\n"
              b"Total: 15.50\n")
NESTED_FOUND = {"invoice_number": "INV-42", "vendor": {"name": "ACME Ltd"},
                "items": [{"description": "Widget", "amount": 10.0}, {"description": "Gadget", "amount": 5.5}]}
# The absent ship_to is named itself, not its address and city.
NESTED_MISSING = ["/vendor/vat_id", "/items/0/sku", "/items/1/sku", "/ship_to", "/iban"]


@pytest.fixture
def config(config: Config) -> Config:
    """Webhooks to a receiver on loopback over plain http."""
    return dataclasses.replace(config, webhooks=dataclasses.replace(
        config.webhooks, allow_http=True, allow_private_networks=True, backoff_initial_ms=50))


def envelopes(requests: list[Received]) -> list[dict[str, Any]]:
    return [json.loads(request.body) for request in requests]


async def ids(client: Any, auth: dict[str, str], query: str) -> list[str]:
    r = await client.get(f"/api/jobs{query}", headers=auth)
    body = await r.get_json()
    assert r.status_code == 200, (query, body)
    return [job["id"] for job in body["data"]]


# --- completing incomplete, then finishing by hand ----------------------------------------------

async def test_missing_required_values_complete_the_job_and_patches_finish_it(
        client: Any, services: Services, alice: dict[str, str], nursery: trio.Nursery) -> None:
    schema_id = await create_schema(client, alice, NESTED_SCHEMA, name="Nested")
    async with open_receiver() as receiver:
        r = await client.post("/api/webhooks", headers=alice, json={
            "url": receiver.url(), "events": ["job.completed", "job.updated"]})
        assert r.status_code == 201, await r.get_json()
        job = await create_job(client, alice, schema_id, NESTED_TXT)
        async with running_workers(services):
            await nursery.start(run_dispatcher, services)
            done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
            assert done["status"] == "COMPLETED" and done["errorCode"] is None, done
            assert done["result"] == NESTED_FOUND  # the values found are kept
            meta = done["resultMeta"]
            assert meta["complete"] is False and meta["missing"] == NESTED_MISSING
            assert meta["provider"] == "rules" and "/vendor/name" in meta["fields"]

            # The webhook receives the same job, its completeness with it.
            (completed,) = envelopes(await receiver.wait_for(1))
            assert completed["type"] == "job.completed" and completed["data"]["job"] == done

            # A correction that still lacks values lists the rest.
            partial = {**NESTED_FOUND, "iban": "DE89370400440532013000",
                       "ship_to": {"address": "1 Main St", "city": "Springfield"}}
            r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": partial}, headers=alice)
            patched = await r.get_json()
            assert r.status_code == 200, patched
            assert patched["resultMeta"]["complete"] is False
            assert patched["resultMeta"]["missing"] == ["/vendor/vat_id", "/items/0/sku", "/items/1/sku"]
            assert patched["resultMeta"]["fields"] == meta["fields"]  # the evidence of the extraction stays
            assert patched["originalResult"] == NESTED_FOUND

            # A value of the wrong type is still refused, and nothing changes.
            wrong = {**partial, "items": [{"description": "Widget", "sku": 7}]}
            messages = await bad_request(await client.patch(f"/api/jobs/{job['id']}/result",
                                                             json={"result": wrong}, headers=alice))
            assert messages == ["result/items/0/sku: 7 is not of type 'string'"]

            # The correction that supplies the rest makes it complete.
            whole = {**partial, "vendor": {"name": "ACME Ltd", "vat_id": "DE123456789"},
                     "items": [{"description": "Widget", "amount": 10.0, "sku": "W-1"},
                               {"description": "Gadget", "amount": 5.5, "sku": "G-2"}]}
            r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": whole}, headers=alice)
            finished = await r.get_json()
            assert r.status_code == 200, finished
            assert finished["result"] == whole
            assert finished["resultMeta"]["complete"] is True and finished["resultMeta"]["missing"] == []

            updates = envelopes(await receiver.wait_for(3))[1:]
            assert sorted(e["type"] for e in updates) == ["job.updated", "job.updated"]
            by_completeness = {e["data"]["job"]["resultMeta"]["complete"]: e["data"]["job"] for e in updates}
            assert by_completeness == {False: patched, True: finished}
    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    assert await r.get_json() == finished
    rows = await events_of(services, job_id=job["id"])
    assert [row.type for row in rows] == ["job.queued", "job.started", "job.completed", "job.updated",
                                          "job.updated"]

    metrics = (await (await client.get("/metrics")).get_data()).decode()
    assert 'docex_job_attempts_total{outcome="incomplete"} 1.0' in metrics
    assert 'docex_job_attempts_total{outcome="completed"}' not in metrics


async def test_a_complete_result_says_so(client: Any, services: Services, alice: dict[str, str],
                                         schema_id: str) -> None:
    job = await create_job(client, alice, schema_id)
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
    assert done["result"] == INVOICE_RESULT
    assert done["resultMeta"]["complete"] is True and done["resultMeta"]["missing"] == []
    metrics = (await (await client.get("/metrics")).get_data()).decode()
    assert 'docex_job_attempts_total{outcome="completed"} 1.0' in metrics


# --- opting into failure ------------------------------------------------------------------------

async def test_a_schema_that_opts_into_fail_fails_incomplete_results_and_refuses_incomplete_patches(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    strict = await create_schema(client, alice, {**NESTED_SCHEMA, "x-docex-incomplete": "fail"}, name="Strict")
    job = await create_job(client, alice, strict, NESTED_TXT)
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], "FAILED", "COMPLETED")
    assert failed["status"] == "FAILED" and failed["errorCode"] == "RESULT_INVALID", failed
    assert failed["result"] is None and failed["resultMeta"] is None
    assert failed["errorMessage"] == ("Result does not match the schema: required values not found: "
                                      + ", ".join(NESTED_MISSING))
    (event,) = await events_of(services, job_id=job["id"], types=["job.failed"])
    assert event.data == {"job": failed}

    # A job of such a schema that completed whole cannot be corrected into an incomplete one.
    whole_first = await create_schema(client, alice, {**FAIL_SCHEMA, "required": ["invoice_number"]}, name="Whole")
    job = await create_job(client, alice, whole_first, INVOICE_TXT)
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED" and done["resultMeta"]["complete"] is True, done
    url = f"/api/jobs/{job['id']}/result"
    messages = await bad_request(await client.patch(url, json={"result": {"iban": "DE89"}}, headers=alice))
    assert messages == ["result/invoice_number is required"]
    r = await client.patch(url, json={"result": {"invoice_number": "INV-43"}}, headers=alice)
    assert r.status_code == 200 and (await r.get_json())["resultMeta"]["complete"] is True


async def test_the_incomplete_keyword_is_checked_when_a_schema_is_saved(client: Any, alice: dict[str, str]) -> None:
    for policy in ("complete", "fail"):
        await create_schema(client, alice, {**STRICT_SCHEMA, "x-docex-incomplete": policy}, name=policy)
    for bad in ("partial", True, None, ["fail"]):
        r = await client.post("/api/schemas", headers=alice, json={
            "name": "Bad", "definition": {**STRICT_SCHEMA, "x-docex-incomplete": bad}})
        assert await bad_request(r) == ['definition["x-docex-incomplete"] must be one of complete, fail']
    schema_id = await create_schema(client, alice, STRICT_SCHEMA, name="Later")
    r = await client.patch(f"/api/schemas/{schema_id}", headers=alice, json={
        "definition": {**STRICT_SCHEMA, "x-docex-incomplete": "FAIL"}})
    assert await bad_request(r) == ['definition["x-docex-incomplete"] must be one of complete, fail']
    r = await client.get(f"/api/schemas/{schema_id}", headers=alice)
    assert "x-docex-incomplete" not in (await r.get_json())["definition"]


# --- finding the jobs a person must finish ------------------------------------------------------

async def test_jobs_can_be_listed_by_completeness(client: Any, services: Services, alice: dict[str, str],
                                                  schema_id: str) -> None:
    lenient = await create_schema(client, alice, STRICT_SCHEMA, name="Lenient")
    whole = await create_job(client, alice, schema_id)
    lacking = await create_job(client, alice, lenient)
    r = await post_run(client, alice, lenient, [("a.txt", INVOICE_TXT), ("b.txt", INVOICE_TXT + b"IBAN: DE89\n")])
    run = await r.get_json()
    assert r.status_code == 201, run
    async with running_workers(services):
        for job in (whole, lacking):
            await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
        await wait_for_run(client, alice, run["id"], "COMPLETED", "FAILED")
    run_lacking, run_whole = (job["id"] for job in sorted(run["jobs"], key=lambda job: job["fileName"]))
    waiting = await create_job(client, alice, schema_id)  # QUEUED: neither complete nor incomplete

    assert set(await ids(client, alice, "?complete=false")) == {lacking["id"], run_lacking}
    assert set(await ids(client, alice, "?complete=0")) == {lacking["id"], run_lacking}
    assert set(await ids(client, alice, "?complete=true")) == {whole["id"], run_whole}
    assert await ids(client, alice, f"?complete=false&schemaId={schema_id}") == []
    assert await ids(client, alice, f"?complete=true&schemaId={schema_id}") == [whole["id"]]
    assert set(await ids(client, alice, "?complete=false&status=COMPLETED")) == {lacking["id"], run_lacking}
    assert waiting["id"] not in await ids(client, alice, "?complete=true") + await ids(client, alice,
                                                                                        "?complete=false")
    r = await client.get(f"/api/job-runs/{run['id']}/jobs?complete=false", headers=alice)
    assert [job["id"] for job in (await r.get_json())["data"]] == [run_lacking]
    for query in ("?complete=maybe", "?complete="):
        await bad_request(await client.get(f"/api/jobs{query}", headers=alice))

    # A correction that supplies the value moves the job from one list to the other.
    r = await client.patch(f"/api/jobs/{lacking['id']}/result", headers=alice,
                           json={"result": {"invoice_number": "INV-42", "iban": "DE89"}})
    assert r.status_code == 200, await r.get_json()
    assert await ids(client, alice, "?complete=false") == [run_lacking]
    assert lacking["id"] in await ids(client, alice, "?complete=true")


# --- jobs completed before ----------------------------------------------------------------------

async def test_the_migration_marks_jobs_completed_before_as_complete(config: Config) -> None:
    db = Database(config.database_url)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    user_id, done_id, failed_id = (f"01BBBBBBBBBBBBBBBBBBBBBBB{i}" for i in range(1, 4))
    old_meta = {"provider": "rules", "model": None, "durationMs": 3.5, "fields": {}}

    def seed_and_migrate() -> None:
        upgrade(db.engine, "0007")
        with db.engine.begin() as conn:
            conn.execute(users.insert().values(id=user_id, email="old@example.com", email_key="old@example.com",
                                               name="x", password_hash="x", role="USER", disabled=False,
                                               created_at=now, updated_at=now))
            for job_id, status, meta in ((done_id, "COMPLETED", old_meta), (failed_id, "FAILED", None)):
                conn.execute(jobs.insert().values(
                    id=job_id, user_id=user_id, schema_id=user_id, type="EXTRACTION", status=status, attempts=1,
                    result={"total": 1.0} if meta else None, result_meta=meta, created_at=now, updated_at=now))
        upgrade(db.engine)

    await trio.to_thread.run_sync(seed_and_migrate)
    with db.engine.connect() as conn:
        rows = {row.id: row for row in conn.execute(sa.select(jobs))}
    db.engine.dispose()
    assert rows[done_id].result_complete is True
    assert rows[done_id].result_meta == {**old_meta, "complete": True, "missing": []}
    assert rows[failed_id].result_complete is None and rows[failed_id].result_meta is None

