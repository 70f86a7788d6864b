"""Getting an account back: a password changed by its owner, reset on the server, hashes
brought to a new cost, a disabled account's sessions gone for good, and an audit trail of it
(found by attacking the daemon: a leaked password could not be changed, and re-enabling an
account revived a thief's tokens)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

import bcrypt
import jwt
import pytest
import sqlalchemy as sa
from auth_helpers import PASSWORD, bearer, error_body, origin, register

from daemon.config import ConfigError, load_config
from daemon.storage.tables import sessions, users

NEW_PASSWORD = "battery staple 7"


async def login(client: Any, email: str = "alice@example.com", password: str = PASSWORD) -> Any:
    return await client.post("/api/auth/login", json={"email": email, "password": password})


async def change_password(client: Any, token: str, current: str, new: str) -> Any:
    return await client.post("/api/auth/password", json={"currentPassword": current, "newPassword": new},
                             headers=bearer(token))


async def status_of(client: Any, token: str) -> int:
    return int((await client.get("/api/auth/me", headers=bearer(token))).status_code)


# --- a password changed by its owner -----------------------------------------------------

async def test_changing_the_password_ends_every_other_session_and_keeps_this_one(client) -> None:
    here = await register(client)
    elsewhere = await (await login(client)).get_json()  # the thief's session, say
    key = (await (await client.post("/api/auth/api-keys", json={"name": "ci"},
                                    headers=bearer(here["accessToken"]))).get_json())["apiKey"]

    r = await change_password(client, here["accessToken"], PASSWORD, NEW_PASSWORD)
    assert r.status_code == 204, await r.get_data()

    assert await status_of(client, here["accessToken"]) == 200
    assert (await client.post("/api/auth/refresh", json={"refreshToken": here["refreshToken"]})).status_code == 200
    assert await status_of(client, elsewhere["accessToken"]) == 401
    await error_body(await client.post("/api/auth/refresh", json={"refreshToken": elsewhere["refreshToken"]}), 401)
    assert await status_of(client, key) == 200  # programs keep running; a leaked key is revoked by itself
    await error_body(await login(client), 401)
    assert (await login(client, password=NEW_PASSWORD)).status_code == 200


async def test_a_wrong_current_password_is_403_and_changes_nothing(client) -> None:
    me = await register(client)
    body = await error_body(await change_password(client, me["accessToken"], "not it", NEW_PASSWORD), 403)
    assert "current password" in body["message"]
    assert (await login(client)).status_code == 200
    assert await status_of(client, me["accessToken"]) == 200


@pytest.mark.parametrize(("new", "expected"), [
    ("short", "newPassword must be longer than or equal to 6 characters"),
    ("é" * 37, "newPassword must be shorter than or equal to 72 bytes (bcrypt's limit)"),
])
async def test_a_new_password_is_held_to_the_registration_rules(client, new, expected) -> None:
    me = await register(client)
    body = await error_body(await change_password(client, me["accessToken"], PASSWORD, new), 400)
    assert expected in body["message"]


async def test_an_api_key_cannot_change_the_password(client) -> None:
    me = await register(client)
    key = (await (await client.post("/api/auth/api-keys", json={"name": "ci"},
                                    headers=bearer(me["accessToken"]))).get_json())["apiKey"]
    await error_body(await change_password(client, key, PASSWORD, NEW_PASSWORD), 403)
    assert (await login(client)).status_code == 200


async def test_guessing_the_current_password_meets_the_login_limit(client, services) -> None:
    me = await register(client, ip="10.9.0.1")
    limit = services.config.rate_limits.login.count
    statuses = []
    for attempt in range(limit + 1):
        r = await client.post("/api/auth/password", json={"currentPassword": f"guess {attempt}",
                                                          "newPassword": NEW_PASSWORD},
                              headers=bearer(me["accessToken"]), **origin("10.9.0.1"))
        statuses.append(r.status_code)
    assert statuses[:limit] == [403] * limit and statuses[-1] == 429


# --- an administrator's reset, and a disabled account ---------------------------------------

async def test_a_reset_on_the_server_ends_every_session(client, services) -> None:
    from daemon.auth.accounts import reset_password  # what `docex users set-password` calls

    me = await register(client)
    await reset_password(services, email="ALICE@example.com", new=NEW_PASSWORD)
    assert await status_of(client, me["accessToken"]) == 401
    await error_body(await login(client), 401)
    assert (await login(client, password=NEW_PASSWORD)).status_code == 200


# --- hashes at a new cost ---------------------------------------------------------------------

async def test_a_login_rehashes_a_password_made_at_another_cost(client, services) -> None:
    await register(client)  # the tests' cost, 4
    services.config = dataclasses.replace(services.config, auth=dataclasses.replace(services.config.auth,
                                                                                      bcrypt_rounds=5))
    assert (await login(client)).status_code == 200
    stored = await services.db.read(lambda conn: conn.execute(sa.select(users.c.password_hash)).scalar_one())
    assert stored.startswith("$2b$05$")
    assert (await login(client)).status_code == 200


# --- a password typed on another system -------------------------------------------------------

COMPOSED = "caf\u00e9 cr\u00e8me"  # é and è as one character each
DECOMPOSED = "cafe\u0301 cre\u0300me"  # e and a combining accent, as macOS types them


async def test_a_password_typed_with_the_accents_composed_otherwise_signs_in(client) -> None:
    await register(client, password=COMPOSED)
    assert (await login(client, password=DECOMPOSED)).status_code == 200
    assert (await login(client, password=COMPOSED)).status_code == 200
    assert (await login(client, password="cafe creme")).status_code == 401


async def test_a_full_width_password_is_the_same_password(client) -> None:
    await register(client, password="\uff30\uff21\uff33\uff33 word")  # "ＰＡＳＳ word"
    assert (await login(client, password="PASS word")).status_code == 200


async def test_a_password_hashed_before_it_was_normalized_still_signs_in(client, services) -> None:
    await register(client)
    legacy = bcrypt.hashpw(DECOMPOSED.encode(), bcrypt.gensalt(4)).decode()
    await services.db.run(lambda conn: conn.execute(sa.update(users).values(password_hash=legacy)))
    assert (await login(client, password=DECOMPOSED)).status_code == 200
    assert (await login(client, password=PASSWORD)).status_code == 401


# --- what an audit needs ----------------------------------------------------------------------

async def test_security_events_are_logged_with_whom_they_concern(client, caplog) -> None:
    caplog.set_level(logging.INFO, logger="daemon.audit")
    admin = await register(client, "Ada", "ada@example.com")
    bob = await register(client, "Bob", "bob@example.com")
    await login(client, "bob@example.com", "wrong password")
    rotated = await client.post("/api/auth/refresh", json={"refreshToken": bob["refreshToken"]})
    assert rotated.status_code == 200
    await client.post("/api/auth/refresh", json={"refreshToken": bob["refreshToken"]})  # reuse: theft
    await client.patch(f"/api/admin/users/{bob['user']['id']}", json={"disabled": True},
                       headers=bearer(admin["accessToken"]))
    seen = {(r.action, getattr(r, "user_id", None)) for r in caplog.records if hasattr(r, "action")}
    bob_id = bob["user"]["id"]
    assert {("auth.login_failed", bob_id), ("auth.refresh_reused", bob_id), ("admin.user_updated", bob_id)} <= seen
    updated = next(r for r in caplog.records if getattr(r, "action", None) == "admin.user_updated")
    assert updated.by == admin["user"]["id"] and updated.disabled is True
    assert all(PASSWORD not in r.getMessage() and "wrong password" not in str(r.__dict__) for r in caplog.records)


# --- odd credentials and addresses -------------------------------------------------------------

async def test_a_401_names_the_bearer_scheme(client) -> None:
    r = await client.get("/api/auth/me")
    await error_body(r, 401)
    assert r.headers["WWW-Authenticate"].startswith("Bearer")


async def test_a_token_expiring_past_year_9999_is_401_not_500(client, services) -> None:
    me = await register(client)
    claims = jwt.decode(me["accessToken"], options={"verify_signature": False})
    forged = jwt.encode({**claims, "exp": 10**30}, services.config.auth.jwt_access_secret.reveal(),
                        algorithm="HS256")
    await error_body(await client.get("/api/auth/me", headers=bearer(forged)), 401)


async def test_a_client_address_that_is_not_an_ip_is_not_stored(client, services) -> None:
    """Behind `server.trusted_proxy_hops` the address is what X-Forwarded-For says: on
    PostgreSQL 100 characters of it were a 500 after the account was made."""
    r = await client.post("/api/auth/register", json={"name": "Al", "email": "al@example.com",
                                                      "password": PASSWORD}, **origin("<script>" + "x" * 100))
    assert r.status_code == 201, await r.get_data()
    ips = await services.db.read(lambda conn: conn.execute(sa.select(sessions.c.ip)).scalars().all())
    assert ips == ["unknown"]


async def test_a_blank_api_key_name_is_400(client) -> None:
    me = await register(client)
    r = await client.post("/api/auth/api-keys", json={"name": "   "}, headers=bearer(me["accessToken"]))
    assert "name should not be empty" in (await error_body(r, 400))["message"]


@pytest.mark.parametrize(("variable", "value"), [
    ("JWT_ACCESS_EXPIRES_IN", "3000000d"), ("JWT_REFRESH_EXPIRES_IN", "3000000d"), ("JWT_ACCESS_EXPIRES_IN", "2d"),
])
def test_token_lifetimes_that_no_date_can_hold_are_refused(variable, value) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={variable: value})
    # Past 3650 d every duration is refused as it is read; within it, a token's lifetime has its own bound.
    assert any(problem.startswith(f"{variable}: must be 1s to") or
               (problem.startswith(f"{variable}:") and "must be at most 3650d" in problem)
               for problem in caught.value.problems), caught.value.problems


def test_the_longest_lifetimes_allowed_still_make_dates() -> None:
    config = load_config(environ={"JWT_ACCESS_EXPIRES_IN": "1d", "JWT_REFRESH_EXPIRES_IN": "3650d"})
    assert dt.datetime.now(dt.UTC) + dt.timedelta(seconds=config.auth.refresh_ttl_s) > dt.datetime.now(dt.UTC)
