"""Custom headers that carry the receiver's credentials: sealed at rest, masked in every
answer, kept when sent back masked, and sent in full to the receiver (both backends)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from webhook_receiver import Receiver, open_receiver
from webhooks_0013 import ENDPOINTS_0013, insert_plain_endpoints, sealed_headers

from daemon.config import Config
from daemon.errors import StartupError
from daemon.services import Services
from daemon.storage.database import Database
from daemon.storage.migrate import current_revision, downgrade, upgrade
from daemon.webhooks.dispatcher import run_dispatcher
from daemon.webhooks.keys import open_headers_with

PASSWORD = "correct horse battery"
TOKEN = "Bearer r3ceiver-t0ken"


@pytest.fixture
def config(config: Config) -> Config:
    return dataclasses.replace(config, webhooks=dataclasses.replace(
        config.webhooks, allow_http=True, allow_private_networks=True, backoff_initial_ms=50, timeout_ms=2000))


@pytest.fixture
async def dispatcher(services: Services, nursery: trio.Nursery) -> AsyncIterator[None]:
    await nursery.start(run_dispatcher, services)
    yield
    services.stopping.set()


@pytest.fixture
async def alice(client: Any) -> dict[str, str]:
    r = await client.post("/api/auth/register", json={"name": "A", "email": "alice@example.com",
                                                      "password": PASSWORD})
    return {"Authorization": f"Bearer {(await r.get_json())['accessToken']}"}


async def call(client: Any, method: str, path: str, auth: dict[str, str], status: int, **kw: Any) -> Any:
    r = await getattr(client, method)(path, headers=auth, **kw)
    body = await r.get_json()
    assert r.status_code == status, body
    return body


async def sent_headers(client: Any, auth: dict[str, str], endpoint_id: str, receiver: Receiver) -> dict[str, str]:
    """The headers of a manual send as the receiver got them."""
    await call(client, "post", f"/api/webhooks/{endpoint_id}/send", auth, 202, json={"data": {}})
    received = await receiver.wait_for(len(receiver.requests) + 1)
    return dict(received[-1].headers)


async def stored_bytes(services: Services) -> bytes:
    """Every webhook endpoint row as the database holds it."""
    def read(conn: sa.Connection) -> bytes:
        rows = conn.execute(sa.text("SELECT * FROM webhook_endpoints")).all()
        return repr([tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]).encode()

    return await services.db.read(read)


async def test_a_credential_header_is_masked_in_answers_and_sealed_at_rest(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    async with open_receiver() as receiver:
        created = await call(client, "post", "/api/webhooks", alice, 201, json={
            "url": receiver.url(), "events": ["*"],
            "customHeaders": {"Authorization": TOKEN, "X-Api-Key": "k-123", "X-Tenant": "42"}})
        shown = {"Authorization": "********", "X-Api-Key": "********", "X-Tenant": "42"}
        assert created["customHeaders"] == shown
        url = f"/api/webhooks/{created['id']}"
        assert (await call(client, "get", url, alice, 200))["customHeaders"] == shown
        assert (await call(client, "get", "/api/webhooks", alice, 200))["data"][0]["customHeaders"] == shown

        stored = await stored_bytes(services)
        assert b"r3ceiver-t0ken" not in stored and b"k-123" not in stored and b"X-Tenant" not in stored

        headers = await sent_headers(client, alice, created["id"], receiver)
        assert (headers["authorization"], headers["x-api-key"], headers["x-tenant"]) == (TOKEN, "k-123", "42")


async def test_headers_sent_back_masked_keep_their_values(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    """What the console does: it sends an endpoint's headers back whole, as it was shown them."""
    async with open_receiver() as receiver:
        created = await call(client, "post", "/api/webhooks", alice, 201, json={
            "url": receiver.url(), "events": ["*"], "customHeaders": {"Authorization": TOKEN, "X-Tenant": "42"}})
        url = f"/api/webhooks/{created['id']}"
        patched = await call(client, "patch", url, alice, 200, json={
            "customHeaders": {"authorization": "********", "X-Tenant": "43", "X-Session-Id": "s-9"}})
        assert patched["customHeaders"] == {"authorization": "********", "X-Tenant": "43", "X-Session-Id": "********"}
        headers = await sent_headers(client, alice, created["id"], receiver)
        assert (headers["authorization"], headers["x-tenant"], headers["x-session-id"]) == (TOKEN, "43", "s-9")

        # A new value replaces the stored one; leaving a header out removes it.
        await call(client, "patch", url, alice, 200, json={"customHeaders": {"Authorization": "Bearer new"}})
        headers = await sent_headers(client, alice, created["id"], receiver)
        assert headers["authorization"] == "Bearer new" and "x-tenant" not in headers
        # A PATCH that leaves customHeaders out keeps them all.
        await call(client, "patch", url, alice, 200, json={"description": "ledger"})
        assert (await sent_headers(client, alice, created["id"], receiver))["authorization"] == "Bearer new"
        await call(client, "patch", url, alice, 200, json={"customHeaders": {}})
        assert "authorization" not in await sent_headers(client, alice, created["id"], receiver)
        assert (await call(client, "get", url, alice, 200))["customHeaders"] == {}


