"""Webhook endpoints, deliveries and their attempts as frozen, typed records, each built
from a row in one place, and their JSON shapes (SPEC §9).

Layering: this module is pure domain, like `daemon.webhooks.models` and
`daemon.jobs.records`: it imports no storage. The storage layer
(`daemon.storage.repos.webhooks`) imports it and returns these records; the
dispatcher and the routes above it read their attributes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy.engine import Row

from daemon.clock import iso
from daemon.webhooks.models import (
    MASKED_HEADER_VALUE,
    BodyFormat,
    DeliveryMode,
    DeliveryStatus,
    is_credential_header,
)

# A row of any number of columns (a claim selects from three tables).
AnyRow = Row[*tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    id: str
    user_id: str
    url: str
    description: str | None
    delivery_mode: DeliveryMode
    events: tuple[str, ...]
    body_format: BodyFormat
    # Sealed (AES-256-GCM, daemon.webhooks.keys); kept out of reprs all the same.
    custom_headers_sealed: bytes | None = field(repr=False)
    secret_sealed: bytes = field(repr=False)
    previous_secret_sealed: bytes | None = field(repr=False)
    previous_secret_expires_at: dt.datetime | None
    enabled: bool
    disabled_reason: str | None
    consecutive_dead_deliveries: int
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def from_row(cls, row: AnyRow) -> WebhookEndpoint:
        values = _values(row, _ENDPOINT_FIELDS)
        return cls(**values | {
            "delivery_mode": DeliveryMode(values["delivery_mode"]),
            "events": tuple(values["events"]),
            "body_format": BodyFormat(values["body_format"]),
            "enabled": bool(values["enabled"]),
        })


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    endpoint_id: str
    event_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: dt.datetime | None
    last_attempt_at: dt.datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: dt.datetime
    lease_owner: str | None
    lease_expires_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: AnyRow) -> Delivery:
        values = _values(row, _DELIVERY_FIELDS)
        return cls(**values | {"status": DeliveryStatus(values["status"])})


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    id: str
    delivery_id: str
    attempted_at: dt.datetime
    duration_ms: int
    status_code: int | None
    error: str | None
    response_body: str | None  # the first 1 KiB of the answer

    @classmethod
    def from_row(cls, row: AnyRow) -> DeliveryAttempt:
        return cls(**_values(row, _ATTEMPT_FIELDS))


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery leased to a dispatcher, with what one attempt needs: its endpoint's
    settings and sealed secrets, and its event."""

    id: str
    endpoint_id: str
    user_id: str
    event_id: str
    event_type: str
    attempts: int
    created_at: dt.datetime
    url: str
    body_format: BodyFormat
    custom_headers_sealed: bytes | None = field(repr=False)
    secret_sealed: bytes = field(repr=False)
    previous_secret_sealed: bytes | None = field(repr=False)
    previous_secret_expires_at: dt.datetime | None
    data: dict[str, Any]
    occurred_at: dt.datetime

    @classmethod
    def from_row(cls, row: AnyRow) -> ClaimedDelivery:
        values = _values(row, _CLAIMED_FIELDS)
        return cls(**values | {"body_format": BodyFormat(values["body_format"])})

    def previous_secret_signs(self, now_s: float) -> bool:
        """The previous secret (after a rotation) still signs at `now_s` (a Unix time)."""
        return (self.previous_secret_sealed is not None and self.previous_secret_expires_at is not None
                and self.previous_secret_expires_at.timestamp() > now_s)


def _values(row: AnyRow, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: row._mapping[name] for name in names}


_ENDPOINT_FIELDS = tuple(f.name for f in fields(WebhookEndpoint))
_DELIVERY_FIELDS = tuple(f.name for f in fields(Delivery))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(DeliveryAttempt))
_CLAIMED_FIELDS = tuple(f.name for f in fields(ClaimedDelivery))


def endpoint_json(row: WebhookEndpoint, schema_ids: list[str], headers: dict[str, str]) -> dict[str, Any]:
    """The endpoint object of SPEC §9, given its opened custom `headers`: never the secret
    (create and rotate add it), nor the value of a header that carries a credential."""
    return {
        "id": row.id,
        "url": row.url,
        "description": row.description,
        "deliveryMode": row.delivery_mode,
        "events": list(row.events),
        "bodyFormat": row.body_format,
        "customHeaders": {name: MASKED_HEADER_VALUE if is_credential_header(name) else value
                          for name, value in headers.items()},
        "enabled": row.enabled,
        "disabledReason": row.disabled_reason,
        "consecutiveDeadDeliveries": row.consecutive_dead_deliveries,
        "schemaIds": schema_ids,
        "createdAt": iso(row.created_at),
        "updatedAt": iso(row.updated_at),
    }


def delivery_json(row: Delivery) -> dict[str, Any]:
    """The delivery object of SPEC §9."""
    return {
        "id": row.id,
        "endpointId": row.endpoint_id,
        "eventId": row.event_id,
        "eventType": row.event_type,
        "status": row.status,
        "attempts": row.attempts,
        "nextAttemptAt": iso(row.next_attempt_at),
        "lastAttemptAt": iso(row.last_attempt_at),
        "lastStatusCode": row.last_status_code,
        "lastError": row.last_error,
        "createdAt": iso(row.created_at),
    }


def attempt_json(row: DeliveryAttempt) -> dict[str, Any]:
    """One attempt of a delivery, as the delivery detail lists it."""
    return {
        "at": iso(row.attempted_at),
        "durationMs": row.duration_ms,
        "statusCode": row.status_code,
        "error": row.error,
        "responseBody": row.response_body,
    }
