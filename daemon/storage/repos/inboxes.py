"""Watched inboxes and what they took. Each function is one unit of work for
`Database.run`/`read` (or a part of one); lookups are scoped to their owner.

At most once: `record_sweep` inserts the identities of the files a sweep found into
`inbox_items` (primary key: inbox, identity) with ON CONFLICT DO NOTHING, and makes
jobs only of the rows it inserted, in the same transaction as the run, its jobs and the
inbox.swept event. A file another sweep (another process, or this one before a restart)
took is skipped by the database itself, never by a check that could race.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from daemon.errors import BadRequest, Conflict, Missing
from daemon.inboxes.models import After, Candidate, Inbox, InboxKind, inbox_json
from daemon.jobs.models import JobStatus
from daemon.storage.database import lock_rows, serialize
from daemon.storage.ids import new_id
from daemon.storage.outbox import record_event
from daemon.storage.repos.accounts import Role
from daemon.storage.repos.jobs import MAX_FILE_NAME, NewJob, create_run
from daemon.storage.tables import inbox_items, inboxes, integrations, jobs, schemas, users

# Identities per IN (...) query: well under SQLite's 32,766 bound parameters.
_CHUNK = 500


def create_inbox(conn: Connection, *, user_id: str, schema_id: str, kind: InboxKind, integration_id: str | None,
                 path: str, after: After, now: dt.datetime,
                 clashes: Callable[[list[str]], bool] | None = None) -> Inbox:
    """The new inbox. Raises BadRequest if its integration is gone (deleted since the request
    was checked), and Conflict if `clashes` says the paths of the local inboxes already there
    clash with this one: both are checked here, under locks, so that creates at once cannot
    all pass a check made before any of them inserted."""
    if integration_id is not None:
        # Kept until commit (the foreign key would otherwise fail the insert: a 500).
        kept = conn.execute(lock_rows(conn, sa.select(integrations.c.id).where(
            integrations.c.id == integration_id, integrations.c.user_id == user_id), key_share=True)).first()
        if kept is None:
            raise BadRequest(["integrationId must be the id of one of your integrations"])
    if clashes is not None:
        serialize(conn, "docex.local-inboxes")
        if clashes(list(local_inbox_paths(conn).values())):
            raise Conflict("An inbox already watches this folder, or moves its files into it (done/, failed/): "
                           "one inbox a folder, or each file would become a job once per inbox")
    inbox_id = new_id()
    conn.execute(inboxes.insert().values(
        id=inbox_id, user_id=user_id, schema_id=schema_id, kind=kind, integration_id=integration_id, path=path,
        after=after, paused=False, created_at=now, updated_at=now,
    ))
    return _inbox(conn, inbox_id)


def local_inbox_paths(conn: Connection) -> dict[str, str]:
    """The path of every user's local inbox, by inbox id (to keep to one inbox a folder)."""
    rows = conn.execute(sa.select(inboxes.c.id, inboxes.c.path).where(inboxes.c.kind == InboxKind.LOCAL))
    return {row.id: row.path for row in rows}


def _inbox(conn: Connection, inbox_id: str) -> Inbox:
    return Inbox.from_row(conn.execute(sa.select(inboxes).where(inboxes.c.id == inbox_id)).one())


def get_inbox(conn: Connection, user_id: str, inbox_id: str) -> Inbox | None:
    row = conn.execute(sa.select(inboxes).where(inboxes.c.id == inbox_id, inboxes.c.user_id == user_id)).first()
    return None if row is None else Inbox.from_row(row)


def owned_inbox(conn: Connection, user_id: str, inbox_id: str) -> Inbox:
    """The inbox, or Missing (also for another user's)."""
    inbox = get_inbox(conn, user_id, inbox_id)
    if inbox is None:
        raise Missing("Inbox not found")
    return inbox


def list_inboxes(conn: Connection, user_id: str, limit: int, cursor: str | None) -> list[Inbox]:
    query = sa.select(inboxes).where(inboxes.c.user_id == user_id).order_by(inboxes.c.id.desc()).limit(limit + 1)
    if cursor:
        query = query.where(inboxes.c.id < cursor)
    return [Inbox.from_row(row) for row in conn.execute(query)]


