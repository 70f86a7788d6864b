"""Jobs and batch runs: every state change and its event in one transaction.

Transitions follow the seed's table (SPEC §6, §8):

    (create) → PENDING | QUEUED            job.queued
    PENDING  → PENDING   (claim to fetch)  leased; attempts count fetch attempts
    PENDING  → QUEUED    (file fetched)    attempts back to 0 (job.queued was sent at creation)
    PENDING  → FAILED    (fetch failed)    job.failed
    QUEUED   → RUNNING   (claim)           job.started
    RUNNING  → COMPLETED                   job.completed (its result complete or not, SPEC §7)
    RUNNING  → QUEUED    (retryable error, lease expiry, shutdown release)
    RUNNING  → FAILED    (last attempt)    job.failed
    PENDING | QUEUED → CANCELLED           job.cancelled
    FAILED   → QUEUED | PENDING (restart)  job.queued (PENDING: its file was never fetched)
    COMPLETED → COMPLETED (result patch)   job.updated (an approval before it is cleared)
    COMPLETED → COMPLETED (approval)       job.updated (reviewedAt, reviewedBy)

A PENDING job (its file still at an integration) is claimed like a QUEUED one but stays
PENDING while a worker holds its lease and fetches the file; its retries, releases and
lease expiries bring it back to PENDING, not QUEUED.

A job that ends inside a batch run updates the run: job_run.progress (at most
once a second, the last always sent) and, when every job has ended,
job_run.completed or job_run.failed (or, for a cancelled run, CANCELLED).

What may happen is decided in `daemon.jobs.transitions` (pure); this module
loads records, asks, and writes the answer with its event. Rows leave it as
`Job` and `JobRun` records.
"""

from __future__ import annotations

import datetime as dt
import itertools
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from daemon.clock import iso, utcnow
from daemon.errors import Missing, Stale
from daemon.jobs import transitions
from daemon.jobs.models import (
    JOB_TYPE_EXTRACTION,
    ErrorCode,
    JobStatus,
    RunStatus,
    completeness,
    count_key,
    least_confidence,
)
from daemon.jobs.records import Job, JobRun, job_json, run_json, version_of
from daemon.jsonvalues import storable
from daemon.storage.database import Wake, as_utc, lock_rows, stamped_after, wake_after_commit
from daemon.storage.ids import new_id
from daemon.storage.outbox import record_event
from daemon.storage.repos.learning import forget_job
from daemon.storage.tables import UNREVIEWED, deliveries, events, idempotency_keys, job_runs, jobs
from daemon.webhooks.models import DUE_STATUSES


@dataclass(frozen=True)
class NewJob:
    """What a job is made from: an uploaded file, or a remote source still to fetch."""

    file_name: str | None = None
    file_size: int | None = None
    mime_type: str | None = None
    sha256: str | None = None
    blob_key: str | None = None
    source: dict[str, Any] | None = None


def _claimable(conn: Connection) -> None:
    """A job became claimable, or its due time moved: wake this process's idle workers after commit."""
    wake_after_commit(conn, Wake.WORKERS)


def _job(conn: Connection, job_id: str) -> Job:
    return Job.from_row(conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one())


def _run(conn: Connection, run_id: str, *, lock: bool = False) -> JobRun | None:
    query = sa.select(job_runs).where(job_runs.c.id == run_id)
    row = conn.execute(lock_rows(conn, query) if lock else query).first()
    return None if row is None else JobRun.from_row(row)


def _event(conn: Connection, type: str, job: Job, now: dt.datetime, *, with_result: bool = False) -> None:
    record_event(
        conn,
        user_id=job.user_id,
        type=type,
        data={"job": job_json(job, with_result=with_result)},
        now=now,
        schema_id=job.schema_id,
        job_id=job.id,
        job_run_id=job.job_run_id,
    )


# The longest file name a job keeps (its column's length).
MAX_FILE_NAME = 500


def stored_file_name(name: str | None) -> str | None:
    """A file's name as a job keeps it, whatever brought it (an upload, an inbox, a bucket's
    key): without control characters (a NUL, which PostgreSQL refuses in text; a line
    break, which no response header may carry) or bidirectional overrides (U+202E shows
    "\u202egpj.exe" as "exe.jpg" in the console and a download dialog), at most
    `MAX_FILE_NAME` characters; None when nothing is left."""
    if name is None:
        return None
    return "".join(ch for ch in name if unicodedata.category(ch) != "Cc" and ch not in _BIDI_CONTROLS
                   )[:MAX_FILE_NAME] or None


