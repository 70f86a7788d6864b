"""Webhook endpoints over HTTP: CRUD, every validation rule, secrets, the event catalog, test
and manual sends, the delivery log, replays, ownership, schema bindings and routing in the
outbox (seed §4, §6; SPEC §9). Sending is in test_webhook_delivery.py."""

from __future__ import annotations

import dataclasses
import re
from http import HTTPStatus
from typing import Any

import pytest
import sqlalchemy as sa

from daemon.clock import utcnow
from daemon.events import CATALOG
from daemon.services import Services
from daemon.storage.outbox import record_event
from daemon.storage.tables import deliveries, events, webhook_endpoints
from daemon.webhooks.keys import open_secret

PASSWORD = "correct horse 42"
ENDPOINT_KEYS = {"id", "url", "description", "deliveryMode", "events", "bodyFormat", "customHeaders", "enabled",
                 "disabledReason", "consecutiveDeadDeliveries", "schemaIds", "createdAt", "updatedAt"}
DELIVERY_KEYS = {"id", "endpointId", "eventId", "eventType", "status", "attempts", "nextAttemptAt", "lastAttemptAt",
                 "lastStatusCode", "lastError", "createdAt"}
SECRET = re.compile(r"whsec_[A-Za-z0-9+/]{43}=")
ISO_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
URL = "https://hooks.example.com/docex"
SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}}


# --- helpers ---------------------------------------------------------------------------


async def token(client: Any, email: str = "alice@example.com") -> dict[str, str]:
    r = await client.post("/api/auth/register", json={"name": "Someone", "email": email, "password": PASSWORD})
    body = await r.get_json()
    assert r.status_code == 201, body
    return {"Authorization": f"Bearer {body['accessToken']}"}


async def user_id(client: Any, auth: dict[str, str]) -> str:
    return str((await (await client.get("/api/auth/me", headers=auth)).get_json())["id"])


async def create(client: Any, auth: dict[str, str], **fields: Any) -> dict[str, Any]:
    r = await client.post("/api/webhooks", json={"url": URL, "events": ["job.*"], **fields}, headers=auth)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def call(client: Any, method: str, path: str, auth: dict[str, str], status: int, **kw: Any) -> Any:
    r = await getattr(client, method)(path, headers=auth, **kw)
    body = await r.get_json() if status != 204 else None
    assert r.status_code == status, body
    if status >= 400:
        assert body["statusCode"] == status and body["error"] == HTTPStatus(status).phrase, body
    return body


async def bad_request(client: Any, method: str, path: str, auth: dict[str, str], **kw: Any) -> list[str]:
    body = await call(client, method, path, auth, 400, **kw)
    assert isinstance(body["message"], list)
    return body["message"]  # type: ignore[no-any-return]


@pytest.fixture
async def alice(client: Any) -> dict[str, str]:
    return await token(client)


@pytest.fixture
async def bob(client: Any, alice: dict[str, str]) -> dict[str, str]:
    return await token(client, "bob@example.com")


def allow_dev_urls(services: Any, *, http: bool = True, private: bool = True) -> None:
    webhooks = dataclasses.replace(services.config.webhooks, allow_http=http, allow_private_networks=private)
    services.config = dataclasses.replace(services.config, webhooks=webhooks)


# --- CRUD --------------------------------------------------------------------------------


