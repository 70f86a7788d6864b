"""The OpenAPI document served at /api/openapi.json, complete enough to generate a client from.

quart-schema documents what the routes declare (request models, `document_response`);
this provider adds what every operation shares, in one place:

- the SPEC §3 error model (`Error`) on each error status an operation may answer: 400 for
  a body or query, 401 for a credential, 404 for a path id, 413 for a body, 429 for the
  rate limits, 500 for any, plus what a route declares with `@error_responses(...)`;
- the security schemes (an access token or an API key, both as Bearer);
- path ids as ULIDs, request bodies in several encodings (`@request_bodies`), and
  answers that are not JSON (`NoContent` for 204, `FileBytes`, `PlainText`, `HtmlPage`);
- the `webhooks` section (OpenAPI 3.1): each event type of the catalog as the request
  docex sends a receiver, its envelope and `data` typed, with an example, so receivers
  can generate their types.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, Field
from quart_schema import OpenAPIProvider
from quart_schema.validation import DataSource
from werkzeug.routing import BaseConverter, Rule

from daemon.errors import reason_phrase
from daemon.events import CATALOG
from daemon.http.models import ApiModel
from daemon.webhooks.models import EXAMPLES

T = TypeVar("T")

ACCESS_TOKEN: list[dict[str, list[str]]] = [{"accessToken": []}]
PROTECTED: list[dict[str, list[str]]] = [{"accessToken": []}, {"apiKey": []}]
SECURITY_SCHEMES = {
    "accessToken": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                    "description": "an access token from POST /api/auth/login, /register or /refresh"},
    "apiKey": {"type": "http", "scheme": "bearer",
               "description": "an API key from POST /api/auth/api-keys, sent as a Bearer token"},
}
ERROR_REF = "#/components/schemas/Error"
ID_PATTERN = "^[0-9a-hjkmnp-tv-z]{26}$"  # daemon.storage.ids: a ULID, lower case

_PARAMETER = re.compile(r"<(?:[^:<>]*:)?([^<>]+)>")  # a rule's `<name>` or `<converter:name>`
_ERRORS = "_docex_error_responses"
_BODIES = "_docex_request_bodies"
RATE_LIMITED = "_docex_rate_limited"

_MEANINGS = {
    400: "The request is invalid: `message` lists one problem per failed rule.",
    401: "No credential, or one that is invalid, expired or revoked.",
    403: "The credential may not do this.",
    404: "No such resource (or another user's).",
    409: "The resource is not in a state that allows this.",
    413: "The body is larger than the limit.",
    429: "Too many requests: wait for the seconds in Retry-After.",
    500: "Unexpected: `message` names the request id to look for in the log.",
    502: "An upstream service failed.",
}


class ErrorOut(ApiModel):
    """The error shape of every 4xx and 5xx (SPEC §3)."""

    statusCode: int
    message: str | list[str] = Field(description="a sentence, or a list of them (validation)")
    error: str = Field(description="the HTTP reason phrase, e.g. Bad Request")
    details: Any = Field(default=None, description="machine-readable detail where a route documents one")


class RawAnswer(ApiModel):
    """A marker for `document_response`: an answer that is not JSON, described by its docstring."""

    content_type: ClassVar[str | None] = None
    schema_: ClassVar[dict[str, Any]] = {"type": "string"}


class NoContent(RawAnswer):
    """No content."""


class FileBytes(RawAnswer):
    """The file's bytes, with its own Content-Type."""

    content_type = "*/*"
    schema_: ClassVar[dict[str, Any]] = {"type": "string", "format": "binary"}


class PlainText(RawAnswer):
    """Text."""

    content_type = "text/plain"


class HtmlPage(RawAnswer):
    """A small HTML page saying what happened."""

    content_type = "text/html"


def error_responses(*statuses: int) -> Callable[[T], T]:
    """Document error statuses a route answers beyond those every route of its kind may."""

    def decorate(view: T) -> T:
        setattr(view, _ERRORS, (*getattr(view, _ERRORS, ()), *statuses))
        return view

    return decorate


def request_bodies(*, json: type[BaseModel], multipart: type[BaseModel] | None = None) -> Callable[[T], T]:
    """Document a body a route parses itself: JSON, and optionally a multipart upload."""

    def decorate(view: T) -> T:
        setattr(view, _BODIES, (json, multipart))
        return view

    return decorate


def _name_inline_models(document: dict[str, Any]) -> None:
    """Move each body and answer model quart-schema writes inline into `components` under
    its title, and refer to it there: one `JobOut` a client generator can name once, where
    inline copies (a job's 201 and its idempotent replay's 200) made openapi-python-client
    drop all but one. A title already taken by a different schema stays inline."""
    named = document["components"]["schemas"]
    for operations in document["paths"].values():
        for operation in operations.values():
            bodies = [operation.get("requestBody", {}), *operation.get("responses", {}).values()]
            for media in (m for body in bodies for m in body.get("content", {}).values()):
                schema = media.get("schema", {})
                title = schema.get("title")
                if "$ref" in schema or not title or named.get(title, schema) != schema:
                    continue
                named[title] = schema
                media["schema"] = {"$ref": f"#/components/schemas/{title}"}


