"""Helpers shared by the account tests (auth, API keys, admin, rate limits)."""

from __future__ import annotations

import time
from typing import Any

import trio

from daemon.auth.ratelimit import window
from daemon.config import RateLimit
from daemon.errors import reason_phrase

PASSWORD = "correct horse 42"
ERROR_KEYS = {"statusCode", "message", "error"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def origin(ip: str | None) -> dict[str, Any]:
    """Test-client arguments that make a request come from `ip`."""
    return {"scope_base": {"client": (ip, 40000)}} if ip else {}


async def clear_of_window_end(limit: RateLimit, within_s: float = 30.0) -> None:
    """Wait out the end of `limit`'s current window if it is less than `within_s` away.

    Rate limits count in fixed windows aligned on the clock (an hour-long one ends on the
    hour), so a test counting hits up to a 429 that ran across the end of one would see its
    count reset. Called before the counting starts; waits only near a window's end."""
    left = window(limit, time.time())[1]
    if left < within_s:
        await trio.sleep(left + 0.1)


async def register(client: Any, name: str = "Alice", email: str = "alice@example.com",
                   password: str = PASSWORD, *, ip: str | None = None,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
    """Register an account (asserting 201) and return the token pair."""
    r = await client.post("/api/auth/register", json={"name": name, "email": email, "password": password},
                          headers=headers, **origin(ip))
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def error_body(response: Any, status: int) -> dict[str, Any]:
    """Assert the SPEC §3 error shape with this status; return the body."""
    body = await response.get_json()
    assert response.status_code == status, body
    assert isinstance(body, dict) and set(body) >= ERROR_KEYS, body
    assert body["statusCode"] == status
    assert body["error"] == reason_phrase(status)
    assert isinstance(body["message"], (str, list))
    return body  # type: ignore[no-any-return]
