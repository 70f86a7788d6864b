"""The extraction worker pool and the lease reaper.

Each worker is a trio task that claims one QUEUED job at a time, holds a
lease on it (renewed while it runs) and records the outcome. A PENDING job
(its file still at an integration) is claimed the same way, and the worker
fetches its file instead (`fetch_job`): QUEUED once the file is in the blob
store, retried with backoff on transient errors, FAILED on permanent ones.
Idle workers sleep until a commit in this process makes a job claimable
(`Database.jobs_due`, set by the database layer after commit), the next retry
is due, or a slow poll for jobs created by other processes.

Shutdown: the pool stops claiming; a running job finishes within the grace
period or, cancelled, is released back to QUEUED (PENDING if its file was being
fetched; a final write), so no job is lost and none is left RUNNING by a clean
stop. A crashed process's jobs come back through the reaper when their leases
expire. The lease machinery shared with the webhook dispatcher is `daemon.leasing`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import sqlalchemy as sa
import trio

from daemon.clock import utcnow
from daemon.config import Config
from daemon.errors import JobError, PermanentJobError, TransientJobError
from daemon.extraction import learning
from daemon.extraction.pipeline import Extraction, LearnedLookup, extract
from daemon.integrations.fetch import FetchedFile, fetch_file
from daemon.jobs.models import ErrorCode, JobStatus
from daemon.jobs.records import Job
from daemon.jobs.retry import job_retry_at
from daemon.leasing import final_write, given_back_if_cancelled, idle_delay, owner_id, poll_interval
from daemon.schemas.definition import learning_on
from daemon.services import Services
from daemon.storage.blobs import BlobStoreError
from daemon.storage.repos import jobs as repo
from daemon.storage.repos import learning as learning_repo
from daemon.storage.repos.schemas import get_schema
from daemon.wakeup import Wakeup, wait_any

log = logging.getLogger(__name__)
T = TypeVar("T")


async def run_workers(services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Keep `jobs.workers` workers running until the process drains; resize on SIGHUP."""
    resized = Wakeup()

    def on_reload(old: Config, new: Config) -> None:
        if old.jobs.workers != new.jobs.workers:
            resized.set()

    services.reload_hooks.append(on_reload)
    stops: list[trio.Event] = []
    async with trio.open_nursery() as nursery:

        def resize() -> None:
            want = 0 if services.stopping.is_set() else services.config.jobs.workers
            while len(stops) < want:
                stop = trio.Event()
                stops.append(stop)
                nursery.start_soon(_worker, services, owner_id(f"worker{len(stops)}"), stop)
            while len(stops) > want:
                stops.pop().set()
            services.running["workers"] = want > 0 or services.config.jobs.workers == 0

        resize()
        task_status.started()
        while not services.stopping.is_set():
            await wait_any(services.stopping.wait, resized.sleep)
            resize()
            log.info("worker pool sized", extra={"action": "workers.resized", "workers": len(stops)})
    services.running["workers"] = False


async def _worker(services: Services, owner: str, stop: trio.Event) -> None:
    poll_s = poll_interval(services.db.url.get_backend_name())
    failures = 0
    previous_user = None  # whose job this worker ran last: users take turns (repo.claim_next)
    while not stop.is_set():
        try:
            job = await services.db.run(repo.claim_next, owner=owner, now=utcnow(),
                                        lease_s=services.config.jobs.lease_s, previous_user=previous_user)
            if job is None:
                due = await services.db.read(repo.next_due)
                await wait_any(stop.wait, functools.partial(services.db.jobs_due.sleep, idle_delay(due, poll_s)))
                continue
            previous_user = job.user_id
            if job.status == JobStatus.PENDING:
                await fetch_job(services, job, owner)
            else:
                await process_job(services, job, owner)
            failures = 0
        except Exception as exc:
            # The database is unreachable or failing, or a bug: the worker waits and tries again.
            # A job it held keeps its lease until expiry, then the reaper queues it again.
            failures += 1
            if isinstance(exc, sa.exc.DBAPIError):
                log.exception("worker: database error", extra={"action": "worker.db_error"})
            else:
                log.exception("worker failed: %s", type(exc).__name__, extra={"action": "worker.crashed"})
            await wait_any(stop.wait, functools.partial(trio.sleep, min(30.0, 0.5 * 2**failures)))


