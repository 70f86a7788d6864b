"""Steps shared by the end-to-end tests: a signed-in HTTP client, the test's database
read directly, and the scale-out runs (an api process and worker processes).

A module of its own, not conftest, so the test modules import what they use:
``from e2e_helpers import ...`` (pytest puts this directory on sys.path; conftest
registers it for assertion rewriting). The daemons themselves are conftest's
`Daemon`s, from the `start_daemon` fixture.
"""

from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Callable, Collection
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import trio

STARTUP = 20.0  # seconds: a cold interpreter plus migrations on a busy machine

# Fast password hashing and quiet access logs: neither is what these tests are about.
QUICK_ENV = {"DOCEX_AUTH_BCRYPT_ROUNDS": "4", "DOCEX_LOG_ACCESS": "false"}

needs_postgresql = pytest.mark.skipif(
    not os.environ.get("DOCEX_TEST_DATABASE_URL"),
    reason="scale-out is several processes over one PostgreSQL database (SPEC §1); "
    "set DOCEX_TEST_DATABASE_URL=postgresql+psycopg://... to run it (SQLite is single-machine)",
)

INVOICE_SCHEMA = {
    "type": "object",
    "properties": {"invoice_number": {"type": "string"}, "total": {"type": "number"}},
}



def wait_until_serving(daemon: Any) -> None:
    """Block (a sync test: Playwright, a generated client) until the daemon answers /api/health."""
    deadline = time.monotonic() + STARTUP
    while True:
        try:
            if httpx.get(daemon.url("/api/health"), timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if daemon.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"docex did not answer /api/health\n{daemon.describe()}")
        time.sleep(0.05)

# --- talking to the daemon ------------------------------------------------------------