async def test_a_masked_value_with_nothing_stored_is_a_400(client: Any, alice: dict[str, str]) -> None:
    refused = await call(client, "post", "/api/webhooks", alice, 400, json={
        "url": "http://127.0.0.1:9/x", "events": ["*"], "customHeaders": {"Authorization": "********"}})
    assert refused["message"] == ["customHeaders.Authorization is ********, which keeps the value stored, and this "
                                  "endpoint stores none: send the value"]
    created = await call(client, "post", "/api/webhooks", alice, 201, json={
        "url": "http://127.0.0.1:9/x", "events": ["*"], "customHeaders": {"X-Tenant": "********"}})
    assert created["customHeaders"] == {"X-Tenant": "********"}  # not a credential: a value like any other
    refused = await call(client, "patch", f"/api/webhooks/{created['id']}", alice, 400,
                         json={"customHeaders": {"X-Tenant": "1", "X-Auth-Token": "********"}})
    assert refused["message"] == ["customHeaders.X-Auth-Token is ********, which keeps the value stored, and this "
                                  "endpoint stores none: send the value"]


async def test_a_changed_key_is_a_clear_error_not_a_leak(client: Any, services: Services, alice: dict[str, str],
                                                        config: Config) -> None:
    created = await call(client, "post", "/api/webhooks", alice, 201, json={
        "url": "http://127.0.0.1:9/x", "events": ["*"], "customHeaders": {"Authorization": TOKEN}})
    other = dataclasses.replace(config.webhooks, encryption_key=type(config.webhooks.encryption_key)("0" * 64))
    services.config = dataclasses.replace(services.config, webhooks=other)
    r = await client.get(f"/api/webhooks/{created['id']}", headers=alice)
    body = await r.get_json()
    assert r.status_code == 500
    assert body["message"] == ("the endpoint's custom headers do not open with WEBHOOK_ENCRYPTION_KEY "
                               "(was the key changed?)")


# --- migration 0014: the headers stored in plain text before it ---------------------------------


def test_migration_0014_seals_the_headers_stored_before(database_url: str) -> None:
    key = bytes(range(32))
    db = Database(database_url, pool_size=1)
    try:
        upgrade(db.engine, "0013")
        insert_plain_endpoints(db.engine, {"e1": {"Authorization": TOKEN, "X-Tenant": "42"}, "e2": {}})

        with pytest.raises(StartupError, match="sealing them needs WEBHOOK_ENCRYPTION_KEY"):
            upgrade(db.engine)
        with db.engine.connect() as conn:
            assert current_revision(conn) == "0013"  # nothing half done

        upgrade(db.engine, encryption_key=key)
        sealed = sealed_headers(db.engine)
        assert sealed["e2"] is None and sealed["e1"] is not None and b"t0ken" not in sealed["e1"]
        assert open_headers_with(key, "e1", sealed["e1"]) == {"Authorization": TOKEN, "X-Tenant": "42"}

        downgrade(db.engine, "0013", encryption_key=key)
        with db.engine.connect() as conn:
            plain = dict(conn.execute(sa.select(ENDPOINTS_0013.c.id, ENDPOINTS_0013.c.custom_headers)).all())
        assert plain == {"e1": {"Authorization": TOKEN, "X-Tenant": "42"}, "e2": {}}
    finally:
        db.dispose()