async def _holding_lease(services: Services, job: Job, owner: str, work: Callable[[], Awaitable[T]]) -> T | None:
    """`work()`'s outcome, run while renewing the job's lease; None if the lease was lost
    (the work is then cancelled: the job is someone else's now).

    Cancelled from outside (shutdown past the grace period), the job is given back (it
    runs again elsewhere or later) and the cancellation propagates.
    """

    async def give_back() -> None:
        await services.db.run(repo.release_job, job_id=job.id, owner=owner, now=utcnow())
        log.info("job released", extra={"action": "job.released", "job_id": job.id})

    outcome: T | None = None
    async with given_back_if_cancelled(give_back, {"job_id": job.id}), trio.open_nursery() as nursery:
        nursery.start_soon(_keep_lease, services, job.id, owner, nursery.cancel_scope)
        outcome = await work()
        nursery.cancel_scope.cancel()
    return outcome


async def process_job(services: Services, job: Job, owner: str) -> None:
    """Run one claimed job to its outcome, holding its lease meanwhile."""
    started = time.perf_counter()
    outcome = await _holding_lease(services, job, owner, functools.partial(_attempt, services, job))
    if outcome is None:
        # The lease was lost (the reaper gave the job to another worker): not ours to record.
        services.metrics.job_attempts.labels("lost").inc()
        log.warning("lease lost", extra={"action": "job.lease_lost", "job_id": job.id})
        return
    with final_write():
        await _record(services, job, owner, outcome, time.perf_counter() - started)


async def _attempt(services: Services, job: Job) -> Extraction | JobError | _ConnectionLost:
    config = services.config
    try:
        schema = await services.db.read(get_schema, job.user_id, job.schema_id, include_deleted=True)
        if schema is None or schema.deleted_at is not None:
            raise PermanentJobError(ErrorCode.SCHEMA_NOT_FOUND, f"Schema {job.schema_id} was deleted")
        if job.blob_key is None or job.mime_type is None:  # a QUEUED job has its file (fetched_job)
            raise PermanentJobError(ErrorCode.INTERNAL_ERROR, "The job has no file")
        # The file as a local path for the parsers, for the attempt (S3: a temporary download).
        async with contextlib.AsyncExitStack() as stack:
            try:
                path = await stack.enter_async_context(services.blobs.open_local(job.blob_key))
            except FileNotFoundError:
                raise PermanentJobError(ErrorCode.INTERNAL_ERROR, "The uploaded file is missing from storage") from None
            return await extract(path, job.mime_type, schema.definition, config, client=services.ai_client(),
                                 learned=_learned_lookup(services, job, schema.definition))
    except JobError as error:
        return error
    except BlobStoreError as exc:
        return _blob_store_failed(exc)
    except sa.exc.DBAPIError as exc:
        return _database_failed(job, exc)
    except Exception as exc:  # a bug, not the document: fail the job, keep the worker
        log.exception("job attempt crashed", extra={"action": "job.crashed", "job_id": job.id})
        return PermanentJobError(ErrorCode.INTERNAL_ERROR, f"Internal error ({type(exc).__name__}); see the daemon log")


def _learned_lookup(services: Services, job: Job, definition: dict[str, Any]) -> LearnedLookup | None:
    """How `job` finds the examples its owner's corrections taught for its schema; None
    when learning is off (``learning.enabled``, the schema's ``x-docex-learning``)."""
    if not learning_on(definition, services.config.learning.enabled):
        return None

    async def lookup(keys: list[str], then: Callable[[list[learning.Match]], T]) -> T:
        rows = await services.db.read(learning_repo.closest_examples, job.user_id, job.schema_id, keys)
        # Reading with the examples runs after the transaction: it holds no connection meanwhile.
        return await trio.to_thread.run_sync(then, learning.matches([learning.Match(*row) for row in rows]))

    return lookup


class _ConnectionLost:
    """The outcome of an attempt cut short by a lost database connection (a restart or
    failover of PostgreSQL): neither the document's nor the worker's fault, so the job is
    given back with the attempt not counted. Counted, a database that kept dropping
    connections failed jobs for good once they had met it `jobs.max_attempts` times."""


CONNECTION_LOST = _ConnectionLost()


def _database_failed(job: Job, exc: sa.exc.DBAPIError) -> JobError | _ConnectionLost:
    log.warning("database error during a job", exc_info=True, extra={"action": "worker.db_error", "job_id": job.id})
    if exc.connection_invalidated:
        return CONNECTION_LOST
    # Any other database error (a lock held past SQLite's busy timeout) counts as an attempt.
    return TransientJobError(ErrorCode.INTERNAL_ERROR, "A database error ended the attempt; see the daemon log")