def set_paused(conn: Connection, user_id: str, inbox_id: str, paused: bool, now: dt.datetime) -> Inbox:
    """Pause or resume; a resumed inbox is due at once (what came in meanwhile is taken)."""
    inbox = owned_inbox(conn, user_id, inbox_id)
    values: dict[str, Any] = {"paused": paused, "updated_at": now}
    if inbox.paused and not paused:
        values["last_swept_at"] = None
    conn.execute(inboxes.update().where(inboxes.c.id == inbox_id).values(**values))
    return _inbox(conn, inbox_id)


def delete_inbox(conn: Connection, user_id: str, inbox_id: str) -> None:
    """Delete the inbox and its memory of what it took (its jobs stay). Raises Missing."""
    owned_inbox(conn, user_id, inbox_id)
    conn.execute(inboxes.delete().where(inboxes.c.id == inbox_id))


def active_inboxes(conn: Connection) -> list[Inbox]:
    """The inboxes the sweeper watches: not paused, of an account not disabled, and, for a
    local folder, of an account that is still an ADMIN (a demoted admin's folders rest)."""
    query = (
        sa.select(inboxes)
        .join(users, users.c.id == inboxes.c.user_id)
        .where(inboxes.c.paused.is_(False), users.c.disabled.is_(False),
               sa.or_(inboxes.c.kind != InboxKind.LOCAL, users.c.role == Role.ADMIN))
        .order_by(inboxes.c.id)
    )
    return [Inbox.from_row(row) for row in conn.execute(query)]


def taken_identities(conn: Connection, inbox_id: str, identities: list[str]) -> set[str]:
    """Which of `identities` the inbox already took (a hint that spares copying them: the
    arbiter is still `record_sweep`)."""
    taken: set[str] = set()
    for start in range(0, len(identities), _CHUNK):
        chunk = identities[start:start + _CHUNK]
        taken.update(conn.execute(sa.select(inbox_items.c.identity).where(
            inbox_items.c.inbox_id == inbox_id, inbox_items.c.identity.in_(chunk))).scalars())
    return taken


def adopt_identities(conn: Connection, inbox_id: str, pairs: list[tuple[str, str]]) -> None:
    """Give each file the inbox took under the first identity of a pair the second too, with
    its job, error and times."""
    for former, new in pairs:
        row = conn.execute(sa.select(inbox_items).where(
            inbox_items.c.inbox_id == inbox_id, inbox_items.c.identity == former)).mappings().first()
        if row is not None:
            _insert_identity(conn, {**row, "identity": new})


@dataclass(frozen=True)
class Found:
    """A file a sweep wants to take: made into `job`, or refused with `error` (no job)."""

    candidate: Candidate
    job: NewJob | None = None
    error: str | None = None


@dataclass(frozen=True)
class SweepOutcome:
    taken: list[Found]  # the files this sweep took (jobs made, or refused)
    lost: list[Found]  # already taken by another sweep: the caller deletes their blobs
    job_run_id: str | None


