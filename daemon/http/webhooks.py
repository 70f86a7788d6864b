"""/api/webhooks: endpoints, secrets, test and manual sends, the delivery log, replays,
and the event catalog (seed §4, §6; SPEC §9).

Settings are checked against the configuration in force at the time of the
request (``webhooks.allow_http``, ``webhooks.allow_private_networks``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import ConfigDict, Field, StrictBool, field_validator
from quart import Blueprint
from quart_schema import document_response, tag_blueprint, validate_querystring, validate_request
from quart_trio.wrappers.response import TrioResponse as Response
from sqlalchemy.engine import Connection

from daemon.auth.guard import current_principal
from daemon.clock import utcnow
from daemon.config import WebhooksConfig
from daemon.crypto import SealError
from daemon.errors import ApiError, BadRequest
from daemon.events import CATALOG
from daemon.http.context import no_content, services
from daemon.http.models import ApiModel, IsoDateTime
from daemon.http.openapi import NoContent, error_responses
from daemon.http.pagination import PageQuery, page
from daemon.http.validation import in_utc
from daemon.storage.ids import new_id
from daemon.storage.repos import webhooks as repo
from daemon.webhooks.keys import open_headers, seal_headers, seal_secret
from daemon.webhooks.models import (
    EXAMPLES,
    PING,
    RESERVED_PREFIXES,
    SEND,
    BodyFormat,
    DeliveryMode,
    DeliveryStatus,
)
from daemon.webhooks.records import Delivery, WebhookEndpoint, attempt_json, delivery_json, endpoint_json
from daemon.webhooks.signing import new_signing_secret
from daemon.webhooks.validation import (
    MAX_URL_LENGTH,
    events_problems,
    header_problems,
    url_problems,
    with_kept_values,
)

blueprint = Blueprint("webhooks", __name__, url_prefix="/api/webhooks")
tag_blueprint(blueprint, ["webhooks"])

MAX_PATTERNS = 50
# One recovery is one transaction; a longer outage is recovered by calling again (hasMore).
MAX_RECOVER = 1000
_TYPE_PATTERN = r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$"


# --- request and response models -------------------------------------------------------


class CreateEndpointBody(ApiModel):
    """`events` is required (non-empty) for AUTOMATIC endpoints; MANUAL ones receive only manual sends."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=MAX_URL_LENGTH)
    description: str | None = Field(default=None, max_length=500)
    deliveryMode: DeliveryMode = DeliveryMode.AUTOMATIC
    events: list[str] = Field(default_factory=list, max_length=MAX_PATTERNS)
    bodyFormat: BodyFormat = BodyFormat.JSON
    customHeaders: dict[str, str] = Field(default_factory=dict)


class UpdateEndpointBody(ApiModel):
    """Only the keys given change; `description: null` clears the description, null for the
    others changes nothing. `enabled: true` re-enables and resets consecutiveDeadDeliveries."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, min_length=1, max_length=MAX_URL_LENGTH)
    description: str | None = Field(default=None, max_length=500)
    deliveryMode: DeliveryMode | None = None
    events: list[str] | None = Field(default=None, max_length=MAX_PATTERNS)
    bodyFormat: BodyFormat | None = None
    customHeaders: dict[str, str] | None = Field(
        default=None, description='the whole set; "********" for a credential header keeps its stored value')
    enabled: StrictBool | None = None


class SendBody(ApiModel):
    """A manual event: `data` as the receiver should get it; `type` defaults to webhook.send."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(default=SEND, min_length=1, max_length=40, pattern=_TYPE_PATTERN)
    data: dict[str, Any]

    @field_validator("type")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.startswith(RESERVED_PREFIXES):
            raise ValueError("type must not be a job or job_run event type (docex sends those itself)")
        if value == PING:
            raise ValueError("type webhook.ping is reserved for POST /api/webhooks/:id/test")
        return value


class RecoverBody(ApiModel):
    model_config = ConfigDict(extra="forbid")

    since: IsoDateTime = Field(description="replay the DEAD deliveries created at or after this time "
                                           "(ISO 8601; without a zone, UTC)")

    @field_validator("since")
    @classmethod
    def _in_utc_range(cls, value: dt.datetime) -> dt.datetime:
        # Compared in UTC by the query: 9999-12-31T23:59:59-23:59 has no such time (a 500).
        return value if value.tzinfo is None else in_utc(value, "since")


