"""API keys over HTTP: create, list, use, revoke, expire, roles, the per-user cap and the
configured prefix (SPEC §4; seed §5.6)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
from typing import Any

import trio
from auth_helpers import bearer, error_body, register

CREATED_KEYS = {"id", "name", "role", "prefix", "last4", "createdAt", "expiresAt", "apiKey"}
KEY_SHAPE = re.compile(r"dx_live_[0-9A-Za-z]{43}")
ISO_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


async def create_key(client: Any, token: str, name: str = "ci", **extra: Any) -> dict[str, Any]:
    r = await client.post("/api/auth/api-keys", json={"name": name, **extra}, headers=bearer(token))
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def list_keys(client: Any, token: str, **query: Any) -> dict[str, Any]:
    r = await client.get("/api/auth/api-keys", headers=bearer(token), query_string=query or None)
    body = await r.get_json()
    assert r.status_code == 200, body
    return body  # type: ignore[no-any-return]


async def status_of(client: Any, token: str, path: str = "/api/auth/me") -> int:
    return int((await client.get(path, headers=bearer(token))).status_code)


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@dataclasses.dataclass
class Pair:
    admin: dict[str, Any]
    user: dict[str, Any]


async def admin_and_user(client: Any) -> Pair:
    return Pair(await register(client, "Ada", "ada@example.com"), await register(client, "Bob", "bob@example.com"))


# --- create and list -------------------------------------------------------------------

async def test_create_returns_201_with_the_key_once(client) -> None:
    people = await admin_and_user(client)
    r = await client.post("/api/auth/api-keys", json={"name": "deploy bot"},
                          headers=bearer(people.user["accessToken"]))
    body = await r.get_json()
    assert r.status_code == 201
    assert set(body) >= CREATED_KEYS, body
    assert not any("hash" in k.lower() for k in body)
    assert body["name"] == "deploy bot"
    assert body["role"] == "USER"
    assert body["prefix"] == "dx_live_"
    assert KEY_SHAPE.fullmatch(body["apiKey"]), body["apiKey"]
    assert body["last4"] == body["apiKey"][-4:]
    assert ISO_Z.fullmatch(body["createdAt"]) and body["expiresAt"] is None
    assert hashlib.sha256(body["apiKey"].encode()).hexdigest() not in str(body)


async def test_keys_are_distinct(client) -> None:
    reg = await register(client)
    keys = [(await create_key(client, reg["accessToken"], f"k{i}"))["apiKey"] for i in range(5)]
    assert len(set(keys)) == 5
    assert len({k[-4:] for k in keys}) >= 4  # last4 comes from the random part


async def test_the_list_has_metadata_but_never_the_key_or_its_hash(client) -> None:
    reg = await register(client)
    first = await create_key(client, reg["accessToken"], "one")
    second = await create_key(client, reg["accessToken"], "two")
    page = await list_keys(client, reg["accessToken"])
    assert set(page) == {"data", "nextCursor"} and page["nextCursor"] is None
    assert {k["id"] for k in page["data"]} == {first["id"], second["id"]}
    text = str(page)
    for created in (first, second):
        assert created["apiKey"] not in text
        assert created["apiKey"][len("dx_live_"):] not in text
        assert hashlib.sha256(created["apiKey"].encode()).hexdigest() not in text
    for item in page["data"]:
        assert "apiKey" not in item
        assert not any("hash" in k.lower() for k in item)
        assert CREATED_KEYS - {"apiKey"} <= set(item)
        original = first if item["id"] == first["id"] else second
        for field in ("name", "role", "prefix", "last4", "createdAt", "expiresAt"):
            assert item[field] == original[field]


async def test_the_list_pages_with_limit_and_cursor(client) -> None:
    reg = await register(client)
    made = {(await create_key(client, reg["accessToken"], f"k{i}"))["id"] for i in range(3)}
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        page = await list_keys(client, reg["accessToken"], limit=1, **({"cursor": cursor} if cursor else {}))
        assert len(page["data"]) <= 1
        seen += [k["id"] for k in page["data"]]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert len(seen) == 3 and set(seen) == made
    r = await client.get("/api/auth/api-keys", headers=bearer(reg["accessToken"]), query_string={"limit": "0"})
    await error_body(r, 400)


async def test_a_key_shows_only_to_its_owner(client) -> None:
    people = await admin_and_user(client)
    await create_key(client, people.admin["accessToken"], "admin's")
    assert (await list_keys(client, people.user["accessToken"]))["data"] == []


async def test_create_validation_is_400(client) -> None:
    reg = await register(client)
    h = bearer(reg["accessToken"])
    r = await client.post("/api/auth/api-keys", json={}, headers=h)
    body = await error_body(r, 400)
    assert "name should not be empty" in body["message"]
    r = await client.post("/api/auth/api-keys", json={"name": "k", "role": "ROOT"}, headers=h)
    body = await error_body(r, 400)
    assert isinstance(body["message"], list) and any(m.startswith("role") for m in body["message"])
    r = await client.post("/api/auth/api-keys", json={"name": "k", "expiresAt": "tomorrow"}, headers=h)
    body = await error_body(r, 400)
    assert any(m.startswith("expiresAt") for m in body["message"])


# --- using a key -----------------------------------------------------------------------

async def test_a_key_works_as_bearer_and_records_last_use(client) -> None:
    reg = await register(client)
    key = await create_key(client, reg["accessToken"])
    [listed] = (await list_keys(client, reg["accessToken"]))["data"]
    assert listed["lastUsedAt"] is None
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2)
    r = await client.get("/api/auth/me", headers=bearer(key["apiKey"]))
    assert r.status_code == 200
    assert await r.get_json() == reg["user"]
    [listed] = (await list_keys(client, reg["accessToken"]))["data"]
    assert listed["lastUsedAt"] is not None and ISO_Z.fullmatch(listed["lastUsedAt"])
    assert listed["lastUsedAt"] >= iso(before)
    # Another route, another method: still the same principal.
    r = await client.get("/api/auth/verify", headers=bearer(key["apiKey"]))
    body = await r.get_json()
    assert body["credential"] == "api_key" and body["apiKeyId"] == key["id"]


async def test_a_wrong_or_mangled_key_is_401(client) -> None:
    reg = await register(client)
    key = (await create_key(client, reg["accessToken"]))["apiKey"]
    flipped = key[:-1] + ("A" if key[-1] != "A" else "B")
    for token in (flipped, key[:-1], key + "x", "dx_live_" + "0" * 43, key[len("dx_live_"):]):
        await error_body(await client.get("/api/auth/me", headers=bearer(token)), 401)
    assert await status_of(client, key) == 200


async def test_creating_a_key_with_an_api_key_is_403(client) -> None:
    reg = await register(client)
    key = await create_key(client, reg["accessToken"])
    r = await client.post("/api/auth/api-keys", json={"name": "child"}, headers=bearer(key["apiKey"]))
    await error_body(r, 403)
    assert len((await list_keys(client, reg["accessToken"]))["data"]) == 1


async def test_a_user_cannot_mint_an_admin_key(client) -> None:
    people = await admin_and_user(client)
    r = await client.post("/api/auth/api-keys", json={"name": "sneaky", "role": "ADMIN"},
                          headers=bearer(people.user["accessToken"]))
    await error_body(r, 403)
    assert (await list_keys(client, people.user["accessToken"]))["data"] == []
    explicit = await create_key(client, people.user["accessToken"], "fine", role="USER")
    assert explicit["role"] == "USER"


async def test_an_admin_may_make_a_user_key_which_is_refused_on_admin_routes(client) -> None:
    people = await admin_and_user(client)
    admin_token = people.admin["accessToken"]
    user_key = await create_key(client, admin_token, "reporting", role="USER")
    admin_key = await create_key(client, admin_token, "ops", role="ADMIN")
    default_key = await create_key(client, admin_token, "default")
    assert user_key["role"] == "USER" and admin_key["role"] == "ADMIN"
    assert default_key["role"] == "ADMIN"  # no role given: the owner's
    for path in ("/api/admin/stats", "/api/admin/users"):
        await error_body(await client.get(path, headers=bearer(user_key["apiKey"])), 403)
        assert await status_of(client, admin_key["apiKey"], path) == 200
    assert await status_of(client, user_key["apiKey"]) == 200  # still a valid key elsewhere


# --- revoke and expiry -----------------------------------------------------------------

async def test_revoked_key_is_401_at_once(client) -> None:
    reg = await register(client)
    key = await create_key(client, reg["accessToken"])
    keep = await create_key(client, reg["accessToken"], "keep")
    assert await status_of(client, key["apiKey"]) == 200
    r = await client.delete(f"/api/auth/api-keys/{key['id']}", headers=bearer(reg["accessToken"]))
    assert r.status_code == 204 and await r.get_data() == b""
    await error_body(await client.get("/api/auth/me", headers=bearer(key["apiKey"])), 401)
    assert [k["id"] for k in (await list_keys(client, reg["accessToken"]))["data"]] == [keep["id"]]
    assert await status_of(client, keep["apiKey"]) == 200
    r = await client.delete(f"/api/auth/api-keys/{key['id']}", headers=bearer(reg["accessToken"]))
    await error_body(r, 404)


async def test_a_key_may_revoke_itself(client) -> None:
    reg = await register(client)
    key = await create_key(client, reg["accessToken"])
    r = await client.delete(f"/api/auth/api-keys/{key['id']}", headers=bearer(key["apiKey"]))
    assert r.status_code == 204
    await error_body(await client.get("/api/auth/me", headers=bearer(key["apiKey"])), 401)


async def test_a_key_revokes_no_other_key_nor_any_session(client) -> None:
    """Before: a leaked USER key of an admin revoked the admin's ADMIN keys, and ended every
    session of its owner one by one, which logout-all refuses to a key."""
    people = await admin_and_user(client)
    admin_token = people.admin["accessToken"]
    user_key = await create_key(client, admin_token, "reporting", role="USER")
    admin_key = await create_key(client, admin_token, "ops", role="ADMIN")
    r = await client.delete(f"/api/auth/api-keys/{admin_key['id']}", headers=bearer(user_key["apiKey"]))
    body = await error_body(r, 403)
    assert body["message"] == "An API key may revoke only itself; revoking another key needs an access token"
    assert await status_of(client, admin_key["apiKey"], "/api/admin/stats") == 200
    r = await client.get("/api/auth/sessions", headers=bearer(admin_key["apiKey"]))
    await error_body(r, 403)
    sessions = (await (await client.get("/api/auth/sessions", headers=bearer(admin_token))).get_json())["data"]
    r = await client.delete(f"/api/auth/sessions/{sessions[0]['id']}", headers=bearer(admin_key["apiKey"]))
    await error_body(r, 403)
    assert await status_of(client, admin_token) == 200  # still signed in
    r = await client.delete(f"/api/auth/api-keys/{admin_key['id']}", headers=bearer(admin_token))
    assert r.status_code == 204


async def test_another_users_key_is_404_and_keeps_working(client) -> None:
    people = await admin_and_user(client)
    theirs = await create_key(client, people.admin["accessToken"], "admin's")
    r = await client.delete(f"/api/auth/api-keys/{theirs['id']}", headers=bearer(people.user["accessToken"]))
    await error_body(r, 404)
    assert await status_of(client, theirs["apiKey"]) == 200
    r = await client.delete("/api/auth/api-keys/01h00000000000000000000000",
                            headers=bearer(people.user["accessToken"]))
    await error_body(r, 404)


async def test_expires_at_in_the_past_or_without_a_zone_is_400(client) -> None:
    reg = await register(client)
    h = bearer(reg["accessToken"])
    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    r = await client.post("/api/auth/api-keys", json={"name": "k", "expiresAt": iso(past)}, headers=h)
    body = await error_body(r, 400)
    assert isinstance(body["message"], list) and any("expiresAt" in m for m in body["message"])
    naive = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).replace(tzinfo=None).isoformat()
    r = await client.post("/api/auth/api-keys", json={"name": "k", "expiresAt": naive}, headers=h)
    await error_body(r, 400)
    assert (await list_keys(client, reg["accessToken"]))["data"] == []


async def test_a_key_stops_working_when_it_expires(client) -> None:
    reg = await register(client)
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
    key = await create_key(client, reg["accessToken"], "short", expiresAt=iso(expires))
    assert key["expiresAt"] is not None
    shown = dt.datetime.fromisoformat(key["expiresAt"].replace("Z", "+00:00"))
    assert abs((shown - expires).total_seconds()) < 0.01
    assert await status_of(client, key["apiKey"]) == 200
    await trio.sleep(max(0.0, (expires - dt.datetime.now(dt.UTC)).total_seconds()) + 0.1)
    body = await error_body(await client.get("/api/auth/me", headers=bearer(key["apiKey"])), 401)
    assert isinstance(body["message"], str)


async def test_the_26th_active_key_is_409_until_one_is_revoked(client) -> None:
    reg = await register(client)
    token = reg["accessToken"]
    made = [await create_key(client, token, f"k{i}") for i in range(25)]
    r = await client.post("/api/auth/api-keys", json={"name": "one too many"}, headers=bearer(token))
    body = await error_body(r, 409)
    assert isinstance(body["message"], str)
    page = await list_keys(client, token, limit=100)
    assert len(page["data"]) == 25
    r = await client.delete(f"/api/auth/api-keys/{made[0]['id']}", headers=bearer(token))
    assert r.status_code == 204
    again = await create_key(client, token, "replacement")
    assert await status_of(client, again["apiKey"]) == 200
    await error_body(await client.post("/api/auth/api-keys", json={"name": "27"}, headers=bearer(token)), 409)


async def test_the_cap_is_per_user(client) -> None:
    people = await admin_and_user(client)
    for i in range(25):
        await create_key(client, people.admin["accessToken"], f"k{i}")
    assert (await create_key(client, people.user["accessToken"]))["role"] == "USER"


# --- configuration ---------------------------------------------------------------------

async def test_a_new_prefix_applies_to_new_keys_and_old_keys_keep_working(client, services) -> None:
    reg = await register(client)
    old = await create_key(client, reg["accessToken"], "old")
    services.config = dataclasses.replace(
        services.config, auth=dataclasses.replace(services.config.auth, api_key_prefix="acme_test_"))
    new = await create_key(client, reg["accessToken"], "new")
    assert new["prefix"] == "acme_test_"
    assert re.fullmatch(r"acme_test_[0-9A-Za-z]{43}", new["apiKey"])
    assert old["apiKey"].startswith("dx_live_")
    assert await status_of(client, old["apiKey"]) == 200
    assert await status_of(client, new["apiKey"]) == 200
    listed = {k["id"]: k["prefix"] for k in (await list_keys(client, reg["accessToken"]))["data"]}
    assert listed == {old["id"]: "dx_live_", new["id"]: "acme_test_"}
