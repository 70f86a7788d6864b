"""Webhooks sent for real: the dispatcher against HTTP receivers on 127.0.0.1 (SPEC §9).

Every lifecycle event delivered and verified with Stripe's own verifier; the headers of
the seed and custom ones; XML and form bodies; retries (500 then success, 500 until
DEAD, a timeout, a redirect, Retry-After); auto-disable and re-enable; replay; secret
rotation; the SSRF guard at send time; leases (another process's, an expired one, two
dispatchers on one database); concurrency bounds; shutdown; custom headers that carry
credentials (sealed at rest, masked in answers, kept when sent back masked, and sealed by
migration 0014 where an older docex stored them in plain text).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
import stripe
import trio
from webhook_receiver import Received, Receiver, Reply, open_receiver
from webhooks_0013 import ENDPOINTS_0013, insert_plain_endpoints, on_disk, sealed_headers

from daemon.clock import utcnow
from daemon.config import Config
from daemon.errors import StartupError
from daemon.jobs.models import completeness
from daemon.services import Services
from daemon.storage.database import Database
from daemon.storage.migrate import current_revision, downgrade, upgrade
from daemon.storage.outbox import record_event
from daemon.storage.repos import jobs as jobs_repo
from daemon.storage.repos.jobs import NewJob
from daemon.storage.tables import deliveries, events, webhook_endpoints
from daemon.webhooks.dispatcher import run_dispatcher
from daemon.webhooks.keys import open_headers_with, seal_headers
from daemon.webhooks.signing import SignatureVerificationError, verify_signature

PASSWORD = "correct horse 42"
SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}}
LIFECYCLE = {"job.queued", "job.started", "job.completed", "job.failed", "job.cancelled", "job.updated",
             "job_run.created", "job_run.progress", "job_run.completed", "job_run.failed"}


@pytest.fixture
def config(config: Config) -> Config:
    """Loopback receivers over plain http, and retries fast enough for a test."""
    return dataclasses.replace(config, webhooks=dataclasses.replace(
        config.webhooks, allow_http=True, allow_private_networks=True, backoff_initial_ms=50, max_attempts=3,
        timeout_ms=2000,
    ))


def configure(services: Services, **changes: Any) -> None:
    """Change webhook settings in the running process, as a SIGHUP would."""
    services.config = dataclasses.replace(services.config,
                                          webhooks=dataclasses.replace(services.config.webhooks, **changes))


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


async def endpoint(client: Any, auth: dict[str, str], receiver: Receiver, **fields: Any) -> dict[str, Any]:
    return await call(client, "post", "/api/webhooks", auth, 201,
                      json={"url": receiver.url(), "events": ["*"], **fields})


async def settled(client: Any, auth: dict[str, str], delivery_id: str, *statuses: str,
                  timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
    """The delivery detail once its status is one of `statuses`."""
    with trio.fail_after(timeout):
        while True:
            detail = await call(client, "get", f"/api/webhooks/deliveries/{delivery_id}", auth, 200)
            if detail["status"] in statuses:
                return detail  # type: ignore[no-any-return]
            await trio.sleep(0.02)


def verified(request: Received, *secrets: str) -> dict[str, Any]:
    """The envelope of a request whose signature Stripe's verifier, and docex's for receivers,
    accept with each of `secrets`."""
    for secret in secrets:
        assert stripe.WebhookSignature.verify_header(
            request.body, request.headers["x-webhook-signature"], secret, tolerance=300)
        verify_signature(request.body, request.headers["x-webhook-signature"], secret)  # docex's own agrees
    return json.loads(request.body) if request.headers["content-type"] == "application/json" else {}


def documented_event(document: dict[str, Any], event_type: str) -> Any:
    """A validator of the body the OpenAPI document's `webhooks` section gives `event_type`."""
    import jsonschema

    pointer = f"#/webhooks/{event_type}/post/requestBody/content/application~1json/schema"
    return jsonschema.Draft202012Validator({**document, "$ref": pointer})


async def user_id(client: Any, auth: dict[str, str]) -> str:
    return str((await call(client, "get", "/api/auth/me", auth, 200))["id"])


def replying(*replies: Reply) -> Any:
    """A handler answering `replies` in turn, then the last one forever."""
    queue = list(replies)

    async def handler(request: Received) -> Reply:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return handler


# --- every lifecycle event, signed ------------------------------------------------------------


