"""Watched inboxes as values: kinds, the record, its JSON, a file's identity, and the pure
decisions of a sweep (what is new, when the next sweep is due, where a local file goes).

Pure domain: no storage, no I/O. `daemon.storage.repos.inboxes` builds on it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import Row

from daemon.clock import iso
from daemon.jobs.models import JobStatus


class InboxKind(StrEnum):
    LOCAL = "local"
    S3 = "s3"
    GOOGLE_DRIVE = "google-drive"


class After(StrEnum):
    """What becomes of a local file once its job ended."""

    MOVE = "move"  # into done/ (COMPLETED) or failed/ (FAILED, CANCELLED, refused) beside it
    KEEP = "keep"  # left where it is (its identity keeps it from being taken again)


DONE_DIR = "done"
FAILED_DIR = "failed"


@dataclass(frozen=True, slots=True)
class Inbox:
    id: str
    user_id: str
    schema_id: str
    kind: InboxKind
    integration_id: str | None
    path: str  # local: folder under inboxes.local_root; s3: key prefix; google-drive: folder id
    after: After
    paused: bool
    created_at: dt.datetime
    updated_at: dt.datetime
    last_swept_at: dt.datetime | None
    last_error: str | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> Inbox:
        values = {name: row._mapping[name] for name in _INBOX_FIELDS}
        return cls(**values | {"kind": InboxKind(values["kind"]), "after": After(values["after"])})


_INBOX_FIELDS = tuple(f.name for f in fields(Inbox))


def inbox_json(inbox: Inbox) -> dict[str, Any]:
    """The API's and the events' shape of an inbox: where it looks is `path` (local),
    `prefix` (s3) or `folderId` (google-drive), the other two null."""
    return {
        "id": inbox.id,
        "kind": str(inbox.kind),
        "schemaId": inbox.schema_id,
        "integrationId": inbox.integration_id,
        "path": inbox.path if inbox.kind == InboxKind.LOCAL else None,
        "prefix": inbox.path if inbox.kind == InboxKind.S3 else None,
        "folderId": inbox.path if inbox.kind == InboxKind.GOOGLE_DRIVE else None,
        "after": str(inbox.after),
        "paused": inbox.paused,
        "createdAt": iso(inbox.created_at),
        "updatedAt": iso(inbox.updated_at),
        "lastSweptAt": iso(inbox.last_swept_at) if inbox.last_swept_at else None,
        "lastError": inbox.last_error,
    }


def identity(*parts: object) -> str:
    """A file's identity as stored: the sha256 of its parts (local: path, size, mtime;
    S3: key, ETag; Drive: file id, head revision or version). A file changed in place is a
    new file."""
    return hashlib.sha256("\0".join(str(part) for part in parts).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file a sweep found: its identity, its name (relative to the inbox) and how to
    make it a job (a local path to copy, or a remote `source`)."""

    identity: str
    name: str
    size: int | None = None
    local_path: str | None = None
    source: dict[str, Any] | None = None
    # Its identity as earlier releases made it, where that differs (`RemoteEntry.former_version`).
    formerly: str | None = None


def untaken(found: list[Candidate], taken: set[str]) -> list[Candidate]:
    """The files of `found` not taken yet, each identity once, in the order found."""
    seen = set(taken)
    fresh = []
    for candidate in found:
        if candidate.identity not in seen:
            seen.add(candidate.identity)
            fresh.append(candidate)
    return fresh


def next_sweep_at(last_swept_at: dt.datetime | None, interval_s: float, now: dt.datetime) -> dt.datetime:
    """When an inbox is due again: `interval_s` after its last sweep (by any process), at
    once if never swept."""
    if last_swept_at is None:
        return now
    return last_swept_at + dt.timedelta(seconds=interval_s)


def settled_folder(job_status: str | None) -> str | None:
    """Where a taken local file goes beside it once its job ended (None: not ended yet).
    A file refused without a job (`job_status` None) is settled by the sweep itself."""
    if job_status == JobStatus.COMPLETED:
        return DONE_DIR
    if job_status in (JobStatus.FAILED, JobStatus.CANCELLED):
        return FAILED_DIR
    return None
