"""Requests hypercorn cannot parse, answered before the app sees them, still in the SPEC §3
error shape: raw sockets against a real `docex serve`."""

from __future__ import annotations

import contextlib
import json

import pytest
import trio


async def answer_to(port: int, request: bytes) -> tuple[bytes, dict[str, str], bytes]:
    """Send `request` on a new connection and read the answer until the server closes it.

    The server answers a header block too large as soon as it has read 16 KiB, and closes
    while the rest is still on its way: the send may then break, as it would for any client,
    and the answer is read all the same."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = b""

    async def send() -> None:
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(request)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            with contextlib.suppress(trio.BrokenResourceError):  # a reset after the answer
                while chunk := await stream.receive_some():
                    received += chunk
            nursery.cancel_scope.cancel()
    await stream.aclose()
    head, _, body = received.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {k.strip().lower().decode(): v.strip().decode() for k, _, v in (line.partition(b":") for line in lines)}
    return status, headers, body


BAD_REQUEST = (400, "Bad Request", "Malformed HTTP request")


@pytest.mark.parametrize(("request_bytes", "expected"), [
    (b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
     (431, "Request Header Fields Too Large", "Request header fields too large: at most 16 KiB in all")),
    (b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n", BAD_REQUEST),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", BAD_REQUEST),  # TLS spoken to plain HTTP
    # A header block over the limit that arrives whole in one read (h11 bounds only what
    # is still incomplete, so 40 KiB in one packet passed).
    (b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n",
     (431, "Request Header Fields Too Large", "Request header fields too large: at most 16 KiB in all")),
    # HTTP/2's connection preface (a client with prior knowledge): docex speaks HTTP/1.1 only.
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
     (505, "HTTP Version Not Supported", "HTTP/2 is not served here: send HTTP/1.1")),
])
async def test_a_request_hypercorn_cannot_parse_gets_a_json_error(start_daemon, request_bytes: bytes,
                                                                   expected: tuple[int, str, str]) -> None:
    status, error, message = expected
    d = start_daemon()
    await d.wait_http_ready()
    assert d.port is not None
    line, headers, body = await answer_to(d.port, request_bytes)
    assert line.startswith(b"HTTP/1.1 %d" % status), line
    assert headers["content-type"] == "application/json" and int(headers["content-length"]) == len(body)
    assert json.loads(body) == {"statusCode": status, "error": error, "message": message}
    # The daemon goes on serving.
    line, _, body = await answer_to(d.port, b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert line.startswith(b"HTTP/1.1 200"), (line, body)
    await d.stop()


async def test_an_http2_client_whose_upload_is_refused_early_leaves_the_daemon_serving(start_daemon) -> None:
    """hypercorn's HTTP/2 raised on body data for a request it had already answered (401,
    404, 405 or 413 before the body ended), out of the server into the daemon's root
    nursery: one unauthenticated request stopped the API, the workers and the dispatcher."""
    import httpx

    d = start_daemon()
    await d.wait_http_ready()
    base = f"http://127.0.0.1:{d.port}"
    async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as h2_only:
        for path in ("/api/jobs", "/api/health", "/api/nowhere"):
            with contextlib.suppress(httpx.HTTPError):  # an HTTP/1.1 answer to an HTTP/2-only client
                await h2_only.post(base + path, content=b"A" * 200_000,
                                   headers={"content-type": "multipart/form-data; boundary=X"})
    async with httpx.AsyncClient(timeout=10) as client:
        # An Upgrade to h2c is ignored: the request is answered in HTTP/1.1.
        upgraded = await client.get(base + "/api/health", headers={
            "Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c", "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA"})
        assert upgraded.status_code == 200 and upgraded.http_version == "HTTP/1.1"
        assert (await client.get(base + "/api/ready")).status_code == 200
    assert d.proc.poll() is None, d.describe()
    await d.stop()
