"""The quart-trio application: built by `create_app(services)`, never module-global."""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from typing import Any

import trio
from quart import Response, g, request
from quart_schema import QuartSchema
from quart_trio import QuartTrio

from daemon import __version__
from daemon.auth.guard import install_guard
from daemon.http import (
    admin,
    auth,
    console,
    docs,
    exports,
    inboxes,
    integrations,
    job_pages,
    jobs,
    ops,
    schemas,
    webhooks,
)
from daemon.http.errors import install_error_handlers
from daemon.http.openapi import DocexOpenAPI
from daemon.http.ops import refresh_job_gauges
from daemon.http.requests import DocexRequest, FlowControlledHTTPConnection, current_request, refuse_unusable_requests
from daemon.services import Services

access_log = logging.getLogger("daemon.http.access")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._\-]{1,128}")
# JSON bodies are small (schemas, webhook settings); uploads raise their own, larger limit.
JSON_BODY_LIMIT_BYTES = 4 * 1024 * 1024
# The methods a metric names; any other (a client may send any HTTP token, kilobytes long)
# counts as OTHER: each name would be a new series of the public /metrics, kept for ever.
_METRIC_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def create_app(services: Services, *, ops_only: bool = False) -> QuartTrio:
    """The API, or with `ops_only` the operations routes alone (health, ready, settings,
    metrics: what `server.metrics_port` serves)."""
    app = QuartTrio("docex")
    app.request_class = DocexRequest
    # werkzeug answers /api//jobs with a 308 to /api/jobs: an HTML body, not the SPEC §3
    # shape, and a Location built from the Host header the client sent. No route has an
    # empty segment, so such a path is an unknown route (404) like any other.
    app.url_map.merge_slashes = False
    app.asgi_http_class = FlowControlledHTTPConnection
    app.extensions["docex"] = services
    app.config.update(
        MAX_CONTENT_LENGTH=JSON_BODY_LIMIT_BYTES,
        JSON_SORT_KEYS=False,
        PROPAGATE_EXCEPTIONS=False,
    )
    QuartSchema(
        app,
        openapi_path=docs.OPENAPI_PATH,
        swagger_ui_path=None,  # quart-schema's page loads Swagger UI from a CDN; ours is in daemon.http.docs
        redoc_ui_path=None,
        scalar_ui_path=None,
        info={"title": "docex", "version": __version__,
              "description": "Self-hosted document extraction daemon."},
        openapi_provider_class=DocexOpenAPI,  # error shape, security schemes, non-JSON answers
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]  # after QuartSchema, which replaces app.json
    _skip_schema_conversion_for_plain_json(app)
    install_error_handlers(app)
    _install_request_context(app, services)
    install_guard(app, services)  # after the request id, so refusals carry one too
    refuse_unusable_requests(app)  # after the guard: no credentials is a 401 whatever the path
    services.metrics.set_refresher(functools.partial(refresh_job_gauges, services))
    blueprints = (ops.blueprint,) if ops_only else (
        ops.blueprint, auth.blueprint, admin.blueprint, jobs.blueprint, job_pages.blueprint, schemas.blueprint,
        webhooks.blueprint, integrations.blueprint, inboxes.blueprint, docs.blueprint, console.blueprint,
        exports.blueprint)
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    return app


def _skip_schema_conversion_for_plain_json(app: QuartTrio) -> None:
    """Answer plain dicts and lists with Quart's own JSON response.

    quart-schema converts every result through a new pydantic TypeAdapter, a deep
    copy costing about a tenth of a small request (bench/idle.py); our routes
    already return JSON-ready dicts, and models still take quart-schema's path.
    """
    converting = app.make_response  # quart-schema's wrapper, set by QuartSchema(app)
    plain = QuartTrio.make_response.__get__(app)

    async def make_response(result: Any) -> Any:
        body = result[0] if isinstance(result, tuple) else result
        if type(body) in (dict, list):
            return await plain(result)
        return await converting(result)

    app.make_response = make_response  # type: ignore[method-assign]


async def _body_left_unread(req: DocexRequest) -> bool:
    """Whether the answer goes out before the request's body has all come (an upload refused
    413, a 401 or 404 answered before the body was read): hypercorn then closes the
    connection, which the answer must say, or a keep-alive client sends its next request
    into a closed socket. A small body is given a moment to arrive: a client whose token
    expired keeps its connection for the retry."""
    if req.body.discarded:
        return True
    declares_body = (req.content_length or 0) > 0 or "chunked" in req.headers.get("Transfer-Encoding", "").lower()
    if not declares_body:
        return False
    if req.body.arriving and (req.content_length or 0) <= SMALL_BODY_BYTES:
        with trio.move_on_after(SMALL_BODY_WAIT_S):
            await req.body.complete()
    return req.body.arriving


# A body this small has normally all come while its request is answered (one read of the socket).
SMALL_BODY_BYTES = 64 * 1024
SMALL_BODY_WAIT_S = 0.05


BROWSER_HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"}


def _install_request_context(app: QuartTrio, services: Services) -> None:
    @app.before_request
    async def _start() -> None:
        g.started = time.perf_counter()
        incoming = request.headers.get("X-Request-Id", "")
        g.request_id = incoming if _REQUEST_ID.fullmatch(incoming) else os.urandom(16).hex()

    @app.after_request
    async def _finish(response: Response) -> Response:
        request_id = getattr(g, "request_id", None) or os.urandom(16).hex()
        response.headers["X-Request-Id"] = request_id
        response.headers["X-Docex-Version"] = __version__
        # Every answer: a browser neither guesses a type other than the one given (an
        # uploaded HTML file downloaded as text/html) nor shows any page in a frame.
        response.headers.update(BROWSER_HEADERS)
        if response.status_code in (204, 304):  # no body, so no type of one (RFC 9110 §15.3.5, §15.4.5)
            response.headers.pop("Content-Type", None)
        if await _body_left_unread(current_request()):
            response.headers["Connection"] = "close"
        elapsed = time.perf_counter() - getattr(g, "started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule is not None else "<unmatched>"
        method = request.method if request.method in _METRIC_METHODS else "OTHER"
        services.metrics.http_request_duration.labels(method, route, str(response.status_code)).observe(elapsed)
        if services.config.log.access:
            access_log.info(
                "%s %s %d",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "action": "http.request",
                    "request_id": request_id,
                    "method": request.method,
                    "route": route,
                    "status": response.status_code,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )
        return response
