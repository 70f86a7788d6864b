"""Races: many requests at once at one job, endpoint, session or key, and the invariants
the SPEC states for each (its state machines of §6 and §9, one winner per transition,
never a 500). SQLite runs writers one at a time; PostgreSQL runs them side by side under
READ COMMITTED, which is where a check-then-write without a row lock lets two requests
through. Run on both (DOCEX_TEST_DATABASE_URL)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from jobs_helpers import (
    INVOICE_RESULT,
    INVOICE_TXT,
    RESULT_META,
    STRICT_SCHEMA,
    create_job,
    create_schema,
    event_types,
    events_of,
    post_job,
    post_run,
    running_workers,
    wait_for_run,
    wait_for_status,
)

from daemon.services import Services
from daemon.storage.tables import deliveries, jobs, webhook_endpoints
from daemon.webhooks.keys import open_secret

ALLOWED = {200, 201, 202, 204, 404, 409}


async def _all_at_once(*calls: Callable[[], Awaitable[Any]]) -> list[tuple[int, Any]]:
    """Start every call at once; their (status, body) in the order given."""
    out: list[tuple[int, Any]] = [(0, None)] * len(calls)

    async def one(i: int, call: Callable[[], Awaitable[Any]]) -> None:
        r = await call()
        out[i] = (r.status_code, await r.get_json() if r.status_code != 204 else None)

    async with trio.open_nursery() as nursery:
        for i, call in enumerate(calls):
            nursery.start_soon(one, i, call)
    return out


def _no_500(answers: list[tuple[int, Any]]) -> None:
    for status, body in answers:
        assert status in ALLOWED, (status, body)
        if status >= 400:
            assert body["statusCode"] == status and isinstance(body["message"], str), body


async def _set_job(services: Services, job_id: str, **values: Any) -> None:
    await services.db.run(lambda conn: conn.execute(jobs.update().where(jobs.c.id == job_id).values(**values)))


async def _completed_by_hand(client: Any, services: Services, auth: dict[str, str], schema_id: str,
                             result: dict[str, Any] | None = None) -> str:
    """A COMPLETED job with a complete result, as a worker leaves it."""
    job = await create_job(client, auth, schema_id)
    now = dt.datetime.now(dt.UTC)
    await _set_job(services, job["id"], status="COMPLETED", result=result or INVOICE_RESULT, result_meta=RESULT_META,
                   result_complete=True, min_confidence=1.0, started_at=now, finished_at=now, run_after=None)
    return str(job["id"])


async def _failed_by_hand(client: Any, services: Services, auth: dict[str, str], schema_id: str) -> str:
    job = await create_job(client, auth, schema_id)
    now = dt.datetime.now(dt.UTC)
    await _set_job(services, job["id"], status="FAILED", error_code="PARSE_FAILED", error_message="x",
                   attempts=1, started_at=now, finished_at=now, run_after=None)
    return str(job["id"])


# --- one transition, many requests: one wins ------------------------------------------------


@pytest.mark.parametrize("action", ["cancel", "restart"])
async def test_a_transition_requested_many_times_at_once_happens_once(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, action: str) -> None:
    """Eight cancels of one QUEUED job (eight restarts of one FAILED job): one 200, seven 409,
    and one job.cancelled (one job.queued) event, not eight."""
    for _ in range(3):
        if action == "cancel":
            job_id = str((await create_job(client, alice, schema_id))["id"])
        else:
            job_id = await _failed_by_hand(client, services, alice, schema_id)
        answers = await _all_at_once(*[
            lambda job_id=job_id: client.post(f"/api/jobs/{job_id}/{action}", headers=alice) for _ in range(8)])
        _no_500(answers)
        assert sorted(status for status, _ in answers) == [200] + [409] * 7, answers
        event = "job.cancelled" if action == "cancel" else "job.queued"
        # A restart's job.queued comes after the creation's.
        expected = 1 if action == "cancel" else 2
        assert len(await events_of(services, job_id=job_id, types=[event])) == expected


@pytest.mark.parametrize("action", ["cancel", "restart", "approve", "patch", "delete"])
async def test_a_delete_racing_another_change_is_never_a_500(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, action: str) -> None:
    """A job deleted while another request changes it: the change either happened first
    (200, then the delete's 204) or finds the job gone (404); never a 500."""
    for _ in range(4):
        if action == "cancel":
            ids = [str((await create_job(client, alice, schema_id))["id"]) for _ in range(3)]
        elif action == "restart":
            ids = [await _failed_by_hand(client, services, alice, schema_id) for _ in range(3)]
        else:
            ids = [await _completed_by_hand(client, services, alice, schema_id) for _ in range(3)]

        def change(job_id: str) -> Callable[[], Awaitable[Any]]:
            if action == "patch":
                return lambda: client.patch(f"/api/jobs/{job_id}/result",
                                             json={"result": {**INVOICE_RESULT, "total": 13.0}}, headers=alice)
            if action == "delete":
                return lambda: client.delete(f"/api/jobs/{job_id}", headers=alice)
            return lambda: client.post(f"/api/jobs/{job_id}/{action}", headers=alice)

        calls: list[Callable[[], Awaitable[Any]]] = []
        for job_id in ids:
            calls += [change(job_id), lambda job_id=job_id: client.delete(f"/api/jobs/{job_id}", headers=alice)]
        answers = await _all_at_once(*calls)
        _no_500(answers)
        for job_id in ids:
            r = await client.get(f"/api/jobs/{job_id}", headers=alice)
            assert r.status_code == 404  # one delete won each time: the job is gone


async def test_an_approval_racing_a_correction_never_leaves_an_incomplete_result_approved(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    """Approve needs a complete result; a correction that takes a required value away clears
    any approval. At once, whatever the order, an approved job has a complete result (an
    incomplete approved job would drop out of the review queue unseen)."""
    strict = await create_schema(client, alice, STRICT_SCHEMA)
    complete = {**INVOICE_RESULT, "iban": "DE89370400440532013000"}
    for _ in range(8):
        ids = [await _completed_by_hand(client, services, alice, strict, result=complete) for _ in range(4)]
        calls: list[Callable[[], Awaitable[Any]]] = []
        for job_id in ids:
            calls += [lambda job_id=job_id: client.patch(f"/api/jobs/{job_id}/result",
                                                         json={"result": INVOICE_RESULT}, headers=alice),
                      lambda job_id=job_id: client.post(f"/api/jobs/{job_id}/approve", headers=alice)]
        _no_500(await _all_at_once(*calls))
        for job_id in ids:
            job = await (await client.get(f"/api/jobs/{job_id}", headers=alice)).get_json()
            assert job["resultMeta"]["complete"] is False
            assert job["reviewedAt"] is None, job  # approved with `iban` missing
        queue = await (await client.get("/api/jobs?review=pending&limit=100", headers=alice)).get_json()
        assert set(ids) <= {j["id"] for j in queue["data"]}


async def test_cancels_racing_the_workers_never_cancel_a_job_that_started(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Cancel is for PENDING and QUEUED jobs only: a cancel that answers 200 stopped a job
    before it started, and one that loses to a worker's claim is a 409. No job is both
    started and cancelled."""
    created = [str((await create_job(client, alice, schema_id))["id"]) for _ in range(24)]
    async with running_workers(services, workers=4):
        answers = await _all_at_once(*[
            lambda job_id=job_id: client.post(f"/api/jobs/{job_id}/cancel", headers=alice) for job_id in created])
        _no_500(answers)
        for job_id, (status, _) in zip(created, answers, strict=True):
            job = await wait_for_status(client, alice, job_id, "COMPLETED", "FAILED", "CANCELLED")
            types = [e.type for e in await events_of(services, job_id=job_id)]
            if status == 200:
                assert job["status"] == "CANCELLED" and types == ["job.queued", "job.cancelled"], types
            else:
                assert job["status"] == "COMPLETED" and "job.cancelled" not in types, (job["status"], types)


async def test_a_run_cancelled_many_times_at_once_cancels_each_job_once(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Four cancels of one run, and a cancel of each of its jobs, all at once: every job is
    cancelled once (one job.cancelled each) and the run ends CANCELLED once."""
    for _ in range(3):
        r = await post_run(client, alice, schema_id, [(f"f{i}.txt", INVOICE_TXT) for i in range(8)])
        run = await r.get_json()
        assert r.status_code == 201, run
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda run_id=run["id"]: client.post(f"/api/job-runs/{run_id}/cancel", headers=alice) for _ in range(4)]
        calls += [lambda job_id=job["id"]: client.post(f"/api/jobs/{job_id}/cancel", headers=alice)
                  for job in run["jobs"]]
        answers = await _all_at_once(*calls)
        _no_500(answers)
        for job in run["jobs"]:
            assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.cancelled"]
        ended = await (await client.get(f"/api/job-runs/{run['id']}", headers=alice)).get_json()
        # Cancelled if a cancel of the run came before its last job ended; if the jobs' own
        # cancels ended them all first, no job failed: COMPLETED (SPEC §8), and the run's cancel is 409.
        run_cancelled = any(status == 200 for status, _ in answers[:4])
        assert ended["status"] == ("CANCELLED" if run_cancelled else "COMPLETED"), (ended, answers[:4])
        assert ended["counts"]["cancelled"] == 8 and ended["finishedAt"] is not None, ended
        finals = await event_types(services, run_id=run["id"], types=["job_run.completed", "job_run.failed"])
        assert finals == ([] if run_cancelled else ["job_run.completed"])


async def test_a_run_cancelled_while_workers_claim_its_jobs_never_cancels_a_started_job(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Cancelling a run cancels its waiting jobs; a job a worker claimed first runs to its
    end. No job is both started and cancelled, and the run ends once all have ended."""
    for _ in range(3):
        r = await post_run(client, alice, schema_id, [(f"f{i}.txt", INVOICE_TXT) for i in range(12)])
        run = await r.get_json()
        async with running_workers(services, workers=4):
            await trio.sleep(0.01 * _)
            r = await client.post(f"/api/job-runs/{run['id']}/cancel", headers=alice)
            assert r.status_code in (200, 409), await r.get_json()
            ended = await wait_for_run(client, alice, run["id"], "CANCELLED", "COMPLETED", "FAILED")
        for job in run["jobs"]:
            types = await event_types(services, job_id=job["id"])
            assert types in (["job.queued", "job.cancelled"], ["job.queued", "job.started", "job.completed"]), types
        assert ended["finishedAt"] is not None


# --- webhooks -----------------------------------------------------------------------------


async def _endpoint(client: Any, auth: dict[str, str]) -> dict[str, Any]:
    r = await client.post("/api/webhooks", json={"url": "https://example.com/hook", "events": ["job.*"]},
                          headers=auth)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def test_secrets_rotated_at_once_both_still_sign(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    """Two rotations at once are two rotations: the later secret signs, the earlier one keeps
    signing through the overlap. A secret handed out must never be dropped unseen."""
    for _ in range(4):
        endpoint_id = (await _endpoint(client, alice))["id"]
        answers = await _all_at_once(*[
            lambda e=endpoint_id: client.post(f"/api/webhooks/{e}/rotate-secret", headers=alice) for _ in range(2)])
        assert [status for status, _ in answers] == [200, 200], answers
        given = {body["signingSecret"] for _, body in answers}
        row = await services.db.read(lambda c, e=endpoint_id: c.execute(
            sa.select(webhook_endpoints).where(webhook_endpoints.c.id == e)).one())
        signing = {open_secret(services.config.webhooks, endpoint_id, row.secret_sealed),
                   open_secret(services.config.webhooks, endpoint_id, row.previous_secret_sealed)}
        assert signing == given


async def test_a_ping_racing_the_deletion_of_its_endpoint_is_never_a_500(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    for _ in range(6):
        ids = [(await _endpoint(client, alice))["id"] for _ in range(3)]
        calls: list[Callable[[], Awaitable[Any]]] = []
        for endpoint_id in ids:
            calls += [lambda e=endpoint_id: client.post(f"/api/webhooks/{e}/test", headers=alice),
                      lambda e=endpoint_id: client.post(f"/api/webhooks/{e}/send", json={"data": {"a": 1}},
                                                        headers=alice),
                      lambda e=endpoint_id: client.delete(f"/api/webhooks/{e}", headers=alice)]
        _no_500(await _all_at_once(*calls))

async def test_jobs_created_while_their_endpoint_is_deleted_are_never_a_500(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Every job event is routed to the owner's endpoints in the creating transaction; an
    endpoint deleted meanwhile gets no delivery, and the job is still created."""
    for _ in range(8):
        ids = [(await _endpoint(client, alice))["id"] for _ in range(10)]
        calls: list[Callable[[], Awaitable[Any]]] = [lambda: post_job(client, alice, schema_id) for _ in range(5)]
        calls += [lambda e=endpoint_id: client.delete(f"/api/webhooks/{e}", headers=alice) for endpoint_id in ids]
        _no_500(await _all_at_once(*calls))


async def test_an_endpoint_bound_to_a_schema_while_it_is_deleted_is_not_left_bound(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """Deleting an endpoint unbinds it from the schemas (README); a binding racing the delete
    either comes first (and is unbound) or is refused (400). A schema left bound to a deleted
    endpoint would send its jobs' events nowhere, not even to the AUTOMATIC endpoints."""
    for _ in range(6):
        ids = [(await _endpoint(client, alice))["id"] for _ in range(4)]
        schemas = [await create_schema(client, alice, name=f"s{i}") for i in range(4)]
        calls: list[Callable[[], Awaitable[Any]]] = []
        for endpoint_id, sid in zip(ids, schemas, strict=True):
            calls += [lambda e=endpoint_id, s=sid: client.patch(f"/api/schemas/{s}", json={"webhookEndpointIds": [e]},
                                                                headers=alice),
                      lambda e=endpoint_id: client.delete(f"/api/webhooks/{e}", headers=alice)]
        answers = await _all_at_once(*calls)
        assert {status for status, _ in answers} <= {200, 204, 400}, answers
        for sid in schemas:
            schema = await (await client.get(f"/api/schemas/{sid}", headers=alice)).get_json()
            assert schema["webhookEndpointIds"] == [], schema


async def test_recoveries_at_once_replay_each_dead_delivery_once(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    """Recover replays each failed event once, however often it is called (README): also
    when the calls come at once."""
    endpoint_id = (await _endpoint(client, alice))["id"]
    for _ in range(5):
        r = await client.post(f"/api/webhooks/{endpoint_id}/test", headers=alice)
        assert r.status_code == 202
    await services.db.run(lambda conn: conn.execute(deliveries.update().values(status="DEAD", next_attempt_at=None)))
    answers = await _all_at_once(*[
        lambda: client.post(f"/api/webhooks/{endpoint_id}/recover", json={"since": "2000-01-01T00:00:00Z"},
                            headers=alice) for _ in range(4)])
    assert [status for status, _ in answers] == [202] * 4, answers
    assert sum(body["recovered"] for _, body in answers) == 5, answers


# --- sessions, keys, idempotency ------------------------------------------------------------


async def test_one_refresh_token_presented_many_times_at_once_wins_once(client: Any) -> None:
    r = await client.post("/api/auth/register",
                          json={"name": "A", "email": "r@example.com", "password": "correct horse 42"})
    token = (await r.get_json())["refreshToken"]
    answers = await _all_at_once(*[
        lambda: client.post("/api/auth/refresh", json={"refreshToken": token}) for _ in range(6)])
    assert sorted(status for status, _ in answers) == [200] + [401] * 5, answers


async def test_one_idempotency_key_with_different_bodies_at_once_creates_one_job(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    key = {"Idempotency-Key": "same-key"}
    answers = await _all_at_once(*[
        lambda i=i: post_job(client, alice, schema_id, f"Invoice Number: INV-{i}\n".encode(), headers=key)
        for i in range(6)])
    _no_500(answers)
    assert sorted(status for status, _ in answers) == [201] + [409] * 5, answers
    listed = await (await client.get("/api/jobs", headers=alice)).get_json()
    assert len(listed["data"]) == 1


async def test_an_api_key_revoked_while_in_use_stops_at_once(client: Any, alice: dict[str, str]) -> None:
    r = await client.post("/api/auth/api-keys", json={"name": "ci"}, headers=alice)
    key = (await r.get_json())
    auth = {"Authorization": f"Bearer {key['apiKey']}"}
    answers = await _all_at_once(
        *[lambda: client.get("/api/jobs", headers=auth) for _ in range(6)],
        lambda: client.delete(f"/api/auth/api-keys/{key['id']}", headers=alice),
    )
    assert {status for status, _ in answers} <= {200, 204, 401}, answers
    assert (await client.get("/api/jobs", headers=auth)).status_code == 401


async def test_a_second_account_registered_at_once_is_not_an_admin_too(client: Any) -> None:
    answers = await _all_at_once(*[
        lambda i=i: client.post("/api/auth/register", json={"name": "A", "email": f"u{i}@example.com",
                                                            "password": "correct horse 42"}) for i in range(5)])
    assert [status for status, _ in answers] == [201] * 5, answers
    assert sorted(body["user"]["role"] for _, body in answers) == ["ADMIN"] + ["USER"] * 4
