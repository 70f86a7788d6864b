"""Every error leaves as ``{"statusCode", "message", "error"[, "details"]}`` (SPEC §3).

Unexpected exceptions become a 500 that names only the request id; the
traceback goes to the log, never to the client.
"""

from __future__ import annotations

import errno
import logging

import sqlalchemy as sa
from pydantic import ValidationError
from quart import Quart, Response, g, jsonify, request
from quart_schema import RequestSchemaValidationError
from werkzeug.exceptions import HTTPException

from daemon.errors import ApiError, BadRequest, DomainError
from daemon.http.validation import messages

log = logging.getLogger(__name__)


def error_response(error: ApiError) -> Response:
    response = jsonify(error.body())
    response.status_code = error.status
    response.headers.update(error.headers)
    return response


def install_error_handlers(app: Quart) -> None:
    @app.errorhandler(ApiError)
    async def _api_error(error: ApiError) -> Response:
        return error_response(error)

    @app.errorhandler(DomainError)
    async def _domain_error(error: DomainError) -> Response:
        return error_response(error.api_error())

    @app.errorhandler(RequestSchemaValidationError)
    async def _validation(error: RequestSchemaValidationError) -> Response:
        cause = error.validation_error
        if isinstance(cause, ValidationError):
            return error_response(BadRequest(messages(cause)))
        return error_response(BadRequest(["request body must be a JSON object"]))

    @app.errorhandler(HTTPException)
    async def _http_exception(error: HTTPException) -> Response:
        # Raised by Quart/werkzeug (routing, body limits), whose own descriptions are prose
        # for browsers; our code raises ApiError instead.
        status = error.code or 500
        message = f"Cannot {request.method} {request.path}" if status == 404 else None
        response = error_response(ApiError(message, status=status))
        if status == 405 and hasattr(error, "valid_methods") and error.valid_methods:
            response.headers["Allow"] = ", ".join(sorted(error.valid_methods))
        return response

    @app.errorhandler(sa.exc.OperationalError)
    @app.errorhandler(sa.exc.InterfaceError)
    async def _database_unreachable(error: sa.exc.DBAPIError) -> Response:
        # The connection lost (a restart or failover of PostgreSQL) or the database busy past
        # its timeout: the request may be sent again as it was, which a 500 does not say.
        request_id = getattr(g, "request_id", None)
        if _out_of_space(error):
            return _storage_full(error, request_id)
        log.error("database unreachable", exc_info=error, extra={"action": "http.db_error", "request_id": request_id})
        return error_response(ApiError(f"The database is unreachable; try again (request id {request_id})",
                                       status=503, headers={"Retry-After": "1"}))

    @app.errorhandler(OSError)
    async def _file_error(error: OSError) -> Response:
        request_id = getattr(g, "request_id", None)
        if _out_of_space(error):
            return _storage_full(error, request_id)
        return await _unexpected(error)

    async def _unexpected(error: Exception) -> Response:
        request_id = getattr(g, "request_id", None)
        log.error(
            "unhandled error",
            exc_info=error,
            extra={"action": "http.unhandled", "request_id": request_id},
        )
        return error_response(ApiError(f"Internal server error (request id {request_id})", status=500))
    app.register_error_handler(Exception, _unexpected)


def _out_of_space(error: BaseException) -> bool:
    """A full disk (or quota) under the data directory: the file store's ENOSPC, or SQLite's
    "database or disk is full" (SQLITE_FULL)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "disk is full" in str(getattr(error, "orig", error))


def _storage_full(error: BaseException, request_id: str | None) -> Response:
    # Not the database unreachable, nor a bug: the operator must free space; the client may try later.
    log.error("the data volume is full", exc_info=error, extra={"action": "http.storage_full",
                                                                  "request_id": request_id})
    return error_response(ApiError(f"docex's storage is full: nothing more can be stored until space is freed "
                                   f"(request id {request_id})", status=507, headers={"Retry-After": "60"}))