EVENT_ENVELOPE: dict[str, Any] = {
    "title": "Event",
    "type": "object",
    "description": "The body of every delivery (as JSON; XML and form bodies carry the same fields).",
    "properties": {
        "id": {"type": "string", "description": "the event's id: the same on every delivery and replay of it"},
        "type": {"type": "string"},
        "data": {"type": "object"},
        "occurredAt": {"type": "string", "format": "date-time"},
    },
    "required": ["id", "type", "data", "occurredAt"],
}
# What `data` holds, by the start of the event type (SPEC §9).
_EVENT_DATA: list[tuple[str, dict[str, Any]]] = [
    ("job_run.", {"type": "object", "properties": {"jobRun": {"$ref": "#/components/schemas/RunOut"}},
                  "required": ["jobRun"]}),
    ("job.", {"type": "object", "properties": {"job": {"$ref": "#/components/schemas/JobOut"}},
              "required": ["job"]}),
    ("webhook.ping", {"type": "object", "properties": {"endpointId": {"type": "string"},
                                                       "message": {"const": "ping"}},
                      "required": ["endpointId", "message"]}),
]
_DELIVERY_HEADERS = [
    ("X-Webhook-Id", "the delivery's id: the same on each retry of it, new on a replay"),
    ("X-Webhook-Event", "the event type"),
    ("X-Webhook-Timestamp", "Unix seconds when the attempt was signed"),
    ("X-Webhook-Signature", "t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.\" + body under the signing "
                            "secret>[,v1=<with the previous secret, during a rotation>]; Stripe's verifiers accept it"),
]


def webhooks_section() -> dict[str, Any]:
    """One POST per event type of the catalog: what a receiver is sent."""
    section = {}
    for event_type, meaning in CATALOG.items():
        data = next((schema for prefix, schema in _EVENT_DATA if event_type.startswith(prefix)),
                    {"type": "object", "description": "what the sender gave"})
        envelope = {"id": "01jhx6m3c8q9v2w7n5k4t1r0ab", "type": event_type, "data": EXAMPLES.get(event_type, {}),
                    "occurredAt": "2026-01-15T09:30:00.540Z"}
        section[event_type] = {"post": {
            "operationId": f"event_{event_type.replace('.', '_')}",
            "summary": event_type,
            "description": meaning,
            "tags": ["webhooks"],
            "parameters": [{"name": name, "in": "header", "required": True, "description": text,
                            "schema": {"type": "string"}} for name, text in _DELIVERY_HEADERS],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"allOf": [{"$ref": "#/components/schemas/Event"}, {"type": "object", "properties": {
                    "type": {"const": event_type}, "data": data}}]},
                "example": envelope,
            }}},
            "responses": {"2XX": {"description": "Received. Any other answer, a redirect or no answer within "
                                                 "the timeout is retried with backoff."}},
        }}
    return section


class DocexOpenAPI(OpenAPIProvider):
    def schema(self) -> dict[str, Any]:
        document = super().schema()
        components = document["components"]
        components["schemas"]["Error"] = ErrorOut.model_json_schema()
        components["securitySchemes"] = SECURITY_SCHEMES
        _name_inline_models(document)
        components["schemas"]["Event"] = EVENT_ENVELOPE
        document["webhooks"] = webhooks_section()
        return document

    def build_paths(self, rule: Rule) -> tuple[dict[str, Any], dict[str, Any]]:
        paths, components = super().build_paths(rule)
        # quart-schema's pattern runs from one parameter into the next one's converter
        # (`/jobs/<job_id>/pages/<int:number>` became `/jobs/{number}`): the path again.
        paths = {_PARAMETER.sub(r"{\1}", rule.rule): operations for operations in paths.values()}
        view = self._app.view_functions[rule.endpoint]
        for operations in paths.values():
            for operation in operations.values():
                # Per method, not shared; keyed by text as in the document (quart-schema uses ints).
                operation["responses"] = {str(status): r for status, r in operation["responses"].items()}
                if (bodies := getattr(view, _BODIES, None)) is not None:
                    json_model, multipart_model = bodies
                    operation["requestBody"] = self._bodies(json_model, multipart_model, components)
                if operation.get("security") is None:
                    operation["security"] = PROTECTED
                for status in sorted(self._error_statuses(view, operation)):
                    response = operation["responses"].setdefault(str(status), {
                        "description": f"{reason_phrase(status)}. {_MEANINGS.get(status, '')}".strip(),
                    })
                    # Also beside a route's own page for that status (the Drive callback's HTML):
                    # a request refused before the route runs gets the error model.
                    response.setdefault("content", {})["application/json"] = {"schema": {"$ref": ERROR_REF}}
        return paths, components

    def _error_statuses(self, view: Any, operation: dict[str, Any]) -> set[int]:
        statuses = {500, *getattr(view, _ERRORS, ())}  # any operation may fail unexpectedly
        has_body = "requestBody" in operation
        params = {p["in"] for p in operation["parameters"]}
        protected = bool(operation["security"])
        if has_body or "query" in params:
            statuses.add(400)
        if protected:
            statuses.update((401, 429))
        if "path" in params:
            statuses.add(404)
        if has_body:
            statuses.add(413)
        if getattr(view, RATE_LIMITED, False):
            statuses.add(429)
        return statuses

    def _bodies(self, json: type[BaseModel], multipart: type[BaseModel] | None,
                components: dict[str, Any]) -> dict[str, Any]:
        body, found = self.build_request_body(json, DataSource.JSON)
        components.update(found)
        if multipart is not None:
            upload, found = self.build_request_body(multipart, DataSource.FORM_MULTIPART)
            components.update(found)
            body["content"].update(upload["content"])
        body["required"] = True
        return body

    def build_path_parameter(self, name: str, converter: BaseConverter) -> dict[str, Any]:
        parameter = super().build_path_parameter(name, converter)
        if name.endswith("_id"):
            parameter["schema"] = {"type": "string", "pattern": ID_PATTERN}
        return parameter

    def build_response_object(self, model: Any, headers_model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        if isinstance(model, type) and issubclass(model, RawAnswer):
            response: dict[str, Any] = {"description": model.__doc__ or ""}
            if model.content_type is not None:
                response["content"] = {model.content_type: {"schema": model.schema_}}
            return response, {}
        return super().build_response_object(model, headers_model)
