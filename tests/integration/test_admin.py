"""/api/admin over HTTP: who may call it, the users list, role and disabled changes that apply
at once, and the statistics (SPEC §4)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
import trio
from auth_helpers import PASSWORD, bearer, error_body, register

from daemon.clock import utcnow
from daemon.errors import Conflict
from daemon.storage.repos import accounts as repo
from daemon.storage.tables import users

ADMIN_USER_KEYS = {"id", "name", "email", "role", "disabled", "createdAt", "updatedAt"}
ADMIN_ROUTES = [
    ("GET", "/api/admin/users", None),
    ("GET", "/api/admin/stats", None),
    ("PATCH", "/api/admin/users/{other}", {"role": "ADMIN"}),
    ("PATCH", "/api/admin/users/{other}", {"disabled": True}),
]


async def status_of(client: Any, token: str, path: str = "/api/auth/me") -> int:
    return int((await client.get(path, headers=bearer(token))).status_code)


async def patch_user(client: Any, token: str, user_id: str, changes: dict[str, Any]) -> Any:
    return await client.patch(f"/api/admin/users/{user_id}", json=changes, headers=bearer(token))


async def new_key(client: Any, token: str, **extra: Any) -> str:
    r = await client.post("/api/auth/api-keys", json={"name": "k", **extra}, headers=bearer(token))
    body = await r.get_json()
    assert r.status_code == 201, body
    return body["apiKey"]  # type: ignore[no-any-return]


@pytest.fixture
async def people(client) -> dict[str, dict[str, Any]]:
    """The first account (ADMIN) and two USERs."""
    return {
        "admin": await register(client, "Ada", "ada@example.com"),
        "bob": await register(client, "Bob", "bob@example.com"),
        "cy": await register(client, "Cy", "cy@example.com"),
    }


# --- who may call ----------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
async def test_a_user_gets_403_on_admin_routes(client, people, method, path, body) -> None:
    other = people["cy"]["user"]["id"]
    for credential in (people["bob"]["accessToken"], await new_key(client, people["bob"]["accessToken"])):
        r = await client.open(path.format(other=other), method=method, json=body, headers=bearer(credential))
        await error_body(r, 403)
    # Nothing changed.
    r = await client.get("/api/admin/users", headers=bearer(people["admin"]["accessToken"]))
    cy = next(u for u in (await r.get_json())["data"] if u["id"] == other)
    assert cy["role"] == "USER" and cy["disabled"] is False


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
async def test_no_credential_is_401_on_admin_routes(client, people, method, path, body) -> None:
    r = await client.open(path.format(other=people["cy"]["user"]["id"]), method=method, json=body)
    await error_body(r, 401)


# --- users list ------------------------------------------------------------------------

async def test_an_admin_lists_users_without_hashes(client, services, people) -> None:
    r = await client.get("/api/admin/users", headers=bearer(people["admin"]["accessToken"]))
    page = await r.get_json()
    assert r.status_code == 200
    assert set(page) == {"data", "nextCursor"} and page["nextCursor"] is None
    assert len(page["data"]) == 3
    by_email = {u["email"]: u for u in page["data"]}
    assert set(by_email) == {"ada@example.com", "bob@example.com", "cy@example.com"}
    for u in page["data"]:
        assert set(u) == ADMIN_USER_KEYS
    assert by_email["ada@example.com"]["role"] == "ADMIN"
    assert by_email["bob@example.com"]["role"] == "USER" and by_email["bob@example.com"]["disabled"] is False
    assert by_email["bob@example.com"]["id"] == people["bob"]["user"]["id"]
    text = (await r.get_data()).decode()
    for email in by_email:
        stored = await services.db.read(repo.find_user_by_email, email)
        assert stored.password_hash not in text
    assert "$2b$" not in text and "hash" not in text.lower()


async def test_the_users_list_pages(client, people) -> None:
    h = bearer(people["admin"]["accessToken"])
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        r = await client.get("/api/admin/users", headers=h,
                             query_string={"limit": 1} | ({"cursor": cursor} if cursor else {}))
        page = await r.get_json()
        assert r.status_code == 200 and len(page["data"]) <= 1
        seen += [u["id"] for u in page["data"]]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 3
    r = await client.get("/api/admin/users", headers=h, query_string={"limit": 101})
    await error_body(r, 400)


# --- changing users --------------------------------------------------------------------

async def test_promotion_applies_to_the_users_existing_token_at_once(client, people) -> None:
    bob = people["bob"]
    await error_body(await client.get("/api/admin/stats", headers=bearer(bob["accessToken"])), 403)
    r = await patch_user(client, people["admin"]["accessToken"], bob["user"]["id"], {"role": "ADMIN"})
    body = await r.get_json()
    assert r.status_code == 200
    assert set(body) == ADMIN_USER_KEYS
    assert body["id"] == bob["user"]["id"] and body["role"] == "ADMIN" and body["disabled"] is False
    # Same token, issued while Bob was a USER.
    assert await status_of(client, bob["accessToken"], "/api/admin/stats") == 200
    r = await client.get("/api/auth/me", headers=bearer(bob["accessToken"]))
    assert (await r.get_json())["role"] == "ADMIN"


async def test_demotion_applies_at_once_to_tokens_and_admin_keys(client, people) -> None:
    admin, bob = people["admin"], people["bob"]
    assert (await patch_user(client, admin["accessToken"], bob["user"]["id"], {"role": "ADMIN"})).status_code == 200
    # Bob, now ADMIN, logs in (his token says ADMIN) and makes an ADMIN key.
    r = await client.post("/api/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
    token = (await r.get_json())["accessToken"]
    key = await new_key(client, token, role="ADMIN")
    assert await status_of(client, key, "/api/admin/stats") == 200
    r = await patch_user(client, admin["accessToken"], bob["user"]["id"], {"role": "USER"})
    assert r.status_code == 200 and (await r.get_json())["role"] == "USER"
    await error_body(await client.get("/api/admin/stats", headers=bearer(token)), 403)
    await error_body(await client.get("/api/admin/stats", headers=bearer(key)), 403)
    # Both still authenticate, as a USER.
    assert await status_of(client, token) == 200 and await status_of(client, key) == 200


async def test_disabling_ends_sessions_for_good_and_suspends_keys(client, people) -> None:
    admin, bob = people["admin"], people["bob"]
    key = await new_key(client, bob["accessToken"])
    assert await status_of(client, bob["accessToken"]) == 200 and await status_of(client, key) == 200
    r = await patch_user(client, admin["accessToken"], bob["user"]["id"], {"disabled": True})
    body = await r.get_json()
    assert r.status_code == 200 and body["disabled"] is True
    await error_body(await client.get("/api/auth/me", headers=bearer(bob["accessToken"])), 401)
    await error_body(await client.get("/api/auth/me", headers=bearer(key)), 401)
    r = await client.post("/api/auth/refresh", json={"refreshToken": bob["refreshToken"]})
    await error_body(r, 401)
    r = await client.post("/api/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
    assert r.status_code in (401, 403)
    # Other users are untouched.
    assert await status_of(client, people["cy"]["accessToken"]) == 200

    r = await patch_user(client, admin["accessToken"], bob["user"]["id"], {"disabled": False})
    assert r.status_code == 200 and (await r.get_json())["disabled"] is False
    # The sessions of before stay ended: a thief's stolen tokens do not come back with the account.
    await error_body(await client.get("/api/auth/me", headers=bearer(bob["accessToken"])), 401)
    await error_body(await client.post("/api/auth/refresh", json={"refreshToken": bob["refreshToken"]}), 401)
    r = await client.post("/api/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
    assert r.status_code == 200
    assert await status_of(client, (await r.get_json())["accessToken"]) == 200
    assert await status_of(client, key) == 200  # a key is revoked only by revoking it


async def test_an_admin_cannot_demote_or_disable_themselves(client, people) -> None:
    admin = people["admin"]
    me = admin["user"]["id"]
    for changes in ({"role": "USER"}, {"disabled": True}, {"role": "USER", "disabled": True}):
        await error_body(await patch_user(client, admin["accessToken"], me, changes), 409)
    assert await status_of(client, admin["accessToken"], "/api/admin/stats") == 200
    r = await client.get("/api/auth/me", headers=bearer(admin["accessToken"]))
    assert (await r.get_json())["role"] == "ADMIN"
    # Harmless changes to oneself are fine.
    r = await patch_user(client, admin["accessToken"], me, {"role": "ADMIN"})
    assert r.status_code == 200 and (await r.get_json())["role"] == "ADMIN"


async def test_unknown_user_is_404_and_a_bad_body_is_400(client, people) -> None:
    h = people["admin"]["accessToken"]
    await error_body(await patch_user(client, h, "01h00000000000000000000000", {"role": "ADMIN"}), 404)
    await error_body(await patch_user(client, h, "no-such-user", {"disabled": True}), 404)
    body = await error_body(await patch_user(client, h, people["bob"]["user"]["id"], {"role": "ROOT"}), 400)
    assert isinstance(body["message"], list) and any(m.startswith("role") for m in body["message"])
    body = await error_body(await patch_user(client, h, people["bob"]["user"]["id"], {"disabled": "maybe"}), 400)
    assert isinstance(body["message"], list)


# --- statistics ------------------------------------------------------------------------

async def test_stats_count_users_admins_sessions_and_keys(client, people) -> None:
    admin_token = people["admin"]["accessToken"]
    h = bearer(admin_token)
    r = await client.get("/api/admin/stats", headers=h)
    stats = await r.get_json()
    assert r.status_code == 200
    assert stats == stats | {"users": 3, "admins": 1, "disabledUsers": 0, "activeSessions": 3,
                             "activeApiKeys": 0}

    await new_key(client, admin_token)
    await new_key(client, people["bob"]["accessToken"])
    r = await client.post("/api/auth/api-keys", json={"name": "gone"}, headers=bearer(people["cy"]["accessToken"]))
    gone = await r.get_json()
    await client.delete(f"/api/auth/api-keys/{gone['id']}", headers=bearer(people["cy"]["accessToken"]))
    await client.post("/api/auth/login", json={"email": "bob@example.com", "password": PASSWORD})
    await client.post("/api/auth/logout", json={"refreshToken": people["cy"]["refreshToken"]})
    await patch_user(client, admin_token, people["bob"]["user"]["id"], {"role": "ADMIN"})
    await patch_user(client, admin_token, people["cy"]["user"]["id"], {"disabled": True})
    await register(client, "Dee", "dee@example.com")

    stats = await (await client.get("/api/admin/stats", headers=h)).get_json()
    assert stats["users"] == 4
    assert stats["admins"] == 2
    assert stats["disabledUsers"] == 1
    assert stats["activeApiKeys"] == 2
    # ada, bob twice and dee; cy logged out.
    assert stats["activeSessions"] == 4


async def test_two_admins_demoting_each_other_at_once_leave_one_admin(client, services, people) -> None:
    """Each may demote the other, but not both at once: the installation keeps an admin."""
    admin, bob = people["admin"], people["bob"]
    assert (await patch_user(client, admin["accessToken"], bob["user"]["id"], {"role": "ADMIN"})).status_code == 200
    statuses: list[int] = []

    async def demote(actor: dict[str, Any], target: dict[str, Any], change: dict[str, Any]) -> None:
        r = await patch_user(client, actor["accessToken"], target["user"]["id"], change)
        statuses.append(r.status_code)

    for change in ({"role": "USER"}, {"disabled": True}):
        statuses.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(demote, admin, bob, change)
            nursery.start_soon(demote, bob, admin, change)
        # The second either finds its caller no longer an admin (403), or no longer active at all
        # when the first disabled them before the second was authenticated (401), or would leave
        # no admin (409).
        refused = (403, 409, 401) if change.get("disabled") else (403, 409)
        assert sorted(statuses) in [[200, code] for code in refused], statuses
        assert await services.db.read(active_admins) == 1
        # Put Bob back as an active admin for the next round, whoever won.
        for person in (admin, bob):
            other = bob if person is admin else admin
            await patch_user(client, person["accessToken"], other["user"]["id"], {"role": "ADMIN", "disabled": False})


async def test_the_last_active_admin_cannot_be_demoted_even_by_the_database_layer(services, people) -> None:
    """The rule holds below the HTTP check that an admin cannot demote themselves."""
    admin_id = people["admin"]["user"]["id"]
    for change in ({"role": "USER"}, {"disabled": True}):
        with pytest.raises(Conflict, match="no active admin"):
            await services.db.run(repo.update_user, admin_id, change, utcnow())
        row = await services.db.read(repo.get_user, admin_id)
        assert row.role == "ADMIN" and row.disabled is False


def active_admins(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(users)
                            .where(users.c.role == "ADMIN", users.c.disabled.is_(False))).scalar_one())
