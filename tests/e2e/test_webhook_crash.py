"""Webhook deliveries survive the death of the daemon (SPEC §9: "a crash can delay a
delivery, never lose it").

A real `docex serve` has an endpoint whose receiver is down (nothing listens on its
port), so every delivery fails and is retried. The process is killed with SIGKILL
while deliveries are due or retrying; then the receiver comes up on that port and a
new process starts on the same data directory and database. Every event the first
process recorded arrives at the receiver, signed, each under its delivery's id.
"""

from __future__ import annotations

import json
import signal
import socket
from collections.abc import Callable
from typing import Any

import httpx
import stripe
import trio
from e2e_helpers import QUICK_ENV, Api, query
from webhook_receiver import open_receiver

PASSWORD = "correct horse 42"
SENDS = 12
ENV = {
    **QUICK_ENV,
    "DOCEX_WEBHOOKS_ALLOW_HTTP": "true",
    "DOCEX_WEBHOOKS_ALLOW_PRIVATE_NETWORKS": "true",
    "WEBHOOK_BACKOFF_INITIAL_MS": "200",
    "WEBHOOK_MAX_ATTEMPTS": "30",
    "WEBHOOK_TIMEOUT_MS": "2000",
}


async def _json(response: httpx.Response, status: int) -> Any:
    assert response.status_code == status, response.text
    return response.json()


async def test_deliveries_due_when_the_daemon_is_killed_are_all_sent_after_a_restart(
    start_daemon: Callable[..., Any], database_url: str
) -> None:
    # The receiver's port stays bound (never listening: connections to it are refused) until the
    # receiver takes it: a port only found free could be handed to the daemon started next.
    reserved = socket.socket()
    reserved.bind(("127.0.0.1", 0))
    port = reserved.getsockname()[1]
    first = start_daemon(env=ENV)
    await first.wait_http_ready()
    async with Api(first.url(""), timeout=10) as session:
        api = session.client
        auth = await session.sign_up(password=PASSWORD)
        r = await api.post("/api/webhooks", headers=auth,
                           json={"url": f"http://127.0.0.1:{port}/hook", "events": ["*"]})
        endpoint = await _json(r, 201)
        sent = [await _json(await api.post(f"/api/webhooks/{endpoint['id']}/send", headers=auth,
                                           json={"data": {"n": i}}), 202) for i in range(SENDS)]
        sent.append(await _json(await api.post(f"/api/webhooks/{endpoint['id']}/test", headers=auth), 202))
        # A job too: its lifecycle events are routed to the endpoint by the outbox.
        schema_id = await session.create_schema({"type": "object", "properties": {"total": {"type": "number"}}},
                                                name="S")
        await session.upload(schema_id, "receipt.txt", b"Total: 12.50\n", "text/plain", statuses=None)

        # Wait until the receiver's absence shows: deliveries failing and retrying.
        with trio.fail_after(15):
            while True:
                r = await api.get(f"/api/webhooks/{endpoint['id']}/deliveries?status=RETRYING&limit=100",
                                  headers=auth)
                retrying = (await _json(r, 200))["data"]
                if len(retrying) >= SENDS // 2:
                    break
                await trio.sleep(0.05)
        assert all("connection failed" in d["lastError"] for d in retrying), retrying

    first.signal(signal.SIGKILL)
    assert await first.wait_exit(timeout=5) == -signal.SIGKILL

    reserved.close()
    async with open_receiver(port=port) as receiver:
        second = start_daemon(env=ENV)
        await second.wait_http_ready()
        await receiver.wait_for(len(sent), timeout=30)
        async with httpx.AsyncClient(base_url=second.url(""), timeout=10) as api:
            with trio.fail_after(15):
                while True:
                    r = await api.get(f"/api/webhooks/{endpoint['id']}/deliveries?limit=100", headers=auth)
                    log = (await _json(r, 200))["data"]
                    recorded = {row.id for row in await query(database_url, "SELECT id FROM events")}
                    if len(log) == len(recorded) and all(d["status"] == "SUCCEEDED" for d in log):
                        break
                    await trio.sleep(0.05)

    assert {d["id"] for d in sent} <= {d["id"] for d in log}
    assert {d["eventId"] for d in log} == recorded
    arrived = {r.headers["x-webhook-id"] for r in receiver.requests}
    assert arrived == {d["id"] for d in log}  # none lost (a send cut by the kill may arrive twice)
    assert {json.loads(r.body)["id"] for r in receiver.requests} == recorded
    assert {json.loads(r.body)["type"] for r in receiver.requests} >= {"webhook.send", "webhook.ping", "job.queued"}
    for request in receiver.requests:
        stripe.WebhookSignature.verify_header(request.body, request.headers["x-webhook-signature"],
                                              endpoint["signingSecret"], tolerance=300)
    assert max(d["attempts"] for d in log) >= 2  # they had failed before the crash
    await second.stop(timeout=10)