async def test_create_get_list_patch_delete(client: Any, alice: dict[str, str]) -> None:
    created = await create(client, alice)
    assert set(created) == ENDPOINT_KEYS | {"signingSecret"}
    assert SECRET.fullmatch(created["signingSecret"])
    assert created | {"id": None, "signingSecret": None, "createdAt": None, "updatedAt": None} == {
        "id": None, "url": URL, "description": None, "deliveryMode": "AUTOMATIC", "events": ["job.*"],
        "bodyFormat": "JSON", "customHeaders": {}, "enabled": True, "disabledReason": None,
        "consecutiveDeadDeliveries": 0, "schemaIds": [], "signingSecret": None, "createdAt": None, "updatedAt": None,
    }
    assert ISO_Z.fullmatch(created["createdAt"]) and created["updatedAt"] == created["createdAt"]
    shown = {k: v for k, v in created.items() if k != "signingSecret"}
    url = f"/api/webhooks/{created['id']}"

    assert await call(client, "get", url, alice, 200) == shown
    assert await call(client, "get", "/api/webhooks", alice, 200) == {"data": [shown], "nextCursor": None}

    patched = await call(client, "patch", url, alice, 200, json={
        "url": "https://other.example.com/x", "description": "Accounting", "deliveryMode": "MANUAL", "events": [],
        "bodyFormat": "XML", "customHeaders": {"Authorization": "Bearer t0k3n", "X-Tenant": "7"},
    })
    assert patched | {"updatedAt": None} == shown | {
        "url": "https://other.example.com/x", "description": "Accounting", "deliveryMode": "MANUAL", "events": [],
        "bodyFormat": "XML", "customHeaders": {"Authorization": "********", "X-Tenant": "7"}, "updatedAt": None}
    assert "signingSecret" not in patched
    again = await call(client, "patch", url, alice, 200, json={"description": None})
    assert again["description"] is None and again["bodyFormat"] == "XML"

    await call(client, "delete", url, alice, 204)
    for method in ("get", "patch", "delete"):
        body = await call(client, method, url, alice, 404, **({"json": {}} if method == "patch" else {}))
        assert body["message"] == "Webhook endpoint not found"
    assert await call(client, "get", "/api/webhooks", alice, 200) == {"data": [], "nextCursor": None}


async def test_every_format_and_mode_can_be_created(client: Any, alice: dict[str, str]) -> None:
    for fmt in ("JSON", "XML", "FORM_URLENCODED"):
        assert (await create(client, alice, bodyFormat=fmt))["bodyFormat"] == fmt
    manual = await create(client, alice, deliveryMode="MANUAL", events=[])
    assert manual["deliveryMode"] == "MANUAL" and manual["events"] == []
    everything = await create(client, alice, events=["*", "job_run.*", "job.completed"], description="all",
                              customHeaders={f"X-H{i}": str(i) for i in range(20)})
    assert len(everything["customHeaders"]) == 20


async def test_pagination_is_newest_first(client: Any, alice: dict[str, str]) -> None:
    ids = [(await create(client, alice))["id"] for _ in range(3)]
    first = await call(client, "get", "/api/webhooks?limit=2", alice, 200)
    assert [e["id"] for e in first["data"]] == ids[::-1][:2] and first["nextCursor"]
    second = await call(client, "get", f"/api/webhooks?limit=2&cursor={first['nextCursor']}", alice, 200)
    assert [e["id"] for e in second["data"]] == [ids[0]] and second["nextCursor"] is None