def _insert_identity(conn: Connection, values: dict[str, Any]) -> bool:
    """Insert one identity unless the inbox has it; True if this call inserted it."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    # RETURNING, not rowcount: psycopg 3 answers -1 for the rowcount of this statement.
    statement = dialect.insert(inbox_items).values(**values).on_conflict_do_nothing(
        index_elements=["inbox_id", "identity"]).returning(inbox_items.c.identity)
    return conn.execute(statement).first() is not None


def record_sweep(conn: Connection, *, inbox_id: str, found: list[Found], now: dt.datetime,
                 error: str | None = None) -> SweepOutcome:
    """Take the files of `found` no sweep took before: one batch run of jobs for those with
    a job, a memory of the refused ones, and one inbox.swept event, all or nothing; the
    inbox's lastError becomes `error` (what went wrong beside taking files) or none.

    A deleted or paused inbox, or one whose schema was deleted, takes nothing (everything
    is `lost`, so the caller deletes the blobs it copied)."""
    row = conn.execute(lock_rows(conn, sa.select(inboxes).where(inboxes.c.id == inbox_id))).first()
    inbox = None if row is None else Inbox.from_row(row)
    if inbox is None or inbox.paused:
        return SweepOutcome(taken=[], lost=list(found), job_run_id=None)
    schema_live = conn.execute(sa.select(schemas.c.id).where(
        schemas.c.id == inbox.schema_id, schemas.c.deleted_at.is_(None))).first() is not None
    if not schema_live:
        mark_swept(conn, inbox_id, now, error=f"Schema {inbox.schema_id} was deleted: the inbox takes nothing "
                   "until it is given a live schema")
        return SweepOutcome(taken=[], lost=list(found), job_run_id=None)
    taken: list[Found] = []
    lost: list[Found] = []
    for item in found:
        inserted = _insert_identity(conn, {
            "inbox_id": inbox_id, "identity": item.candidate.identity, "name": item.candidate.name[:1024],
            "error": item.error, "taken_at": now,
        })
        (taken if inserted else lost).append(item)
    with_jobs = [item for item in taken if item.job is not None]
    run_id: str | None = None
    job_ids: dict[str, str] = {}
    if with_jobs:
        run, created = create_run(conn, user_id=inbox.user_id, schema_id=inbox.schema_id,
                                  items=[item.job for item in with_jobs if item.job is not None], now=now)
        run_id = run.id
        for item, job in zip(with_jobs, created, strict=True):
            job_ids[item.candidate.identity] = job.id
            conn.execute(inbox_items.update().where(
                inbox_items.c.inbox_id == inbox_id, inbox_items.c.identity == item.candidate.identity,
            ).values(job_id=job.id))
    mark_swept(conn, inbox_id, now, error=error)
    if taken:
        record_event(conn, user_id=inbox.user_id, type="inbox.swept", now=now, schema_id=inbox.schema_id,
                     job_run_id=run_id, data={
                         "inbox": inbox_json(_inbox(conn, inbox_id)),
                         "jobRunId": run_id,
                         # Names as a job keeps them (a shared folder's 300,000-character name made
                         # an event of 300 KB, sent to every endpoint).
                         "taken": [{"name": item.candidate.name[:MAX_FILE_NAME],
                                    "jobId": job_ids[item.candidate.identity]} for item in with_jobs],
                         "refused": [{"name": item.candidate.name[:MAX_FILE_NAME], "reason": item.error}
                                     for item in taken if item.job is None],
                     })
    return SweepOutcome(taken=taken, lost=lost, job_run_id=run_id)


def mark_swept(conn: Connection, inbox_id: str, now: dt.datetime, *, error: str | None) -> None:
    """Record a sweep's time (other processes wait an interval from it) and its failure, if any."""
    conn.execute(inboxes.update().where(inboxes.c.id == inbox_id).values(
        last_swept_at=now, last_error=error[:2000] if error else None))


@dataclass(frozen=True)
class Unsettled:
    identity: str
    name: str
    job_status: JobStatus | None  # None: no job (refused, or the job was deleted)


def unsettled_items(conn: Connection, inbox_id: str, limit: int = 1000) -> list[Unsettled]:
    """Files of a local `move` inbox whose job ended (or that have none) and that were not
    moved yet."""
    query = (
        sa.select(inbox_items.c.identity, inbox_items.c.name, jobs.c.status)
        .select_from(inbox_items.outerjoin(jobs, jobs.c.id == inbox_items.c.job_id))
        .where(inbox_items.c.inbox_id == inbox_id, inbox_items.c.settled_at.is_(None),
               sa.or_(jobs.c.id.is_(None), jobs.c.status.in_(
                   [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED])))
        .limit(limit)
    )
    return [Unsettled(row.identity, row.name, None if row.status is None else JobStatus(row.status))
            for row in conn.execute(query)]


def settle_item(conn: Connection, inbox_id: str, identity: str, now: dt.datetime) -> None:
    conn.execute(inbox_items.update().where(inbox_items.c.inbox_id == inbox_id,
                                            inbox_items.c.identity == identity).values(settled_at=now))
