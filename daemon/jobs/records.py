"""Jobs and batch runs as frozen, typed records, each built from a row in one place, and
their JSON shapes (the API's and the events').

Layering: this module is pure domain, like `daemon.jobs.models` and
`daemon.jobs.transitions`: it imports no storage. The storage layer
(`daemon.storage.repos.jobs`) imports it and returns these records; the worker
pool and the routes above it read their attributes. (The pool in this folder sits
above storage; the pure modules sit below it.)
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy.engine import Row

from daemon.clock import iso
from daemon.jobs.models import JobStatus, RunStatus


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    user_id: str
    schema_id: str
    job_run_id: str | None
    type: str
    status: JobStatus
    file_name: str | None
    file_size: int | None
    mime_type: str | None
    sha256: str | None
    blob_key: str | None
    source: dict[str, Any] | None  # a remote file still to fetch (integrations)
    page_count: int | None
    attempts: int
    result: dict[str, Any] | None
    original_result: dict[str, Any] | None
    result_meta: dict[str, Any] | None
    error_message: str | None
    error_code: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    reviewed_at: dt.datetime | None
    reviewed_by: str | None
    run_after: dt.datetime | None
    lease_owner: str | None
    lease_expires_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> Job:
        values = {name: row._mapping[name] for name in _JOB_FIELDS}
        return cls(**values | {"status": JobStatus(values["status"])})

    @property
    def unfetched(self) -> bool:
        """Its file is still at an integration (a worker fetches it first)."""
        return self.blob_key is None and self.source is not None


@dataclass(frozen=True, slots=True)
class JobRun:
    id: str
    user_id: str
    schema_id: str
    status: RunStatus
    total: int
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None
    progress_sent_at: dt.datetime | None
    # Set by a cancel: the run ends CANCELLED once none of its jobs runs any more.
    cancel_requested_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> JobRun:
        values = {name: row._mapping[name] for name in _RUN_FIELDS}
        return cls(**values | {"status": RunStatus(values["status"])})


_JOB_FIELDS = tuple(f.name for f in fields(Job))
_RUN_FIELDS = tuple(f.name for f in fields(JobRun))


def version_of(row: Job) -> str:
    """The job's version as its ETag says it: its updatedAt as the API shows it (every change
    of a job is stamped after the one before, `stamped_after`)."""
    return iso(row.updated_at) or ""


def job_json(row: Job, *, with_result: bool = True) -> dict[str, Any]:
    """The job object of SPEC §6. Events carry it too (with `result` on job.completed/updated)."""
    body: dict[str, Any] = {
        "id": row.id,
        "type": row.type,
        "status": row.status,
        "schemaId": row.schema_id,
        "jobRunId": row.job_run_id,
        "fileName": row.file_name,
        "fileSize": row.file_size,
        "mimeType": row.mime_type,
        "sha256": row.sha256,
        "pageCount": row.page_count,
        "attempts": row.attempts,
        "result": row.result if with_result else None,
        "resultMeta": row.result_meta,
        "errorMessage": row.error_message,
        "errorCode": row.error_code,
        "createdAt": iso(row.created_at),
        "updatedAt": iso(row.updated_at),
        "startedAt": iso(row.started_at),
        "finishedAt": iso(row.finished_at),
        "reviewedAt": iso(row.reviewed_at),
        "reviewedBy": row.reviewed_by,
    }
    if row.original_result is not None:
        body["originalResult"] = row.original_result
    return body


def run_json(row: JobRun, counts: dict[str, int]) -> dict[str, Any]:
    """The batch-run object of SPEC §8."""
    return {
        "id": row.id,
        "status": row.status,
        "schemaId": row.schema_id,
        "total": row.total,
        "counts": {key: counts.get(key, 0) for key in ("queued", "running", "completed", "failed", "cancelled")},
        "createdAt": iso(row.created_at),
        "finishedAt": iso(row.finished_at),
    }