class Api:
    """An HTTP client for the daemon at `base`, signed in (`sign_up`) as a fresh user."""

    def __init__(self, base: str, timeout: float = 30.0) -> None:
        self.client = httpx.AsyncClient(base_url=base, timeout=timeout)
        self.headers: dict[str, str] = {}

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def sign_up(self, email: str = "ops@example.com", password: str = "correct-horse-1") -> dict[str, str]:
        """Register; the Authorization header of the new user (also kept in `headers`)."""
        r = await self.client.post("/api/auth/register", json={"name": "Ops", "email": email, "password": password})
        assert r.status_code == 201, r.text
        self.headers = {"Authorization": f"Bearer {r.json()['accessToken']}"}
        return self.headers

    async def create_schema(self, definition: dict[str, Any] = INVOICE_SCHEMA, name: str = "Invoice") -> str:
        r = await self.client.post("/api/schemas", json={"name": name, "definition": definition},
                                   headers=self.headers)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def upload(self, schema_id: str, name: str, content: bytes, mime: str,
                     statuses: Collection[str] | None = ("QUEUED", "RUNNING")) -> dict[str, Any]:
        """An extraction job for the file: its 201 body, whose status must be one of `statuses`
        (None: not looked at)."""
        r = await self.client.post(
            "/api/jobs",
            data={"type": "EXTRACTION", "schemaId": schema_id},
            files={"file": (name, content, mime)},
            headers=self.headers,
        )
        assert r.status_code == 201, r.text
        job: dict[str, Any] = r.json()
        if statuses is not None:
            # QUEUED as created; a worker may have claimed it already by the time the
            # 201 body is read back (see the report: SPEC §6 says 201 QUEUED).
            assert job["status"] in statuses, job
        return job

    async def jobs(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every job of the user (all pages), optionally of one status."""
        out: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 100}
        if status:
            params["status"] = status
        while True:
            r = await self.client.get("/api/jobs", params=params, headers=self.headers)
            assert r.status_code == 200, r.text
            body = r.json()
            out += body["data"]
            if not body["nextCursor"]:
                return out
            params["cursor"] = body["nextCursor"]


# --- reading the database directly ----------------------------------------------------------


def _query(url: str, sql: str) -> list[Any]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(sql)))
    finally:
        engine.dispose()


async def query(url: str, sql: str) -> list[Any]:
    """The rows of `sql` on the database at `url` (a connection of its own, in a thread)."""
    return await trio.to_thread.run_sync(_query, url, sql)


async def job_rows(url: str) -> dict[str, Any]:
    rows = await query(url, "SELECT id, status, attempts, lease_owner, lease_expires_at, error_code FROM jobs")
    return {row.id: row for row in rows}


async def event_counts(url: str) -> dict[str, collections.Counter[str]]:
    """job id → Counter of the types of its events in the outbox."""
    rows = await query(url, "SELECT job_id, type FROM events WHERE job_id IS NOT NULL")
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        counts[row.job_id][row.type] += 1
    return counts


# --- several processes ------------------------------------------------------------------------


async def start_api_and_workers(start_daemon: Callable[..., Any], api_env: dict[str, str],
                                worker_envs: list[dict[str, str]]) -> tuple[Any, list[Any]]:
    """`serve --role api`, answering, then one `serve --role worker` per environment, ready.

    The api process first: it applies the migrations (and, with a shared data directory,
    writes the development secrets the workers then read instead of racing for them).
    """
    api_proc = start_daemon("--role", "api", env=api_env)
    await api_proc.wait_http_ready(timeout=STARTUP)
    workers = [start_daemon("--role", "worker", env=env) for env in worker_envs]
    for w in workers:
        _, ready = await w.wait_for("service.ready", timeout=STARTUP)
        assert ready["role"] == "worker" and ready["database"] == "postgresql"
    return api_proc, workers


async def upload_and_drain(
    api: Api, database_url: str, processes: list[Any], *, schema_id: str, document: Callable[[int], bytes],
    jobs: int, uploaders: int, statuses: Collection[str] | None, timeout: float,  # noqa: ASYNC109
    sample_every: float, check_every: float = 0.0,
) -> tuple[dict[str, int], dict[str, set[str]]]:
    """Upload `jobs` TXT documents (``document(i)``) with `uploaders` concurrent clients while
    watching the jobs table until every job has ended: ({job id: i}, {job id: lease owners seen}).

    Who holds each RUNNING job's lease is sampled every `sample_every` s (a sample, not an
    exact count); every `check_every` s whether any job is left and that no process died.
    """
    created: dict[str, int] = {}
    seen_owner: dict[str, set[str]] = collections.defaultdict(set)
    uploaded = trio.Event()

    async def upload(indexes: range) -> None:
        for i in indexes:
            job = await api.upload(schema_id, f"invoice-{i}.txt", document(i), "text/plain", statuses=statuses)
            created[job["id"]] = i

    async def uploads() -> None:
        async with trio.open_nursery() as nursery:
            for k in range(uploaders):
                nursery.start_soon(upload, range(k, jobs, uploaders))
        uploaded.set()

    async def watch() -> None:
        engine = sa.create_engine(database_url, pool_size=1)

        def running() -> list[Any]:
            with engine.connect() as conn:
                return list(conn.execute(sa.text("SELECT id, lease_owner FROM jobs WHERE status = 'RUNNING'")))

        def unfinished() -> dict[str, int]:
            with engine.connect() as conn:
                return {row.status: row.n for row in conn.execute(sa.text(
                    "SELECT status, count(*) AS n FROM jobs WHERE status NOT IN ('COMPLETED', 'FAILED') "
                    "GROUP BY status"))}

        deadline = time.monotonic() + timeout
        checked = float("-inf")
        try:
            while True:
                for row in await trio.to_thread.run_sync(running):
                    if row.lease_owner:
                        seen_owner[row.id].add(row.lease_owner)
                if time.monotonic() - checked > check_every:
                    checked = time.monotonic()
                    left = await trio.to_thread.run_sync(unfinished)
                    if uploaded.is_set() and not left:
                        return
                    for p in processes:
                        if p.proc.poll() is not None:
                            pytest.fail(f"a docex process exited\n{p.describe()}")
                    if time.monotonic() > deadline:
                        pytest.fail(f"jobs not done within {timeout:g}s: {left}\n"
                                    + "\n".join(p.describe() for p in processes))
                await trio.sleep(sample_every)
        finally:
            engine.dispose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(uploads)
        nursery.start_soon(watch)
    return created, seen_owner


async def assert_each_job_ran_once(
    api: Api, database_url: str, created: dict[str, int], seen_owner: dict[str, set[str]], processes: list[Any],
    result: Callable[[int], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Every job COMPLETED with ``result(i)``, attempted once, with one claim and one completion
    in the outbox; never seen leased to two owners; no reaping. The jobs, by id."""
    # Through the API: every job COMPLETED with its own document's values, attempted once.
    jobs = {j["id"]: j for j in await api.jobs()}
    assert set(jobs) == set(created)
    for job_id, job in jobs.items():
        i = created[job_id]
        assert job["status"] == "COMPLETED", job
        assert job["attempts"] == 1, job
        assert job["result"] == result(i), job

    # The outbox: exactly one claim and one completion per job, nothing else about jobs.
    per_job = await event_counts(database_url)
    assert set(per_job) == set(created)
    for job_id, types in per_job.items():
        assert types == {"job.queued": 1, "job.started": 1, "job.completed": 1}, (job_id, types)

    # No job was ever seen leased to two owners.
    assert [j for j, owners in seen_owner.items() if len(owners) > 1] == []
    for p in processes:
        assert not [r for r in p.records if r.get("action") in ("jobs.reaped", "job.lease_lost")], p.describe()
    return jobs


def sampled_split(seen_owner: dict[str, set[str]], workers: list[Any]) -> dict[str, int]:
    """Jobs per worker process ("worker1", ...) as sampled: a lease owner is host:pid:worker:ns."""
    by_pid = collections.Counter(next(iter(owners)).split(":")[1] for owners in seen_owner.values())
    names = {str(w.pid): f"worker{n}" for n, w in enumerate(workers, 1)}
    assert set(by_pid) <= set(names), (by_pid, names)
    return {names[pid]: by_pid.get(pid, 0) for pid in names}


async def stop_all(*daemons: Any, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """SIGTERM to every one at once, then each must exit 0 within `timeout`."""
    for d in daemons:
        d.signal(signal.SIGTERM)
    for d in daemons:
        code = await d.wait_exit(timeout=timeout)
        assert code == 0, f"exit {code}\n{d.describe()}"
