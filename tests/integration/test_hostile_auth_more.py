"""More hostile requests against accounts and sessions, and what every route shares: each
is answered in the SPEC §3 shape, never with a 500, and changes nothing it should not."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa
from auth_helpers import bearer, error_body, register
from jobs_helpers import create_schema

from daemon.services import Services
from daemon.storage.ids import new_id
from daemon.storage.repos import learning as learning_repo
from daemon.storage.tables import api_keys, learned_keys

# Parse as datetimes, but one is past 9999-12-31 in UTC and the other before 0001-01-01.
NO_UTC_DATETIME = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"]


async def _count(services: Services, query: Any) -> int:
    return int(await services.db.read(lambda conn: conn.execute(query).scalar_one()))


# --- dates with no UTC datetime -----------------------------------------------------------

@pytest.mark.parametrize("when", NO_UTC_DATETIME)
async def test_an_api_key_expiry_with_no_utc_datetime_is_400_and_makes_no_key(
        client: Any, services: Services, when: str) -> None:
    """9999-12-31T23:59:59-23:59 passed as a date in the future, then overflowed where the
    database stores it in UTC: a 500. The other was refused, but only as a past date."""
    pair = await register(client)
    r = await client.post("/api/auth/api-keys", json={"name": "ci", "expiresAt": when},
                          headers=bearer(pair["accessToken"]))
    body = await error_body(r, 400)
    assert body["message"] == ["expiresAt must be a date between 0001-01-01 and 9999-12-31 in UTC"]
    assert await _count(services, sa.select(sa.func.count()).select_from(api_keys)) == 0


@pytest.mark.parametrize("when", NO_UTC_DATETIME)
async def test_a_recovery_since_a_time_with_no_utc_datetime_is_400(client: Any, when: str) -> None:
    """The time was compared in the query, in UTC: OverflowError, a 500."""
    auth = bearer((await register(client))["accessToken"])
    r = await client.post("/api/webhooks", json={"url": "https://hooks.example.com/docex", "events": ["job.*"]},
                          headers=auth)
    endpoint = await r.get_json()
    assert r.status_code == 201, endpoint
    r = await client.post(f"/api/webhooks/{endpoint['id']}/recover", json={"since": when}, headers=auth)
    body = await error_body(r, 400)
    assert body["message"] == ["since must be a date between 0001-01-01 and 9999-12-31 in UTC"]


@pytest.mark.parametrize("when", [1700000000, 1e11, "1700000000", 1.5])
async def test_a_time_written_as_a_number_is_400_not_a_guess_at_its_unit(client: Any, when: object) -> None:
    """pydantic read a number as Unix seconds, or as milliseconds past 2e10 (1e11 was 1973):
    the API documents ISO 8601 for `since` and `expiresAt`."""
    auth = bearer((await register(client))["accessToken"])
    r = await client.post("/api/webhooks", json={"url": "https://hooks.example.com/docex", "events": ["job.*"]},
                          headers=auth)
    endpoint = await r.get_json()
    r = await client.post(f"/api/webhooks/{endpoint['id']}/recover", json={"since": when}, headers=auth)
    assert (await error_body(r, 400))["message"] == ["since must be a valid ISO 8601 date string"]
    r = await client.post("/api/auth/api-keys", json={"name": "ci", "expiresAt": when}, headers=auth)
    assert (await error_body(r, 400))["message"] == ["expiresAt must be a valid ISO 8601 date string"]


# --- refresh-token theft ------------------------------------------------------------------

async def test_logging_out_with_an_already_rotated_refresh_token_is_theft(client: Any) -> None:
    """SPEC §4: presenting an already-rotated refresh token again revokes every session of
    that login and answers 401. /logout took it as an idempotent logout (204) and left the
    thief's, or the user's, newer session of the family alive."""
    first = await register(client)
    r = await client.post("/api/auth/refresh", json={"refreshToken": first["refreshToken"]})
    rotated = await r.get_json()
    assert r.status_code == 200, rotated

    await error_body(await client.post("/api/auth/logout", json={"refreshToken": first["refreshToken"]}), 401)
    await error_body(await client.get("/api/auth/me", headers=bearer(rotated["accessToken"])), 401)
    await error_body(await client.post("/api/auth/refresh", json={"refreshToken": rotated["refreshToken"]}), 401)


async def test_logging_out_twice_with_the_same_token_is_still_204(client: Any) -> None:
    """What the theft rule must not change: logout is idempotent for the token it revoked."""
    pair = await register(client)
    for _ in range(2):
        r = await client.post("/api/auth/logout", json={"refreshToken": pair["refreshToken"]})
        assert r.status_code == 204


# --- what every route shares --------------------------------------------------------------

async def test_methods_no_route_has_are_not_labels_of_the_public_metrics(client: Any) -> None:
    """Every method name a client made up (any HTTP token, kilobytes long) became a new
    label of docex_http_request_duration_seconds: unauthenticated, the histogram grew
    without bound in memory and in every /metrics answer."""
    auth = bearer((await register(client))["accessToken"])
    for method in ("XMETHOD1", "XMETHOD2", "Y" * 2000):
        r = await client.open("/api/jobs", method=method, headers=auth)
        await error_body(r, 405)
        await error_body(await client.open("/nowhere", method=method), 404)
    text = (await (await client.get("/metrics")).get_data()).decode()
    assert "XMETHOD" not in text and "YYYY" not in text
    assert 'method="OTHER"' in text
    assert 'method="POST",route="/api/auth/register"' in text  # known methods keep their name


async def test_a_path_with_a_doubled_slash_is_a_json_404_not_a_redirect_to_the_host_header(client: Any) -> None:
    """werkzeug merged the slashes with a 308 and an HTML body, to a Location built from the
    Host header the client sent (http://evil.example/api/auth/login, for a POST that carries
    a password): not the SPEC §3 shape, and a redirect an attacker's Host header chooses."""
    for method, path in [("POST", "/api//auth/login"), ("GET", "/api//jobs"), ("GET", "/api/auth//me")]:
        r = await client.open(path, method=method, json={"email": "a@example.com", "password": "x"},
                              headers={"Host": "evil.example"})
        body = await error_body(r, 404)
        assert "Location" not in r.headers
        assert body["message"] == f"Cannot {method} {path}"


