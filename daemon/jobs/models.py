"""Job and batch-run vocabulary: statuses, error codes, the job type, a result's completeness."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any


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


def completeness(missing: Sequence[str]) -> dict[str, Any]:
    """The resultMeta members that say whether a COMPLETED job's result is whole (SPEC §7):
    `missing`, the JSON pointers of the required values not found, and `complete`, true
    when there are none (false: the job needs a person)."""
    return {"complete": not missing, "missing": list(missing)}


def count_key(status: str) -> str:
    """Which `counts` entry a job status adds to (PENDING counts as queued)."""
    return "queued" if status == JobStatus.PENDING else status.lower()