async def test_secrets_are_stored_sealed_and_shown_only_on_create_and_rotate(
        client: Any, services: Any, alice: dict[str, str]) -> None:
    created = await create(client, alice)
    secret = created["signingSecret"]
    row = await services.db.read(lambda c: c.execute(
        sa.select(webhook_endpoints).where(webhook_endpoints.c.id == created["id"])).one())
    assert secret.encode() not in row.secret_sealed
    assert open_secret(services.config.webhooks, created["id"], row.secret_sealed) == secret

    rotated = await call(client, "post", f"/api/webhooks/{created['id']}/rotate-secret", alice, 200)
    assert set(rotated) == {"signingSecret"} and SECRET.fullmatch(rotated["signingSecret"])
    assert rotated["signingSecret"] != secret
    row = await services.db.read(lambda c: c.execute(
        sa.select(webhook_endpoints).where(webhook_endpoints.c.id == created["id"])).one())
    assert open_secret(services.config.webhooks, created["id"], row.secret_sealed) == rotated["signingSecret"]
    assert open_secret(services.config.webhooks, created["id"], row.previous_secret_sealed) == secret
    assert row.previous_secret_expires_at is not None
    assert "signingSecret" not in await call(client, "get", f"/api/webhooks/{created['id']}", alice, 200)


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "message"), [
    ({"events": ["*"]}, "url should not be empty"),
    ({"url": "", "events": ["*"]}, "url should not be empty"),
    ({"url": "nope", "events": ["*"]}, "url must be a URL address"),
    ({"url": "https://xn--ls8h.la/", "events": ["*"]},  # a 500 before: IDNA refuses the label
     "url's host must be a host name (labels of letters, digits and hyphens, each at most 63 characters) "
     "or an IP address"),
    ({"url": "ftp://example.com/x", "events": ["*"]},
     "url must start with https:// (or http:// with webhooks.allow_http), not ftp://"),
    ({"url": "http://example.com/x", "events": ["*"]}, "url must use https (plain http is off: webhooks.allow_http)"),
    ({"url": "https://u:p@example.com/x", "events": ["*"]},
     "url must not contain a user name or password (send credentials in customHeaders)"),
    ({"url": "https://127.0.0.1/x", "events": ["*"]},
     "url must not point to a private, loopback or link-local address (webhooks.allow_private_networks is off)"),
    ({"url": "https://169.254.169.254/x", "events": ["*"]}, "url must not point to a private, loopback or "
                                                            "link-local address (webhooks.allow_private_networks "
                                                            "is off)"),
    ({"url": "https://" + "a" * 2050 + ".com", "events": ["*"]},
     "url must be shorter than or equal to 2048 characters"),
    ({"url": URL}, "events should not be empty (an AUTOMATIC endpoint subscribes through events)"),
    ({"url": URL, "events": []}, "events should not be empty (an AUTOMATIC endpoint subscribes through events)"),
    ({"url": URL, "events": ["job.done"]},
     "events[0] must be an event type of the catalog, \"*\" or a \"prefix.*\" pattern (got 'job.done')"),
    ({"url": URL, "events": ["*", "*"]}, "All events's elements must be unique"),
    ({"url": URL, "events": "job.*"}, "events must be an array"),
    ({"url": URL, "events": ["*"], "deliveryMode": "SOMETIMES"},
     "deliveryMode must be one of the following values: AUTOMATIC, MANUAL"),
    ({"url": URL, "events": ["*"], "bodyFormat": "YAML"},
     "bodyFormat must be one of the following values: JSON, XML, FORM_URLENCODED"),
    ({"url": URL, "events": ["*"], "customHeaders": {f"X-H{i}": "v" for i in range(21)}},
     "customHeaders must contain no more than 20 headers"),
    ({"url": URL, "events": ["*"], "customHeaders": {"content-type": "text/plain"}},
     "customHeaders.content-type cannot be set: docex sets Content-Type from bodyFormat"),
    ({"url": URL, "events": ["*"], "customHeaders": {"X-WEBHOOK-ID": "1"}},
     "customHeaders.X-WEBHOOK-ID cannot be set: X-Webhook-* headers are docex's own"),
    ({"url": URL, "events": ["*"], "customHeaders": {"Host": "x"}},
     "customHeaders.Host cannot be set: it frames the request, docex sets it"),
    ({"url": URL, "events": ["*"], "customHeaders": {"Bad Name": "x"}},
     "customHeaders.Bad Name must be a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"),
    ({"url": URL, "events": ["*"], "customHeaders": {"X-A": "1\r\nX-B: 2"}},
     "customHeaders.X-A must be printable ASCII, without CR, LF or other control characters"),
    ({"url": URL, "events": ["*"], "customHeaders": {"X-A": 5}}, "customHeaders.X-A must be a string"),
    ({"url": URL, "events": ["*"], "customHeaders": {"Authorization": "Bearer t0k3n "}},
     "customHeaders.Authorization must not start or end with a space or tab"),
    ({"url": URL, "events": ["*"], "customHeaders": {"X-A": "\tx"}},
     "customHeaders.X-A must not start or end with a space or tab"),
    ({"url": URL, "events": ["*"], "secret": "mine"}, "property secret should not exist"),
    ({"url": URL, "events": ["*"], "description": "d" * 501},
     "description must be shorter than or equal to 500 characters"),
])
async def test_create_refuses_each_broken_rule(client: Any, alice: dict[str, str], body: dict[str, Any],
                                               message: str) -> None:
    assert message in await bad_request(client, "post", "/api/webhooks", alice, json=body)


