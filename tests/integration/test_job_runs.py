"""Batch runs over HTTP (SPEC §8): creation with several files, the run's life as its
jobs end (progress, completed, failed, back to running on restart), listing, cancel,
ownership and refused uploads."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from jobs_helpers import (
    COUNT_KEYS,
    FAIL_SCHEMA,
    GARBAGE,
    INVOICE_RESULT,
    INVOICE_TXT,
    JOB_KEYS,
    RESULT_META,
    RUN_KEYS,
    bad_request,
    blob_files,
    count_jobs,
    count_runs,
    create_job,
    create_schema,
    error_of,
    event_types,
    events_of,
    post_run,
    register,
    running_workers,
    user_id_of,
    wait_for_run,
    wait_for_status,
    with_jobs_config,
)

from daemon.clock import utcnow
from daemon.storage.repos import jobs as repo
from daemon.storage.repos.jobs import JobFilter, NewJob

FILES = [(f"invoice-{i}.txt", f"Invoice Number: INV-{i}\nTotal: 1{i}.50\n".encode()) for i in range(3)]


async def create_run(client: Any, auth: dict[str, str], schema_id: str,
                     files: list[tuple[str, bytes]] = FILES) -> dict[str, Any]:
    r = await post_run(client, auth, schema_id, files)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


def counts(**nonzero: int) -> dict[str, int]:
    return {key: nonzero.get(key, 0) for key in COUNT_KEYS}


async def get_run(client: Any, auth: dict[str, str], run_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/job-runs/{run_id}", headers=auth)
    body = await r.get_json()
    assert r.status_code == 200, body
    return body  # type: ignore[no-any-return]


# --- creation --------------------------------------------------------------------------

async def test_create_a_run_with_several_files(client: Any, services: Any, alice: dict[str, str],
                                               schema_id: str) -> None:
    r = await post_run(client, alice, schema_id, FILES)
    run = await r.get_json()
    assert r.status_code == 201, run
    assert set(run) == RUN_KEYS | {"jobs"}
    assert run["status"] == "RUNNING" and run["schemaId"] == schema_id and run["total"] == 3
    assert run["counts"] == counts(queued=3)
    assert run["finishedAt"] is None and run["createdAt"].endswith("Z")
    assert len(run["jobs"]) == 3
    by_name = {job["fileName"]: job for job in run["jobs"]}
    assert set(by_name) == {name for name, _ in FILES}
    for name, data in FILES:
        job = by_name[name]
        assert set(job) == JOB_KEYS
        assert job["jobRunId"] == run["id"] and job["status"] == "QUEUED" and job["schemaId"] == schema_id
        assert job["sha256"] == hashlib.sha256(data).hexdigest() and job["fileSize"] == len(data)
        assert job["mimeType"] == "text/plain"
        assert await event_types(services, job_id=job["id"]) == ["job.queued"]
    assert len(blob_files(services)) == 3

    (created,) = await events_of(services, types=["job_run.created"])
    assert created.job_run_id == run["id"] and created.schema_id == schema_id
    assert created.data == {"jobRun": {key: run[key] for key in RUN_KEYS}}

    got = await get_run(client, alice, run["id"])
    assert got == {key: run[key] for key in RUN_KEYS}


async def test_a_runs_jobs_come_in_the_order_of_its_files(client: Any, alice: dict[str, str],
                                                          schema_id: str) -> None:
    files = [(f"page-{i:02}.txt", f"Invoice Number: INV-{i}\n".encode()) for i in range(20)]
    run = await create_run(client, alice, schema_id, files)
    assert [job["fileName"] for job in run["jobs"]] == [name for name, _ in files]


async def test_refused_runs_create_nothing(client: Any, services: Any, alice: dict[str, str],
                                           schema_id: str) -> None:
    # An unsupported file among good ones: 400 naming it, no run, no job, no blob.
    r = await post_run(client, alice, schema_id, [FILES[0], ("junk.bin", GARBAGE), FILES[1]])
    messages = await bad_request(r)
    assert any(m.startswith("Unsupported file type") and "junk.bin" in m for m in messages), messages
    # No files at all, no schema, wrong type.
    assert any("files" in m for m in await bad_request(await post_run(client, alice, schema_id, [])))
    await bad_request(await post_run(client, alice, None, FILES))
    await bad_request(await post_run(client, alice, schema_id, FILES, type_="OCR"))
    # A file over the limit among good ones: 413, and the good ones' blobs go too.
    with_jobs_config(services, max_file_size_bytes=100)
    r = await post_run(client, alice, schema_id, [FILES[0], ("big.txt", b"Total: 1\n" * 100)])
    await error_of(r, 413)
    with_jobs_config(services, max_file_size_bytes=50 * 1024 * 1024)
    # Files each under the limit, over the run's in all (before: 1,000 files of 50 MiB were
    # taken, 50 GB): 413, and what was stored goes.
    with_jobs_config(services, max_run_size_bytes=2_000)
    r = await post_run(client, alice, schema_id, [(f"{i}.txt", b"Total: 1\n" * 100) for i in range(3)])
    assert (await error_of(r, 413))["message"] == ("the files of a request may hold at most 2,000 bytes in all "
                                                   "(jobs.max_run_size): send them in several runs")
    with_jobs_config(services, max_run_size_bytes=2 * 1024**3)
    # JSON with remote sources: there are no integrations yet.
    r = await client.post("/api/job-runs", json={"type": "EXTRACTION", "schemaId": schema_id,
                                                 "sources": [{"integrationId": "int_1", "fileId": "f1"}]},
                          headers=alice)
    messages = await bad_request(r)
    assert any("integrationId" in m for m in messages), messages
    await bad_request(await client.post("/api/job-runs", json={"type": "EXTRACTION", "schemaId": schema_id,
                                                               "sources": []}, headers=alice))
    # No credential.
    await error_of(await post_run(client, {}, schema_id, FILES), 401)

    assert await count_runs(services) == 0 and await count_jobs(services) == 0
    assert blob_files(services) == []
    assert await events_of(services) == []


# --- the run's life ---------------------------------------------------------------------

async def test_a_run_completes_when_all_its_jobs_do(client: Any, services: Any, alice: dict[str, str],
                                                    schema_id: str) -> None:
    run = await create_run(client, alice, schema_id)
    async with running_workers(services, workers=3):
        done = await wait_for_run(client, alice, run["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done
    assert done["counts"] == counts(completed=3) and done["total"] == 3
    assert done["finishedAt"] is not None and done["finishedAt"] >= done["createdAt"]
    r = await client.get(f"/api/job-runs/{run['id']}/jobs", headers=alice)
    jobs = (await r.get_json())["data"]
    assert {job["status"] for job in jobs} == {"COMPLETED"}
    results = {job["fileName"]: job["result"] for job in jobs}
    assert results == {f"invoice-{i}.txt": {"invoice_number": f"INV-{i}", "total": float(f"1{i}.5")}
                       for i in range(3)}

    rows = await events_of(services, run_id=run["id"])
    run_events = [row for row in rows if row.type.startswith("job_run.")]
    types = [row.type for row in run_events]
    assert types[0] == "job_run.created" and types.count("job_run.created") == 1
    assert types.count("job_run.completed") == 1 and "job_run.failed" not in types
    progress = [row for row in run_events if row.type == "job_run.progress"]
    assert progress, types
    last = progress[-1].data["jobRun"]
    assert last["counts"] == counts(completed=3) and last["status"] == "COMPLETED"
    (completed,) = (row for row in run_events if row.type == "job_run.completed")
    assert completed.data == {"jobRun": done}
    # The run's end comes after the last job's end.
    job_ends = [row.occurred_at for row in rows if row.type == "job.completed"]
    assert len(job_ends) == 3 and completed.occurred_at >= max(job_ends)
    # Throttled: at most one progress a second, except the last, which is always sent.
    for earlier, later in itertools.pairwise(progress[:-1]):
        assert (later.occurred_at - earlier.occurred_at).total_seconds() >= 1.0, types
    assert len(progress) <= 3


async def test_a_run_with_a_failed_job_fails_and_restarting_it_reopens_the_run(
        client: Any, services: Any, alice: dict[str, str]) -> None:
    strict = await create_schema(client, alice, FAIL_SCHEMA, name="Strict")
    files = [("good.txt", b"Invoice Number: INV-1\nIBAN: DE89370400440532013000\n"), ("bad.txt", INVOICE_TXT)]
    run = await create_run(client, alice, strict, files)
    bad = next(job for job in run["jobs"] if job["fileName"] == "bad.txt")
    async with running_workers(services):
        failed_run = await wait_for_run(client, alice, run["id"], "COMPLETED", "FAILED")
    assert failed_run["status"] == "FAILED", failed_run
    assert failed_run["counts"] == counts(completed=1, failed=1) and failed_run["finishedAt"] is not None
    r = await client.get(f"/api/jobs/{bad['id']}", headers=alice)
    assert (await r.get_json())["errorCode"] == "RESULT_INVALID"
    types = await event_types(services, run_id=run["id"], types=["job_run.completed", "job_run.failed"])
    assert types == ["job_run.failed"]
    (failed_event,) = await events_of(services, run_id=run["id"], types=["job_run.failed"])
    assert failed_event.data == {"jobRun": failed_run}

    r = await client.post(f"/api/jobs/{bad['id']}/restart", headers=alice)
    assert r.status_code == 200, await r.get_json()
    reopened = await get_run(client, alice, run["id"])
    assert reopened["status"] == "RUNNING" and reopened["finishedAt"] is None
    assert reopened["counts"] == counts(completed=1, queued=1)


async def test_restarting_the_failed_job_of_a_failed_run_completes_the_run(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    run = await create_run(client, alice, schema_id, FILES[:2])
    # One job fails (as a worker would record it), the other runs normally.
    claimed = await services.db.run(repo.claim_next, owner="w", now=utcnow(), lease_s=60)
    await services.db.run(repo.fail_job, job_id=claimed.id, owner="w", code="AI_PROVIDER_ERROR",
                          message="the provider broke", now=utcnow(), retry_at=None)
    async with running_workers(services):
        failed_run = await wait_for_run(client, alice, run["id"], "COMPLETED", "FAILED")
        assert failed_run["status"] == "FAILED" and failed_run["counts"] == counts(completed=1, failed=1)
        assert await event_types(services, run_id=run["id"], types=["job_run.completed", "job_run.failed"]) == [
            "job_run.failed"]

        r = await client.post(f"/api/jobs/{claimed.id}/restart", headers=alice)
        assert r.status_code == 200
        await wait_for_status(client, alice, claimed.id, "COMPLETED", "FAILED")
        done = await wait_for_run(client, alice, run["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED" and done["counts"] == counts(completed=2), done
    assert done["finishedAt"] is not None
    assert await event_types(services, run_id=run["id"], types=["job_run.completed", "job_run.failed"]) == [
        "job_run.failed", "job_run.completed"]
    (completed,) = await events_of(services, run_id=run["id"], types=["job_run.completed"])
    assert completed.data == {"jobRun": done}


async def test_deleting_the_last_unfinished_job_of_a_run_ends_the_run(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    run = await create_run(client, alice, schema_id, FILES[:2])
    claimed = await services.db.run(repo.claim_next, owner="w", now=utcnow(), lease_s=60)
    await services.db.run(repo.complete_job, job_id=claimed.id, owner="w", result=INVOICE_RESULT,
                          meta=RESULT_META, page_count=1, now=utcnow())
    other = next(job for job in run["jobs"] if job["id"] != claimed.id)
    assert (await client.delete(f"/api/jobs/{other['id']}", headers=alice)).status_code == 204
    after = await get_run(client, alice, run["id"])
    assert after["total"] == 1 and after["counts"] == counts(completed=1)
    # Every job left has ended: the run is over.
    assert after["status"] == "COMPLETED" and after["finishedAt"] is not None, after
    assert "job_run.completed" in await event_types(services, run_id=run["id"])


# --- cancel -----------------------------------------------------------------------------

async def test_cancel_a_run_cancels_its_queued_jobs(client: Any, services: Any, alice: dict[str, str],
                                                    schema_id: str) -> None:
    run = await create_run(client, alice, schema_id)
    outside = await create_job(client, alice, schema_id)
    r = await client.post(f"/api/job-runs/{run['id']}/cancel", headers=alice)
    cancelled = await r.get_json()
    assert r.status_code == 200, cancelled
    assert set(cancelled) >= RUN_KEYS
    assert cancelled["status"] == "CANCELLED" and cancelled["counts"] == counts(cancelled=3)
    assert cancelled["finishedAt"] is not None
    for job in run["jobs"]:
        r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
        body = await r.get_json()
        assert body["status"] == "CANCELLED" and body["finishedAt"] is not None
        rows = await events_of(services, job_id=job["id"])
        assert [row.type for row in rows] == ["job.queued", "job.cancelled"]
        assert rows[-1].data["job"]["status"] == "CANCELLED"
    r = await client.get(f"/api/jobs/{outside['id']}", headers=alice)
    assert (await r.get_json())["status"] == "QUEUED"
    run_types = await event_types(services, run_id=run["id"])
    assert "job_run.completed" not in run_types and "job_run.failed" not in run_types

    await error_of(await client.post(f"/api/job-runs/{run['id']}/cancel", headers=alice), 409)
    assert await get_run(client, alice, run["id"]) == {key: cancelled[key] for key in RUN_KEYS}


async def test_a_cancelled_run_stays_running_until_its_running_job_ends_then_is_cancelled(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    run = await create_run(client, alice, schema_id, FILES[:2])
    claimed = await services.db.run(repo.claim_next, owner="w", now=utcnow(), lease_s=60)
    r = await client.post(f"/api/job-runs/{run['id']}/cancel", headers=alice)
    body = await r.get_json()
    assert r.status_code == 200, body
    # Not final yet: a client waiting for a final status must not read results still coming.
    assert body["status"] == "RUNNING" and body["counts"] == counts(running=1, cancelled=1)
    assert body["finishedAt"] is None
    r = await client.get(f"/api/jobs/{claimed.id}", headers=alice)
    assert (await r.get_json())["status"] == "RUNNING"
    # Cancelling again meanwhile is allowed and changes nothing: no progress event either
    # (each repeat sent one, past the once-a-second limit).
    progress_before = (await event_types(services, run_id=run["id"])).count("job_run.progress")
    for _ in range(3):
        again = await (await client.post(f"/api/job-runs/{run['id']}/cancel", headers=alice)).get_json()
        assert again["status"] == "RUNNING" and again["counts"] == counts(running=1, cancelled=1)
    assert (await event_types(services, run_id=run["id"])).count("job_run.progress") == progress_before

    await services.db.run(repo.complete_job, job_id=claimed.id, owner="w", result=INVOICE_RESULT,
                          meta=RESULT_META, page_count=1, now=utcnow())
    after = await get_run(client, alice, run["id"])
    assert after["status"] == "CANCELLED" and after["counts"] == counts(completed=1, cancelled=1)
    assert after["finishedAt"] is not None
    run_types = await event_types(services, run_id=run["id"])
    assert "job_run.completed" not in run_types and "job_run.failed" not in run_types
    last = (await events_of(services, run_id=run["id"]))[-1]
    assert last.type == "job_run.progress" and last.data["jobRun"]["status"] == "CANCELLED"
    await error_of(await client.post(f"/api/job-runs/{run['id']}/cancel", headers=alice), 409)


async def test_cancelling_a_run_drops_the_fetch_lease_of_its_pending_jobs(
        client: Any, services: Any, alice: dict[str, str], schema_id: str) -> None:
    uid = await user_id_of(client, alice)
    remote = NewJob(source={"integrationId": "x", "fileId": "y"})
    run, _ = await services.db.run(repo.create_run, user_id=uid, schema_id=schema_id, items=[remote, remote],
                                   now=utcnow())
    fetching = await services.db.run(repo.claim_next, owner="w", now=utcnow(), lease_s=60)
    assert fetching.status == "PENDING" and fetching.lease_owner == "w"
    await error_of(await client.post(f"/api/jobs/{fetching.id}/restart", headers=alice), 409)
    r = await client.post(f"/api/job-runs/{run.id}/cancel", headers=alice)
    assert r.status_code == 200 and (await r.get_json())["status"] == "CANCELLED"
    for job in (await services.db.read(repo.list_jobs, uid, JobFilter(job_run_id=run.id), 10, None)).jobs:
        assert job.status == "CANCELLED"
        assert (job.lease_owner, job.lease_expires_at) == (None, None)
    # The worker fetching the file finds the job gone.
    assert not await services.db.run(repo.renew_lease, job_id=fetching.id, owner="w", now=utcnow(), lease_s=60)


async def test_a_finished_run_cannot_be_cancelled(client: Any, services: Any, alice: dict[str, str],
                                                  schema_id: str) -> None:
    run = await create_run(client, alice, schema_id, FILES[:1])
    claimed = await services.db.run(repo.claim_next, owner="w", now=utcnow(), lease_s=60)
    await services.db.run(repo.complete_job, job_id=claimed.id, owner="w", result=INVOICE_RESULT,
                          meta=RESULT_META, page_count=1, now=utcnow())
    assert (await get_run(client, alice, run["id"]))["status"] == "COMPLETED"
    await error_of(await client.post(f"/api/job-runs/{run['id']}/cancel", headers=alice), 409)
    assert (await get_run(client, alice, run["id"]))["status"] == "COMPLETED"


# --- listing and ownership -------------------------------------------------------------

async def test_list_runs_newest_first_with_pagination(client: Any, alice: dict[str, str],
                                                      schema_id: str) -> None:
    import trio

    runs = []
    for i in range(3):
        runs.append(await create_run(client, alice, schema_id, FILES[: i + 1]))
        await trio.sleep(0.003)
    r = await client.get("/api/job-runs", headers=alice)
    body = await r.get_json()
    assert r.status_code == 200 and set(body) == {"data", "nextCursor"}
    assert [run["id"] for run in body["data"]] == [run["id"] for run in reversed(runs)]
    assert body["nextCursor"] is None
    for run in body["data"]:
        assert set(run) == RUN_KEYS, run
    assert [run["total"] for run in body["data"]] == [3, 2, 1]
    assert [run["counts"]["queued"] for run in body["data"]] == [3, 2, 1]

    r = await client.get("/api/job-runs?limit=2", headers=alice)
    first = await r.get_json()
    assert [run["id"] for run in first["data"]] == [runs[2]["id"], runs[1]["id"]] and first["nextCursor"]
    r = await client.get(f"/api/job-runs?limit=2&cursor={first['nextCursor']}", headers=alice)
    second = await r.get_json()
    assert [run["id"] for run in second["data"]] == [runs[0]["id"]] and second["nextCursor"] is None
    for query in ("?limit=0", "?limit=101", "?cursor=nope"):
        await bad_request(await client.get(f"/api/job-runs{query}", headers=alice))


async def test_a_runs_jobs_list_holds_only_its_jobs(client: Any, alice: dict[str, str], schema_id: str) -> None:
    run = await create_run(client, alice, schema_id)
    other = await create_run(client, alice, schema_id, FILES[:1])
    single = await create_job(client, alice, schema_id)
    url = f"/api/job-runs/{run['id']}/jobs"
    r = await client.get(url, headers=alice)
    body = await r.get_json()
    assert r.status_code == 200 and set(body) == {"data", "nextCursor"}, body
    assert {job["id"] for job in body["data"]} == {job["id"] for job in run["jobs"]}
    assert body["nextCursor"] is None
    for job in body["data"]:
        assert set(job) == JOB_KEYS and job["jobRunId"] == run["id"]
    seen = []
    cursor = ""
    while True:
        r = await client.get(f"{url}?limit=1" + (f"&cursor={cursor}" if cursor else ""), headers=alice)
        page = await r.get_json()
        assert len(page["data"]) <= 1
        seen += [job["id"] for job in page["data"]]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert seen == [job["id"] for job in body["data"]]
    # Another run's jobs and single jobs stay out, whatever the filters say.
    r = await client.get(f"{url}?jobRunId={other['id']}",
                         headers=alice)
    assert {job["id"] for job in (await r.get_json())["data"]} == {job["id"] for job in run["jobs"]}
    assert single["id"] not in seen
    r = await client.get(f"{url}?status=COMPLETED", headers=alice)
    assert (await r.get_json())["data"] == []
    await bad_request(await client.get(f"{url}?limit=0", headers=alice))


async def test_another_users_run_is_404(client: Any, services: Any, alice: dict[str, str],
                                        schema_id: str) -> None:
    run = await create_run(client, alice, schema_id)
    bob = await register(client, "bob@example.com")
    for path in ("", "/jobs"):
        body = await error_of(await client.get(f"/api/job-runs/{run['id']}{path}", headers=bob), 404)
        assert body["message"] == "Job run not found"
    await error_of(await client.post(f"/api/job-runs/{run['id']}/cancel", headers=bob), 404)
    r = await client.get("/api/job-runs", headers=bob)
    assert await r.get_json() == {"data": [], "nextCursor": None}
    r = await client.get(f"/api/jobs?jobRunId={run['id']}", headers=bob)
    assert (await r.get_json())["data"] == []
    # Bob cannot start a run on Alice's schema either.
    await bad_request(await post_run(client, bob, schema_id, FILES))
    # Untouched.
    assert (await get_run(client, alice, run["id"]))["status"] == "RUNNING"
    for path in ("/api/job-runs/01m7y0wjbda0tq1qjfvjv4mj8f", "/api/job-runs/nope/jobs"):
        await error_of(await client.get(path, headers=alice), 404)