# Unicode's explicit direction embeddings, overrides and isolates (UAX #9).
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def create_job(
    conn: Connection, *, user_id: str, schema_id: str, new: NewJob, now: dt.datetime, job_run_id: str | None = None
) -> Job:
    job_id = new_id()
    status = JobStatus.PENDING if new.source is not None and new.blob_key is None else JobStatus.QUEUED
    conn.execute(
        jobs.insert().values(
            id=job_id,
            user_id=user_id,
            schema_id=schema_id,
            job_run_id=job_run_id,
            type=JOB_TYPE_EXTRACTION,
            status=status,
            file_name=stored_file_name(new.file_name),
            file_size=new.file_size,
            mime_type=new.mime_type,
            sha256=new.sha256,
            blob_key=new.blob_key,
            source=new.source,
            attempts=0,
            created_at=now,
            updated_at=now,
            run_after=now,
        )
    )
    job = _job(conn, job_id)
    _event(conn, "job.queued", job, now)
    _claimable(conn)
    return job


def get_job(conn: Connection, user_id: str | None, job_id: str) -> Job | None:
    """Job `job_id` if it is `user_id`'s; `user_id` None: any user's (an ADMIN's request)."""
    query = sa.select(jobs).where(jobs.c.id == job_id)
    row = conn.execute(query if user_id is None else query.where(jobs.c.user_id == user_id)).first()
    return None if row is None else Job.from_row(row)


def _to_change(conn: Connection, job_id: str, user_id: str | None) -> Job:
    """The job a person's request is about to change (cancel, restart, correct, approve,
    delete), locked until the transaction ends; `user_id` None: any user's (an ADMIN).

    The transition is decided on this row, so it must not change before the write:
    under PostgreSQL's READ COMMITTED two requests (or a request and a worker's claim)
    would otherwise both pass the check on what they read, e.g. eight cancels at once
    answering 200 eight times with eight job.cancelled events, or a delete committed
    between the check and the write making the write find no row (a 500). The second
    request waits here and decides on the row as the first left it. (SQLite: writers
    already run one at a time.)

    Raises:
        Missing: no such job (of `user_id`).
    """
    query = sa.select(jobs).where(jobs.c.id == job_id)
    if user_id is not None:
        query = query.where(jobs.c.user_id == user_id)
    row = conn.execute(lock_rows(conn, query)).first()
    if row is None:
        raise Missing("Job not found")
    return Job.from_row(row)


@dataclass(frozen=True)
class JobFilter:
    status: str | None = None
    schema_id: str | None = None
    job_run_id: str | None = None
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    complete: bool | None = None  # COMPLETED jobs whose result has (True) or lacks (False) every required value
    # The review queue, oldest first: COMPLETED jobs nobody approved whose result lacks a
    # required value or has one under this confidence.
    review_below: float | None = None


# What one page of jobs may hold of stored JSON (results, the originals a person corrected,
# their metadata): a correction may be 4 MiB, and a page of 100 of them was 400 MB of text
# and several times that in memory. A page is cut short of its limit to stay under it (its
# first job is always in it), and its cursor goes on from there.
PAGE_JSON_BYTES = 8 * 1024 * 1024
_RESULT, _ORIGINAL, _META = (sa.func.coalesce(sa.func.length(sa.cast(column, sa.Text)), 0)
                             for column in (jobs.c.result, jobs.c.original_result, jobs.c.result_meta))
_STORED_JSON = (_RESULT + _ORIGINAL + _META).label("stored_json")


@dataclass(frozen=True)
class JobSlice:
    jobs: list[Job]  # at most the limit asked for (fewer where some were deleted as they were read)
    after: str | None  # where the next page starts, when more jobs match: the last id this one chose


