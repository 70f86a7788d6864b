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
