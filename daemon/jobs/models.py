"""Job and batch-run vocabulary, and their JSON shapes (the API's and the events')."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from daemon.clock import iso


class JobStatus(StrEnum):
    PENDING = "PENDING"  # waiting for its file from an integration
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def ended(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


class RunStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class ErrorCode(StrEnum):
    UNSUPPORTED_FILE = "UNSUPPORTED_FILE"
    CORRUPTED_FILE = "CORRUPTED_FILE"
    SCHEMA_NOT_FOUND = "SCHEMA_NOT_FOUND"
    PARSE_FAILED = "PARSE_FAILED"
    OCR_FAILED = "OCR_FAILED"
    AI_PROVIDER_TIMEOUT = "AI_PROVIDER_TIMEOUT"
    AI_PROVIDER_RATE_LIMIT = "AI_PROVIDER_RATE_LIMIT"
    AI_PROVIDER_ERROR = "AI_PROVIDER_ERROR"
    RESULT_INVALID = "RESULT_INVALID"
    INTEGRATION_AUTH_EXPIRED = "INTEGRATION_AUTH_EXPIRED"
    INTEGRATION_PERMISSION_DENIED = "INTEGRATION_PERMISSION_DENIED"
    INTEGRATION_ACCESS_DENIED = "INTEGRATION_ACCESS_DENIED"
    REMOTE_FILE_NOT_FOUND = "REMOTE_FILE_NOT_FOUND"
    TOO_MANY_PAGES = "TOO_MANY_PAGES"
    # Limits on a parse (hardening issue, SPEC §13): each names its extraction.* setting.
    DOCUMENT_TOO_LARGE = "DOCUMENT_TOO_LARGE"
    PARSE_TIMEOUT = "PARSE_TIMEOUT"
    PARSE_OUT_OF_MEMORY = "PARSE_OUT_OF_MEMORY"
    INTERNAL_ERROR = "INTERNAL_ERROR"


JOB_TYPE_EXTRACTION = "EXTRACTION"


def job_json(row: Any, *, with_result: bool = True) -> dict[str, Any]:
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
    }
    if row.original_result is not None:
        body["originalResult"] = row.original_result
    return body


def run_json(row: Any, counts: dict[str, int]) -> dict[str, Any]:
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


def count_key(status: str) -> str:
    """Which `counts` entry a job status adds to (PENDING counts as queued)."""
    return "queued" if status == JobStatus.PENDING else status.lower()
