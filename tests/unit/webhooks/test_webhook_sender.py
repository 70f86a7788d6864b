"""One attempt (daemon.webhooks.sender) against httpx's MockTransport: what is sent where,
and how every kind of answer or failure becomes an Outcome."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from daemon.webhooks.sender import USER_AGENT, Outcome, request_headers, send

HEADERS = request_headers(content_type="application/json", delivery_id="d1", event_type="job.queued",
                          timestamp=1700000000, signature="t=1700000000,v1=ab", custom={"X-Tenant": "7"})


async def attempt(handler: Any, url: str = "http://127.0.0.1:9000/hook", *, timeout_s: float = 2.0,
                  allow_private: bool = True) -> Outcome:
    transport = httpx.MockTransport(handler)
    async with httpx.AsyncClient(transport=transport, follow_redirects=False, headers={"User-Agent": USER_AGENT}) as c:
        return await send(c, url=url, body=b'{"a":1}', headers=HEADERS, timeout_s=timeout_s,
                          allow_private=allow_private)


async def test_the_request_goes_to_the_checked_address_with_the_original_host() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    outcome = await attempt(handler, url="https://localhost:8443/hook?x=1")
    assert outcome.succeeded and outcome.status_code == 204 and outcome.error is None
    (request,) = seen
    assert request.method == "POST" and request.content == b'{"a":1}'
    assert request.url.host in ("127.0.0.1", "::1") and request.url.port == 8443
    assert request.url.raw_path == b"/hook?x=1" and request.url.scheme == "https"
    assert request.headers["host"] == "localhost:8443"
    assert request.extensions["sni_hostname"] == "localhost"  # TLS sends and verifies the real name
    assert request.headers["connection"] == "close"  # a TLS session is never reused for another name
    assert request.headers["user-agent"] == USER_AGENT and request.headers["x-tenant"] == "7"
    assert request.headers["x-webhook-id"] == "d1" and request.headers["content-type"] == "application/json"


async def test_plain_http_keeps_its_connection_and_has_no_sni() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    await attempt(handler)
    assert "sni_hostname" not in seen[0].extensions and seen[0].headers["connection"] == "keep-alive"
    assert seen[0].headers["host"] == "127.0.0.1:9000"


@pytest.mark.parametrize(("status", "error"), [
    (200, None), (299, None), (500, "HTTP 500"), (404, "HTTP 404"), (429, "HTTP 429"),
    (301, "HTTP 301: redirects are not followed (Location: https://elsewhere.example/)"),
    (307, "HTTP 307: redirects are not followed (Location: https://elsewhere.example/)"),
])
async def test_only_2xx_succeeds_and_redirects_are_failures(status: int, error: str | None) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"Location": "https://elsewhere.example/"}, content=b"body")

    outcome = await attempt(handler)
    assert (outcome.status_code, outcome.error, outcome.succeeded) == (status, error, error is None)
    assert outcome.response_body == "body"


async def test_retry_after_is_read_and_the_answer_is_cut_to_1_kib() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "120"}, content="é".encode() * 2000)

    outcome = await attempt(handler)
    assert outcome.retry_after_s == 120 and outcome.error == "HTTP 503"
    assert outcome.response_body == "é" * 512 and len(outcome.response_body.encode()) == 1024


async def test_an_answer_is_never_unpacked() -> None:
    """Receivers were asked for gzip, and a 64 KiB answer of one was unpacked to 64 MB on the
    loop that serves the API (8 such receivers held /api/health at 0.9 s)."""
    import gzip

    bomb = gzip.compress(b"\0" * 20_000_000)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(500, headers={"Content-Encoding": "gzip"}, content=bomb)

    outcome = await attempt(handler)
    assert seen[0].headers["accept-encoding"] == "identity"
    assert outcome.error == "HTTP 500" and outcome.response_body == "(gzip-encoded answer, not unpacked)"


async def test_a_receiver_slower_than_the_timeout_is_a_failure() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.sleep(5)
        return httpx.Response(200)

    with trio.fail_after(2):
        outcome = await attempt(handler, timeout_s=0.1)
    assert outcome.status_code is None and outcome.error == "no answer within 100 ms (WEBHOOK_TIMEOUT_MS)"
    assert 90 <= outcome.duration_ms < 1000


async def test_network_errors_become_outcomes() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    outcome = await attempt(refused)
    assert outcome.error == "connection failed: [Errno 111] Connection refused" and not outcome.succeeded

    def silent(request: httpx.Request) -> httpx.Response:  # a TLS failure may say nothing
        raise httpx.ConnectError("", request=request)

    assert (await attempt(silent)).error == "connection failed: ConnectError"

    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    assert (await attempt(broken)).error == "RemoteProtocolError: Server disconnected without sending a response."


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/x", "http://[::1]/x", "http://[::ffff:127.0.0.1]/x",
                                 "http://10.0.0.7/x", "http://169.254.169.254/latest/meta-data/",
                                 "http://localhost:9000/x"])
async def test_refused_addresses_are_never_contacted(url: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("contacted")

    outcome = await attempt(handler, url=url, allow_private=False)
    assert outcome.status_code is None and outcome.error is not None
    assert outcome.error.startswith("refused to connect: ") and "allow_private_networks is off" in outcome.error


async def test_a_name_that_does_not_resolve_is_a_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("contacted")

    outcome = await attempt(handler, url="https://no-such-host.invalid/x", allow_private=False)
    assert outcome.error is not None and outcome.error.startswith("DNS lookup of no-such-host.invalid failed")
