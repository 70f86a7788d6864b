"""The console's webhooks screens in a real browser, against a real receiver on loopback:
create an endpoint (its secret shown once), send a test that the receiver gets signed with
that secret, see the delivery and its attempt, replay it, rotate the secret, disable and
enable, edit and delete."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import stripe
import trio
from console_browser import expect, open_console
from webhook_receiver import Received, Receiver, open_receiver

# A loopback receiver over plain http: both are refused unless the operator allows them.
ENV = {"DOCEX_WEBHOOKS_ALLOW_HTTP": "true", "DOCEX_WEBHOOKS_ALLOW_PRIVATE_NETWORKS": "true"}
HOSTILE = "<img src=x onerror=alert(1)>"


class ThreadedReceiver:
    """tests/webhook_receiver.py's trio server, run in a thread beside Playwright's sync API."""

    def __init__(self) -> None:
        self.receiver: Receiver | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with open_receiver() as receiver:
            self.receiver = receiver
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        assert self._token is not None and self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)

    def url(self) -> str:
        assert self.receiver is not None
        return self.receiver.url("/hook")

    def wait_for(self, count: int, timeout_s: float = 15.0, explain: Callable[[], str] = str) -> list[Received]:
        """The requests once `count` have arrived; a timeout fails with `explain()` attached."""
        assert self.receiver is not None
        deadline = time.monotonic() + timeout_s
        while len(self.receiver.requests) < count:
            assert time.monotonic() < deadline, (
                f"{len(self.receiver.requests)} of {count} requests arrived\n{explain()}")
            time.sleep(0.05)
        return list(self.receiver.requests)


@contextmanager
def receiving() -> Iterator[ThreadedReceiver]:
    threaded = ThreadedReceiver()
    thread = threading.Thread(target=trio.run, args=(threaded._serve,), daemon=True)
    thread.start()
    assert threaded._ready.wait(10), "the receiver did not start"
    try:
        yield threaded
    finally:
        threaded.stop()
        thread.join(10)


def verified(request: Received, secret: str) -> dict[str, Any]:
    """The envelope, once Stripe's own verifier accepts its signature with `secret`."""
    assert stripe.WebhookSignature.verify_header(
        request.body.decode(), request.headers["x-webhook-signature"], secret, tolerance=300)
    envelope: dict[str, Any] = json.loads(request.body)
    return envelope


