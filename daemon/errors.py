"""The exception tree of docex, branched by who must act.

    DocexError
    ├── ConfigError            the operator: fix the file or environment, restart
    ├── StartupError           the operator: something the daemon needs at start is not there
    ├── ApiError               the caller: becomes a 4xx response in the SPEC §3 shape
    │   ├── BadRequest         400 (validation: `message` is a list of rule failures)
    │   ├── Unauthorized       401
    │   ├── Forbidden          403
    │   ├── NotFound           404
    │   ├── Conflict           409
    │   ├── PayloadTooLarge    413
    │   └── TooManyRequests    429 (carries Retry-After)
    ├── DomainError            the caller, told by the domain, not HTTP: the HTTP seam maps it
    │   ├── InvalidTransition  409: the resource's state does not allow the change asked for
    │   └── Missing            404: no such resource of the caller
    └── JobError               a job step failed; `code` is a SPEC §6 errorCode
        ├── TransientJobError  retried with backoff up to the attempt limit
        └── PermanentJobError  fails the job at once

Library exceptions are translated at the seam where they are caught, most
specific first, and chained with ``raise ... from exc``.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

# The seed's spellings where Python's differ between versions (3.11: "Request Entity Too Large").
_PHRASES = {413: "Payload Too Large"}


def reason_phrase(status: int) -> str:
    return _PHRASES.get(status) or HTTPStatus(status).phrase


class DocexError(Exception):
    """Root of every error docex raises on purpose."""


class ConfigError(DocexError):
    """Invalid configuration; `problems` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class StartupError(DocexError):
    """`docex serve` cannot start with a valid configuration (its port is taken, ...):
    one line for the operator, exit 1 (a runtime failure, not a usage error)."""


class ApiError(DocexError):
    """An error the HTTP layer turns into ``{statusCode, message, error}``."""

    status = 500

    def __init__(
        self,
        message: str | list[str] | None = None,
        *,
        details: Any = None,
        headers: dict[str, str] | None = None,
        status: int | None = None,
    ) -> None:
        if status is not None:
            self.status = status
        self.message: str | list[str] = message or reason_phrase(self.status)
        super().__init__(self.message if isinstance(self.message, str) else "; ".join(self.message))
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "statusCode": self.status,
            "message": self.message,
            "error": reason_phrase(self.status),
        }
        if self.details is not None:
            body["details"] = self.details
        return body


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401

    def __init__(self, message: str | list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        # RFC 9110 §11.6.1: a 401 names the scheme that would be taken.
        self.headers.setdefault("WWW-Authenticate", 'Bearer realm="docex"')


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class PreconditionFailed(ApiError):
    status = 412


class PayloadTooLarge(ApiError):
    status = 413


class TooManyRequests(ApiError):
    status = 429

    def __init__(self, retry_after_s: int, message: str = "Too Many Requests") -> None:
        super().__init__(message, headers={"Retry-After": str(max(1, retry_after_s))})
        self.retry_after_s = retry_after_s


class DomainError(DocexError):
    """A request the domain refuses; `daemon.http.errors` turns it into a 4xx (`api_error`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def api_error(self) -> ApiError:
        raise NotImplementedError


class InvalidTransition(DomainError):
    """The resource's state does not allow the change asked for (→ 409, with this message)."""

    def api_error(self) -> ApiError:
        return Conflict(self.message)


class Stale(DomainError):
    """The resource changed since the version the caller named in If-Match (→ 412)."""

    def api_error(self) -> ApiError:
        return PreconditionFailed(self.message)


class Missing(DomainError):
    """No such resource of the caller (also another user's) (→ 404, with this message)."""

    def api_error(self) -> ApiError:
        return NotFound(self.message)


class JobError(DocexError):
    """A job step failed with a SPEC §6 errorCode."""

    retryable = False

    def __init__(self, code: str, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s


class TransientJobError(JobError):
    retryable = True


class PermanentJobError(JobError):
    retryable = False
