"""A webhook URL may hold its secret (`?token=`, Slack's path): a delivery logs none of it.
httpx logged every request's whole URL at INFO, into the journal, on every delivery."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e_helpers import QUICK_ENV, Api
from webhook_receiver import open_receiver

SECRET = "SUPERSECRET0123456789"
ENV = {**QUICK_ENV, "DOCEX_WEBHOOKS_ALLOW_HTTP": "true", "DOCEX_WEBHOOKS_ALLOW_PRIVATE_NETWORKS": "true"}


async def test_a_delivery_does_not_log_the_endpoint_url(start_daemon: Callable[..., Any]) -> None:
    async with open_receiver() as receiver:
        daemon = start_daemon(env=ENV)
        await daemon.wait_http_ready()
        async with Api(daemon.url(""), timeout=10) as session:
            auth = await session.sign_up()
            r = await session.client.post("/api/webhooks", headers=auth,
                                          json={"url": receiver.url(f"/hook/{SECRET}?token={SECRET}"), "events": ["*"]})
            assert r.status_code == 201, r.text
            r = await session.client.post(f"/api/webhooks/{r.json()['id']}/test", headers=auth)
            assert r.status_code == 202, r.text
            await receiver.wait_for(1, timeout=15)
        await daemon.stop(timeout=10)
    assert daemon.records, daemon.describe()
    assert not [line for line in daemon.records if SECRET in str(line)]
