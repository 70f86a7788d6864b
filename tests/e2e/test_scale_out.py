"""Scale-out over one PostgreSQL database (SPEC §1): `docex serve --role api` takes the
uploads, two `docex serve --role worker` processes share the queue.

Workers claim with ``SELECT … FOR UPDATE SKIP LOCKED`` and leases, so every job must
run exactly once: one job.started and one job.completed event each, attempts == 1.

The three processes share one DOCEX_DATA_DIR: the blob store is a local directory,
and the workers read the files the api process wrote (S3 is for separate machines).

Who ran what is not recorded anywhere once a job has finished (the lease owner is
cleared on completion and the daemon logs nothing per completed job), so the test
samples the jobs table's ``lease_owner`` (``host:pid:worker:ns``) of RUNNING jobs
while the queue drains and prints the split it saw: a sample, not an exact count.
"""

from __future__ import annotations

import collections
import os
import signal
import time
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import trio

pytestmark = pytest.mark.skipif(
    not os.environ.get("DOCEX_TEST_DATABASE_URL"),
    reason="scale-out is several processes over one PostgreSQL database (SPEC §1); "
    "set DOCEX_TEST_DATABASE_URL=postgresql+psycopg://... to run it (SQLite is single-machine)",
)

SCHEMA = {
    "type": "object",
    "properties": {"invoice_number": {"type": "string"}, "total": {"type": "number"}},
}
JOBS = 200
UPLOADERS = 8
STARTUP = 20.0
ENV = {
    "DOCEX_AUTH_BCRYPT_ROUNDS": "4",
    "DOCEX_LOG_ACCESS": "false",
    "DOCEX_JOBS_WORKERS": "4",
    # The default lease (60 s) and poll are kept: nothing here should need a reaper.
}


def invoice(i: int) -> bytes:
    return f"Invoice Number: INV-{10000 + i}\nTotal: {i}.50\n".encode()


def _query(url: str, sql: str) -> list[Any]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(sql)))
    finally:
        engine.dispose()


async def query(url: str, sql: str) -> list[Any]:
    return await trio.to_thread.run_sync(_query, url, sql)


