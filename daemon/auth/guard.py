"""The global guard: every route needs a principal unless marked `@public`.

`install_guard` runs before each request: it resolves the Bearer credential,
applies the per-principal rate limit and leaves the principal in ``g``.
`@jwt_only` and `@admin_only` narrow a route further (403).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from quart import Quart, g, request
from quart_schema import security_scheme

from daemon.auth.principal import Credential, Principal, authenticate
from daemon.auth.ratelimit import LocalLimiter
from daemon.clock import utcnow
from daemon.errors import Forbidden, TooManyRequests, Unauthorized
from daemon.services import Services
from daemon.storage.repos.accounts import Role

P = ParamSpec("P")
R = TypeVar("R")

_PUBLIC = "_docex_public"
# Routes quart-schema adds for the OpenAPI document and its viewer.
_PUBLIC_ENDPOINTS = {"openapi", "static"}


def public(view: Callable[P, R]) -> Callable[P, R]:
    """Mark a route as needing no credential (also in the OpenAPI document)."""
    setattr(view, _PUBLIC, True)
    return security_scheme([])(view)


def current_principal() -> Principal:
    principal: Principal = g.principal
    return principal


def jwt_only(view: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Refuse API keys (403): the route needs a logged-in user's access token."""

    @functools.wraps(view)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if current_principal().credential is not Credential.ACCESS_TOKEN:
            raise Forbidden("This route needs an access token; API keys are not accepted")
        return await view(*args, **kwargs)

    return wrapper


def admin_only(view: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    @functools.wraps(view)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if current_principal().role is not Role.ADMIN:
            raise Forbidden("Admin role required")
        return await view(*args, **kwargs)

    return wrapper


def install_guard(app: Quart, services: Services) -> None:
    limiter = LocalLimiter()

    @app.before_request
    async def _guard() -> None:
        endpoint = request.endpoint
        if endpoint is None or endpoint in _PUBLIC_ENDPOINTS:
            return  # no route matched: routing answers 404/405 on its own
        view: Any = app.view_functions.get(endpoint)
        if getattr(view, _PUBLIC, False):
            return
        credentials = request.headers.getlist("Authorization")
        if len(credentials) > 1:  # which one would act is a proxy's or a client's guess
            raise Unauthorized("Send one Authorization header, not several")
        principal = await authenticate(services, credentials[0] if credentials else None, utcnow())
        g.principal = principal
        retry_after = limiter.hit(principal.rate_key, services.config.rate_limits.authenticated, time.time())
        if retry_after is not None:
            raise TooManyRequests(retry_after)