async def test_several_problems_are_several_messages(client: Any, alice: dict[str, str]) -> None:
    messages = await bad_request(client, "post", "/api/webhooks", alice, json={
        "url": "http://10.0.0.1/x", "events": [], "customHeaders": {"Content-Type": "x", "X-Webhook-Event": "y"}})
    assert len(messages) == 5, messages


async def test_http_and_private_addresses_when_the_operator_allows_them(client: Any, services: Any,
                                                                        alice: dict[str, str]) -> None:
    allow_dev_urls(services)
    created = await create(client, alice, url="http://127.0.0.1:9/hook")
    assert created["url"] == "http://127.0.0.1:9/hook"
    allow_dev_urls(services, http=False, private=False)  # a SIGHUP later: checked again on change only
    url = f"/api/webhooks/{created['id']}"
    assert (await call(client, "patch", url, alice, 200, json={"description": "kept"}))["description"] == "kept"
    assert "url must use https (plain http is off: webhooks.allow_http)" in await bad_request(
        client, "patch", url, alice, json={"url": "http://127.0.0.1:9/other"})


async def test_patch_checks_mode_and_events_together(client: Any, alice: dict[str, str]) -> None:
    manual = await create(client, alice, deliveryMode="MANUAL", events=[])
    url = f"/api/webhooks/{manual['id']}"
    assert await bad_request(client, "patch", url, alice, json={"deliveryMode": "AUTOMATIC"}) == [
        "events should not be empty (an AUTOMATIC endpoint subscribes through events)"]
    ok = await call(client, "patch", url, alice, 200, json={"deliveryMode": "AUTOMATIC", "events": ["job_run.*"]})
    assert ok["deliveryMode"] == "AUTOMATIC" and ok["events"] == ["job_run.*"]
    assert await bad_request(client, "patch", url, alice, json={"events": []}) == [
        "events should not be empty (an AUTOMATIC endpoint subscribes through events)"]
    assert "customHeaders.X-Webhook-Signature cannot be set: X-Webhook-* headers are docex's own" in (
        await bad_request(client, "patch", url, alice, json={"customHeaders": {"X-Webhook-Signature": "x"}}))
    assert await bad_request(client, "patch", url, alice, json={"id": "x"}) == ["property id should not exist"]
    assert await bad_request(client, "patch", url, alice, json={"enabled": "maybe"}) == [
        "enabled must be a boolean value"]


async def test_disable_and_re_enable_by_patch(client: Any, services: Any, alice: dict[str, str]) -> None:
    created = await create(client, alice)
    url = f"/api/webhooks/{created['id']}"
    off = await call(client, "patch", url, alice, 200, json={"enabled": False})
    assert off["enabled"] is False and off["disabledReason"] == "Disabled by its owner (enabled: false)"
    await services.db.run(lambda c: c.execute(webhook_endpoints.update().values(
        consecutive_dead_deliveries=5, disabled_reason="Disabled automatically after 5 ...")))
    on = await call(client, "patch", url, alice, 200, json={"enabled": True})
    assert on["enabled"] is True and on["disabledReason"] is None and on["consecutiveDeadDeliveries"] == 0


# --- the event catalog -----------------------------------------------------------------------