class DeliveryQuery(PageQuery):
    status: DeliveryStatus | None = None
    eventType: str | None = Field(default=None, max_length=40)


class EndpointOut(ApiModel):
    id: str
    url: str
    description: str | None
    deliveryMode: DeliveryMode
    events: list[str]
    bodyFormat: BodyFormat
    customHeaders: dict[str, str] = Field(
        description='the value of a header whose name says it carries a credential is "********"')
    enabled: bool
    disabledReason: str | None
    consecutiveDeadDeliveries: int
    schemaIds: list[str]
    createdAt: str
    updatedAt: str


class EndpointCreatedOut(EndpointOut):
    signingSecret: str = Field(description="shown once: whsec_ + 32 random bytes in base64; the HMAC key as is")


class EndpointPage(ApiModel):
    data: list[EndpointOut]
    nextCursor: str | None


class SecretOut(ApiModel):
    signingSecret: str


class DeliveryOut(ApiModel):
    id: str
    endpointId: str
    eventId: str
    eventType: str
    status: DeliveryStatus
    attempts: int
    nextAttemptAt: str | None
    lastAttemptAt: str | None
    lastStatusCode: int | None
    lastError: str | None
    createdAt: str


class AttemptOut(ApiModel):
    at: str
    durationMs: int
    statusCode: int | None
    error: str | None
    responseBody: str | None = Field(description="the start of the answer, at most 1 KiB")


class DeliveryDetailOut(DeliveryOut):
    attemptLog: list[AttemptOut] = Field(description="every attempt, oldest first")


class RecoveredOut(ApiModel):
    recovered: int = Field(description="how many DEAD deliveries were replayed by this call")
    deliveries: list[DeliveryOut] = Field(description="the new deliveries, in the order of the originals")
    hasMore: bool = Field(description=f"more than {MAX_RECOVER} were due: call again to replay the rest")


class DeliveryPage(ApiModel):
    data: list[DeliveryOut]
    nextCursor: str | None


class CatalogEntry(ApiModel):
    type: str
    description: str
    example: dict[str, Any] = Field(description="an example of the event's data")


class Catalog(ApiModel):
    data: list[CatalogEntry]
    nextCursor: str | None


# --- helpers -----------------------------------------------------------------------------


def _settings_problems(config: WebhooksConfig, *, url: str | None, mode: str | None, events: list[str] | None,
                       headers: dict[str, str] | None) -> list[str]:
    """Problems with the settings given (None: not being changed)."""
    problems: list[str] = []
    if url is not None:
        problems += url_problems(url, allow_http=config.allow_http, allow_private=config.allow_private_networks)
    if mode is not None and events is not None:
        problems += events_problems(events, mode, CATALOG)
    if headers is not None:
        problems += header_problems(headers)
    return problems


def _headers(config: WebhooksConfig, row: WebhookEndpoint) -> dict[str, str]:
    try:
        return open_headers(config, row.id, row.custom_headers_sealed)
    except SealError:
        raise ApiError("the endpoint's custom headers do not open with WEBHOOK_ENCRYPTION_KEY "
                       "(was the key changed?)") from None


def _shown(config: WebhooksConfig, row: WebhookEndpoint, schema_ids: list[str]) -> dict[str, Any]:
    return endpoint_json(row, schema_ids, _headers(config, row))


async def _endpoint_body(endpoint_id: str) -> dict[str, Any]:
    user_id = current_principal().user_id
    config = services().config.webhooks

    def load(conn: Connection) -> dict[str, Any]:
        row = repo.owned_endpoint(conn, user_id, endpoint_id)
        return _shown(config, row, repo.bound_schemas(conn, user_id, [row.id])[row.id])

    return await services().db.read(load)


def _delivered(row: Delivery) -> tuple[dict[str, Any], int]:
    return delivery_json(row), 202


# --- routes ------------------------------------------------------------------------------


@blueprint.get("/event-catalog")
@document_response(Catalog)
async def event_catalog() -> dict[str, Any]:
    """Every event type, with a description and an example of its `data`."""
    return {
        "data": [{"type": t, "description": d, "example": EXAMPLES[t]} for t, d in CATALOG.items()],
        "nextCursor": None,
    }


