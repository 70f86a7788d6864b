"""The console's session (issue #15): with `X-Docex-Session: cookie` the refresh token lives
in an httpOnly, SameSite=Strict cookie scoped to /api/auth instead of the body; refresh and
logout accept it only with that header (CSRF defence). Cookies are read from Set-Cookie and
sent by hand, as a browser would. Runs on SQLite and, with DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

from http.cookies import SimpleCookie
from typing import Any

import pytest
from auth_helpers import PASSWORD, bearer, error_body

COOKIE_MODE = {"X-Docex-Session": "cookie"}
ACCOUNT = {"name": "Ada", "email": "ada@example.com", "password": PASSWORD}


@pytest.fixture
def client(app: Any) -> Any:
    """A client without a cookie jar: each test sends exactly the cookies it means to."""
    return app.test_client(use_cookies=False)


def session_cookie(response: Any) -> Any:
    [header] = response.headers.getlist("Set-Cookie")
    return SimpleCookie(header)["docex_refresh"]


def sending(cookie: Any) -> dict[str, str]:
    return {"Cookie": f"docex_refresh={cookie.value}"}


async def test_login_in_cookie_mode_sets_an_httponly_strict_cookie_and_keeps_the_token_out_of_the_body(
        client: Any) -> None:
    r = await client.post("/api/auth/register", json=ACCOUNT, headers=COOKIE_MODE)
    body = await r.get_json()
    assert r.status_code == 201 and "refreshToken" not in body and body["accessToken"]
    cookie = session_cookie(r)
    assert cookie["httponly"] is True and cookie["samesite"] == "Strict" and cookie["path"] == "/api/auth"
    assert not cookie["secure"]  # plain http: a Secure cookie would never come back
    assert int(cookie["max-age"]) == 30 * 86400

    r = await client.post("/api/auth/login", json={"email": ACCOUNT["email"], "password": PASSWORD},
                          headers=COOKIE_MODE, scheme="https")
    assert "refreshToken" not in await r.get_json()
    assert session_cookie(r)["secure"] is True  # over https (or a trusted proxy's X-Forwarded-Proto)

    plain = await client.post("/api/auth/login", json={"email": ACCOUNT["email"], "password": PASSWORD})
    assert (await plain.get_json())["refreshToken"] and "Set-Cookie" not in plain.headers


async def test_refresh_by_cookie_rotates_it_and_needs_the_header(client: Any) -> None:
    r = await client.post("/api/auth/register", json=ACCOUNT, headers=COOKIE_MODE)
    cookie = session_cookie(r)

    forged = await client.post("/api/auth/refresh", json={}, headers=sending(cookie))  # a cross-site form
    body = await error_body(forged, 403)
    assert "X-Docex-Session: cookie" in body["message"]

    r = await client.post("/api/auth/refresh", json={}, headers={**COOKIE_MODE, **sending(cookie)})
    body = await r.get_json()
    assert r.status_code == 200, body
    assert "refreshToken" not in body
    assert (await client.get("/api/auth/me", headers=bearer(body["accessToken"]))).status_code == 200
    rotated = session_cookie(r)
    assert rotated.value != cookie.value

    # The old cookie was rotated: presenting it again is theft, and revokes the login.
    await error_body(await client.post("/api/auth/refresh", json={}, headers={**COOKIE_MODE, **sending(cookie)}),
                     401)
    await error_body(await client.post("/api/auth/refresh", json={}, headers=COOKIE_MODE), 400)  # no cookie


async def test_logout_by_cookie_revokes_the_session_and_clears_the_cookie(client: Any) -> None:
    r = await client.post("/api/auth/register", json=ACCOUNT, headers=COOKIE_MODE)
    access = (await r.get_json())["accessToken"]
    cookie = session_cookie(r)

    await error_body(await client.post("/api/auth/logout", json={}, headers=sending(cookie)), 403)
    assert (await client.get("/api/auth/me", headers=bearer(access))).status_code == 200  # still logged in

    out = await client.post("/api/auth/logout", json={}, headers={**COOKIE_MODE, **sending(cookie)})
    assert out.status_code == 204
    cleared = session_cookie(out)
    assert cleared.value == "" and int(cleared["max-age"]) == 0 and cleared["path"] == "/api/auth"
    await error_body(await client.post("/api/auth/refresh", json={}, headers={**COOKIE_MODE, **sending(cookie)}),
                     401)
    await error_body(await client.get("/api/auth/me", headers=bearer(access)), 401)
