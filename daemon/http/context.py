"""What a route handler needs from the current request, in one place."""

from __future__ import annotations

import functools
import ipaddress
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from quart import current_app, request
from quart_trio.wrappers.response import TrioResponse as Response

from daemon.auth.ratelimit import shared_hit
from daemon.config import RateLimitConfig
from daemon.errors import TooManyRequests
from daemon.http.openapi import RATE_LIMITED
from daemon.services import Services

P = ParamSpec("P")
R = TypeVar("R")


def services() -> Services:
    s: Services = current_app.extensions["docex"]
    return s


def client_ip() -> str:
    """The client's IP address; "unknown" when there is none or what there is is not an
    address (behind a trusted proxy, `X-Forwarded-For` is whatever the client wrote)."""
    try:
        return str(ipaddress.ip_address((request.remote_addr or "").strip()))
    except ValueError:
        return "unknown"


def no_content() -> Response:
    return Response(status=204)


def streamed(body: AsyncIterator[bytes], **kwargs: Any) -> Response:
    """A response whose `body` is sent as it is made, for as long as the client takes to read
    it: Quart cuts a body still sending after its RESPONSE_TIMEOUT (60 s), with the 200 already
    sent, and the client got a truncated file, export or replay as if it were whole."""
    response = Response(body, **kwargs)
    response.timeout = None
    return response


async def enforce_limit(name: str, subject: str) -> None:
    """Count one hit of limit `name` (a field of `rate_limits`) for `subject`, shared across processes."""
    limit = getattr(services().config.rate_limits, name)
    retry_after = await services().db.run(shared_hit, f"{name}:{subject}", limit, time.time())
    if retry_after is not None:
        raise TooManyRequests(retry_after)


def limited_per_ip(name: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Rate-limit a public route per client IP, before its body is even read."""
    assert name in RateLimitConfig.__dataclass_fields__, name

    def decorate(view: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(view)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            await enforce_limit(name, f"ip:{client_ip()}")
            return await view(*args, **kwargs)

        setattr(wrapper, RATE_LIMITED, True)  # documented as 429 in the OpenAPI document
        return wrapper

    return decorate