@blueprint.post("")
@validate_request(CreateEndpointBody)
@document_response(EndpointCreatedOut, 201)
@error_responses(409)
async def create_endpoint(data: CreateEndpointBody) -> tuple[dict[str, Any], int]:
    """Register an endpoint; the answer carries its `signingSecret`, shown only here and on rotation."""
    config = services().config.webhooks
    headers, problems = with_kept_values(data.customHeaders, {})
    problems += _settings_problems(config, url=data.url, mode=data.deliveryMode, events=data.events,
                                   headers=headers)
    if problems:
        raise BadRequest(problems)
    endpoint_id = new_id()
    secret = new_signing_secret()
    row = await services().db.run(
        repo.create_endpoint, endpoint_id=endpoint_id, user_id=current_principal().user_id, url=data.url,
        description=data.description, delivery_mode=data.deliveryMode, events=data.events,
        body_format=data.bodyFormat, custom_headers_sealed=seal_headers(config, endpoint_id, headers),
        secret_sealed=seal_secret(config, endpoint_id, secret), now=utcnow(),
        max_endpoints=config.max_endpoints_per_user,
    )
    return endpoint_json(row, [], headers) | {"signingSecret": secret}, 201


@blueprint.get("")
@validate_querystring(PageQuery)
@document_response(EndpointPage)
async def list_endpoints(query_args: PageQuery) -> dict[str, Any]:
    """The caller's endpoints, newest first."""
    user_id = current_principal().user_id
    config = services().config.webhooks

    def load(conn: Connection) -> dict[str, Any]:
        rows = repo.list_endpoints(conn, user_id, query_args.limit, query_args.cursor)
        bound = repo.bound_schemas(conn, user_id, [row.id for row in rows])
        return page(rows, query_args.limit, lambda row: _shown(config, row, bound[row.id]))

    return await services().db.read(load)


@blueprint.get("/<endpoint_id>")
@document_response(EndpointOut)
async def get_endpoint(endpoint_id: str) -> dict[str, Any]:
    return await _endpoint_body(endpoint_id)


@blueprint.patch("/<endpoint_id>")
@validate_request(UpdateEndpointBody)
@document_response(EndpointOut)
async def update_endpoint(endpoint_id: str, data: UpdateEndpointBody) -> dict[str, Any]:
    """Change settings; `{"enabled": true}` re-enables a disabled endpoint and resets its dead counter."""
    user_id = current_principal().user_id
    given = data.model_dump(exclude_unset=True)
    changes: dict[str, Any] = {}
    for field, column in (("url", "url"), ("deliveryMode", "delivery_mode"), ("events", "events"),
                          ("bodyFormat", "body_format"), ("enabled", "enabled")):
        if given.get(field) is not None:
            changes[column] = given[field]
    if "description" in given:
        changes["description"] = given["description"]
    config = services().config.webhooks

    def unit(conn: Connection) -> dict[str, Any]:
        current = repo.owned_endpoint(conn, user_id, endpoint_id, lock=True)
        mode_or_events = "delivery_mode" in changes or "events" in changes
        headers: dict[str, str] | None = None
        problems: list[str] = []
        if given.get("customHeaders") is not None:
            headers, problems = with_kept_values(given["customHeaders"], _headers(config, current))
        problems += _settings_problems(
            config,
            url=changes.get("url"),
            mode=changes.get("delivery_mode", current.delivery_mode) if mode_or_events else None,
            events=changes.get("events", list(current.events)) if mode_or_events else None,
            headers=headers,
        )
        if problems:
            raise BadRequest(problems)
        if headers is not None:
            changes["custom_headers_sealed"] = seal_headers(config, endpoint_id, headers)
        row = repo.update_endpoint(conn, user_id, endpoint_id, changes, utcnow())
        return _shown(config, row, repo.bound_schemas(conn, user_id, [row.id])[row.id])

    return await services().db.run(unit)


@blueprint.delete("/<endpoint_id>")
@document_response(NoContent, 204)
async def delete_endpoint(endpoint_id: str) -> Response:
    """Delete the endpoint and its deliveries (pending ones are never sent); unbind it from schemas."""
    await services().db.run(repo.delete_endpoint, current_principal().user_id, endpoint_id)
    return no_content()