def list_jobs(conn: Connection, user_id: str, where: JobFilter, limit: int, cursor: str | None,
              oldest_first: bool = False, max_json_bytes: int = PAGE_JSON_BYTES) -> JobSlice:
    """The user's jobs matching `where`, newest first (the review queue, or with
    `oldest_first`, oldest first), after `cursor`: at most `limit`, and no more than fit
    `max_json_bytes` of stored JSON (but at least one)."""
    oldest_first = oldest_first or where.review_below is not None
    order = jobs.c.id.asc() if oldest_first else jobs.c.id.desc()
    query = sa.select(jobs.c.id, _STORED_JSON).where(jobs.c.user_id == user_id).order_by(order).limit(limit + 1)
    if where.status:
        query = query.where(jobs.c.status == where.status)
    if where.schema_id:
        query = query.where(jobs.c.schema_id == where.schema_id)
    if where.job_run_id:
        query = query.where(jobs.c.job_run_id == where.job_run_id)
    if where.created_after:
        # Times are shown to the millisecond, cut (`daemon.clock.iso`): a job shown at T was
        # created in [T, T + 1 ms), and "after T" read from a shown T must leave it out
        # (a client polling with the newest createdAt it saw got that job again every time).
        after = where.created_after
        try:
            query = query.where(jobs.c.created_at >= after + dt.timedelta(milliseconds=1)
                                if after.microsecond % 1000 == 0 else jobs.c.created_at > after)
        except OverflowError:  # its last millisecond of the year 9999: no job is created after it
            query = query.where(sa.false())
    if where.created_before:
        query = query.where(jobs.c.created_at < where.created_before)
    if where.complete is not None:
        query = query.where(jobs.c.result_complete == where.complete)
    if where.review_below is not None:
        query = query.where(UNREVIEWED, sa.or_(jobs.c.min_confidence < where.review_below,
                                               jobs.c.result_complete.is_(False)))
    if cursor:
        query = query.where(jobs.c.id > cursor if oldest_first else jobs.c.id < cursor)
    # The sizes first, then the jobs that fit: what does not fit is never read.
    sized = conn.execute(query).all()
    chosen: list[str] = []
    total = 0
    for job_id, size in sized[:limit]:
        total += size
        if chosen and total > max_json_bytes:
            break
        chosen.append(job_id)
    # (Under PostgreSQL's READ COMMITTED a job chosen may be deleted before this reads it: the
    # next page still starts after the last chosen, not at the last found, or at none.)
    found = [Job.from_row(row) for row in conn.execute(sa.select(jobs).where(jobs.c.id.in_(chosen)).order_by(order))]
    return JobSlice(found, after=chosen[-1] if len(sized) > len(chosen) else None)


def _update(conn: Connection, job_id: str, now: dt.datetime, **values: Any) -> Job:
    conn.execute(jobs.update().where(jobs.c.id == job_id).values(updated_at=now, **values))
    return _job(conn, job_id)


def cancel_job(conn: Connection, user_id: str, job_id: str, now: dt.datetime) -> Job:
    """PENDING | QUEUED → CANCELLED (job.cancelled). Raises Missing, InvalidTransition."""
    job = _to_change(conn, job_id, user_id)
    transitions.check_cancel(job)
    job = _cancel(conn, job, now)
    _job_ended(conn, job, now)
    return job


def _cancel(conn: Connection, job: Job, now: dt.datetime) -> Job:
    # A PENDING job may be leased to a worker fetching its file: the fetch will find it gone.
    job = _update(conn, job.id, now, status=JobStatus.CANCELLED, finished_at=now, run_after=None,
                  lease_owner=None, lease_expires_at=None)
    _event(conn, "job.cancelled", job, now)
    return job


def restart_job(conn: Connection, user_id: str, job_id: str, now: dt.datetime) -> Job:
    """FAILED → QUEUED (PENDING if its file was never fetched), job.queued. Raises Missing,
    InvalidTransition."""
    job = _to_change(conn, job_id, user_id)
    status = transitions.restarted_status(job)
    job = _update(
        conn,
        job_id,
        now,
        status=status,
        attempts=0,
        error_code=None,
        error_message=None,
        started_at=None,
        finished_at=None,
        run_after=now,
    )
    _event(conn, "job.queued", job, now)
    _claimable(conn)
    run = _run(conn, job.job_run_id) if job.job_run_id else None
    if run is not None and transitions.restart_reopens(run):
        conn.execute(
            job_runs.update()
            .where(job_runs.c.id == run.id)
            .values(status=RunStatus.RUNNING, finished_at=None, updated_at=now)
        )
    return job


def _check_version(job: Job, expected: Collection[str] | None) -> None:
    """Raises Stale when the caller read other versions of `job` (its If-Match) than the
    one it now changes: a reviewer's form made from an older one would undo what was written
    since (another tab's correction, an approval)."""
    if expected is not None and version_of(job) not in expected:
        raise Stale(f"The job changed since you read it (it is now at updatedAt {iso(job.updated_at)}): "
                    "read it again")