async def _through_outage(services: Services, fn: Callable[..., T], **kwargs: Any) -> T:
    """`services.db.run(fn, **kwargs)`, written again while the database connection is lost
    (within a `final_write`'s time): the worker holds an outcome the job must not lose, and
    an outcome left unwritten let the lease expire, which the reaper counts as a lost worker."""
    delay = 0.1
    while True:
        try:
            return await services.db.run(fn, **kwargs)
        except sa.exc.DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            log.warning("database connection lost writing a job's outcome; writing it again",
                        extra={"action": "worker.db_error"})
        await trio.sleep(delay)
        delay = min(2.0, delay * 2)


def _blob_store_failed(exc: BlobStoreError) -> JobError:
    log.warning("blob store failed: %s", exc, extra={"action": "blobs.error"})
    kind = TransientJobError if exc.transient else PermanentJobError
    return kind(ErrorCode.INTERNAL_ERROR, "The file storage failed; see the daemon log")


async def _record(services: Services, job: Job, owner: str, outcome: Extraction | JobError | _ConnectionLost,
                  elapsed: float) -> None:
    now = utcnow()
    if isinstance(outcome, _ConnectionLost):
        label = "released" if await _given_back(services, job, owner, now) else "lost"
        services.metrics.job_duration.labels(label).observe(elapsed)
        services.metrics.job_attempts.labels(label).inc()
        return
    if isinstance(outcome, Extraction):
        done = await _through_outage(
            services,
            repo.complete_job,
            job_id=job.id,
            owner=owner,
            result=outcome.result,
            meta=outcome.meta,
            page_count=outcome.page_count,
            reading=outcome.reading,
            now=now,
        )
        label = "completed" if outcome.meta["complete"] else "incomplete"
    else:
        retry_at = _retry_at(services, job, outcome, now)
        done = await _through_outage(
            services,
            repo.fail_job,
            job_id=job.id,
            owner=owner,
            code=outcome.code,
            message=outcome.message,
            now=now,
            retry_at=retry_at,
        )
        label = "retried" if retry_at else "failed"
        log.info(
            "job attempt failed",
            extra={"action": f"job.{label}", "job_id": job.id, "error_code": outcome.code, "attempt": job.attempts},
        )
    if done is None:
        label = "lost"
    services.metrics.job_duration.labels(label).observe(elapsed)
    services.metrics.job_attempts.labels(label).inc()


async def fetch_job(services: Services, job: Job, owner: str) -> None:
    """Fetch a claimed PENDING job's file from its integration, holding its lease meanwhile:
    QUEUED once the file is in the blob store (and a worker woken for it), PENDING again
    at the next retry after a transient error, FAILED (job.failed) after a permanent one
    or the last attempt. A file fetched for a job cancelled or deleted meanwhile is dropped.
    """
    outcome = await _holding_lease(services, job, owner, functools.partial(_fetch_attempt, services, job))
    if outcome is None:
        log.warning("lease lost", extra={"action": "job.lease_lost", "job_id": job.id})
        return
    with final_write():
        await _record_fetch(services, job, owner, outcome)


async def _fetch_attempt(services: Services, job: Job) -> FetchedFile | JobError | _ConnectionLost:
    try:
        return await fetch_file(services, job)
    except JobError as error:
        return error
    except BlobStoreError as exc:
        return _blob_store_failed(exc)
    except sa.exc.DBAPIError as exc:
        return _database_failed(job, exc)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # The file is fine, the data volume full: fetched again later (it failed for good,
            # and an inbox's file, marked taken, was never tried again).
            log.warning("no space left to fetch a file", extra={"action": "job.storage_full", "job_id": job.id})
            return TransientJobError(ErrorCode.INTERNAL_ERROR, "docex's storage is full; the file is fetched again "
                                     "later")
        return _fetch_crashed(job, exc)
    except Exception as exc:
        return _fetch_crashed(job, exc)


def _fetch_crashed(job: Job, exc: Exception) -> JobError:
    """A bug: fail the job, keep the worker."""
    log.exception("job fetch crashed", extra={"action": "job.crashed", "job_id": job.id})
    return PermanentJobError(ErrorCode.INTERNAL_ERROR, f"Internal error ({type(exc).__name__}); see the daemon log")