async def test_two_worker_processes_share_the_queue_and_run_each_job_exactly_once(
    start_daemon, database_url
) -> None:
    api_proc = start_daemon("--role", "api", env=ENV)
    # The api process first: it applies the migrations and writes the development secrets
    # into the shared data directory, which the workers then read instead of racing for them.
    await api_proc.wait_http_ready(timeout=STARTUP)
    workers = [start_daemon("--role", "worker", env=ENV) for _ in range(2)]
    for w in workers:
        _, ready = await w.wait_for("service.ready", timeout=STARTUP)
        assert ready["role"] == "worker" and ready["database"] == "postgresql"

    client = httpx.AsyncClient(base_url=api_proc.url(""), timeout=30.0)
    try:
        r = await client.post("/api/auth/register",
                              json={"name": "Ops", "email": "ops@example.com", "password": "correct-horse-1"})
        assert r.status_code == 201, r.text
        headers = {"Authorization": f"Bearer {r.json()['accessToken']}"}
        r = await client.post("/api/schemas", json={"name": "Invoice", "definition": SCHEMA}, headers=headers)
        assert r.status_code == 201, r.text
        schema_id = r.json()["id"]

        created: dict[str, int] = {}
        seen_owner: dict[str, set[str]] = collections.defaultdict(set)
        uploaded = trio.Event()
        started = time.monotonic()

        async def upload(indexes: range) -> None:
            for i in indexes:
                r = await client.post(
                    "/api/jobs",
                    data={"type": "EXTRACTION", "schemaId": schema_id},
                    files={"file": (f"invoice-{i}.txt", invoice(i), "text/plain")},
                    headers=headers,
                )
                assert r.status_code == 201, r.text
                # QUEUED when created; a worker process may have claimed (even finished) it by the
                # time the api process reads it back for the 201 body.
                assert r.json()["status"] in ("QUEUED", "RUNNING", "COMPLETED"), r.json()
                created[r.json()["id"]] = i

        async def uploads() -> None:
            async with trio.open_nursery() as nursery:
                for k in range(UPLOADERS):
                    nursery.start_soon(upload, range(k, JOBS, UPLOADERS))
            uploaded.set()

        async def sample_owners() -> None:
            """Until the queue is empty: who holds each RUNNING job's lease, every few ms."""
            engine = sa.create_engine(database_url, pool_size=1)

            def running() -> list[Any]:
                with engine.connect() as conn:
                    return list(conn.execute(sa.text("SELECT id, lease_owner FROM jobs WHERE status = 'RUNNING'")))

            def unfinished() -> dict[str, int]:
                with engine.connect() as conn:
                    return {row.status: row.n for row in conn.execute(sa.text(
                        "SELECT status, count(*) AS n FROM jobs WHERE status NOT IN ('COMPLETED', 'FAILED') "
                        "GROUP BY status"))}

            deadline = time.monotonic() + 45
            checked = 0.0
            try:
                while True:
                    for row in await trio.to_thread.run_sync(running):
                        if row.lease_owner:
                            seen_owner[row.id].add(row.lease_owner)
                    if time.monotonic() - checked > 0.25:
                        checked = time.monotonic()
                        left = await trio.to_thread.run_sync(unfinished)
                        if uploaded.is_set() and not left:
                            return
                        for p in (api_proc, *workers):
                            if p.proc.poll() is not None:
                                pytest.fail(f"a docex process exited\n{p.describe()}")
                        if time.monotonic() > deadline:
                            pytest.fail(f"jobs not done within 45s: {left}\n"
                                        + "\n".join(p.describe() for p in (api_proc, *workers)))
                    await trio.sleep(0.002)
            finally:
                engine.dispose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(uploads)
            nursery.start_soon(sample_owners)
        elapsed = time.monotonic() - started
        assert len(created) == JOBS

        # Through the API: every job COMPLETED with its own document's values, attempted once.
        jobs: dict[str, dict[str, Any]] = {}
        params: dict[str, Any] = {"limit": 100}
        while True:
            r = await client.get("/api/jobs", params=params, headers=headers)
            assert r.status_code == 200, r.text
            jobs |= {j["id"]: j for j in r.json()["data"]}
            if not r.json()["nextCursor"]:
                break
            params["cursor"] = r.json()["nextCursor"]
    finally:
        await client.aclose()

    assert set(jobs) == set(created)
    for job_id, job in jobs.items():
        i = created[job_id]
        assert job["status"] == "COMPLETED", job
        assert job["attempts"] == 1, job
        assert job["result"] == {"invoice_number": f"INV-{10000 + i}", "total": i + 0.5}, job

    # The outbox: exactly one claim and one completion per job, nothing else about jobs.
    rows = await query(database_url, "SELECT job_id, type FROM events WHERE job_id IS NOT NULL")
    per_job: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        per_job[row.job_id][row.type] += 1
    assert set(per_job) == set(created)
    for job_id, types in per_job.items():
        assert types == {"job.queued": 1, "job.started": 1, "job.completed": 1}, (job_id, types)

    # No job was ever seen leased to two owners.
    assert [j for j, owners in seen_owner.items() if len(owners) > 1] == []
    assert not await query(database_url, "SELECT id FROM jobs WHERE lease_owner IS NOT NULL")
    for p in (api_proc, *workers):
        assert not [r for r in p.records if r.get("action") in ("jobs.reaped", "job.lease_lost")], p.describe()

    # The split, as sampled: owner is host:pid:worker:ns.
    by_pid = collections.Counter(next(iter(owners)).split(":")[1] for owners in seen_owner.values())
    pids = {str(w.pid): f"worker{n}" for n, w in enumerate(workers, 1)}
    assert set(by_pid) <= set(pids), (by_pid, pids)
    split = {pids[pid]: by_pid.get(pid, 0) for pid in pids}
    print(f"\n{JOBS} jobs in {elapsed:.1f}s ({JOBS / elapsed:.0f} jobs/s incl. upload); "
          f"sampled RUNNING for {len(seen_owner)} of them; split as sampled: {split}")

    for p in (*workers, api_proc):
        p.signal(signal.SIGTERM)
    for p in (*workers, api_proc):
        assert await p.wait_exit(timeout=15) == 0, p.describe()