def patch_result(conn: Connection, user_id: str, job_id: str, result: dict[str, Any], missing: list[str],
                 now: dt.datetime, expected: Collection[str] | None = None) -> Job:
    """Replace a COMPLETED job's result (validated by the caller, which found the required
    values it still lacks: `missing`); the extracted one is kept. `expected`: the versions
    (`version_of`) the caller read, one of which the job must be at. Raises Missing, InvalidTransition, Stale."""
    job = _to_change(conn, job_id, user_id)
    _check_version(job, expected)
    transitions.check_patch_result(job)
    now = stamped_after(job.updated_at, now)
    original = job.original_result if job.original_result is not None else job.result
    meta = {**(job.result_meta or {}), **completeness(missing)}
    # An approval vouched for the values it saw; corrected values wait for a person again.
    job = _update(conn, job_id, now, result=result, original_result=original, result_meta=meta,
                  result_complete=meta["complete"], reviewed_at=None, reviewed_by=None,
                  min_confidence=least_confidence(meta.get("fields") or {}, result, original))
    # What the job's result taught is no longer confirmed: its caller records what the new
    # one teaches, if anything (learning off, or no reading kept: nothing).
    forget_job(conn, job.user_id, job_id)
    _event(conn, "job.updated", job, now, with_result=True)
    return job


def approve_job(conn: Connection, job_id: str, owner_id: str | None, reviewer_id: str, now: dt.datetime,
                expected: Collection[str] | None = None) -> Job:
    """Record that `reviewer_id` checked a COMPLETED, complete result (job.updated). The job
    must be `owner_id`'s (None: any user's, for an ADMIN). Approving again moves reviewedAt.
    `expected`: the versions the reviewer saw. Raises Missing, InvalidTransition, Stale."""
    job = _to_change(conn, job_id, owner_id)
    _check_version(job, expected)
    transitions.check_approve(job)
    now = stamped_after(job.updated_at, now)
    job = _update(conn, job_id, now, reviewed_at=now, reviewed_by=reviewer_id)
    _event(conn, "job.updated", job, now, with_result=True)
    return job


def delete_job(conn: Connection, user_id: str, job_id: str, now: dt.datetime) -> str | None:
    """Delete the job; returns its blob key for the caller to delete. A run it belonged to
    counts one job less, and ends if that was its last unfinished one. Raises Missing,
    InvalidTransition."""
    job = _to_change(conn, job_id, user_id)
    transitions.check_delete(job)
    conn.execute(jobs.delete().where(jobs.c.id == job_id))
    # Locked first: a replay of one of them that commits meanwhile is then seen below (the
    # DELETE would re-check only the event's own row after waiting for it, and its new
    # delivery went with it).
    conn.execute(lock_rows(conn, sa.select(events.c.id).where(events.c.job_id == job_id,
                                                              events.c.user_id == job.user_id)))
    # Its events go too (each carries the job, its result: a job corrected 50 times kept
    # 195 MB of them), with their delivery history; not one a webhook has still to deliver.
    undelivered = sa.exists().where(deliveries.c.event_id == events.c.id, deliveries.c.status.in_(DUE_STATUSES))
    conn.execute(events.delete().where(events.c.job_id == job_id, events.c.user_id == job.user_id, ~undelivered))
    # The keys that created it go with it: a repeat of the upload makes a new job, where it
    # replayed a job that no longer is (404 for a create, for the keys' 24 h).
    conn.execute(idempotency_keys.delete().where(
        idempotency_keys.c.user_id == job.user_id, idempotency_keys.c.resource_type == "job",
        idempotency_keys.c.resource_id == job_id))
    if job.job_run_id:
        conn.execute(job_runs.update().where(job_runs.c.id == job.job_run_id).values(total=job_runs.c.total - 1))
        _settle_run(conn, job.job_run_id, now)
    return str(job.blob_key) if job.blob_key else None


# --- the queue ------------------------------------------------------------------------


# Jobs a worker may claim: QUEUED ones to run, PENDING ones to fetch their file. Neither is
# leased while waiting (a PENDING job being fetched is, and is skipped).
_CLAIMABLE = (JobStatus.QUEUED, JobStatus.PENDING)
# What a job waiting again goes back to: a PENDING job being fetched stays PENDING, a RUNNING one is QUEUED.
_WAITING_AGAIN = sa.case((jobs.c.status == JobStatus.PENDING.value, sa.literal(JobStatus.PENDING.value)),
                         else_=sa.literal(JobStatus.QUEUED.value))


