"""Accounts over HTTP: register, login, access tokens, refresh rotation, sessions, me/verify,
and what reaches the database (SPEC §3, §4; seed §4, §5, §7)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
import sqlalchemy as sa
import trio
from auth_helpers import PASSWORD, bearer, error_body, origin, register

from daemon.config import RateLimit
from daemon.storage.repos import accounts as repo
from daemon.storage.tables import api_keys, sessions, users

PAIR_KEYS = {"user", "accessToken", "refreshToken", "expiresIn"}
USER_KEYS = {"id", "name", "email", "role", "createdAt"}
SESSION_KEYS = {"id", "createdAt", "lastUsedAt", "expiresAt", "userAgent", "ip", "current"}
ISO_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


# --- helpers ---------------------------------------------------------------------------

async def login(client: Any, email: str = "alice@example.com", password: str = PASSWORD, *,
                ip: str | None = None, headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = await client.post("/api/auth/login", json={"email": email, "password": password},
                          headers=headers, **origin(ip))
    body = await r.get_json()
    assert r.status_code == 200, body
    return body  # type: ignore[no-any-return]


async def refresh(client: Any, refresh_token: str) -> Any:
    return await client.post("/api/auth/refresh", json={"refreshToken": refresh_token})


async def status_of(client: Any, token: str, path: str = "/api/auth/me") -> int:
    r = await client.get(path, headers=bearer(token))
    return int(r.status_code)


def claims_of(access_token: str) -> dict[str, Any]:
    return jwt.decode(access_token, options={"verify_signature": False})  # type: ignore[no-any-return]


def _parse(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def with_auth(config: Any, **changes: Any) -> Any:
    return dataclasses.replace(config, auth=dataclasses.replace(config.auth, **changes))


# --- register --------------------------------------------------------------------------

async def test_register_returns_201_with_the_user_and_a_token_pair(client) -> None:
    r = await client.post("/api/auth/register",
                          json={"name": "Alice", "email": "alice@example.com", "password": PASSWORD})
    body = await r.get_json()
    assert r.status_code == 201
    assert set(body) == PAIR_KEYS
    assert set(body["user"]) == USER_KEYS
    assert body["user"]["name"] == "Alice"
    assert body["user"]["email"].lower() == "alice@example.com"
    assert ISO_Z.fullmatch(body["user"]["createdAt"])
    assert body["expiresIn"] == 900
    assert isinstance(body["refreshToken"], str) and len(body["refreshToken"]) >= 40
    claims = claims_of(body["accessToken"])
    assert claims["sub"] == body["user"]["id"] and claims["typ"] == "access"
    assert claims["exp"] - claims["iat"] == 900 and claims["sid"]
    assert jwt.get_unverified_header(body["accessToken"])["alg"] == "HS256"
    # The pair works at once.
    r = await client.get("/api/auth/me", headers=bearer(body["accessToken"]))
    assert r.status_code == 200 and (await r.get_json())["id"] == body["user"]["id"]


async def test_first_account_is_admin_and_later_ones_are_users(client) -> None:
    first = await register(client, "Ada", "ada@example.com")
    second = await register(client, "Bob", "bob@example.com")
    third = await register(client, "Cy", "cy@example.com")
    assert first["user"]["role"] == "ADMIN"
    assert second["user"]["role"] == "USER"
    assert third["user"]["role"] == "USER"
    assert len({first["user"]["id"], second["user"]["id"], third["user"]["id"]}) == 3


async def test_an_email_differing_only_by_case_is_a_duplicate(client) -> None:
    await register(client, email="alice@example.com")
    r = await client.post("/api/auth/register",
                          json={"name": "Alice 2", "email": "ALICE@Example.COM", "password": PASSWORD})
    body = await error_body(r, 409)
    assert isinstance(body["message"], str)
    # ...and logging in works whatever the case.
    assert (await login(client, "Alice@EXAMPLE.com"))["user"]["email"].lower() == "alice@example.com"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"name": "A", "email": "not-an-email", "password": PASSWORD}, "email must be an email"),
        ({"name": "A", "email": "a@", "password": PASSWORD}, "email must be an email"),
        ({"name": "A", "email": "a@example.com", "password": "12345"},
         "password must be longer than or equal to 6 characters"),
        ({"email": "a@example.com", "password": PASSWORD}, "name should not be empty"),
        ({"name": "", "email": "a@example.com", "password": PASSWORD}, "name should not be empty"),
        ({"name": "x" * 101, "email": "a@example.com", "password": PASSWORD},
         "name must be shorter than or equal to 100 characters"),
        ({"name": "A", "password": PASSWORD}, "email should not be empty"),
        ({"name": "A", "email": "a@example.com"}, "password should not be empty"),
        ({"name": "A", "email": "a@example.com", "password": 123456}, "password must be a string"),
    ],
)
async def test_register_validation_is_400_worded_like_class_validator(client, payload, expected) -> None:
    r = await client.post("/api/auth/register", json=payload)
    body = await error_body(r, 400)
    assert isinstance(body["message"], list)
    assert expected in body["message"], body


async def test_register_reports_every_failed_rule_at_once(client) -> None:
    r = await client.post("/api/auth/register", json={"name": "A", "email": "nope", "password": "123"})
    body = await error_body(r, 400)
    assert "email must be an email" in body["message"]
    assert "password must be longer than or equal to 6 characters" in body["message"]


async def test_a_password_over_72_bytes_is_400_naming_the_limit_and_72_bytes_is_fine(client) -> None:
    # 37 characters but 74 bytes: the limit is bcrypt's, in bytes.
    r = await client.post("/api/auth/register",
                          json={"name": "A", "email": "a@example.com", "password": "é" * 37})
    body = await error_body(r, 400)
    assert isinstance(body["message"], list)
    assert any("72" in m and "bytes" in m for m in body["message"]), body
    r = await client.post("/api/auth/register",
                          json={"name": "A", "email": "a@example.com", "password": "x" * 100})
    await error_body(r, 400)
    await register(client, email="b@example.com", password="y" * 72)
    await login(client, "b@example.com", "y" * 72)


async def test_malformed_json_on_register_is_400(client) -> None:
    r = await client.post("/api/auth/register", data=b'{"name": ',
                          headers={"Content-Type": "application/json"})
    await error_body(r, 400)


async def test_no_response_ever_carries_a_password_hash(client, services) -> None:
    seen: list[str] = []

    async def text(r: Any) -> str:
        data = (await r.get_data()).decode()
        seen.append(data)
        return data

    admin = await register(client, "Ada", "ada@example.com")
    r = await client.post("/api/auth/register", json={"name": "Bob", "email": "bob@example.com",
                                                      "password": PASSWORD})
    await text(r)
    r = await client.post("/api/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
    await text(r)
    pair = await r.get_json()
    r = await refresh(client, pair["refreshToken"])
    await text(r)
    pair = await r.get_json()
    h = bearer(pair["accessToken"])
    for path in ("/api/auth/me", "/api/auth/verify", "/api/auth/sessions", "/api/auth/api-keys"):
        await text(await client.get(path, headers=h))
    await text(await client.post("/api/auth/api-keys", json={"name": "k"}, headers=h))
    await text(await client.get("/api/admin/users", headers=bearer(admin["accessToken"])))
    await text(await client.post("/api/auth/register", json={"name": "Bob", "email": "BOB@example.com",
                                                             "password": PASSWORD}))
    await text(await client.post("/api/auth/login", json={"email": "bob@example.com", "password": "wrong!!"}))

    hashes = [(await services.db.read(repo.find_user_by_email, e)).password_hash
              for e in ("ada@example.com", "bob@example.com")]
    assert all(h.startswith("$2") for h in hashes)
    for body in seen:
        for h in hashes:
            assert h not in body
            assert h[:29] not in body  # not even the salt
        assert "$2b$" not in body and "$2a$" not in body
        assert "password" not in body.lower() or "Invalid email or password" in body
        assert "hash" not in body.lower()


class TestClosedRegistration:
    @pytest.fixture
    def config(self, config):
        return with_auth(config, registration="closed")

    async def test_the_first_account_may_register_then_registration_is_403(self, client) -> None:
        first = await register(client, "Ada", "ada@example.com")
        assert first["user"]["role"] == "ADMIN"
        r = await client.post("/api/auth/register",
                              json={"name": "Bob", "email": "bob@example.com", "password": PASSWORD})
        body = await error_body(r, 403)
        assert isinstance(body["message"], str)
        r = await client.post("/api/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
        await error_body(r, 401)  # and no account was created
        await login(client, "ada@example.com")  # logging in still works


# --- login -----------------------------------------------------------------------------

async def test_login_returns_200_with_the_same_shape(client) -> None:
    reg = await register(client)
    r = await client.post("/api/auth/login", json={"email": "alice@example.com", "password": PASSWORD})
    body = await r.get_json()
    assert r.status_code == 200
    assert set(body) == PAIR_KEYS and set(body["user"]) == USER_KEYS
    assert body["user"] == reg["user"]
    assert body["expiresIn"] == 900
    assert body["refreshToken"] != reg["refreshToken"]
    assert claims_of(body["accessToken"])["sid"] != claims_of(reg["accessToken"])["sid"]
    assert await status_of(client, body["accessToken"]) == 200


async def test_wrong_password_and_unknown_email_get_the_identical_401(client) -> None:
    await register(client)
    wrong = await client.post("/api/auth/login", json={"email": "alice@example.com", "password": "not-it!"})
    unknown = await client.post("/api/auth/login", json={"email": "nobody@example.com", "password": "not-it!"})
    wrong_body = await error_body(wrong, 401)
    unknown_body = await error_body(unknown, 401)
    assert wrong_body == unknown_body
    assert "accessToken" not in wrong_body


async def test_login_with_an_overlong_password_is_refused_not_a_500(client) -> None:
    """Login does not cap the password at 72 bytes; bcrypt (5.x) then raises instead of answering."""
    await register(client)
    for email in ("alice@example.com", "nobody@example.com"):
        r = await client.post("/api/auth/login", json={"email": email, "password": "p" * 100})
        body = await r.get_json()
        assert r.status_code in (400, 401), body
        await error_body(r, r.status_code)


async def test_login_validation_is_400(client) -> None:
    r = await client.post("/api/auth/login", json={"email": "nope", "password": ""})
    body = await error_body(r, 400)
    assert "email must be an email" in body["message"]
    r = await client.post("/api/auth/login", json={})
    body = await error_body(r, 400)
    assert "email should not be empty" in body["message"]
    assert "password should not be empty" in body["message"]


class TestLoginTiming:
    @pytest.fixture
    def config(self, config):
        config = with_auth(config, bcrypt_rounds=8)
        return dataclasses.replace(
            config, rate_limits=dataclasses.replace(config.rate_limits, login=RateLimit(1000, 3600)))

    async def test_unknown_email_takes_about_as_long_as_a_wrong_password(self, client, services) -> None:
        await register(client)
        user = await services.db.read(repo.find_user_by_email, "alice@example.com")
        assert user.password_hash.startswith("$2b$08$")  # the cost this test means to measure

        async def timed(email: str) -> float:
            start = time.perf_counter()
            r = await client.post("/api/auth/login", json={"email": email, "password": "wrong-password"})
            elapsed = time.perf_counter() - start
            assert r.status_code == 401
            return elapsed

        await timed("nobody@example.com")  # warm-up (a dummy hash may be made once)
        await timed("alice@example.com")
        # The fastest run of each is its intrinsic cost (load only ever adds time). Skipping the
        # hash for an unknown e-mail makes it several times faster than a wrong password, in
        # every round; a busy machine may spoil one round, so up to three are measured.
        rounds: list[tuple[list[float], list[float]]] = []
        for attempt in range(3):
            wrong, unknown = [], []
            for i in range(7):  # interleaved, so load on the machine hits both alike
                wrong.append(await timed("alice@example.com"))
                unknown.append(await timed(f"nobody{attempt}.{i}@example.com"))
            rounds.append((wrong, unknown))
            if min(unknown) >= 0.5 * min(wrong):
                break
        else:
            pytest.fail(f"unknown e-mails answer much faster than wrong passwords: {rounds}")


async def test_a_disabled_users_login_and_refresh_are_refused(client) -> None:
    admin = await register(client, "Ada", "ada@example.com")
    bob = await register(client, "Bob", "bob@example.com")
    r = await client.patch(f"/api/admin/users/{bob['user']['id']}", json={"disabled": True},
                           headers=bearer(admin["accessToken"]))
    assert r.status_code == 200
    r = await client.post("/api/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
    body = await r.get_json()
    assert r.status_code in (401, 403), body
    await error_body(r, r.status_code)
    assert "accessToken" not in body and "refreshToken" not in body
    await error_body(await refresh(client, bob["refreshToken"]), 401)


# --- access tokens ---------------------------------------------------------------------

async def test_missing_or_non_bearer_authorization_is_401(client) -> None:
    reg = await register(client)
    await error_body(await client.get("/api/auth/me"), 401)
    for value in ("Basic YWxpY2U6cGFzc3dvcmQ=", f"Token {reg['accessToken']}", "Bearer", "Bearer   ",
                  reg["accessToken"], "Bearer not-a-token", "Bearer a.b.c"):
        r = await client.get("/api/auth/me", headers={"Authorization": value})
        await error_body(r, 401)
    assert await status_of(client, reg["accessToken"]) == 200


async def test_forged_access_tokens_are_401(client, config) -> None:
    reg = await register(client)
    claims = claims_of(reg["accessToken"])
    secret = config.auth.jwt_access_secret.reveal()
    now = int(time.time())

    def signed(extra: dict[str, Any], key: str = secret, alg: str = "HS256") -> str:
        return jwt.encode({**claims, **extra}, key, algorithm=alg)

    # Control: the same forging with valid claims is accepted, so each refusal below is about
    # the one thing it changes.
    assert await status_of(client, signed({"iat": now - 5, "exp": now + 600})) == 200

    expired = signed({"iat": now - 1000, "exp": now - 10})
    wrong_secret = signed({"exp": now + 600}, key="a-wrong-secret-" + "z" * 40)
    refresh_typed = signed({"typ": "refresh", "exp": now + 600})
    no_typ = jwt.encode({k: v for k, v in claims.items() if k != "typ"}, secret, algorithm="HS256")
    header = jwt.utils.base64url_encode(b'{"alg":"none","typ":"JWT"}').decode()
    payload = jwt.utils.base64url_encode(
        json.dumps({**claims, "exp": now + 600}).encode()).decode()
    alg_none = f"{header}.{payload}."
    other_user = signed({"sub": "01h00000000000000000000000", "exp": now + 600})
    unknown_session = signed({"sid": "01h00000000000000000000000", "exp": now + 600})
    for token in (expired, wrong_secret, refresh_typed, no_typ, alg_none, other_user, unknown_session):
        await error_body(await client.get("/api/auth/me", headers=bearer(token)), 401)


class TestShortAccessTokens:
    # Claims hold whole seconds, so a token of lifetime N is good for between N - 1 and N seconds:
    # 3 leaves the refreshed token at least 2 s to be used in, however loaded the machine.
    TTL_S = 3

    @pytest.fixture
    def config(self, config):
        return with_auth(config, access_ttl_s=self.TTL_S)

    async def test_an_access_token_past_its_lifetime_is_401_and_refresh_gives_a_working_one(self, client) -> None:
        reg = await register(client)
        assert reg["expiresIn"] == self.TTL_S
        claims = claims_of(reg["accessToken"])
        assert claims["exp"] - claims["iat"] == self.TTL_S
        await trio.sleep(claims["exp"] - time.time() + 0.1)
        await error_body(await client.get("/api/auth/me", headers=bearer(reg["accessToken"])), 401)
        r = await refresh(client, reg["refreshToken"])
        assert r.status_code == 200
        pair = await r.get_json()
        assert pair["expiresIn"] == self.TTL_S
        assert await status_of(client, pair["accessToken"]) == 200


async def test_logout_all_revokes_every_session_at_once(client) -> None:
    first = await register(client)
    second = await login(client)
    assert await status_of(client, first["accessToken"]) == 200
    r = await client.post("/api/auth/logout-all", headers=bearer(first["accessToken"]))
    assert r.status_code == 204 and await r.get_data() == b""
    await error_body(await client.get("/api/auth/me", headers=bearer(first["accessToken"])), 401)
    await error_body(await client.get("/api/auth/me", headers=bearer(second["accessToken"])), 401)
    await error_body(await refresh(client, first["refreshToken"]), 401)
    await error_body(await refresh(client, second["refreshToken"]), 401)
    # Logging in again works.
    assert await status_of(client, (await login(client))["accessToken"]) == 200


async def test_logout_all_only_touches_the_callers_sessions(client) -> None:
    alice = await register(client)
    bob = await register(client, "Bob", "bob@example.com")
    r = await client.post("/api/auth/logout-all", headers=bearer(alice["accessToken"]))
    assert r.status_code == 204
    assert await status_of(client, bob["accessToken"]) == 200
    assert (await refresh(client, bob["refreshToken"])).status_code == 200


async def test_deleting_a_session_makes_its_access_token_401_at_once(client) -> None:
    first = await register(client)
    second = await login(client)
    sid = claims_of(second["accessToken"])["sid"]
    r = await client.delete(f"/api/auth/sessions/{sid}", headers=bearer(first["accessToken"]))
    assert r.status_code == 204 and await r.get_data() == b""
    await error_body(await client.get("/api/auth/me", headers=bearer(second["accessToken"])), 401)
    await error_body(await refresh(client, second["refreshToken"]), 401)
    assert await status_of(client, first["accessToken"]) == 200


# --- refresh ---------------------------------------------------------------------------

async def test_refresh_rotates_to_a_new_pair_and_revokes_the_old_session(client) -> None:
    reg = await register(client)
    r = await refresh(client, reg["refreshToken"])
    pair = await r.get_json()
    assert r.status_code == 200
    assert set(pair) == PAIR_KEYS and pair["user"] == reg["user"] and pair["expiresIn"] == 900
    assert pair["refreshToken"] != reg["refreshToken"]
    assert pair["accessToken"] != reg["accessToken"]
    assert claims_of(pair["accessToken"])["sid"] != claims_of(reg["accessToken"])["sid"]
    assert await status_of(client, pair["accessToken"]) == 200
    # The old session is revoked, so its access token stops at once.
    await error_body(await client.get("/api/auth/me", headers=bearer(reg["accessToken"])), 401)
    # Rotation can go on.
    r = await refresh(client, pair["refreshToken"])
    assert r.status_code == 200


async def test_reusing_a_rotated_refresh_token_revokes_the_whole_family(client) -> None:
    stolen = await register(client)
    other_login = await login(client)  # another family of the same user
    r = await refresh(client, stolen["refreshToken"])
    assert r.status_code == 200
    rotated = await r.get_json()
    r = await refresh(client, rotated["refreshToken"])
    assert r.status_code == 200
    latest = await r.get_json()
    assert await status_of(client, latest["accessToken"]) == 200

    # The first token comes back: theft.
    await error_body(await refresh(client, stolen["refreshToken"]), 401)
    # Every descendant of that login is dead now.
    await error_body(await client.get("/api/auth/me", headers=bearer(latest["accessToken"])), 401)
    await error_body(await refresh(client, latest["refreshToken"]), 401)
    await error_body(await refresh(client, rotated["refreshToken"]), 401)
    # The other login is untouched.
    assert await status_of(client, other_login["accessToken"]) == 200
    r = await refresh(client, other_login["refreshToken"])
    assert r.status_code == 200
    assert await status_of(client, (await r.get_json())["accessToken"]) == 200


async def test_unknown_or_missing_refresh_token(client) -> None:
    await register(client)
    await error_body(await refresh(client, "x" * 43), 401)
    r = await client.post("/api/auth/refresh", json={})
    body = await error_body(r, 400)
    assert isinstance(body["message"], list)
    r = await client.post("/api/auth/refresh", json={"refreshToken": ""})
    await error_body(r, 400)


async def test_logout_revokes_that_session_only(client) -> None:
    first = await register(client)
    second = await login(client)
    r = await client.post("/api/auth/logout", json={"refreshToken": first["refreshToken"]})
    assert r.status_code == 204 and await r.get_data() == b""
    await error_body(await refresh(client, first["refreshToken"]), 401)
    await error_body(await client.get("/api/auth/me", headers=bearer(first["accessToken"])), 401)
    assert await status_of(client, second["accessToken"]) == 200
    assert (await refresh(client, second["refreshToken"])).status_code == 200


# --- sessions --------------------------------------------------------------------------

async def test_sessions_list_shape_current_flag_user_agent_and_ip(client) -> None:
    await register(client, ip="10.0.0.1", headers={"User-Agent": "tests/register"})
    await login(client, ip="10.0.0.2", headers={"User-Agent": "tests/phone"})
    mine = await login(client, ip="10.0.0.3", headers={"User-Agent": "tests/laptop"})
    my_sid = claims_of(mine["accessToken"])["sid"]
    r = await client.get("/api/auth/sessions", headers=bearer(mine["accessToken"]))
    body = await r.get_json()
    assert r.status_code == 200
    assert set(body) == {"data", "nextCursor"} and body["nextCursor"] is None
    assert len(body["data"]) == 3
    for s in body["data"]:
        assert set(s) == SESSION_KEYS
        for key in ("createdAt", "lastUsedAt", "expiresAt"):
            assert ISO_Z.fullmatch(s[key]), s
        lifetime = _parse(s["expiresAt"]) - _parse(s["createdAt"])
        assert abs(lifetime - dt.timedelta(days=30)) < dt.timedelta(seconds=5)  # JWT_REFRESH_EXPIRES_IN
    by_agent = {s["userAgent"]: s for s in body["data"]}
    assert set(by_agent) == {"tests/register", "tests/phone", "tests/laptop"}
    assert by_agent["tests/phone"]["ip"] == "10.0.0.2"
    assert by_agent["tests/laptop"]["ip"] == "10.0.0.3"
    assert [s["id"] for s in body["data"] if s["current"]] == [my_sid]
    assert by_agent["tests/laptop"]["current"] is True
    assert by_agent["tests/phone"]["current"] is False
    # Refresh tokens are never listed.
    assert mine["refreshToken"] not in str(body)


async def test_sessions_list_shows_only_the_callers_live_sessions(client) -> None:
    alice = await register(client)
    bob = await register(client, "Bob", "bob@example.com")
    gone = await login(client)
    await client.post("/api/auth/logout", json={"refreshToken": gone["refreshToken"]})
    r = await client.get("/api/auth/sessions", headers=bearer(alice["accessToken"]))
    ids = [s["id"] for s in (await r.get_json())["data"]]
    assert ids == [claims_of(alice["accessToken"])["sid"]]
    assert claims_of(bob["accessToken"])["sid"] not in ids


async def test_sessions_pagination_walks_every_session_once(client) -> None:
    reg = await register(client)
    expected = {claims_of(reg["accessToken"])["sid"]}
    for _ in range(4):
        expected.add(claims_of((await login(client))["accessToken"])["sid"])
    h = bearer(reg["accessToken"])
    for limit in (1, 2):
        seen: list[str] = []
        cursor = None
        for _ in range(10):
            query = {"limit": limit} | ({"cursor": cursor} if cursor else {})
            r = await client.get("/api/auth/sessions", headers=h, query_string=query)
            page = await r.get_json()
            assert r.status_code == 200, page
            assert len(page["data"]) <= limit
            seen += [s["id"] for s in page["data"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 5
        assert set(seen) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"limit": "0"}, "limit must not be less than 1"),
        ({"limit": "101"}, "limit must not be greater than 100"),
        ({"limit": "ten"}, "limit must be an integer number"),
        ({"cursor": "%%%not-a-cursor%%%"}, None),
        ({"cursor": "bm90LWFuLWlk"}, None),  # base64 of "not-an-id"
    ],
)
async def test_bad_paging_parameters_are_400(client, query, expected) -> None:
    reg = await register(client)
    r = await client.get("/api/auth/sessions", headers=bearer(reg["accessToken"]), query_string=query)
    body = await error_body(r, 400)
    assert isinstance(body["message"], list) and body["message"]
    if expected:
        assert expected in body["message"]
    else:
        assert any("cursor" in m for m in body["message"])


async def test_deleting_sessions(client) -> None:
    alice = await register(client)
    other = await login(client)
    bob = await register(client, "Bob", "bob@example.com")
    bob_sid = claims_of(bob["accessToken"])["sid"]
    h = bearer(alice["accessToken"])
    # Another user's session: 404, and it keeps working.
    await error_body(await client.delete(f"/api/auth/sessions/{bob_sid}", headers=h), 404)
    assert await status_of(client, bob["accessToken"]) == 200
    await error_body(await client.delete("/api/auth/sessions/01h00000000000000000000000", headers=h), 404)
    # Own session: 204, gone from the list; deleting again is 404.
    other_sid = claims_of(other["accessToken"])["sid"]
    r = await client.delete(f"/api/auth/sessions/{other_sid}", headers=h)
    assert r.status_code == 204
    listed = [s["id"] for s in (await (await client.get("/api/auth/sessions", headers=h)).get_json())["data"]]
    assert other_sid not in listed and len(listed) == 1
    await error_body(await client.delete(f"/api/auth/sessions/{other_sid}", headers=h), 404)
    # Deleting the current session logs the caller out.
    own_sid = claims_of(alice["accessToken"])["sid"]
    assert (await client.delete(f"/api/auth/sessions/{own_sid}", headers=h)).status_code == 204
    await error_body(await client.get("/api/auth/me", headers=h), 401)


# --- me and verify ---------------------------------------------------------------------

async def test_me_returns_the_user_object(client) -> None:
    reg = await register(client)
    r = await client.get("/api/auth/me", headers=bearer(reg["accessToken"]))
    assert r.status_code == 200
    assert await r.get_json() == reg["user"]


async def test_verify_says_valid_and_which_credential(client) -> None:
    reg = await register(client)
    r = await client.get("/api/auth/verify", headers=bearer(reg["accessToken"]))
    body = await r.get_json()
    assert r.status_code == 200
    assert body["valid"] is True and body["credential"] == "access_token"
    assert body["userId"] == reg["user"]["id"] and body["role"] == "ADMIN"
    assert body["sessionId"] == claims_of(reg["accessToken"])["sid"]
    r = await client.post("/api/auth/api-keys", json={"name": "ci"}, headers=bearer(reg["accessToken"]))
    key = await r.get_json()
    r = await client.get("/api/auth/verify", headers=bearer(key["apiKey"]))
    body = await r.get_json()
    assert r.status_code == 200
    assert body["valid"] is True and body["credential"] == "api_key"
    assert body["userId"] == reg["user"]["id"] and body["apiKeyId"] == key["id"]
    await error_body(await client.get("/api/auth/verify", headers=bearer("dx_live_nope")), 401)


# --- what reaches the database ---------------------------------------------------------

async def test_no_plaintext_secret_reaches_the_database(client, services) -> None:
    password = "Plaintext-Pa55word-Canary"
    reg = await register(client, password=password)
    logged_in = await login(client, password=password)
    r = await refresh(client, logged_in["refreshToken"])
    assert r.status_code == 200
    refreshed = await r.get_json()
    r = await client.post("/api/auth/api-keys", json={"name": "ci"}, headers=bearer(refreshed["accessToken"]))
    assert r.status_code == 201
    api_key = (await r.get_json())["apiKey"]
    assert await status_of(client, api_key) == 200

    secrets_ = {
        "password": password,
        "register refresh token": reg["refreshToken"],
        "login refresh token": logged_in["refreshToken"],
        "rotated refresh token": refreshed["refreshToken"],
        "access token": refreshed["accessToken"],
        "access token signature": refreshed["accessToken"].rsplit(".", 1)[1],
        "api key": api_key,
        "api key body": api_key[len("dx_live_"):],
    }
    # What should be there instead: the SHA-256 of the key and of the newest refresh token.
    expected_hashes = [hashlib.sha256(api_key.encode()).hexdigest(),
                       hashlib.sha256(refreshed["refreshToken"].encode()).hexdigest()]

    if services.db.engine.dialect.name == "sqlite":
        db_file = Path(services.db.engine.url.database)
        files = [p for p in (db_file, Path(f"{db_file}-wal"), Path(f"{db_file}-journal")) if p.exists()]
        assert db_file in files
        raw = b"".join(p.read_bytes() for p in files)
        for what, value in secrets_.items():
            assert value.encode() not in raw, f"{what} found in the SQLite files"
        for digest in expected_hashes:
            assert digest.encode() in raw  # proves these are the files the daemon writes
    else:
        def dump(conn: sa.Connection) -> str:
            cells: list[str] = []
            for table in (users, sessions, api_keys):
                for row in conn.execute(sa.select(table)):
                    cells += [str(v) for v in row if v is not None]
            return "\n".join(cells)

        text = await services.db.read(dump)
        for what, value in secrets_.items():
            assert value not in text, f"{what} found in the database"
        for digest in expected_hashes:
            assert digest in text