async def test_the_catalog_lists_all_thirteen_types_with_description_and_example(client: Any,
                                                                              alice: dict[str, str]) -> None:
    body = await call(client, "get", "/api/webhooks/event-catalog", alice, 200)
    assert body["nextCursor"] is None
    assert [e["type"] for e in body["data"]] == list(CATALOG) and len(body["data"]) == 13
    for entry in body["data"]:
        assert set(entry) == {"type", "description", "example"} and entry["description"]
        assert isinstance(entry["example"], dict) and entry["example"]
        family = entry["type"].split(".")[0]
        if family == "job":
            assert set(entry["example"]) == {"job"} and entry["example"]["job"]["id"]
        elif family == "job_run":
            assert set(entry["example"]) == {"jobRun"} and "counts" in entry["example"]["jobRun"]
    by_type = {e["type"]: e["example"] for e in body["data"]}
    assert by_type["job.completed"]["job"]["result"] is not None
    assert by_type["webhook.ping"]["message"] == "ping"
    assert (await client.get("/api/webhooks/event-catalog")).status_code == 401


# --- test, send, the delivery log, replay ---------------------------------------------------------


async def test_test_sends_a_ping_delivery_that_can_be_read_and_replayed(client: Any, services: Any,
                                                                       alice: dict[str, str]) -> None:
    endpoint = await create(client, alice)
    delivery = await call(client, "post", f"/api/webhooks/{endpoint['id']}/test", alice, 202)
    assert set(delivery) == DELIVERY_KEYS
    assert delivery["endpointId"] == endpoint["id"] and delivery["eventType"] == "webhook.ping"
    assert delivery["status"] == "PENDING" and delivery["attempts"] == 0
    assert delivery["nextAttemptAt"] == delivery["createdAt"] and delivery["lastAttemptAt"] is None
    event = await services.db.read(lambda c: c.execute(
        sa.select(events).where(events.c.id == delivery["eventId"])).one())
    assert event.type == "webhook.ping" and event.data == {"endpointId": endpoint["id"], "message": "ping"}

    detail = await call(client, "get", f"/api/webhooks/deliveries/{delivery['id']}", alice, 200)
    assert detail == delivery | {"attemptLog": []}

    replayed = await call(client, "post", f"/api/webhooks/deliveries/{delivery['id']}/replay", alice, 202)
    assert replayed["id"] != delivery["id"] and replayed["eventId"] == delivery["eventId"]
    assert replayed["status"] == "PENDING" and replayed["eventType"] == "webhook.ping"
    log = await call(client, "get", f"/api/webhooks/{endpoint['id']}/deliveries", alice, 200)
    assert [d["id"] for d in log["data"]] == [replayed["id"], delivery["id"]]


async def test_manual_send(client: Any, services: Any, alice: dict[str, str]) -> None:
    manual = await create(client, alice, deliveryMode="MANUAL", events=[])
    url = f"/api/webhooks/{manual['id']}/send"
    sent = await call(client, "post", url, alice, 202, json={"data": {"orderId": "A-1"}})
    assert sent["eventType"] == "webhook.send" and sent["status"] == "PENDING"
    event = await services.db.read(lambda c: c.execute(sa.select(events).where(events.c.id == sent["eventId"])).one())
    assert event.data == {"orderId": "A-1"}
    custom = await call(client, "post", url, alice, 202, json={"type": "invoice.approved", "data": {}})
    assert custom["eventType"] == "invoice.approved"
    automatic = await create(client, alice)
    assert (await call(client, "post", f"/api/webhooks/{automatic['id']}/send", alice, 202,
                       json={"data": {"x": 1}}))["eventType"] == "webhook.send"