@blueprint.post("/<endpoint_id>/rotate-secret")
@document_response(SecretOut)
async def rotate_secret(endpoint_id: str) -> dict[str, Any]:
    """A new signing secret, shown once. For `webhooks.secret_rotation_overlap` (24 h) deliveries
    carry a second v1 signature made with the previous secret."""
    config = services().config.webhooks
    user_id = current_principal().user_id
    secret = new_signing_secret()

    def unit(conn: Connection) -> None:
        # Looked up first: the secret is sealed to the stored id, never to whatever the path says.
        endpoint = repo.owned_endpoint(conn, user_id, endpoint_id)
        repo.rotate_secret(conn, user_id, endpoint.id, new_sealed=seal_secret(config, endpoint.id, secret),
                           now=utcnow(), overlap_s=config.secret_rotation_overlap_s)

    await services().db.run(unit)
    return {"signingSecret": secret}


@blueprint.post("/<endpoint_id>/test")
@document_response(DeliveryOut, 202)
@error_responses(409)
async def test_endpoint(endpoint_id: str) -> tuple[dict[str, Any], int]:
    """Send a webhook.ping to this endpoint (retried like any delivery); 409 if it is disabled."""
    row = await services().db.run(
        repo.send_event, current_principal().user_id, endpoint_id, type=PING,
        data={"endpointId": endpoint_id, "message": "ping"}, now=utcnow(),
    )
    return _delivered(row)


@blueprint.post("/<endpoint_id>/send")
@validate_request(SendBody)
@document_response(DeliveryOut, 202)
@error_responses(409)
async def send(endpoint_id: str, data: SendBody) -> tuple[dict[str, Any], int]:
    """Send `data` now as an event of `type` (webhook.send by default) to this endpoint, in either
    delivery mode; 409 if it is disabled."""
    row = await services().db.run(
        repo.send_event, current_principal().user_id, endpoint_id, type=data.type, data=data.data, now=utcnow(),
    )
    return _delivered(row)


@blueprint.get("/<endpoint_id>/deliveries")
@validate_querystring(DeliveryQuery)
@document_response(DeliveryPage)
async def list_deliveries(endpoint_id: str, query_args: DeliveryQuery) -> dict[str, Any]:
    """The endpoint's delivery log, newest first, by status (e.g. DEAD) and event type."""
    rows = await services().db.read(
        repo.list_deliveries, current_principal().user_id, endpoint_id,
        repo.DeliveryFilter(status=query_args.status, event_type=query_args.eventType),
        query_args.limit, query_args.cursor,
    )
    return page(rows, query_args.limit, delivery_json)


@blueprint.get("/deliveries/<delivery_id>")
@document_response(DeliveryDetailOut)
async def get_delivery(delivery_id: str) -> dict[str, Any]:
    """One delivery with every attempt (`attemptLog`: time, duration, status code, error, 1 KiB of answer)."""
    user_id = current_principal().user_id

    def load(conn: Connection) -> dict[str, Any]:
        row = repo.owned_delivery(conn, user_id, delivery_id)
        return delivery_json(row) | {"attemptLog": [attempt_json(a) for a in repo.list_attempts(conn, row.id)]}

    return await services().db.read(load)


@blueprint.post("/deliveries/<delivery_id>/replay")
@document_response(DeliveryOut, 202)
async def replay(delivery_id: str) -> tuple[dict[str, Any], int]:
    """Deliver the same event again as a new delivery (same envelope id, new X-Webhook-Id), whatever
    the original's status. A disabled endpoint's replay waits until it is enabled again."""
    row = await services().db.run(repo.replay, current_principal().user_id, delivery_id, utcnow())
    return _delivered(row)


@blueprint.post("/<endpoint_id>/recover")
@validate_request(RecoverBody)
@document_response(RecoveredOut, 202)
async def recover(endpoint_id: str, data: RecoverBody) -> tuple[dict[str, Any], int]:
    """Replay every failed (DEAD) delivery of this endpoint since a time, oldest first, as new
    deliveries: after an outage of the receiver, one call sends again what it missed. A DEAD
    delivery whose event was delivered to the endpoint again since (a replay, an earlier
    recovery) is skipped, so each failed event is replayed once however often this is called."""
    since = data.since if data.since.tzinfo is not None else data.since.replace(tzinfo=dt.UTC)
    rows, more = await services().db.run(
        repo.recover, current_principal().user_id, endpoint_id, since, utcnow(), MAX_RECOVER)
    return {"recovered": len(rows), "deliveries": [delivery_json(row) for row in rows], "hasMore": more}, 202