def _waiting() -> sa.ColumnElement[bool]:
    return sa.and_(jobs.c.status.in_(_CLAIMABLE), jobs.c.lease_owner.is_(None))


def claim_next(conn: Connection, *, owner: str, now: dt.datetime, lease_s: int, previous_user: str | None = None
               ) -> Job | None:
    """Take the next due job, leased to `owner`, with one more attempt:

    - QUEUED → RUNNING (job.started), to run the extraction;
    - PENDING → PENDING, to fetch its file from the integration (no event: the job has
      not started; the caller tells the two apart by the returned row's status).

    Users take turns (`_next_user`, after `previous_user`, whose job the worker ran last):
    another user's waiting job goes before those of a user who just had a turn or has a job
    running; otherwise the oldest due job. PostgreSQL skips rows other processes are claiming
    (FOR UPDATE SKIP LOCKED); SQLite runs this under its single writer lock (BEGIN IMMEDIATE).
    """
    query = (
        sa.select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.started_at)
        .where(_waiting(), jobs.c.run_after <= now)
        .order_by(jobs.c.run_after, jobs.c.id)
        .limit(1)
    )
    due = None
    user_id = _next_user(conn, now, previous_user)
    if user_id is not None:
        due = conn.execute(lock_rows(conn, query.where(jobs.c.user_id == user_id), skip_locked=True)).first()
    if due is None:
        due = conn.execute(lock_rows(conn, query, skip_locked=True)).first()
    if due is None:
        return None
    if due.status == JobStatus.PENDING:
        return _update(conn, due.id, now, attempts=due.attempts + 1, lease_owner=owner,
                       lease_expires_at=now + dt.timedelta(seconds=lease_s))
    job = _update(
        conn,
        due.id,
        now,
        status=JobStatus.RUNNING,
        attempts=due.attempts + 1,
        lease_owner=owner,
        lease_expires_at=now + dt.timedelta(seconds=lease_s),
        started_at=due.started_at or now,
    )
    _event(conn, "job.started", job, now)
    return job


def _next_user(conn: Connection, now: dt.datetime, previous: str | None) -> str | None:
    """The user whose turn it is: the first after `previous` (whose job the claiming worker
    ran last), in user order and round again, with a due job and none running. None when no
    other user has a due job and none running: the oldest due job goes first then.

    Taken oldest first whoever's, one user's batch of slow documents held every worker
    while another user's one-page job waited behind all of it. Each gap between the users
    passed over is one seek of `ix_jobs_waiting_user`: running jobs are few (the workers),
    and a user's due jobs are never walked, however many there are (jobs waiting out a
    retry delay are: the index cannot skip them inside a range of users).
    """
    passed = {row.user_id for row in conn.execute(sa.select(jobs.c.user_id).where(jobs.c.status == JobStatus.RUNNING))}
    if previous is not None:
        passed.add(previous)
    if not passed:
        return None
    order = sorted(passed)
    turn = order.index(previous) if previous is not None else 0
    cycle = [*order[turn:], *order[:turn], order[turn]]
    gaps: list[tuple[str | None, str | None]] = []
    for low, high in itertools.pairwise(cycle):
        # Past the end of the user order, round again from its start.
        gaps += [(low, high)] if low < high else [(low, None), (None, high)]
    for low, high in gaps:
        gap = sa.select(jobs.c.user_id).where(_waiting(), jobs.c.run_after <= now)
        if low is not None:
            gap = gap.where(jobs.c.user_id > low)
        if high is not None:
            gap = gap.where(jobs.c.user_id < high)
        user: str | None = conn.execute(gap.order_by(jobs.c.status, jobs.c.user_id).limit(1)).scalar()
        if user is not None:
            return user
    return None


def next_due(conn: Connection) -> dt.datetime | None:
    """When the earliest QUEUED or unleased PENDING job becomes claimable (None: nothing waits)."""
    value = conn.execute(sa.select(sa.func.min(jobs.c.run_after)).where(_waiting())).scalar()
    return None if value is None else as_utc(value)


def _held(owner: str, job_id: str, status: JobStatus = JobStatus.RUNNING) -> sa.ColumnElement[bool]:
    return sa.and_(jobs.c.id == job_id, jobs.c.status == status, jobs.c.lease_owner == owner)


