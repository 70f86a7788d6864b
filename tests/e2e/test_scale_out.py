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

import time

from e2e_helpers import (
    QUICK_ENV,
    Api,
    assert_each_job_ran_once,
    needs_postgresql,
    query,
    sampled_split,
    start_api_and_workers,
    stop_all,
    upload_and_drain,
)

pytestmark = needs_postgresql

JOBS = 200
UPLOADERS = 8
ENV = {
    **QUICK_ENV,
    "DOCEX_JOBS_WORKERS": "4",
    # The default lease (60 s) and poll are kept: nothing here should need a reaper.
}


def invoice(i: int) -> bytes:
    return f"Invoice Number: INV-{10000 + i}\nTotal: {i}.50\n".encode()


async def test_two_worker_processes_share_the_queue_and_run_each_job_exactly_once(
    start_daemon, database_url
) -> None:
    # The api process first: it applies the migrations and writes the development secrets
    # into the shared data directory, which the workers then read instead of racing for them.
    api_proc, workers = await start_api_and_workers(start_daemon, ENV, [ENV, ENV])
    processes = [api_proc, *workers]

    async with Api(api_proc.url("")) as api:
        await api.sign_up()
        schema_id = await api.create_schema()
        started = time.monotonic()
        # QUEUED when created; a worker process may have claimed (even finished) it by the
        # time the api process reads it back for the 201 body.
        created, seen_owner = await upload_and_drain(
            api, database_url, processes, schema_id=schema_id, document=invoice, jobs=JOBS, uploaders=UPLOADERS,
            statuses=("QUEUED", "RUNNING", "COMPLETED"), timeout=45, sample_every=0.002, check_every=0.25)
        elapsed = time.monotonic() - started
        assert len(created) == JOBS

        await assert_each_job_ran_once(api, database_url, created, seen_owner, processes,
                                       lambda i: {"invoice_number": f"INV-{10000 + i}", "total": i + 0.5})
    assert not await query(database_url, "SELECT id FROM jobs WHERE lease_owner IS NOT NULL")

    # The split, as sampled: owner is host:pid:worker:ns.
    split = sampled_split(seen_owner, workers)
    print(f"\n{JOBS} jobs in {elapsed:.1f}s ({JOBS / elapsed:.0f} jobs/s incl. upload); "
          f"sampled RUNNING for {len(seen_owner)} of them; split as sampled: {split}")

    await stop_all(*workers, api_proc)
