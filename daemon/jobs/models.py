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


def least_confidence(fields: dict[str, Any], result: dict[str, Any] | None = None,
                     extracted: dict[str, Any] | None = None) -> float:
    """The lowest confidence among a result's values (resultMeta.fields), for the review queue.

    A value a person changed (it differs in `result` from `extracted`, the result as the
    provider gave it) is certain. A result without any evidence has no confidence: 0.
    """
    if not fields:
        return 0.0
    changed = result is not None and extracted is not None
    return min((1.0 if changed and _at(result, pointer) != _at(extracted, pointer)
                else float(evidence.get("confidence", 0.0)))
               for pointer, evidence in fields.items())


def _at(document: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901), or None where there is none."""
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(document, dict):
            document = document.get(token)
        elif isinstance(document, list) and token.isdigit() and int(token) < len(document):
            document = document[int(token)]
        else:
            return None
    return document


def count_key(status: str) -> str:
    """Which `counts` entry a job status adds to (PENDING counts as queued)."""
    return "queued" if status == JobStatus.PENDING else status.lower()