@pytest.mark.parametrize(("body", "message"), [
    ({}, "data should not be empty"),
    ({"data": [1]}, "data must be an object"),
    ({"type": "job.completed", "data": {}},
     "type must not be a job or job_run event type (docex sends those itself)"),
    ({"type": "job_run.failed", "data": {}},
     "type must not be a job or job_run event type (docex sends those itself)"),
    ({"type": "webhook.ping", "data": {}}, "type webhook.ping is reserved for POST /api/webhooks/:id/test"),
    ({"type": "has space", "data": {}}, "type must match ^[A-Za-z0-9_\\-]+(\\.[A-Za-z0-9_\\-]+)*$ regular expression"),
    ({"type": "x" * 41, "data": {}}, "type must be shorter than or equal to 40 characters"),
    ({"data": {}, "extra": 1}, "property extra should not exist"),
])
async def test_manual_send_refuses_bad_payloads(client: Any, alice: dict[str, str], body: dict[str, Any],
                                                message: str) -> None:
    endpoint = await create(client, alice)
    assert message in await bad_request(client, "post", f"/api/webhooks/{endpoint['id']}/send", alice, json=body)


async def test_a_disabled_endpoint_takes_no_test_or_send_but_replays_wait_for_it(client: Any,
                                                                                alice: dict[str, str]) -> None:
    endpoint = await create(client, alice)
    first = await call(client, "post", f"/api/webhooks/{endpoint['id']}/test", alice, 202)
    await call(client, "patch", f"/api/webhooks/{endpoint['id']}", alice, 200, json={"enabled": False})
    for path, kw in (("test", {}), ("send", {"json": {"data": {}}})):
        body = await call(client, "post", f"/api/webhooks/{endpoint['id']}/{path}", alice, 409, **kw)
        assert "disabled" in body["message"]
    replayed = await call(client, "post", f"/api/webhooks/deliveries/{first['id']}/replay", alice, 202)
    assert replayed["status"] == "PENDING"


async def test_the_delivery_log_filters_by_status_and_event_type_and_pages(client: Any, services: Any,
                                                                          alice: dict[str, str]) -> None:
    endpoint = await create(client, alice)
    base = f"/api/webhooks/{endpoint['id']}"
    ping = await call(client, "post", f"{base}/test", alice, 202)
    sends = [await call(client, "post", f"{base}/send", alice, 202, json={"data": {"n": i}}) for i in range(3)]
    await services.db.run(lambda c: c.execute(deliveries.update().where(deliveries.c.id == sends[0]["id"])
                                              .values(status="DEAD", attempts=8)))
    dead = await call(client, "get", f"{base}/deliveries?status=DEAD", alice, 200)
    assert [d["id"] for d in dead["data"]] == [sends[0]["id"]] and dead["data"][0]["status"] == "DEAD"
    pings = await call(client, "get", f"{base}/deliveries?eventType=webhook.ping", alice, 200)
    assert [d["id"] for d in pings["data"]] == [ping["id"]]
    both = await call(client, "get", f"{base}/deliveries?eventType=webhook.send&status=PENDING", alice, 200)
    assert [d["id"] for d in both["data"]] == [sends[2]["id"], sends[1]["id"]]
    page1 = await call(client, "get", f"{base}/deliveries?limit=3", alice, 200)
    assert len(page1["data"]) == 3 and page1["nextCursor"]
    page2 = await call(client, "get", f"{base}/deliveries?limit=3&cursor={page1['nextCursor']}", alice, 200)
    assert [d["id"] for d in page2["data"]] == [ping["id"]] and page2["nextCursor"] is None
    assert await bad_request(client, "get", f"{base}/deliveries?status=LOST", alice) == [
        "status must be one of the following values: PENDING, RETRYING, SUCCEEDED, DEAD"]
    assert await bad_request(client, "get", f"{base}/deliveries?limit=0", alice) == ["limit must not be less than 1"]


async def test_deleting_an_endpoint_deletes_its_deliveries(client: Any, services: Any, alice: dict[str, str]) -> None:
    endpoint = await create(client, alice)
    delivery = await call(client, "post", f"/api/webhooks/{endpoint['id']}/test", alice, 202)
    await call(client, "delete", f"/api/webhooks/{endpoint['id']}", alice, 204)
    assert await services.db.read(lambda c: c.execute(sa.select(sa.func.count()).select_from(deliveries)).scalar()) == 0
    await call(client, "get", f"/api/webhooks/deliveries/{delivery['id']}", alice, 404)