def _leased(owner: str, job_id: str) -> sa.ColumnElement[bool]:
    """Leased to `owner`: running it, or fetching its file (PENDING)."""
    return sa.and_(jobs.c.id == job_id, jobs.c.status.in_([JobStatus.RUNNING, JobStatus.PENDING]),
                   jobs.c.lease_owner == owner)


def renew_lease(conn: Connection, *, job_id: str, owner: str, now: dt.datetime, lease_s: int) -> bool:
    """Extend the lease; False if the job is no longer ours (the reaper took it back,
    or it was cancelled or deleted while its file was being fetched)."""
    result = conn.execute(
        jobs.update().where(_leased(owner, job_id)).values(lease_expires_at=now + dt.timedelta(seconds=lease_s))
    )
    return result.rowcount == 1


def fetched_job(
    conn: Connection,
    *,
    job_id: str,
    owner: str,
    file_name: str,
    file_size: int,
    mime_type: str,
    sha256: str,
    blob_key: str,
    now: dt.datetime,
) -> Job | None:
    """PENDING → QUEUED once the file is in the blob store, if we still hold the fetch lease
    (else None: the job was cancelled, deleted or taken back; the caller deletes the blob).

    `attempts` starts again at 0 for the extraction. No event: job.queued was sent when
    the job was created.
    """
    done = conn.execute(
        jobs.update()
        .where(_held(owner, job_id, JobStatus.PENDING))
        .values(
            status=JobStatus.QUEUED,
            file_name=stored_file_name(file_name),
            file_size=file_size,
            mime_type=mime_type,
            sha256=sha256,
            blob_key=blob_key,
            attempts=0,
            error_code=None,
            error_message=None,
            run_after=now,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
    )
    if done.rowcount != 1:
        return None
    _claimable(conn)
    return _job(conn, job_id)


def complete_job(
    conn: Connection,
    *,
    job_id: str,
    owner: str,
    result: dict[str, Any],
    meta: dict[str, Any],
    page_count: int | None,
    now: dt.datetime,
    reading: dict[str, Any] | None = None,
) -> Job | None:
    """RUNNING → COMPLETED, if we still hold the lease (else None: someone else has it now).
    `meta` is the whole resultMeta, its `complete` and `missing` included; `reading` what
    learning keeps of the document (`daemon.extraction.learning`)."""
    done = conn.execute(
        jobs.update()
        .where(_held(owner, job_id))
        .values(
            status=JobStatus.COMPLETED,
            result=result,
            result_meta=meta,
            result_complete=meta["complete"],
            min_confidence=least_confidence(meta.get("fields") or {}),
            page_count=page_count,
            reading=reading,
            error_code=None,
            error_message=None,
            finished_at=now,
            updated_at=now,
            lease_owner=None,
            lease_expires_at=None,
            run_after=None,
        )
    )
    if done.rowcount != 1:
        return None
    job = _job(conn, job_id)
    _event(conn, "job.completed", job, now, with_result=True)
    _job_ended(conn, job, now)
    return job


def fail_job(
    conn: Connection,
    *,
    job_id: str,
    owner: str,
    code: str,
    message: str,
    now: dt.datetime,
    retry_at: dt.datetime | None,
) -> Job | None:
    """RUNNING → QUEUED again at `retry_at` (PENDING, fetching its file, stays PENDING until
    then), or either → FAILED when `retry_at` is None. None if the lease is no longer ours.

    The message may quote a provider's or a document's words: without NULs and unpaired
    surrogates, which PostgreSQL and SQLite refused to store (the outcome was lost, and the
    job ran again until "the worker stopped responding")."""
    values: dict[str, Any] = {
        "error_code": code,
        "error_message": storable(message[:2000]),
        "updated_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
    }
    if retry_at is not None:
        values |= {"status": _WAITING_AGAIN, "run_after": retry_at}
    else:
        values |= {"status": JobStatus.FAILED, "finished_at": now, "run_after": None}
    done = conn.execute(jobs.update().where(_leased(owner, job_id)).values(**values))
    if done.rowcount != 1:
        return None
    job = _job(conn, job_id)
    if retry_at is None:
        _event(conn, "job.failed", job, now)
        _job_ended(conn, job, now)
    else:
        _claimable(conn)
    return job


def release_job(conn: Connection, *, job_id: str, owner: str, now: dt.datetime,
                run_after: dt.datetime | None = None) -> bool:
    """Give a running job back to the queue (a PENDING one being fetched back to PENDING),
    the attempt not counted: at shutdown, or after its attempt lost the database connection
    (then to run from `run_after`)."""
    result = conn.execute(
        jobs.update()
        .where(_leased(owner, job_id))
        .values(
            status=_WAITING_AGAIN,
            attempts=jobs.c.attempts - 1,
            run_after=run_after or now,
            updated_at=now,
            lease_owner=None,
            lease_expires_at=None,
        )
    )
    if result.rowcount != 1:
        return False
    _claimable(conn)
    return True


def reap_expired(conn: Connection, *, now: dt.datetime, max_attempts: int) -> int:
    """Jobs whose worker died: back to QUEUED (PENDING if it was fetching the file), or
    FAILED once out of attempts."""
    query = sa.select(jobs).where(jobs.c.status.in_([JobStatus.RUNNING, JobStatus.PENDING]),
                                  jobs.c.lease_expires_at < now)
    expired = [Job.from_row(row) for row in conn.execute(lock_rows(conn, query, skip_locked=True))]
    for job in expired:
        if job.attempts >= max_attempts:
            assert job.lease_owner is not None  # the query took leased jobs only
            fail_job(
                conn,
                job_id=job.id,
                owner=job.lease_owner,
                code=ErrorCode.INTERNAL_ERROR,
                message=f"The worker processing this job stopped responding {job.attempts} times",
                now=now,
                retry_at=None,
            )
        else:
            again = JobStatus.PENDING if job.status == JobStatus.PENDING else JobStatus.QUEUED
            _update(conn, job.id, now, status=again, run_after=now, lease_owner=None, lease_expires_at=None)
            _claimable(conn)
    return len(expired)


def next_lease_expiry(conn: Connection) -> dt.datetime | None:
    value = conn.execute(
        sa.select(sa.func.min(jobs.c.lease_expires_at)).where(
            jobs.c.status.in_([JobStatus.RUNNING, JobStatus.PENDING])
        )
    ).scalar()
    return None if value is None else as_utc(value)


def status_counts(conn: Connection) -> dict[str, int]:
    """Jobs by status across all users, for /metrics."""
    rows = conn.execute(sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status))
    return {str(status): int(count) for status, count in rows}