async def test_each_job_and_job_run_event_is_delivered_and_verifies_with_stripe(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        uid = await user_id(client, alice)
        schema = await call(client, "post", "/api/schemas", alice, 201, json={"name": "S", "definition": SCHEMA})

        # resultMeta as a worker writes it: the document below checks every field of the body.
        meta = {"provider": "rules", "model": None, "durationMs": 5.0, "fields": {}, **completeness([])}

        def lifecycle(conn: sa.Connection) -> None:
            now = utcnow()
            file = NewJob(file_name="a.txt", file_size=3, mime_type="text/plain", sha256="0" * 64, blob_key="k")
            jobs_repo.create_run(conn, user_id=uid, schema_id=schema["id"], items=[file, file], now=now)
            first = jobs_repo.claim_next(conn, owner="w", now=now, lease_s=60)
            jobs_repo.complete_job(conn, job_id=first.id, owner="w", result={"total": 1.0},
                                   meta=meta, page_count=1, now=now)
            jobs_repo.patch_result(conn, uid, first.id, {"total": 2.0}, [], now)
            second = jobs_repo.claim_next(conn, owner="w", now=now, lease_s=60)
            jobs_repo.fail_job(conn, job_id=second.id, owner="w", code="CORRUPTED_FILE", message="bad",
                               now=now, retry_at=None)
            jobs_repo.create_run(conn, user_id=uid, schema_id=schema["id"], items=[file], now=now)
            third = jobs_repo.claim_next(conn, owner="w", now=now, lease_s=60)
            jobs_repo.complete_job(conn, job_id=third.id, owner="w", result={"total": 3.0},
                                   meta=meta, page_count=1, now=now)
            lone = jobs_repo.create_job(conn, user_id=uid, schema_id=schema["id"], new=file, now=now)
            jobs_repo.cancel_job(conn, uid, lone.id, now)

        await services.db.run(lifecycle)
        recorded = await services.db.read(lambda c: list(c.execute(sa.select(events).order_by(events.c.id))))
        assert {e.type for e in recorded} == LIFECYCLE
        await receiver.wait_for(len(recorded))
        await trio.sleep(0.2)
        assert len(receiver.requests) == len(recorded)  # once each

        document = await (await client.get("/api/openapi.json")).get_json()
        by_event = {}
        for request in receiver.requests:
            envelope = verified(request, ep["signingSecret"])
            # The body is what the OpenAPI document's `webhooks` section says receivers get.
            documented_event(document, envelope["type"]).validate(envelope)
            assert set(envelope) == {"id", "type", "data", "occurredAt"}
            assert request.headers["x-webhook-event"] == envelope["type"]
            by_event[envelope["id"]] = envelope
        for event in recorded:
            envelope = by_event[event.id]
            assert envelope["type"] == event.type and envelope["data"] == event.data
            assert envelope["occurredAt"].endswith("Z")
            assert dt.datetime.fromisoformat(envelope["occurredAt"]) == event.occurred_at.replace(
                microsecond=event.occurred_at.microsecond // 1000 * 1000)
            key = "job" if event.type.startswith("job.") else "jobRun"
            assert set(envelope["data"]) == {key}
        completed = next(e for e in by_event.values() if e["type"] == "job.completed")
        assert completed["data"]["job"]["result"] is not None

        log = await call(client, "get", f"/api/webhooks/{ep['id']}/deliveries?limit=100", alice, 200)
        assert {d["status"] for d in log["data"]} == {"SUCCEEDED"} and len(log["data"]) == len(recorded)


async def test_headers_of_the_seed_and_custom_headers(client: Any, services: Services, alice: dict[str, str],
                                                      dispatcher: None) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver, customHeaders={"Authorization": "Bearer abc", "X-Tenant": "42"})
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/send", alice, 202,
                          json={"type": "order.paid", "data": {"order": 7}})
        (request,) = await receiver.wait_for(1)
        h = request.headers
        assert request.method == "POST" and request.path == "/hook"
        assert h["content-type"] == "application/json"
        assert h["x-webhook-id"] == sent["id"]
        assert h["x-webhook-event"] == "order.paid"
        assert h["x-webhook-signature"].startswith(f"t={h['x-webhook-timestamp']},v1=")
        assert abs(int(h["x-webhook-timestamp"]) - time.time()) < 10
        assert h["user-agent"].startswith("docex-webhooks/")
        assert h["authorization"] == "Bearer abc" and h["x-tenant"] == "42"
        assert h["host"] == f"127.0.0.1:{receiver.port}"
        envelope = verified(request, ep["signingSecret"])
        assert envelope == {"id": sent["eventId"], "type": "order.paid", "data": {"order": 7},
                            "occurredAt": envelope["occurredAt"]}
        detail = await settled(client, alice, sent["id"], "SUCCEEDED")
        assert detail["attempts"] == 1 and detail["lastStatusCode"] == 200 and detail["lastError"] is None
        assert detail["nextAttemptAt"] is None and detail["lastAttemptAt"]
        (attempt,) = detail["attemptLog"]
        assert attempt["statusCode"] == 200 and attempt["responseBody"] == "ok" and attempt["error"] is None
        assert attempt["durationMs"] >= 0 and attempt["at"] == detail["lastAttemptAt"]