# --- ownership and authentication ---------------------------------------------------------------


async def test_another_users_endpoints_and_deliveries_do_not_exist(client: Any, alice: dict[str, str],
                                                                  bob: dict[str, str]) -> None:
    endpoint = await create(client, alice)
    delivery = await call(client, "post", f"/api/webhooks/{endpoint['id']}/test", alice, 202)
    base = f"/api/webhooks/{endpoint['id']}"
    for method, path, kw in [
        ("get", base, {}), ("patch", base, {"json": {"description": "mine"}}), ("delete", base, {}),
        ("post", f"{base}/rotate-secret", {}), ("post", f"{base}/test", {}),
        ("post", f"{base}/send", {"json": {"data": {}}}), ("get", f"{base}/deliveries", {}),
    ]:
        body = await call(client, method, path, bob, 404, **kw)
        assert body["message"] == "Webhook endpoint not found", (method, path)
    for method, path in [("get", f"/api/webhooks/deliveries/{delivery['id']}"),
                         ("post", f"/api/webhooks/deliveries/{delivery['id']}/replay")]:
        body = await call(client, method, path, bob, 404)
        assert body["message"] == "Webhook delivery not found"
    assert await call(client, "get", "/api/webhooks", bob, 200) == {"data": [], "nextCursor": None}
    assert (await call(client, "get", base, alice, 200))["description"] is None


async def test_every_route_needs_a_credential(client: Any) -> None:
    for method, path in [("get", "/api/webhooks"), ("post", "/api/webhooks"), ("get", "/api/webhooks/x"),
                         ("patch", "/api/webhooks/x"), ("delete", "/api/webhooks/x"),
                         ("post", "/api/webhooks/x/rotate-secret"), ("post", "/api/webhooks/x/test"),
                         ("post", "/api/webhooks/x/send"), ("get", "/api/webhooks/x/deliveries"),
                         ("get", "/api/webhooks/deliveries/x"), ("post", "/api/webhooks/deliveries/x/replay")]:
        assert (await getattr(client, method)(path)).status_code == 401, (method, path)


async def test_api_keys_work_too(client: Any, alice: dict[str, str]) -> None:
    r = await client.post("/api/auth/api-keys", json={"name": "ci"}, headers=alice)
    key = {"Authorization": f"Bearer {(await r.get_json())['apiKey']}"}
    endpoint = await create(client, key)
    assert (await call(client, "get", f"/api/webhooks/{endpoint['id']}", alice, 200))["id"] == endpoint["id"]


# --- schema bindings ---------------------------------------------------------------------------------


async def test_schemas_bind_only_the_callers_endpoints(client: Any, alice: dict[str, str],
                                                      bob: dict[str, str]) -> None:
    mine = await create(client, alice)
    other = await create(client, alice)
    bobs = await create(client, bob)
    r = await client.post("/api/schemas", headers=alice, json={
        "name": "Invoice", "definition": SCHEMA, "webhookEndpointIds": [mine["id"], bobs["id"], "nope"]})
    assert (await r.get_json())["message"] == [
        "webhookEndpointIds[1] is not one of your webhook endpoints",
        "webhookEndpointIds[2] is not one of your webhook endpoints",
    ]
    schema = await call(client, "post", "/api/schemas", alice, 201, json={
        "name": "Invoice", "definition": SCHEMA, "webhookEndpointIds": [mine["id"]]})
    assert (await call(client, "get", f"/api/webhooks/{mine['id']}", alice, 200))["schemaIds"] == [schema["id"]]
    listed = await call(client, "get", "/api/webhooks", alice, 200)
    assert {e["id"]: e["schemaIds"] for e in listed["data"]} == {mine["id"]: [schema["id"]], other["id"]: []}

    assert await bad_request(client, "patch", f"/api/schemas/{schema['id']}", alice,
                             json={"webhookEndpointIds": [bobs["id"]]}) == [
        "webhookEndpointIds[0] is not one of your webhook endpoints"]
    await call(client, "patch", f"/api/schemas/{schema['id']}", alice, 200,
               json={"webhookEndpointIds": [other["id"], mine["id"]]})
    await call(client, "delete", f"/api/webhooks/{mine['id']}", alice, 204)
    assert (await call(client, "get", f"/api/schemas/{schema['id']}", alice, 200))["webhookEndpointIds"] == [
        other["id"]]


