"""Scale-out across hosts (SPEC §1): `docex serve --role api` and two `--role worker`
processes, each with its OWN data directory as on separate machines, sharing only
PostgreSQL and an S3 bucket (the session's moto server) as the blob store.

The api process streams uploads into the bucket; the workers download them to
temporary files for the parsers. Every job must run exactly once (one job.started
and one job.completed event, attempts == 1) and nothing may stay behind in the
processes' own directories. The processes share JWT_ACCESS_SECRET and
WEBHOOK_ENCRYPTION_KEY through the environment: with separate data directories
each would otherwise generate development secrets of its own.
"""

from __future__ import annotations

import collections
import os
import secrets
import signal
import time
from pathlib import Path
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
JOBS = 100
UPLOADERS = 8
STARTUP = 20.0


def invoice(i: int) -> bytes:
    return f"Invoice Number: INV-{20000 + i}\nTotal: {i}.25\n".encode()


def _query(url: str, sql: str) -> list[Any]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(sql)))
    finally:
        engine.dispose()


async def query(url: str, sql: str) -> list[Any]:
    return await trio.to_thread.run_sync(_query, url, sql)


def _files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


async def test_api_and_workers_on_separate_data_dirs_share_an_s3_blob_store(
        start_daemon: Any, database_url: str, s3_server: Any, tmp_path: Path) -> None:
    bucket = s3_server.new_bucket()
    shared = {
        "DOCEX_AUTH_BCRYPT_ROUNDS": "4",
        "DOCEX_LOG_ACCESS": "false",
        "DOCEX_JOBS_WORKERS": "4",
        "JWT_ACCESS_SECRET": secrets.token_urlsafe(48),
        "WEBHOOK_ENCRYPTION_KEY": secrets.token_hex(32),
        "DOCEX_STORAGE_BACKEND": "s3",
        "DOCEX_STORAGE_S3_BUCKET": bucket,
        "DOCEX_STORAGE_S3_REGION": "us-east-1",
        "DOCEX_STORAGE_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "DOCEX_STORAGE_S3_PREFIX": "blobs/",
        "DOCEX_STORAGE_S3_ACCESS_KEY_ID": s3_server.admin.access_key_id,
        "DOCEX_STORAGE_S3_SECRET_ACCESS_KEY": s3_server.admin.secret_access_key,
    }
    dirs = {name: tmp_path / name for name in ("api", "worker1", "worker2")}
    api_proc = start_daemon("--role", "api", env={**shared, "DOCEX_DATA_DIR": str(dirs["api"])})
    await api_proc.wait_http_ready(timeout=STARTUP)  # it applies the migrations first
    workers = [start_daemon("--role", "worker", env={**shared, "DOCEX_DATA_DIR": str(dirs[name])})
               for name in ("worker1", "worker2")]
    for w in workers:
        _, ready = await w.wait_for("service.ready", timeout=STARTUP)
        assert ready["role"] == "worker" and ready["database"] == "postgresql"

    client = httpx.AsyncClient(base_url=api_proc.url(""), timeout=30.0)
    created: dict[str, int] = {}
    seen_owner: dict[str, set[str]] = collections.defaultdict(set)
    try:
        r = await client.post("/api/auth/register",
                              json={"name": "Ops", "email": "ops@example.com", "password": "correct-horse-1"})
        assert r.status_code == 201, r.text
        headers = {"Authorization": f"Bearer {r.json()['accessToken']}"}
        r = await client.post("/api/schemas", json={"name": "Invoice", "definition": SCHEMA}, headers=headers)
        assert r.status_code == 201, r.text
        schema_id = r.json()["id"]
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
                created[r.json()["id"]] = i

        async def uploads() -> None:
            async with trio.open_nursery() as nursery:
                for k in range(UPLOADERS):
                    nursery.start_soon(upload, range(k, JOBS, UPLOADERS))
            uploaded.set()

        async def watch() -> None:
            """Until every job has ended: who holds each RUNNING job (a sample), and that no process died."""
            engine = sa.create_engine(database_url, pool_size=1)

            def running() -> list[Any]:
                with engine.connect() as conn:
                    return list(conn.execute(sa.text("SELECT id, lease_owner FROM jobs WHERE status = 'RUNNING'")))

            def unfinished() -> int:
                with engine.connect() as conn:
                    return int(conn.execute(sa.text(
                        "SELECT count(*) FROM jobs WHERE status NOT IN ('COMPLETED', 'FAILED')")).scalar_one())

            deadline = time.monotonic() + 60
            try:
                while True:
                    for row in await trio.to_thread.run_sync(running):
                        if row.lease_owner:
                            seen_owner[row.id].add(row.lease_owner)
                    if uploaded.is_set() and await trio.to_thread.run_sync(unfinished) == 0:
                        return
                    for p in (api_proc, *workers):
                        if p.proc.poll() is not None:
                            pytest.fail(f"a docex process exited\n{p.describe()}")
                    if time.monotonic() > deadline:
                        pytest.fail("jobs not done within 60s\n" + "\n".join(p.describe()
                                                                             for p in (api_proc, *workers)))
                    await trio.sleep(0.01)
            finally:
                engine.dispose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(uploads)
            nursery.start_soon(watch)
        elapsed = time.monotonic() - started

        jobs: dict[str, dict[str, Any]] = {}
        params: dict[str, Any] = {"limit": 100}
        while True:
            r = await client.get("/api/jobs", params=params, headers=headers)
            assert r.status_code == 200, r.text
            jobs |= {j["id"]: j for j in r.json()["data"]}
            if not r.json()["nextCursor"]:
                break
            params["cursor"] = r.json()["nextCursor"]
        # The original bytes come back from the bucket through the api process.
        some = next(iter(created))
        r = await client.get(f"/api/jobs/{some}/file", headers=headers)
        assert r.content == invoice(created[some])
    finally:
        await client.aclose()

    assert len(created) == JOBS and set(jobs) == set(created)
    for job_id, job in jobs.items():
        i = created[job_id]
        assert job["status"] == "COMPLETED", job
        assert job["attempts"] == 1, job
        assert job["result"] == {"invoice_number": f"INV-{20000 + i}", "total": i + 0.25}, job

    rows = await query(database_url, "SELECT job_id, type FROM events WHERE job_id IS NOT NULL")
    per_job: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        per_job[row.job_id][row.type] += 1
    assert set(per_job) == set(created)
    for job_id, types in per_job.items():
        assert types == {"job.queued": 1, "job.started": 1, "job.completed": 1}, (job_id, types)
    assert [j for j, owners in seen_owner.items() if len(owners) > 1] == []
    for p in (api_proc, *workers):
        assert not [r for r in p.records if r.get("action") in ("jobs.reaped", "job.lease_lost")], p.describe()

    # The blobs are in the bucket only; the hosts' own directories hold no blob and no download.
    keys = s3_server.keys(bucket)
    assert len(keys) == JOBS and all(k.startswith("blobs/") for k in keys)
    for name, path in dirs.items():
        assert _files_under(path / "blobs") == [], name
        assert _files_under(path / "tmp") == [], name

    by_pid = collections.Counter(next(iter(owners)).split(":")[1] for owners in seen_owner.values())
    names = {str(w.pid): f"worker{n}" for n, w in enumerate(workers, 1)}
    assert set(by_pid) <= set(names), (by_pid, names)
    print(f"\n{JOBS} jobs in {elapsed:.1f}s on the S3 blob store; split as sampled: "
          f"{ {names[pid]: by_pid.get(pid, 0) for pid in names} }")

    for p in (*workers, api_proc):
        p.signal(signal.SIGTERM)
    for p in (*workers, api_proc):
        assert await p.wait_exit(timeout=15) == 0, p.describe()
    # A clean stop removes each process's temporary directory.
    for name, path in dirs.items():
        assert not [p for p in (path / "tmp").glob("blobs-*")], name