# --- batch runs -----------------------------------------------------------------------


def create_run(
    conn: Connection, *, user_id: str, schema_id: str, items: list[NewJob], now: dt.datetime
) -> tuple[JobRun, list[Job]]:
    run_id = new_id()
    conn.execute(
        job_runs.insert().values(
            id=run_id,
            user_id=user_id,
            schema_id=schema_id,
            status=RunStatus.RUNNING,
            total=len(items),
            created_at=now,
            updated_at=now,
        )
    )
    created = [
        create_job(conn, user_id=user_id, schema_id=schema_id, new=item, now=now, job_run_id=run_id) for item in items
    ]
    run = _run(conn, run_id)
    assert run is not None
    record_event(
        conn,
        user_id=user_id,
        type="job_run.created",
        data={"jobRun": run_json(run, run_counts(conn, run_id))},
        now=now,
        schema_id=schema_id,
        job_run_id=run_id,
    )
    return run, created


def get_run(conn: Connection, user_id: str, run_id: str) -> JobRun | None:
    row = conn.execute(sa.select(job_runs).where(job_runs.c.id == run_id, job_runs.c.user_id == user_id)).first()
    return None if row is None else JobRun.from_row(row)


def run_counts(conn: Connection, run_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    rows = conn.execute(
        sa.select(jobs.c.status, sa.func.count()).where(jobs.c.job_run_id == run_id).group_by(jobs.c.status)
    )
    for status, count in rows:
        counts[count_key(status)] = counts.get(count_key(status), 0) + int(count)
    return counts


def list_runs(conn: Connection, user_id: str, limit: int, cursor: str | None) -> list[JobRun]:
    query = sa.select(job_runs).where(job_runs.c.user_id == user_id).order_by(job_runs.c.id.desc()).limit(limit + 1)
    if cursor:
        query = query.where(job_runs.c.id < cursor)
    return [JobRun.from_row(row) for row in conn.execute(query)]


def cancel_run(conn: Connection, user_id: str, run_id: str, now: dt.datetime) -> JobRun:
    """Cancel the run's PENDING and QUEUED jobs (each emits job.cancelled); running ones
    finish, and the run stays RUNNING until none runs, then ends CANCELLED. Raises Missing,
    InvalidTransition."""
    if get_run(conn, user_id, run_id) is None:
        raise Missing("Job run not found")
    # The waiting jobs locked first, in id order, and the run after them: the order in which
    # every other unit of work takes them (a job's change, then its run's settlement), so a
    # cancel racing another cancel, a job's cancel or a job's end waits instead of
    # deadlocking (PostgreSQL answered 500 "deadlock detected"). Locked, a job a worker
    # claimed meanwhile is read again and is no longer waiting: it is left to finish, not
    # turned from RUNNING to CANCELLED under its worker (nor cancelled twice).
    waiting = list(conn.execute(lock_rows(conn, sa.select(jobs).where(
        jobs.c.job_run_id == run_id, jobs.c.status.in_(transitions.CANCELLABLE)).order_by(jobs.c.id))))
    run = _run(conn, run_id, lock=True)
    assert run is not None
    transitions.check_cancel_run(run)
    if run.cancel_requested_at is None:
        conn.execute(job_runs.update().where(job_runs.c.id == run_id)
                     .values(cancel_requested_at=now, updated_at=now))
    for row in waiting:
        _cancel(conn, Job.from_row(row), now)
    # The counts changed: say so now, whatever the once-a-second limit. A cancel that found
    # nothing left to cancel (a repeat, a concurrent one) changed nothing to say.
    _settle_run(conn, run_id, now, force_progress=bool(waiting))
    run = _run(conn, run_id)
    assert run is not None
    return run


def _job_ended(conn: Connection, job: Job, now: dt.datetime) -> None:
    wake_after_commit(conn, Wake.JOB_ENDED)
    if job.job_run_id:
        _settle_run(conn, job.job_run_id, now)


def _settle_run(conn: Connection, run_id: str, now: dt.datetime, *, force_progress: bool = False) -> None:
    """After a job of the run ended (or the run was cancelled): what `transitions.settle_run`
    decides, written with its events."""
    run = _run(conn, run_id, lock=True)  # two workers ending the last two jobs: one settles
    if run is None:
        return
    # Stamped after the lock: a transaction that waited for it comes later than the one it
    # waited for, and its events must not look older.
    now = max(now, utcnow())
    counts = run_counts(conn, run_id)
    settlement = transitions.settle_run(run, counts, now, force_progress=force_progress)
    if settlement.final is not None:
        conn.execute(
            job_runs.update()
            .where(job_runs.c.id == run_id)
            .values(status=settlement.final, finished_at=now, updated_at=now, progress_sent_at=now)
        )
    elif settlement.progress:
        conn.execute(job_runs.update().where(job_runs.c.id == run_id).values(progress_sent_at=now, updated_at=now))
    else:
        return
    run = _run(conn, run_id)
    assert run is not None
    data = {"jobRun": run_json(run, counts)}
    for type in ("job_run.progress", settlement.final_event):
        if type is not None:
            record_event(conn, user_id=run.user_id, type=type, data=data, now=now, schema_id=run.schema_id,
                         job_run_id=run_id)


# --- idempotency ----------------------------------------------------------------------


@dataclass(frozen=True)
class Remembered:
    request_hash: str
    resource_type: str
    resource_id: str


def find_idempotency_key(conn: Connection, user_id: str, key: str, now: dt.datetime) -> Remembered | None:
    row = conn.execute(
        sa.select(idempotency_keys).where(
            idempotency_keys.c.user_id == user_id, idempotency_keys.c.key == key, idempotency_keys.c.expires_at > now
        )
    ).first()
    return None if row is None else Remembered(row.request_hash, row.resource_type, row.resource_id)


def remember_idempotency_key(
    conn: Connection,
    *,
    user_id: str,
    key: str,
    request_hash: str,
    resource_type: str,
    resource_id: str,
    now: dt.datetime,
    ttl_s: int,
) -> None:
    """Raises IntegrityError if a live entry for the key exists (a concurrent request won)."""
    conn.execute(
        idempotency_keys.delete().where(
            idempotency_keys.c.user_id == user_id, idempotency_keys.c.key == key, idempotency_keys.c.expires_at <= now
        )
    )
    conn.execute(
        idempotency_keys.insert().values(
            user_id=user_id,
            key=key,
            request_hash=request_hash,
            resource_type=resource_type,
            resource_id=resource_id,
            created_at=now,
            expires_at=now + dt.timedelta(seconds=ttl_s),
        )
    )


def purge_idempotency_keys(conn: Connection, now: dt.datetime) -> int:
    return conn.execute(idempotency_keys.delete().where(idempotency_keys.c.expires_at <= now)).rowcount