async def _record_fetch(services: Services, job: Job, owner: str,
                        outcome: FetchedFile | JobError | _ConnectionLost) -> None:
    now = utcnow()
    if isinstance(outcome, _ConnectionLost):
        await _given_back(services, job, owner, now)
        return
    if isinstance(outcome, FetchedFile):
        done = await _through_outage(
            services,
            repo.fetched_job, job_id=job.id, owner=owner, file_name=outcome.file_name, file_size=outcome.file_size,
            mime_type=outcome.mime_type, sha256=outcome.sha256, blob_key=outcome.blob_key, now=now,
        )
        if done is None:  # cancelled, deleted or taken back while we fetched
            await services.blobs.delete(outcome.blob_key)
            log.info("fetched file dropped", extra={"action": "job.fetch_dropped", "job_id": job.id})
        return
    retry_at = _retry_at(services, job, outcome, now)
    await _through_outage(services, repo.fail_job, job_id=job.id, owner=owner, code=outcome.code,
                          message=outcome.message, now=now, retry_at=retry_at)
    label = "retried" if retry_at else "failed"
    log.info("job fetch failed", extra={"action": f"job.fetch_{label}", "job_id": job.id,
                                        "error_code": outcome.code, "attempt": job.attempts})


async def _given_back(services: Services, job: Job, owner: str, now: dt.datetime) -> bool:
    """Give back a job whose attempt lost the database connection, the attempt not counted,
    to run again after the first retry delay (a database that is failing over is given time)."""
    run_after = now + dt.timedelta(milliseconds=services.config.jobs.retry_backoff_initial_ms)
    released = await _through_outage(services, repo.release_job, job_id=job.id, owner=owner, now=now,
                                     run_after=run_after)
    log.info("job given back: the database connection was lost", extra={"action": "job.released", "job_id": job.id})
    return released


def _retry_at(services: Services, job: Job, outcome: JobError, now: dt.datetime) -> dt.datetime | None:
    """When the failed attempt runs again under the current settings (None: it fails now)."""
    return job_retry_at(
        attempts=job.attempts,
        max_attempts=services.config.jobs.max_attempts,
        retryable=outcome.retryable,
        now=now,
        initial_delay_s=services.config.jobs.retry_backoff_initial_ms / 1000,
        retry_after_s=outcome.retry_after_s,
    )


async def _keep_lease(services: Services, job_id: str, owner: str, work: trio.CancelScope) -> None:
    """Renew the lease every third of its length; if it was taken back, stop the work.

    A renewal the database cannot take (a restart, a failover) is tried again every second
    while the lease lasts: the work goes on meanwhile. Before, one failed renewal threw the
    work away, and three short outages failed a healthy job ("stopped responding 3 times").
    """
    held_until = trio.current_time() + services.config.jobs.lease_s  # the claim has just set it
    wait = services.config.jobs.lease_s / 3
    while True:
        await trio.sleep(wait)
        lease_s = services.config.jobs.lease_s
        try:
            renewed = await services.db.run(repo.renew_lease, job_id=job_id, owner=owner, now=utcnow(),
                                            lease_s=lease_s)
        except sa.exc.DBAPIError:
            if trio.current_time() >= held_until:  # lapsed: the reaper may give the job to another worker
                work.cancel()
                return
            log.warning("cannot renew a job's lease; trying again", extra={"action": "worker.lease_retry",
                                                                           "job_id": job_id})
            wait = min(1.0, lease_s / 3)
            continue
        if not renewed:
            work.cancel()
            return
        held_until = trio.current_time() + lease_s
        wait = lease_s / 3


async def run_reaper(services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Re-queue jobs whose worker's lease expired (its process died), at each lease's expiry."""
    services.running["reaper"] = True
    task_status.started()
    try:
        while True:
            # Leases of other processes appear without telling us: look again at least every lease length.
            delay = float(services.config.jobs.lease_s)
            try:
                now = utcnow()
                reaped = await services.db.run(repo.reap_expired, now=now,
                                               max_attempts=services.config.jobs.max_attempts)
                if reaped:
                    log.warning("re-queued jobs of a lost worker", extra={"action": "jobs.reaped", "count": reaped})
                await services.db.run(repo.purge_idempotency_keys, now)
                expiry = await services.db.read(repo.next_lease_expiry)
                if expiry is not None:
                    delay = min(delay, max(0.5, (expiry - utcnow()).total_seconds() + 0.1))
            except Exception:
                log.exception("reaper cannot reach the database", extra={"action": "reaper.db_error"})
                delay = min(delay, 5.0)
            await trio.sleep(delay)
    finally:
        services.running["reaper"] = False
