"""Rate limits over HTTP: login per IP and per e-mail, register, refresh, every authenticated
principal; 429 with Retry-After in the SPEC §3 shape; changes apply without a restart (SPEC §4)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from auth_helpers import ERROR_KEYS, PASSWORD, bearer, clear_of_window_end, origin

from daemon.config import RateLimit

# Hour-long windows: a fixed window rolling over in the middle of a test would reset the count
# (and a test starting in an hour's last seconds waits for the next: `clear_of_window_end`).
PERIOD_S = 3600


@pytest.fixture(autouse=True)
async def _clear_of_window_end() -> None:
    await clear_of_window_end(RateLimit(1, PERIOD_S))


@pytest.fixture
def config(config):
    return dataclasses.replace(config, rate_limits=dataclasses.replace(
        config.rate_limits,
        login=RateLimit(3, PERIOD_S),
        register=RateLimit(3, PERIOD_S),
        refresh=RateLimit(3, PERIOD_S),
        authenticated=RateLimit(5, PERIOD_S),
    ))


async def register(client: Any, email: str, *, ip: str, name: str = "Someone") -> Any:
    return await client.post("/api/auth/register", json={"name": name, "email": email, "password": PASSWORD},
                             **origin(ip))


async def login(client: Any, email: str, password: str = PASSWORD, *, ip: str) -> Any:
    return await client.post("/api/auth/login", json={"email": email, "password": password}, **origin(ip))


async def account(client: Any, email: str, ip: str) -> dict[str, Any]:
    r = await register(client, email, ip=ip)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def assert_429(response: Any) -> int:
    body = await response.get_json()
    assert response.status_code == 429, body
    assert isinstance(body, dict) and set(body) >= ERROR_KEYS
    assert body["statusCode"] == 429 and body["error"] == "Too Many Requests"
    assert isinstance(body["message"], str) and body["message"]
    retry_after = response.headers.get("Retry-After")
    assert retry_after is not None and retry_after.isdigit(), retry_after
    assert 1 <= int(retry_after) <= PERIOD_S
    return int(retry_after)


def set_limits(services: Any, **limits: RateLimit) -> None:
    """Change limits the way SIGHUP does: a new config object, read at request time."""
    services.config = dataclasses.replace(
        services.config, rate_limits=dataclasses.replace(services.config.rate_limits, **limits))


# --- login -----------------------------------------------------------------------------

async def test_the_fourth_login_attempt_from_one_ip_is_429(client) -> None:
    await account(client, "alice@example.com", "10.9.9.9")
    # Three attempts from one address, each for a different e-mail (so only the IP limit bites).
    for email in ("x1@example.com", "x2@example.com", "x3@example.com"):
        assert (await login(client, email, ip="10.0.0.1")).status_code == 401
    await assert_429(await login(client, "alice@example.com", ip="10.0.0.1"))  # even the right password
    await assert_429(await login(client, "x4@example.com", ip="10.0.0.1"))
    # Another address is unaffected.
    assert (await login(client, "alice@example.com", ip="10.0.0.2")).status_code == 200


async def test_invalid_login_bodies_count_too(client) -> None:
    for _ in range(3):
        assert (await client.post("/api/auth/login", json={"email": "nope"}, **origin("10.0.0.1"))).status_code == 400
    await assert_429(await login(client, "alice@example.com", ip="10.0.0.1"))


async def test_login_attempts_for_one_email_are_limited_across_addresses(client) -> None:
    await account(client, "alice@example.com", "10.9.9.9")
    for i, email in enumerate(("alice@example.com", "ALICE@example.com", "alice@EXAMPLE.COM")):
        assert (await login(client, email, "wrong-guess", ip=f"10.0.1.{i}")).status_code == 401
    # A fourth address, the right password, different case: still over the e-mail's limit.
    await assert_429(await login(client, "Alice@Example.com", ip="10.0.1.99"))
    # Other e-mails from that address are fine.
    await account(client, "bob@example.com", "10.9.9.8")
    assert (await login(client, "bob@example.com", ip="10.0.1.99")).status_code == 200


# --- register and refresh --------------------------------------------------------------

async def test_the_fourth_registration_from_one_ip_is_429(client) -> None:
    for i in range(3):
        assert (await register(client, f"user{i}@example.com", ip="10.0.2.1")).status_code == 201
    await assert_429(await register(client, "user3@example.com", ip="10.0.2.1"))
    # Nothing was created by the refused request; another address may register it.
    assert (await register(client, "user3@example.com", ip="10.0.2.2")).status_code == 201


async def test_the_fourth_refresh_from_one_ip_is_429(client) -> None:
    pair = await account(client, "alice@example.com", "10.9.9.9")
    token = pair["refreshToken"]
    for _ in range(3):
        r = await client.post("/api/auth/refresh", json={"refreshToken": token}, **origin("10.0.3.1"))
        assert r.status_code == 200
        token = (await r.get_json())["refreshToken"]
    r = await client.post("/api/auth/refresh", json={"refreshToken": token}, **origin("10.0.3.1"))
    await assert_429(r)
    # The refused request did not consume the token: it still refreshes from elsewhere.
    r = await client.post("/api/auth/refresh", json={"refreshToken": token}, **origin("10.0.3.2"))
    assert r.status_code == 200


# --- authenticated principals ----------------------------------------------------------

async def test_the_sixth_authenticated_request_of_a_principal_is_429(client) -> None:
    alice = await account(client, "alice@example.com", "10.9.9.1")
    bob = await account(client, "bob@example.com", "10.9.9.2")
    for _ in range(5):
        assert (await client.get("/api/auth/me", headers=bearer(alice["accessToken"]))).status_code == 200
    await assert_429(await client.get("/api/auth/me", headers=bearer(alice["accessToken"])))
    await assert_429(await client.get("/api/auth/verify", headers=bearer(alice["accessToken"])))
    # Another principal is unaffected.
    for _ in range(5):
        assert (await client.get("/api/auth/me", headers=bearer(bob["accessToken"]))).status_code == 200


async def test_requests_without_a_valid_credential_are_401_not_counted_against_anyone(client) -> None:
    alice = await account(client, "alice@example.com", "10.9.9.1")
    for _ in range(10):
        assert (await client.get("/api/auth/me", headers=bearer("dx_live_bogus"))).status_code == 401
    assert (await client.get("/api/auth/me", headers=bearer(alice["accessToken"]))).status_code == 200


# --- hot changes -----------------------------------------------------------------------

async def test_changed_limits_apply_without_a_restart(client, services) -> None:
    alice = await account(client, "alice@example.com", "10.9.9.1")
    # Tighter: the second login from this address is already over.
    set_limits(services, login=RateLimit(1, PERIOD_S))
    assert (await login(client, "alice@example.com", ip="10.0.4.1")).status_code == 200
    await assert_429(await login(client, "alice@example.com", ip="10.0.4.2"))  # the e-mail's second
    # Looser: allowed again at once.
    set_limits(services, login=RateLimit(100, PERIOD_S))
    assert (await login(client, "alice@example.com", ip="10.0.4.1")).status_code == 200

    h = bearer(alice["accessToken"])
    set_limits(services, authenticated=RateLimit(2, PERIOD_S))
    assert (await client.get("/api/auth/me", headers=h)).status_code == 200
    assert (await client.get("/api/auth/me", headers=h)).status_code == 200
    await assert_429(await client.get("/api/auth/me", headers=h))
    set_limits(services, authenticated=RateLimit(100, PERIOD_S))
    assert (await client.get("/api/auth/me", headers=h)).status_code == 200

    set_limits(services, register=RateLimit(1, PERIOD_S))  # this address registered once above
    await assert_429(await register(client, "bob@example.com", ip="10.9.9.1"))
