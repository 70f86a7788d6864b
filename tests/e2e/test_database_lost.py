"""PostgreSQL's connections lost while docex works (a restart, a failover, an idle-connection
killer): every connection the daemon holds is terminated again and again. The daemon must
stay up, answer a request that met a lost connection with a 503 to send it again, answer
again once the database does, and finish every job: none failed for it.

A lost connection used to end the process: the inbox sweeper's listing had no error
handling, even with no inbox at all, and its error ended the API, the workers and the
webhooks with it. A job whose attempt met the lost connection failed as INTERNAL_ERROR."""

from __future__ import annotations

import collections
import time

import httpx
import trio
from e2e_helpers import QUICK_ENV, Api, needs_postgresql, query

pytestmark = needs_postgresql

JOBS = 30
TERMINATE_DOCEX = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                   "WHERE datname = current_database() AND application_name = 'docex' AND pid <> pg_backend_pid()")


async def test_the_daemon_outlives_its_database_connections_and_finishes_every_job(
        start_daemon, database_url) -> None:
    d = start_daemon(env={**QUICK_ENV, "DOCEX_JOBS_WORKERS": "2"})
    await d.wait_http_ready()
    async with Api(d.url("")) as api:
        await api.sign_up()
        schema_id = await api.create_schema()
        created = [await api.upload(schema_id, f"inv-{i}.txt", f"Invoice Number: INV-{i}\nTotal: {i}.50\n".encode(),
                                    "text/plain", statuses=None) for i in range(JOBS)]
        terminated = 0
        answers: collections.Counter[int] = collections.Counter()
        until = time.monotonic() + 8
        while time.monotonic() < until:
            [row] = await query(database_url, TERMINATE_DOCEX)
            terminated += row[0]
            assert d.proc.poll() is None, f"the daemon exited after a lost connection\n{d.describe()}"
            # A request that met a lost connection says to send it again (503), not a 500.
            r = await api.client.get("/api/jobs", headers=api.headers)
            answers[r.status_code] += 1
            assert r.status_code == 200 or (r.status_code == 503 and r.headers["Retry-After"] == "1"), r.text
            await trio.sleep(0.02)
        assert terminated > 0, "no connection of docex's was terminated: the test proved nothing"
        print(f"\n{terminated} connections terminated; answers during it: {dict(answers)}")

        with trio.fail_after(60):
            while True:
                try:
                    jobs = await api.jobs()
                    if all(job["status"] in ("COMPLETED", "FAILED") for job in jobs):
                        break
                except httpx.HTTPError:
                    pass
                await trio.sleep(0.5)
        assert len(jobs) == JOBS == len(created)
        failed = [(job["fileName"], job["errorMessage"]) for job in jobs if job["status"] != "COMPLETED"]
        assert failed == []
        assert {job["result"]["invoice_number"] for job in jobs} == {f"INV-{i}" for i in range(JOBS)}
        r = await api.client.get("/api/ready")
        assert r.status_code == 200, r.text
    assert d.proc.poll() is None
    await d.stop()