def test_endpoint_secret_test_delivery_replay_rotate_and_delete(start_daemon: Callable[..., Any]) -> None:
    with receiving() as receiver, open_console(start_daemon, env=ENV) as console:
        page = console.page
        console.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console.daemon.url(""))
        console.register("Wanda Hooks", "wanda@example.com")
        auth = {"Authorization": f"Bearer {console.api_token('wanda@example.com')}"}

        def endpoints() -> list[dict[str, Any]]:
            response = httpx.get(console.daemon.url("/api/webhooks"), headers=auth)
            assert response.status_code == 200, response.text
            found: list[dict[str, Any]] = response.json()["data"]
            return found

        def delivery_log() -> str:
            """What the daemon did with this user's deliveries, and its log: why a request is missing."""
            lines = []
            for each in endpoints():
                log = httpx.get(console.daemon.url(f"/api/webhooks/{each['id']}/deliveries"), headers=auth).json()
                for delivery in log.get("data", []):
                    detail = httpx.get(console.daemon.url(f"/api/webhooks/deliveries/{delivery['id']}"),
                                       headers=auth).json()
                    lines.append(json.dumps(detail))
            return "\n".join(lines) + "\n" + console.daemon.describe()

        page.get_by_role("navigation", name="Main").get_by_role("link", name="Webhooks").click()
        page.get_by_role("heading", name="Webhooks", exact=True).wait_for()
        page.get_by_text("No endpoints yet.").wait_for()

        # A bad URL is refused with the API's own words, and nothing is created.
        page.get_by_label("URL").fill("ftp://example.com/hook")
        page.get_by_label("job.completed", exact=True).check()
        page.get_by_role("button", name="Create endpoint").click()
        expect(page.get_by_role("alert")).to_contain_text("url")
        assert endpoints() == []

        # Events from the catalog's checkboxes plus a free pattern, and a custom header.
        page.get_by_label("URL").fill(receiver.url())
        page.get_by_label("Description").fill(HOSTILE)
        page.get_by_label("Mode").select_option("AUTOMATIC")
        page.get_by_label("Other patterns").fill("job_run.*")
        page.get_by_role("button", name="Add header").click()
        page.get_by_label("Header 1 name").fill("X-Team")
        page.get_by_label("Header 1 value").fill("ledger")
        page.get_by_role("button", name="Add header").click()
        page.get_by_label("Header 2 name").fill("Authorization")
        page.get_by_label("Header 2 value").fill("Bearer console-t0ken")
        page.get_by_role("button", name="Create endpoint").click()

        # The secret shows once, with a copy button and a warning.
        box = page.locator(".secret")
        expect(box).to_contain_text("will not be shown again")
        secret = box.locator("code").inner_text()
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/=]{40,}", secret), secret
        page.get_by_role("button", name="Copy secret").click()
        expect(box.get_by_role("status")).to_have_text("Copied.")
        assert page.evaluate("navigator.clipboard.readText()") == secret

        [endpoint] = endpoints()
        assert "signingSecret" not in endpoint and secret not in json.dumps(endpoint)
        assert endpoint["events"] == ["job.completed", "job_run.*"]
        # A credential header's value is never shown again.
        assert endpoint["customHeaders"] == {"X-Team": "ledger", "Authorization": "********"}
        assert endpoint["description"] == HOSTILE
        row = page.get_by_role("row").filter(has=page.get_by_role("link", name=receiver.url()))
        expect(row).to_contain_text("job.completed, job_run.*")
        expect(row).to_contain_text("enabled")
        # Untrusted text stays text: the description's markup shows as characters.
        expect(row.get_by_text(HOSTILE)).to_be_visible()
        expect(page.locator("main img")).to_have_count(0)

        page.reload()
        page.get_by_role("heading", name="Webhooks", exact=True).wait_for()
        expect(page.get_by_role("link", name=receiver.url())).to_be_visible()
        expect(page.locator(".secret")).to_have_count(0)
        assert secret not in page.content() and "console-t0ken" not in page.content()
        console.shot("webhooks")

        # The endpoint's page: a test event reaches the receiver, signed with that secret.
        page.get_by_role("link", name=receiver.url()).click()
        page.get_by_role("heading", name="Webhook endpoint").wait_for()
        page.get_by_role("button", name="Send test").click()
        [ping] = receiver.wait_for(1, explain=delivery_log)
        envelope = verified(ping, secret)
        assert envelope["type"] == "webhook.ping"
        assert envelope["data"] == {"endpointId": endpoint["id"], "message": "ping"}
        assert ping.headers["x-team"] == "ledger" and ping.headers["authorization"] == "Bearer console-t0ken"

        deliveries = page.get_by_role("table", name="Deliveries, newest first")
        expect(deliveries.get_by_role("row").filter(has_text="webhook.ping")).to_contain_text("SUCCEEDED")
        attempts = page.get_by_role("table", name="Attempts, oldest first")
        expect(attempts.get_by_role("row")).to_have_count(2)  # the heading row and one attempt
        expect(attempts.get_by_role("row").nth(1)).to_contain_text("200")
        expect(attempts.get_by_role("row").nth(1)).to_contain_text("ok")

        # Replay: the same event again as a new delivery.
        page.get_by_role("button", name="Replay").click()
        again = receiver.wait_for(2, explain=delivery_log)[1]
        assert verified(again, secret)["id"] == envelope["id"]
        assert again.headers["x-webhook-id"] != ping.headers["x-webhook-id"]
        expect(deliveries.get_by_role("row").filter(has_text="webhook.ping")).to_have_count(2)
        expect(deliveries.get_by_text("SUCCEEDED")).to_have_count(2)
        expect(attempts.get_by_role("row")).to_have_count(2)
        console.shot("webhook-endpoint")

        # The status filter narrows the log.
        page.get_by_label("Filter by status").select_option("DEAD")
        page.get_by_text("No deliveries match.").wait_for()
        page.get_by_label("Filter by status").select_option("")
        expect(deliveries.get_by_role("row")).to_have_count(3)

        # Rotate (asked first): a new secret, shown once, signs the next delivery.
        page.get_by_role("button", name="Rotate secret").click()
        page.get_by_role("button", name="Yes, rotate the secret").click()
        expect(page.locator(".secret")).to_contain_text("will not be shown again")
        rotated = page.locator(".secret code").inner_text()
        assert rotated.startswith("whsec_") and rotated != secret
        page.get_by_role("button", name="Send test").click()
        verified(receiver.wait_for(3, explain=delivery_log)[2], rotated)

        # Disable and enable, as the API sees it.
        page.get_by_role("button", name="Disable").click()
        page.get_by_role("button", name="Enable").wait_for()
        [off] = endpoints()
        assert off["enabled"] is False and off["disabledReason"]
        expect(page.get_by_text(off["disabledReason"])).to_be_visible()
        # A disabled endpoint is sent nothing: no test is offered.
        expect(page.get_by_role("button", name="Send test")).to_be_disabled()
        page.get_by_text("Enable the endpoint to send a test.").wait_for()
        page.get_by_role("button", name="Enable").click()
        page.get_by_role("button", name="Disable").wait_for()
        assert endpoints()[0]["enabled"] is True
        expect(page.get_by_role("button", name="Send test")).to_be_enabled()

        # Edit the settings.
        page.get_by_text("Settings", exact=True).click()
        page.get_by_label("Description").fill("ledger sync")
        page.get_by_label("job.failed", exact=True).check()
        console.shot("webhook-settings")
        page.get_by_role("button", name="Save changes").click()
        page.get_by_text("Settings saved.").wait_for()
        edited = endpoints()[0]
        assert edited["description"] == "ledger sync"
        assert edited["events"] == ["job.completed", "job.failed", "job_run.*"]
        # The form sent the masked header back as it showed it: the stored value is kept.
        expect(page.get_by_label("Header 2 value")).to_have_value("********")
        page.get_by_role("button", name="Send test").click()
        assert receiver.wait_for(4, explain=delivery_log)[3].headers["authorization"] == "Bearer console-t0ken"

        # The log is paged: 20 deliveries a page (4 pings so far, then 20 manual sends).
        for n in range(20):
            sent = httpx.post(console.daemon.url(f"/api/webhooks/{endpoint['id']}/send"), headers=auth,
                              json={"data": {"n": n}})
            assert sent.status_code == 202, sent.text
        page.reload()
        expect(deliveries.get_by_role("row")).to_have_count(21)
        expect(deliveries.get_by_role("row").nth(1)).to_contain_text("webhook.send")
        page.get_by_role("button", name="Next page").click()
        page.get_by_text("Page 2").wait_for()
        expect(deliveries.get_by_role("row")).to_have_count(5)
        expect(deliveries.get_by_role("row").filter(has_text="webhook.ping")).to_have_count(4)
        page.get_by_role("button", name="Previous page").click()
        expect(deliveries.get_by_role("row")).to_have_count(21)

        # Delete (asked first): back to the list, gone from the API.
        page.get_by_role("button", name="Delete endpoint").click()
        page.get_by_role("button", name="Yes, delete the endpoint").click()
        page.get_by_role("heading", name="Webhooks", exact=True).wait_for()
        page.get_by_text("No endpoints yet.").wait_for()
        assert endpoints() == []