# --- learned examples ---------------------------------------------------------------------

async def test_deleting_an_example_under_another_schema_of_the_caller_leaves_it_whole(
        client: Any, services: Services) -> None:
    """DELETE /api/schemas/A/examples/<an example of B> answered 404 but first deleted the
    example's lookup keys: B's example stayed listed and was never used again."""
    auth = bearer((await register(client))["accessToken"])
    first = await create_schema(client, auth, name="First")
    second = await create_schema(client, auth, name="Second")
    user_id = str((await (await client.get("/api/auth/me", headers=auth)).get_json())["id"])
    example_id = await services.db.run(
        learning_repo.record_example, user_id=user_id, schema_id=second, job_id=new_id(),
        fields={"/invoice_number": {"label": "Invoice"}}, keys=["w:acme", "r:42"], now=dt.datetime.now(dt.UTC))
    keys = sa.select(sa.func.count()).select_from(learned_keys).where(learned_keys.c.example_id == example_id)

    r = await client.delete(f"/api/schemas/{first}/examples/{example_id}", headers=auth)
    assert (await error_body(r, 404))["message"] == "Example not found"
    assert await _count(services, keys) == 2
    assert await services.db.read(learning_repo.closest_examples, user_id, second, ["w:acme"])

    r = await client.delete(f"/api/schemas/{second}/examples/{example_id}", headers=auth)
    assert r.status_code == 204
    assert await _count(services, keys) == 0
