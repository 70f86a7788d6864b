"""Webhook vocabulary: statuses, delivery modes, body formats, the catalog's examples.

The records and their JSON shapes are `daemon.webhooks.records`.

Delivery statuses (SPEC §9)::

    PENDING ──attempt fails──▶ RETRYING ──attempt fails, attempts left──▶ RETRYING
       │                          │
       └──── 2xx ──▶ SUCCEEDED ◀──┘ 2xx
                                  └── last attempt fails ──▶ DEAD

A PENDING or RETRYING delivery is due from `next_attempt_at`; while a
dispatcher sends it, it carries a lease (`lease_owner`, `lease_expires_at`)
and keeps its status, so a crashed dispatcher's delivery is simply due again
once the lease has expired.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Final


class DeliveryStatus(StrEnum):
    PENDING = "PENDING"
    RETRYING = "RETRYING"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"


# Statuses a dispatcher may claim.
DUE_STATUSES: Final = (DeliveryStatus.PENDING, DeliveryStatus.RETRYING)


class DeliveryMode(StrEnum):
    AUTOMATIC = "AUTOMATIC"
    MANUAL = "MANUAL"


class BodyFormat(StrEnum):
    JSON = "JSON"
    XML = "XML"
    FORM_URLENCODED = "FORM_URLENCODED"

    @property
    def content_type(self) -> str:
        return _CONTENT_TYPES[self]


_CONTENT_TYPES = {
    BodyFormat.JSON: "application/json",
    BodyFormat.XML: "application/xml",
    BodyFormat.FORM_URLENCODED: "application/x-www-form-urlencoded",
}

# Types that only ever go to one endpoint, on request: never routed by patterns.
PING = "webhook.ping"
SEND = "webhook.send"
# Manual sends may not impersonate the lifecycle events docex emits itself.
RESERVED_PREFIXES: Final = ("job.", "job_run.")

MAX_CUSTOM_HEADERS = 20
# A custom header whose name says it carries a credential is shown with this in place of
# its value, which only deliveries read. Sent back in a PATCH for a header the endpoint
# has, it keeps the stored value: the console sends an endpoint's headers back whole.
MASKED_HEADER_VALUE = "********"
_CREDENTIAL_NAME = re.compile(r"auth|cookie|token|secret|passw|key|credential|session|signature", re.IGNORECASE)


def is_credential_header(name: str) -> bool:
    return _CREDENTIAL_NAME.search(name) is not None


RESPONSE_BODY_MAX_BYTES = 1024


# --- the event catalog's examples -----------------------------------------------------

_JOB_ID = "01jd3m5k8w2x7y9z0a1b2c3d4e"
_SCHEMA_ID = "01jd3m4f6q8r0s2t4v6w8x0y2z"
_RUN_ID = "01jd3m5k8v0a2b4c6d8e0f2g4h"
_AT = "2026-01-15T09:30:00.000Z"


def _job(status: str, *, result: bool = False, **changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": _JOB_ID, "type": "EXTRACTION", "status": status, "schemaId": _SCHEMA_ID, "jobRunId": None,
        "fileName": "invoice-2026-001.pdf", "fileSize": 48213, "mimeType": "application/pdf",
        "sha256": "9f2c4a0e5b7d1c3e8f6a4b2d0c9e7f5a3b1d9c7e5f3a1b9d7c5e3f1a9b7d5c3e", "pageCount": None,
        "attempts": 0, "result": None, "resultMeta": None, "errorMessage": None, "errorCode": None,
        "createdAt": _AT, "updatedAt": _AT, "startedAt": None, "finishedAt": None,
        "reviewedAt": None, "reviewedBy": None,
    }
    if result:
        job |= {
            "pageCount": 1,
            "attempts": 1,
            "result": {"invoiceNumber": "2026-001", "total": 1234.56},
            "resultMeta": {
                "provider": "rules", "model": None, "durationMs": 412,
                "fields": {"/invoiceNumber": {"confidence": 0.97, "page": 1, "text": "2026-001"},
                           "/total": {"confidence": 0.93, "page": 1, "text": "$1,234.56"}},
                "complete": True, "missing": [],
            },
            "startedAt": "2026-01-15T09:30:00.120Z", "finishedAt": "2026-01-15T09:30:00.540Z",
            "updatedAt": "2026-01-15T09:30:00.540Z",
        }
    return job | changes


def _run(status: str, **counts: int) -> dict[str, Any]:
    full = {"queued": 0, "running": 0, "completed": 0, "failed": 0, "cancelled": 0} | counts
    return {"id": _RUN_ID, "status": status, "schemaId": _SCHEMA_ID, "total": 3, "counts": full,
            "createdAt": _AT, "finishedAt": None if status == "RUNNING" else "2026-01-15T09:31:12.004Z"}


EXAMPLES: Final[dict[str, dict[str, Any]]] = {
    "job.queued": {"job": _job("QUEUED")},
    "job.started": {"job": _job("RUNNING", attempts=1, startedAt="2026-01-15T09:30:00.120Z")},
    "job.completed": {"job": _job("COMPLETED", result=True)},
    "job.failed": {"job": _job("FAILED", attempts=3, errorCode="CORRUPTED_FILE",
                               errorMessage="The PDF cannot be read: no trailer found",
                               startedAt="2026-01-15T09:30:00.120Z", finishedAt="2026-01-15T09:30:02.310Z")},
    "job.cancelled": {"job": _job("CANCELLED", finishedAt="2026-01-15T09:30:05.000Z")},
    "job.updated": {"job": _job("COMPLETED", result=True)
                    | {"result": {"invoiceNumber": "2026-001", "total": 1243.56},
                       "originalResult": {"invoiceNumber": "2026-001", "total": 1234.56}}},
    "job_run.created": {"jobRun": _run("RUNNING", queued=3)},
    "job_run.progress": {"jobRun": _run("RUNNING", queued=1, running=1, completed=1)},
    "job_run.completed": {"jobRun": _run("COMPLETED", completed=3)},
    "job_run.failed": {"jobRun": _run("FAILED", completed=2, failed=1)},
    "inbox.swept": {
        "inbox": {"id": "01jd3m6b2c4d6e8f0g2h4j6k8m", "kind": "local", "schemaId": _SCHEMA_ID, "integrationId": None,
                  "path": "scans/invoices", "prefix": None, "folderId": None, "after": "move", "paused": False,
                  "createdAt": _AT, "updatedAt": _AT, "lastSweptAt": "2026-01-15T09:30:00.000Z", "lastError": None},
        "jobRunId": _RUN_ID,
        "taken": [{"name": "invoice-2026-001.pdf", "jobId": _JOB_ID}],
        "refused": [{"name": "notes.odt", "reason": "Unsupported file type: notes.odt (accepted: PDF, PNG, JPEG, "
                                                    "TIFF, WEBP, DOCX, XLSX, CSV, TXT, HTML)"}],
    },
    PING: {"endpointId": "01jd3m2a4c6e8g0j2m4p6r8t0v", "message": "ping"},
    SEND: {"orderId": "A-1001", "note": "whatever the sender gave as data"},
}