def test_recover_sends_again_what_failed_during_an_outage(start_daemon: Callable[..., Any]) -> None:
    # One attempt per delivery: a receiver that is down makes DEAD deliveries at once.
    env = {**ENV, "WEBHOOK_MAX_ATTEMPTS": "1"}
    with receiving() as receiver, open_console(start_daemon, env=env) as console:
        page = console.page
        console.register("Otto Outage", "otto@example.com")
        auth = {"Authorization": f"Bearer {console.api_token('otto@example.com')}"}
        with socket.socket() as probe:  # a port nothing listens on: the receiver is "down"
            probe.bind(("127.0.0.1", 0))
            closed = probe.getsockname()[1]
        endpoint = httpx.post(console.daemon.url("/api/webhooks"), headers=auth, json={
            "url": f"http://127.0.0.1:{closed}/hook", "events": ["*"]}).json()
        for n in range(3):
            httpx.post(console.daemon.url(f"/api/webhooks/{endpoint['id']}/send"), headers=auth,
                       json={"data": {"n": n}})
        console.goto(f"#/webhooks/{endpoint['id']}")
        deliveries = page.get_by_role("table", name="Deliveries, newest first")
        expect(deliveries.get_by_text("DEAD")).to_have_count(3, timeout=15_000)

        # The receiver is back (at a new address): one click sends each failed event again, once.
        moved = httpx.patch(console.daemon.url(f"/api/webhooks/{endpoint['id']}"), headers=auth,
                            json={"url": receiver.url()})
        assert moved.status_code == 200, moved.text
        page.get_by_role("button", name="Recover").click()
        page.get_by_text("3 failed deliveries sent again.").wait_for()
        got = receiver.wait_for(3)
        assert sorted(json.loads(r.body)["data"]["n"] for r in got) == [0, 1, 2]
        expect(deliveries.get_by_text("SUCCEEDED")).to_have_count(3, timeout=15_000)
        page.get_by_role("button", name="Recover").click()
        page.get_by_text("No failed delivery to recover since then.").wait_for()
        time.sleep(0.5)
        assert len(receiver.wait_for(3)) == 3  # nothing more arrived