async def test_xml_and_form_bodies_parse_back_and_verify(client: Any, services: Services, alice: dict[str, str],
                                                         dispatcher: None) -> None:
    data = {"order": {"id": "A-1", "lines": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 1}], "paid": True}}
    async with open_receiver() as receiver:
        xml_ep = await endpoint(client, alice, receiver, bodyFormat="XML")
        form_ep = await endpoint(client, alice, receiver, bodyFormat="FORM_URLENCODED")
        xml_sent = await call(client, "post", f"/api/webhooks/{xml_ep['id']}/send", alice, 202, json={"data": data})
        form_sent = await call(client, "post", f"/api/webhooks/{form_ep['id']}/send", alice, 202,
                               json={"data": data})
        await receiver.wait_for(2)
        by_id = {r.headers["x-webhook-id"]: r for r in receiver.requests}

        xml_request = by_id[xml_sent["id"]]
        verified(xml_request, xml_ep["signingSecret"])
        assert xml_request.headers["content-type"] == "application/xml"
        root = ET.fromstring(xml_request.body)
        assert [c.tag for c in root] == ["id", "type", "occurredAt", "data"]
        assert root.findtext("id") == xml_sent["eventId"] and root.findtext("type") == "webhook.send"
        assert [(i.findtext("sku"), i.findtext("qty")) for i in root.findall("data/order/lines/item")] == [
            ("x", "2"), ("y", "1")]
        assert root.findtext("data/order/paid") == "true"

        form_request = by_id[form_sent["id"]]
        verified(form_request, form_ep["signingSecret"])
        assert form_request.headers["content-type"] == "application/x-www-form-urlencoded"
        fields = dict(urllib.parse.parse_qsl(form_request.body.decode(), strict_parsing=True))
        assert set(fields) == {"id", "type", "occurredAt", "data"}
        assert fields["id"] == form_sent["eventId"] and json.loads(fields["data"]) == data


# --- retries ---------------------------------------------------------------------------------


