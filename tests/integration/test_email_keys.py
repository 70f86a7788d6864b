"""One account per e-mail address, whatever its spelling (daemon.auth.emails): look-alike
registrations refused, every spelling signs in to the same account, IDNA domains, and
the migration that rewrote the stored keys. Runs on SQLite and PostgreSQL.

Why a look-alike spelling is refused at registration rather than folded into the same
key: the first to register a key owns it, so if ``\\u212aate@example.com`` (Kelvin sign)
were accepted and folded, whoever registered it first would hold ``kate@example.com``'s
key and the real Kate would get 409. Refused, it can never take anyone's key; the plain
spelling always can be registered, and every spelling still finds it at login.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from jobs_helpers import PASSWORD, bad_request, error_of

from daemon.auth.accounts import Client, login
from daemon.auth.passwords import hash_password
from daemon.config import Config, RateLimit
from daemon.services import open_services
from daemon.storage.database import Database
from daemon.storage.migrate import upgrade
from daemon.storage.tables import users

KELVIN = "\u212a"  # KELVIN SIGN, looks like K; NFKC and str.lower() both make it k


@pytest.fixture
def config(config: Config) -> Config:
    """More registrations per minute than the default 5 (login keeps its limit)."""
    return dataclasses.replace(config, rate_limits=dataclasses.replace(config.rate_limits,
                                                                       register=RateLimit(100, 60)))


async def _register(client: Any, email: str) -> Any:
    return await client.post("/api/auth/register", json={"name": "Someone", "email": email, "password": PASSWORD})


async def _login(client: Any, email: str, password: str = PASSWORD) -> Any:
    return await client.post("/api/auth/login", json={"email": email, "password": password})


async def test_a_look_alike_cannot_take_the_real_address_first(client: Any) -> None:
    for squatter, plain in ((f"{KELVIN}ate@example.com", "Kate@example.com"),
                            ("ｋａｔｅ@example.com", "kate@example.com"),
                            ("kate@ｅｘａｍｐｌｅ.com", "kate@example.com")):
        messages = await bad_request(await _register(client, squatter))
        assert messages == [f"email must be written with plain characters (as {plain})"], messages
    r = await _register(client, "kate@example.com")  # the real Kate is not locked out
    assert r.status_code == 201, await r.get_json()
    kate = (await r.get_json())["user"]["id"]
    assert (await bad_request(await _register(client, f"{KELVIN}ate@example.com")))[0].startswith("email must be")
    await error_of(await _register(client, "KATE@Example.COM"), 409)

    for spelling in ("kate@example.com", "KATE@EXAMPLE.COM", f"{KELVIN}ate@example.com", "ｋａｔｅ@example.com"):
        r = await _login(client, spelling)
        body = await r.get_json()
        assert r.status_code == 200, (spelling, body)
        assert body["user"]["id"] == kate and body["user"]["email"] == "kate@example.com"


async def test_idna_domains_are_one_domain(client: Any) -> None:
    r = await _register(client, "用户@例子.广告")
    assert r.status_code == 201, await r.get_json()
    chinese = (await r.get_json())["user"]
    assert chinese["email"] == "用户@例子.广告"  # shown as written
    r = await _login(client, "用户@xn--fsqu00a.xn--4rr70v")
    assert r.status_code == 200 and (await r.get_json())["user"]["id"] == chinese["id"]

    r = await _register(client, "anna@bücher.de")
    assert r.status_code == 201, await r.get_json()
    anna = (await r.get_json())["user"]["id"]
    await error_of(await _register(client, "anna@xn--bcher-kva.de"), 409)
    await error_of(await _register(client, "Anna@BÜCHER.DE"), 409)
    for spelling in ("anna@xn--bcher-kva.de", "ANNA@BÜCHER.de", "anna@XN--BCHER-KVA.DE"):
        r = await _login(client, spelling)
        assert r.status_code == 200 and (await r.get_json())["user"]["id"] == anna, spelling


async def test_case_folding_is_full_folding(client: Any) -> None:
    assert (await _register(client, "straße@example.com")).status_code == 201
    await error_of(await _register(client, "STRASSE@example.com"), 409)
    assert (await _login(client, "strasse@example.com")).status_code == 200


async def test_accounts_made_by_the_cli_and_admins_use_the_same_key(services: Any) -> None:
    from daemon.auth.accounts import create_user  # what `docex users create` calls
    from daemon.errors import BadRequest, Conflict

    with pytest.raises(BadRequest, match="plain characters"):
        await create_user(services, name="x", email=f"{KELVIN}ate@example.com", password=PASSWORD)
    await create_user(services, name="Kate", email="Kate@Example.com", password=PASSWORD)
    with pytest.raises(Conflict):
        await create_user(services, name="x", email="kate@EXAMPLE.com", password=PASSWORD, ignore_registration=True)


# --- the migration -----------------------------------------------------------------------------


async def test_the_migration_rewrites_keys_and_settles_collisions(config: Config,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Accounts made under the old key (``email.lower()``), migrated: keys rewritten, and of two
    accounts that are now one address the plain-written one keeps it, the other is reported."""
    db = Database(config.database_url)
    password_hash = await hash_password(PASSWORD, 4)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    look_alike, kate, anna, bob = (f"01AAAAAAAAAAAAAAAAAAAAAAA{i}" for i in range(1, 5))
    old = [
        (look_alike, "ｋａｔｅ@example.com", t0),  # the look-alike came first
        (kate, "Kate@example.com", t0 + dt.timedelta(days=1)),
        (anna, "anna@Bücher.de", t0),
        (bob, "bob@example.com", t0),
    ]

    def seed_and_migrate() -> None:
        upgrade(db.engine, "0005")
        with db.engine.begin() as conn:
            for user_id, email, created in old:
                conn.execute(users.insert().values(
                    id=user_id, email=email, email_key=email.lower(), name="x", password_hash=password_hash,
                    role="USER", disabled=False, created_at=created, updated_at=created))
        upgrade(db.engine)

    with caplog.at_level(logging.WARNING, logger="docex.migrations"):
        await trio.to_thread.run_sync(seed_and_migrate)
    with db.engine.connect() as conn:
        keys = {row.id: row.email_key for row in conn.execute(sa.select(users.c.id, users.c.email_key))}
    db.engine.dispose()
    assert keys == {look_alike: f"collided:{look_alike}", kate: "kate@example.com",
                    anna: "anna@xn--bcher-kva.de", bob: "bob@example.com"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "docex.migrations"]
    assert len(warnings) == 1 and look_alike in warnings[0] and kate in warnings[0], warnings
    assert "@" not in warnings[0].split(":")[0]  # ids, not addresses

    # The daemon on the migrated database: the real Kate signs in by any spelling, the look-alike's
    # password opens nothing, and a migrated domain is found by its Unicode and its ASCII form.
    async with open_services(config) as services:
        for spelling in ("kate@example.com", "ｋａｔｅ@example.com", f"{KELVIN}ATE@EXAMPLE.COM"):
            assert (await login(services, email=spelling, password=PASSWORD, client=Client())).user.id == kate
        for spelling in ("anna@bücher.de", "anna@xn--bcher-kva.de"):
            assert (await login(services, email=spelling, password=PASSWORD, client=Client())).user.id == anna