# --- routing in the outbox ---------------------------------------------------------------------------


async def test_events_are_routed_in_the_transaction_that_records_them(client: Any, services: Any,
                                                                      alice: dict[str, str]) -> None:
    uid = await user_id(client, alice)
    jobs_ep = await create(client, alice, events=["job.*"])
    completed_ep = await create(client, alice, events=["job.completed"])
    everything = await create(client, alice, events=["*"])
    runs_ep = await create(client, alice, events=["job_run.*"])
    manual = await create(client, alice, deliveryMode="MANUAL", events=[])
    off = await create(client, alice, events=["*"])
    await call(client, "patch", f"/api/webhooks/{off['id']}", alice, 200, json={"enabled": False})
    bob = await token(client, "bob@example.com")
    await create(client, bob, events=["*"])
    bound = await call(client, "post", "/api/schemas", alice, 201, json={
        "name": "Bound", "definition": SCHEMA, "webhookEndpointIds": [manual["id"], runs_ep["id"], off["id"]]})

    async def routed(type_: str, schema_id: str | None = None) -> set[str]:
        def unit(conn: sa.Connection) -> set[str]:
            event_id = record_event(conn, user_id=uid, type=type_, data={"x": 1}, now=utcnow(), schema_id=schema_id)
            return set(conn.execute(sa.select(deliveries.c.endpoint_id)
                                    .where(deliveries.c.event_id == event_id)).scalars())
        return await services.db.run(unit)

    assert await routed("job.completed") == {jobs_ep["id"], completed_ep["id"], everything["id"]}
    assert await routed("job.queued") == {jobs_ep["id"], everything["id"]}
    assert await routed("job_run.progress") == {everything["id"], runs_ep["id"]}
    # A bound schema overrides patterns and mode; disabled endpoints still get nothing.
    assert await routed("job.completed", bound["id"]) == {manual["id"], runs_ep["id"]}
    assert await routed("job.completed", "unbound-schema") == {jobs_ep["id"], completed_ep["id"], everything["id"]}

    def failing(conn: sa.Connection) -> None:
        record_event(conn, user_id=uid, type="job.failed", data={}, now=utcnow())
        raise RuntimeError("the state change failed")

    before = await services.db.read(_counts)
    with pytest.raises(RuntimeError):
        await services.db.run(failing)
    assert await services.db.read(_counts) == before


def _counts(conn: sa.Connection) -> tuple[int, int]:
    return (conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(deliveries)).scalar_one())


async def test_a_user_has_at_most_max_endpoints_per_user(client: Any, services: Services, alice: dict[str, str],
                                                         bob: dict[str, str]) -> None:
    """Each event of a user is one delivery per endpoint: 1,000 endpoints on "*" (made in
    7 s) turned one job into thousands of sends."""
    services.config = dataclasses.replace(
        services.config, webhooks=dataclasses.replace(services.config.webhooks, max_endpoints_per_user=3))
    body = {"url": "https://hooks.example.com/docex", "events": ["*"]}
    made = [await call(client, "post", "/api/webhooks", alice, 201, json=body) for _ in range(3)]
    refused = await call(client, "post", "/api/webhooks", alice, 409, json=body)
    assert refused["message"] == "At most 3 webhook endpoints per user; delete one first"
    await call(client, "post", "/api/webhooks", bob, 201, json=body)  # another user's count is theirs
    await call(client, "delete", f"/api/webhooks/{made[0]['id']}", alice, 204)
    await call(client, "post", "/api/webhooks", alice, 201, json=body)