async def test_a_500_then_success(client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    async with open_receiver(replying((500, {}, b"database down"), (200, {}, b"thanks"))) as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        detail = await settled(client, alice, sent["id"], "SUCCEEDED")
        first, second = receiver.requests
        assert first.headers["x-webhook-id"] == second.headers["x-webhook-id"] == sent["id"]
        assert first.body == second.body  # the same envelope; the signature's t may differ
        verified(second, ep["signingSecret"])
        assert detail["attempts"] == 2 and detail["lastStatusCode"] == 200 and detail["lastError"] is None
        assert [(a["statusCode"], a["error"], a["responseBody"]) for a in detail["attemptLog"]] == [
            (500, "HTTP 500", "database down"), (200, None, "thanks")]
        assert (await call(client, "get", f"/api/webhooks/{ep['id']}", alice, 200))["consecutiveDeadDeliveries"] == 0


async def test_500_until_dead(client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    configure(services, backoff_initial_ms=200)
    async with open_receiver(replying((500, {}, b"x" * 5000))) as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        detail = await settled(client, alice, sent["id"], "DEAD")
        assert len(receiver.requests) == 3 and detail["attempts"] == 3
        assert detail["lastStatusCode"] == 500 and detail["lastError"] == "HTTP 500" and detail["nextAttemptAt"] is None
        assert [a["statusCode"] for a in detail["attemptLog"]] == [500, 500, 500]
        assert all(len(a["responseBody"].encode()) == 1024 for a in detail["attemptLog"])
        gaps = [b.at - a.at for a, b in zip(receiver.requests, receiver.requests[1:], strict=False)]
        # Exponential: 200 ms then 400 ms (±10 %), so the second wait is longer than any first one
        # could be. Only lower bounds: a loaded machine lengthens either gap (the exact schedule
        # is tests/unit/webhooks/test_webhook_schedule.py's), so gaps[0] < gaps[1] may not hold.
        assert gaps[0] >= 0.18 and gaps[1] >= 0.36, gaps
        await trio.sleep(0.3)
        assert len(receiver.requests) == 3  # no fourth attempt
        got = await call(client, "get", f"/api/webhooks/{ep['id']}", alice, 200)
        assert got["consecutiveDeadDeliveries"] == 1 and got["enabled"] is True
        dead = await call(client, "get", f"/api/webhooks/{ep['id']}/deliveries?status=DEAD", alice, 200)
        assert [d["id"] for d in dead["data"]] == [sent["id"]]


async def test_a_receiver_slower_than_the_timeout_fails_the_attempt(client: Any, services: Services,
                                                                    alice: dict[str, str], dispatcher: None) -> None:
    configure(services, timeout_ms=200, max_attempts=1)

    async def slow(request: Received) -> Reply:
        await trio.sleep(2)
        return 200, {}, b"late"

    async with open_receiver(slow) as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        detail = await settled(client, alice, sent["id"], "DEAD")
        (attempt,) = detail["attemptLog"]
        assert attempt["statusCode"] is None and "200 ms" in attempt["error"], attempt
        assert 150 <= attempt["durationMs"] < 1500
        assert len(receiver.requests) == 1


async def test_a_redirect_is_a_failure_and_is_not_followed(client: Any, services: Services, alice: dict[str, str],
                                                           dispatcher: None) -> None:
    configure(services, max_attempts=1)
    async with open_receiver() as receiver:
        receiver.handler = replying((302, {"Location": receiver.url("/elsewhere")}, b""))
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        detail = await settled(client, alice, sent["id"], "DEAD")
        assert detail["lastStatusCode"] == 302
        assert detail["lastError"] == f"HTTP 302: redirects are not followed (Location: {receiver.url('/elsewhere')})"
        await trio.sleep(0.2)
        assert [r.path for r in receiver.requests] == ["/hook"]


async def test_retry_after_is_honoured(client: Any, services: Services, alice: dict[str, str],
                                       dispatcher: None) -> None:
    async with open_receiver(replying((503, {"Retry-After": "1"}, b""), (200, {}, b""))) as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        after_first = await settled(client, alice, sent["id"], "RETRYING")
        assert after_first["lastStatusCode"] == 503
        wait = (dt.datetime.fromisoformat(after_first["nextAttemptAt"])
                - dt.datetime.fromisoformat(after_first["lastAttemptAt"])).total_seconds()
        # The wait counts from the attempt's end, lastAttemptAt is its start: less its duration
        # (however long a loaded machine made it), the wait is Retry-After's 1 s.
        (attempt,) = after_first["attemptLog"]
        assert wait >= 0.9 and wait - attempt["durationMs"] / 1000 <= 1.3, (wait, attempt)
        await settled(client, alice, sent["id"], "SUCCEEDED")
        first, second = receiver.requests
        assert second.at - first.at >= 0.95


# --- disabling, re-enabling, replay ---------------------------------------------------------------


async def test_consecutive_dead_deliveries_disable_the_endpoint_until_patched(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    configure(services, max_attempts=1, auto_disable_threshold=2)
    async with open_receiver(replying((500, {}, b""))) as receiver:
        ep = await endpoint(client, alice, receiver, events=["job.*"])
        base = f"/api/webhooks/{ep['id']}"
        first = await call(client, "post", f"{base}/test", alice, 202)
        await settled(client, alice, first["id"], "DEAD")
        assert (await call(client, "get", base, alice, 200))["consecutiveDeadDeliveries"] == 1
        second = await call(client, "post", f"{base}/test", alice, 202)
        await settled(client, alice, second["id"], "DEAD")
        got = await call(client, "get", base, alice, 200)
        assert got["enabled"] is False and got["consecutiveDeadDeliveries"] == 2
        assert got["disabledReason"].startswith("Disabled automatically after 2 consecutive dead deliveries")

        # No new events are queued for it, and nothing is sent.
        uid = await user_id(client, alice)
        await services.db.run(lambda c: record_event(c, user_id=uid, type="job.queued", data={}, now=utcnow()))
        await call(client, "post", f"{base}/test", alice, 409)
        replayed = await call(client, "post", f"/api/webhooks/deliveries/{first['id']}/replay", alice, 202)
        await trio.sleep(0.3)
        assert len(receiver.requests) == 2
        assert (await call(client, "get", f"/api/webhooks/deliveries/{replayed['id']}", alice, 200))[
            "status"] == "PENDING"

        # Re-enabled: the counter resets and the waiting replay goes out.
        receiver.handler = replying((200, {}, b""))
        on = await call(client, "patch", base, alice, 200, json={"enabled": True})
        assert on["enabled"] is True and on["consecutiveDeadDeliveries"] == 0 and on["disabledReason"] is None
        await settled(client, alice, replayed["id"], "SUCCEEDED")
        assert len(receiver.requests) == 3


async def test_a_success_resets_the_dead_counter(client: Any, services: Services, alice: dict[str, str],
                                                 dispatcher: None) -> None:
    configure(services, max_attempts=1)
    async with open_receiver(replying((500, {}, b""), (200, {}, b""))) as receiver:
        ep = await endpoint(client, alice, receiver)
        base = f"/api/webhooks/{ep['id']}"
        await settled(client, alice, (await call(client, "post", f"{base}/test", alice, 202))["id"], "DEAD")
        assert (await call(client, "get", base, alice, 200))["consecutiveDeadDeliveries"] == 1
        await settled(client, alice, (await call(client, "post", f"{base}/test", alice, 202))["id"], "SUCCEEDED")
        assert (await call(client, "get", base, alice, 200))["consecutiveDeadDeliveries"] == 0


async def test_replay_sends_the_same_event_under_a_new_delivery_id(client: Any, services: Services,
                                                                   alice: dict[str, str], dispatcher: None) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/send", alice, 202, json={"data": {"n": 1}})
        await settled(client, alice, sent["id"], "SUCCEEDED")
        replayed = await call(client, "post", f"/api/webhooks/deliveries/{sent['id']}/replay", alice, 202)
        await settled(client, alice, replayed["id"], "SUCCEEDED")
        first, second = receiver.requests
        assert first.headers["x-webhook-id"] == sent["id"] and second.headers["x-webhook-id"] == replayed["id"]
        assert json.loads(first.body) == json.loads(second.body)  # same envelope, same event id
        assert json.loads(second.body)["id"] == sent["eventId"] == replayed["eventId"]


async def test_deliveries_of_a_deleted_endpoint_are_never_sent(client: Any, services: Services,
                                                               alice: dict[str, str]) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        r = await client.delete(f"/api/webhooks/{ep['id']}", headers=alice)
        assert r.status_code == 204
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            await trio.sleep(0.3)
            services.stopping.set()
        assert receiver.requests == []


# --- signing secrets ------------------------------------------------------------------------------


async def test_during_a_rotation_both_secrets_verify_then_only_the_new_one(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        old = ep["signingSecret"]
        new = (await call(client, "post", f"/api/webhooks/{ep['id']}/rotate-secret", alice, 200))["signingSecret"]
        await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        (during,) = await receiver.wait_for(1)
        header = during.headers["x-webhook-signature"]
        assert header.count("v1=") == 2
        verified(during, new, old)  # Stripe accepts the delivery with either secret

        configure(services, secret_rotation_overlap_s=0)
        newest = (await call(client, "post", f"/api/webhooks/{ep['id']}/rotate-secret", alice, 200))["signingSecret"]
        await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        after = (await receiver.wait_for(2))[1]
        assert after.headers["x-webhook-signature"].count("v1=") == 1
        verified(after, newest)
        for stale in (new, old):
            with pytest.raises(stripe.SignatureVerificationError):
                stripe.WebhookSignature.verify_header(after.body, after.headers["x-webhook-signature"], stale)
            with pytest.raises(SignatureVerificationError):
                verify_signature(after.body, after.headers["x-webhook-signature"], stale)


async def test_an_expired_overlap_drops_the_previous_signature(client: Any, services: Services,
                                                               alice: dict[str, str], dispatcher: None) -> None:
    from daemon.storage.tables import webhook_endpoints

    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        new = (await call(client, "post", f"/api/webhooks/{ep['id']}/rotate-secret", alice, 200))["signingSecret"]
        await services.db.run(lambda c: c.execute(webhook_endpoints.update().values(
            previous_secret_expires_at=utcnow() - dt.timedelta(seconds=1))))
        await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        (request,) = await receiver.wait_for(1)
        assert request.headers["x-webhook-signature"].count("v1=") == 1
        verified(request, new)


# --- the SSRF guard at send time -------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_private_addresses_are_refused_at_send_time(client: Any, services: Services, alice: dict[str, str],
                                                          dispatcher: None, host: str) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        await call(client, "patch", f"/api/webhooks/{ep['id']}", alice, 200,
                   json={"url": f"http://{host}:{receiver.port}/hook"})
        configure(services, allow_private_networks=False, max_attempts=1)  # as after a SIGHUP
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        detail = await settled(client, alice, sent["id"], "DEAD")
        assert detail["lastStatusCode"] is None
        assert detail["lastError"].startswith("refused to connect: ") and "loopback" in detail["lastError"]
        assert "webhooks.allow_private_networks is off" in detail["lastError"]
        assert receiver.requests == []


# --- leases, several dispatchers, concurrency, shutdown -------------------------------------------------


async def test_a_delivery_leased_by_another_live_process_is_left_to_it(client: Any, services: Services,
                                                                       alice: dict[str, str]) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        held = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        free = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        await services.db.run(lambda c: c.execute(deliveries.update().where(deliveries.c.id == held["id"]).values(
            lease_owner="elsewhere:1:webhooks:1", lease_expires_at=utcnow() + dt.timedelta(seconds=60))))
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            await settled(client, alice, free["id"], "SUCCEEDED")
            await trio.sleep(0.3)
            services.stopping.set()
        assert [r.headers["x-webhook-id"] for r in receiver.requests] == [free["id"]]
        row = await services.db.read(lambda c: c.execute(
            sa.select(deliveries).where(deliveries.c.id == held["id"])).one())
        assert row.status == "PENDING" and row.lease_owner == "elsewhere:1:webhooks:1"


async def test_an_expired_lease_of_a_crashed_process_is_sent(client: Any, services: Services,
                                                             alice: dict[str, str]) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        held = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        expires = utcnow() + dt.timedelta(seconds=0.4)
        await services.db.run(lambda c: c.execute(deliveries.update().where(deliveries.c.id == held["id"]).values(
            lease_owner="crashed:1:webhooks:1", lease_expires_at=expires)))
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            (request,) = await receiver.wait_for(1, timeout=5)  # woken at the lease's expiry, no event needed
            services.stopping.set()
        # Not while the lease was live (however long the dispatcher took to start).
        assert request.at >= expires.timestamp()
        assert (await settled(client, alice, held["id"], "SUCCEEDED"))["attempts"] == 1


async def test_two_dispatchers_on_one_database_send_each_delivery_once(client: Any, services: Services,
                                                                        alice: dict[str, str]) -> None:
    configure(services, per_endpoint_concurrency=8)
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        ids = [(await call(client, "post", f"/api/webhooks/{ep['id']}/send", alice, 202, json={"data": {"n": i}}))["id"]
               for i in range(40)]
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            await nursery.start(run_dispatcher, services)
            await receiver.wait_for(40)
            await trio.sleep(0.3)
            services.stopping.set()
        assert sorted(r.headers["x-webhook-id"] for r in receiver.requests) == sorted(ids)


async def test_concurrency_is_bounded_per_endpoint_and_in_total(client: Any, services: Services,
                                                                alice: dict[str, str]) -> None:
    configure(services, concurrency=3, per_endpoint_concurrency=2)
    active = {"now": 0, "max": 0, "per_path": {}, "max_per_path": {}}

    async def slow(request: Received) -> Reply:
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        per = active["per_path"]
        per[request.path] = per.get(request.path, 0) + 1
        active["max_per_path"][request.path] = max(active["max_per_path"].get(request.path, 0), per[request.path])
        await trio.sleep(0.15)
        active["now"] -= 1
        per[request.path] -= 1
        return 200, {}, b""

    async with open_receiver(slow) as receiver:
        a = await endpoint(client, alice, receiver, url=receiver.url("/a"))
        b = await endpoint(client, alice, receiver, url=receiver.url("/b"))
        for _ in range(5):
            for ep in (a, b):
                await call(client, "post", f"/api/webhooks/{ep['id']}/send", alice, 202, json={"data": {}})
        # All ten are due before the dispatcher starts: each claim has more than its slots to fill,
        # so the bounds are reached however slowly a loaded machine answered the posts.
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            await receiver.wait_for(10, timeout=15)
            services.stopping.set()
    assert active["max"] == 3
    assert max(active["max_per_path"].values()) == 2


async def test_one_users_hanging_receivers_hold_only_their_share_of_the_sends(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    """Slots were shared by everyone, oldest delivery first: 20 endpoints of one user that
    never answer held all of them, and another user's event waited minutes."""
    configure(services, concurrency=6, per_endpoint_concurrency=2, per_user_concurrency=3, timeout_ms=5000)
    r = await client.post("/api/auth/register", json={"name": "B", "email": "bob@example.com", "password": PASSWORD})
    bob = {"Authorization": f"Bearer {(await r.get_json())['accessToken']}"}
    hanging = trio.Event()

    async def hang(request: Received) -> Reply:
        await hanging.wait()
        return 200, {}, b""

    async with open_receiver(hang) as stuck, open_receiver() as prompt:
        for i in range(4):
            ep = await endpoint(client, alice, stuck, url=stuck.url(f"/{i}"))
            for _ in range(3):
                await call(client, "post", f"/api/webhooks/{ep['id']}/send", alice, 202, json={"data": {}})
        theirs = await endpoint(client, bob, prompt)
        await call(client, "post", f"/api/webhooks/{theirs['id']}/send", bob, 202, json={"data": {"bob": 1}})
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            with trio.fail_after(2):  # long before alice's sends time out
                await prompt.wait_for(1)
            await stuck.wait_for(3, timeout=5)
            await trio.sleep(0.3)
            assert len(stuck.requests) == 3  # alice's share, of 6, and no more
            hanging.set()
            await stuck.wait_for(12, timeout=15)
            services.stopping.set()


async def test_a_first_attempt_goes_out_within_tens_of_milliseconds(client: Any, services: Services,
                                                                    alice: dict[str, str], dispatcher: None) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
        await trio.sleep(0.2)  # the dispatcher is idle, asleep until woken
        lags = []
        for i in range(5):
            sent = await call(client, "post", f"/api/webhooks/{ep['id']}/send", alice, 202, json={"data": {"i": i}})
            request = (await receiver.wait_for(i + 1))[i]
            created = dt.datetime.fromisoformat(sent["createdAt"]).timestamp()
            lags.append(request.at - created)
        assert sorted(lags)[2] < 0.25, lags  # generous for a loaded machine; the bench measures it properly


async def test_shutdown_lets_an_in_flight_send_finish_and_records_it(client: Any, services: Services,
                                                                     alice: dict[str, str]) -> None:
    async def slow(request: Received) -> Reply:
        await trio.sleep(0.3)
        return 200, {}, b""

    async with open_receiver(slow) as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            await receiver.wait_for(1)
            services.stopping.set()  # the dispatcher returns only once the send is recorded
        assert services.running["dispatcher"] is False
        row = await services.db.read(lambda c: c.execute(
            sa.select(deliveries).where(deliveries.c.id == sent["id"])).one())
        assert row.status == "SUCCEEDED" and row.lease_owner is None


async def test_a_send_cancelled_past_the_grace_period_is_released_not_counted(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    async def stuck(request: Received) -> Reply:
        await trio.sleep(10)
        return 200, {}, b""

    async with open_receiver(stuck) as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        async with trio.open_nursery() as nursery:
            await nursery.start(run_dispatcher, services)
            await receiver.wait_for(1)
            nursery.cancel_scope.cancel()  # what the drain deadline does
        row = await services.db.read(lambda c: c.execute(
            sa.select(deliveries).where(deliveries.c.id == sent["id"])).one())
        assert row.status == "PENDING" and row.attempts == 0 and row.lease_owner is None


# --- SIGHUP ---------------------------------------------------------------------------------------


async def test_a_reload_applies_new_webhook_settings_to_the_running_dispatcher(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None, tmp_path: Any) -> None:
    from daemon.lifecycle import ConfigSource, reload

    current = services.config
    assert current.auth.jwt_access_secret is not None and current.webhooks.encryption_key is not None
    path = tmp_path / "docex.toml"
    path.write_text(
        f"data_dir = {json.dumps(current.data_dir)}\n"
        f"[database]\nurl = {json.dumps(current.database.url)}\npool_size = {current.database.pool_size}\n"
        f"[auth]\njwt_access_secret = {json.dumps(current.auth.jwt_access_secret.reveal())}\n"
        "[webhooks]\n"
        f"encryption_key = {json.dumps(current.webhooks.encryption_key.reveal())}\n"
        'allow_http = true\nallow_private_networks = true\nmax_attempts = 1\ntimeout = "300ms"\n',
        encoding="utf-8",
    )
    assert await reload(services, ConfigSource(str(path), {}))  # what SIGHUP does
    assert (services.config.webhooks.max_attempts, services.config.webhooks.timeout_ms) == (1, 300)

    async def slow(request: Received) -> Reply:
        await trio.sleep(1)
        return 200, {}, b""

    async with open_receiver(slow) as receiver:
        ep = await endpoint(client, alice, receiver)
        sent = await call(client, "post", f"/api/webhooks/{ep['id']}/test", alice, 202)
        detail = await settled(client, alice, sent["id"], "DEAD")
        assert detail["attempts"] == 1 and "300 ms" in detail["lastError"]


# --- bulk recovery --------------------------------------------------------------------------------


async def test_recover_replays_each_dead_delivery_since_a_time_once_in_order(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    down = True

    async def outage(request: Received) -> Reply:
        return (503, {}, b"down") if down else (200, {}, b"ok")

    async with open_receiver(outage) as receiver:
        ep = await endpoint(client, alice, receiver)
        base = f"/api/webhooks/{ep['id']}"
        before = await call(client, "post", f"{base}/send", alice, 202, json={"data": {"n": 0}})
        await settled(client, alice, before["id"], "DEAD")
        await trio.sleep(0.01)
        since = utcnow()
        sent = [await call(client, "post", f"{base}/send", alice, 202, json={"data": {"n": n}}) for n in (1, 2, 3)]
        for delivery in sent:
            await settled(client, alice, delivery["id"], "DEAD")
        down = False
        fine = await call(client, "post", f"{base}/send", alice, 202, json={"data": {"n": 4}})
        await settled(client, alice, fine["id"], "SUCCEEDED")
        receiver.requests.clear()

        recovered = await call(client, "post", f"{base}/recover", alice, 202, json={"since": since.isoformat()})
        assert recovered["recovered"] == 3 and recovered["hasMore"] is False
        # New deliveries in the order of the originals: the dispatcher claims them oldest first.
        assert [d["eventId"] for d in recovered["deliveries"]] == [d["eventId"] for d in sent]
        assert [d["id"] for d in recovered["deliveries"]] == sorted(d["id"] for d in recovered["deliveries"])
        assert {d["id"] for d in recovered["deliveries"]}.isdisjoint({d["id"] for d in sent})
        for delivery in recovered["deliveries"]:
            await settled(client, alice, delivery["id"], "SUCCEEDED")
        got = await receiver.wait_for(3)
        # (Sent concurrently, like any deliveries: arrival order is not promised.)
        assert sorted(json.loads(r.body)["data"]["n"] for r in got) == [1, 2, 3]
        verified(got[0], ep["signingSecret"])

        # Each failed event once: a second call finds nothing left to recover.
        again = await call(client, "post", f"{base}/recover", alice, 202, json={"since": since.isoformat()})
        assert again["recovered"] == 0 and again["deliveries"] == []
        await trio.sleep(0.2)
        assert len(receiver.requests) == 3


async def test_recover_is_the_owners_and_needs_a_time(client: Any, services: Services, alice: dict[str, str]) -> None:
    async with open_receiver() as receiver:
        ep = await endpoint(client, alice, receiver)
    r = await client.post("/api/auth/register", json={"name": "B", "email": "bob@example.com", "password": PASSWORD})
    bob = {"Authorization": f"Bearer {(await r.get_json())['accessToken']}"}
    await call(client, "post", f"/api/webhooks/{ep['id']}/recover", bob, 404, json={"since": "2026-01-01T00:00:00Z"})
    for body in ({}, {"since": "yesterday"}, {"since": "2026-01-01T00:00:00Z", "extra": 1}):
        problem = await call(client, "post", f"/api/webhooks/{ep['id']}/recover", alice, 400, json=body)
        assert problem["statusCode"] == 400


# --- custom headers that carry the receiver's credentials ---------------------------------------
# Sealed at rest, masked in every answer, kept when sent back masked, sent in full.

RECEIVER_TOKEN = "Bearer r3ceiver-t0ken"


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
            "customHeaders": {"Authorization": RECEIVER_TOKEN, "X-Api-Key": "k-123", "X-Tenant": "42"}})
        shown = {"Authorization": "********", "X-Api-Key": "********", "X-Tenant": "42"}
        assert created["customHeaders"] == shown
        url = f"/api/webhooks/{created['id']}"
        assert (await call(client, "get", url, alice, 200))["customHeaders"] == shown
        assert (await call(client, "get", "/api/webhooks", alice, 200))["data"][0]["customHeaders"] == shown

        stored = await stored_bytes(services)
        assert b"r3ceiver-t0ken" not in stored and b"k-123" not in stored and b"X-Tenant" not in stored

        headers = await sent_headers(client, alice, created["id"], receiver)
        assert (headers["authorization"], headers["x-api-key"], headers["x-tenant"]) == (RECEIVER_TOKEN, "k-123", "42")


async def test_headers_sent_back_masked_keep_their_values(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    """What the console does: it sends an endpoint's headers back whole, as it was shown them."""
    async with open_receiver() as receiver:
        created = await call(client, "post", "/api/webhooks", alice, 201, json={
            "url": receiver.url(), "events": ["*"],
            "customHeaders": {"Authorization": RECEIVER_TOKEN, "X-Tenant": "42"}})
        url = f"/api/webhooks/{created['id']}"
        patched = await call(client, "patch", url, alice, 200, json={
            "customHeaders": {"authorization": "********", "X-Tenant": "43", "X-Session-Id": "s-9"}})
        assert patched["customHeaders"] == {"authorization": "********", "X-Tenant": "43", "X-Session-Id": "********"}
        headers = await sent_headers(client, alice, created["id"], receiver)
        assert (headers["authorization"], headers["x-tenant"], headers["x-session-id"]) == (RECEIVER_TOKEN, "43", "s-9")

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


async def test_a_header_http_refuses_fails_the_attempt_without_quoting_its_value(
        client: Any, services: Services, alice: dict[str, str], dispatcher: None) -> None:
    """A value that ends in a space, stored before values were checked so: httpx refuses the
    request, and its message, which quotes the header, was the delivery's lastError."""
    async with open_receiver() as receiver:
        created = await call(client, "post", "/api/webhooks", alice, 201, json={
            "url": receiver.url(), "events": ["*"], "customHeaders": {"Authorization": RECEIVER_TOKEN}})
        sealed = seal_headers(services.config.webhooks, created["id"], {"Authorization": RECEIVER_TOKEN + " "})
        await services.db.run(lambda conn: conn.execute(
            webhook_endpoints.update().where(webhook_endpoints.c.id == created["id"])
            .values(custom_headers_sealed=sealed)))
        sent = await call(client, "post", f"/api/webhooks/{created['id']}/send", alice, 202, json={"data": {}})
        detail = await settled(client, alice, sent["id"], "RETRYING", "DEAD")
        assert detail["lastError"] == ("the request could not be sent as HTTP: a custom header's value is not one "
                                       "HTTP allows")
        assert "t0ken" not in json.dumps(detail) and receiver.requests == []


async def test_a_changed_key_is_a_clear_error_not_a_leak(client: Any, services: Services, alice: dict[str, str],
                                                        config: Config) -> None:
    created = await call(client, "post", "/api/webhooks", alice, 201, json={
        "url": "http://127.0.0.1:9/x", "events": ["*"], "customHeaders": {"Authorization": RECEIVER_TOKEN}})
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
        insert_plain_endpoints(db.engine, {"e1": {"Authorization": RECEIVER_TOKEN, "X-Tenant": "42"}, "e2": {}})

        with pytest.raises(StartupError, match="sealing them needs WEBHOOK_ENCRYPTION_KEY"):
            upgrade(db.engine)
        with db.engine.connect() as conn:
            assert current_revision(conn) == "0013"  # nothing half done

        assert on_disk(db.engine, b"r3ceiver-t0ken")  # what the check below would find
        upgrade(db.engine, encryption_key=key)
        # Gone from the table's storage too: PostgreSQL keeps a dropped column's bytes in
        # each row until it is rewritten, and SQLite a freed page's unless it zeroes them.
        assert not on_disk(db.engine, b"r3ceiver-t0ken")
        sealed = sealed_headers(db.engine)
        assert sealed["e2"] is None and sealed["e1"] is not None and b"t0ken" not in sealed["e1"]
        assert open_headers_with(key, "e1", sealed["e1"]) == {"Authorization": RECEIVER_TOKEN, "X-Tenant": "42"}

        downgrade(db.engine, "0013", encryption_key=key)
        with db.engine.connect() as conn:
            plain = dict(conn.execute(sa.select(ENDPOINTS_0013.c.id, ENDPOINTS_0013.c.custom_headers)).all())
        assert plain == {"e1": {"Authorization": RECEIVER_TOKEN, "X-Tenant": "42"}, "e2": {}}
    finally:
        db.dispose()
