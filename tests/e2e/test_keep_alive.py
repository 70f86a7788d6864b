"""Keep-alive connections as the daemon's process sees them: a connection the client
closes is freed at once, an idle one is closed after `server.keep_alive_timeout`, and
SIGTERM closes idle ones without waiting out the grace period.

Raw sockets talk to a real `docex serve`; what the server still holds is read from
/proc: its file descriptors that are TCP sockets on its port (loopback only)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trio
from e2e_helpers import Api
from proc_sockets import CLOSE_WAIT, connections_held

pytestmark = pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads the daemon's sockets in /proc")

REQUEST = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def request_on(stream: trio.SocketStream) -> None:
    """One GET /api/health on an open connection; its whole 200 response read."""
    await stream.send_all(REQUEST)
    received = b""
    with trio.fail_after(5):
        while b"\r\n\r\n" not in received:
            chunk = await stream.receive_some()
            assert chunk, f"the server closed the connection instead of answering: {received!r}"
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += await stream.receive_some()
    assert b"connection: close" not in head.lower(), "the server did not keep the connection alive"


async def open_idle_connections(port: int, n: int) -> list[trio.SocketStream]:
    """`n` connections, each after one request and its response: idle keep-alive connections."""
    streams = []
    for _ in range(n):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await request_on(stream)
        streams.append(stream)
    return streams


async def wait_until_none_held(pid: int, port: int, timeout: float) -> float:  # noqa: ASYNC109
    """Seconds until `pid` holds no connection on `port`; fails after `timeout` naming what is held."""
    start = time.monotonic()
    while held := connections_held(pid, port):
        if time.monotonic() - start > timeout:
            pytest.fail(f"{len(held)} connections still held after {timeout:g}s "
                        f"({held.count(CLOSE_WAIT)} in CLOSE_WAIT): {sorted(set(held))}")
        await trio.sleep(0.05)
    return time.monotonic() - start


async def test_connections_the_clients_close_are_freed_at_once(start_daemon) -> None:
    d = start_daemon()  # keep_alive_timeout is its default, 75 s: far longer than this test waits
    await d.wait_http_ready()
    assert d.port is not None
    streams = await open_idle_connections(d.port, 30)
    assert len(connections_held(d.pid, d.port)) == 30  # the count sees what it should

    for stream in streams:
        await stream.aclose()
    await wait_until_none_held(d.pid, d.port, timeout=1.5)
    assert d.proc.poll() is None
    await d.stop()


async def test_an_idle_connection_is_closed_after_the_keep_alive_timeout(start_daemon) -> None:
    d = start_daemon(env={"DOCEX_SERVER_KEEP_ALIVE_TIMEOUT": "2s"})
    await d.wait_http_ready()
    assert d.port is not None
    async with await trio.open_tcp_stream("127.0.0.1", d.port) as stream:
        # Several requests on one connection: each one ends with the same idle state.
        for _ in range(3):
            await request_on(stream)
        idle_since = time.monotonic()
        with trio.fail_after(10):
            assert await stream.receive_some() == b"", "the server sent something unasked"
        idle_s = time.monotonic() - idle_since
    assert 1.5 < idle_s < 6, f"closed after {idle_s:.1f}s of idleness, not after 2s"
    await wait_until_none_held(d.pid, d.port, timeout=1.5)
    await d.stop()


async def test_sigterm_closes_idle_connections_without_waiting_the_grace_period(start_daemon) -> None:
    d = start_daemon(env={"DOCEX_SERVER_GRACE_PERIOD": "60s"})
    await d.wait_http_ready()
    assert d.port is not None
    streams = await open_idle_connections(d.port, 5)
    started = time.monotonic()
    d.signal(signal.SIGTERM)
    for stream in streams:
        with trio.fail_after(5):
            assert await stream.receive_some() == b""
        await stream.aclose()
    code = await d.wait_exit(timeout=5)
    assert code == 0, d.describe()
    assert time.monotonic() - started < 5


async def test_a_refused_upload_closes_its_connection_instead_of_reading_the_rest(start_daemon) -> None:
    # The 413 answers "Connection: close"; closing must not be lost to the request's cancellation,
    # or the server reads (and drops) every byte the client still sends.
    d = start_daemon()
    await d.wait_http_ready()
    async with Api(d.url("")) as api:
        headers = await api.sign_up()
    declared = 200 * 2**20
    async with await trio.open_tcp_stream("127.0.0.1", d.port) as stream:
        await stream.send_all(
            f"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {headers['Authorization']}\r\n"
            f"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {declared}\r\n\r\n".encode())
        sent, chunk = 0, b"x" * 2**16
        with trio.move_on_after(10):
            try:
                while sent < declared:
                    await stream.send_all(chunk)
                    sent += len(chunk)
            except trio.BrokenResourceError:
                pass
        assert sent < 64 * 2**20, f"the server read {sent / 2**20:.0f} MiB of a body it had refused"
    await d.stop()


@pytest.mark.parametrize(("path", "status"), [
    ("/api/schemas", b"401"),  # no credentials: answered before the body is read
    ("/api/nowhere", b"404"),
    ("/api/health", b"405"),
])
async def test_an_answer_before_the_body_has_come_says_it_closes_the_connection(
        start_daemon, path: str, status: bytes) -> None:
    """The server closes a connection whose body it answered before reading: the answer must
    say so, or a keep-alive client sends its next request into a closed socket."""
    d = start_daemon()
    await d.wait_http_ready()
    async with await trio.open_tcp_stream("127.0.0.1", d.port) as stream:
        await stream.send_all(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              f"Content-Length: 2000000\r\n\r\n".encode() + b"a" * 1000)
        received = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in received:
                chunk = await stream.receive_some()
                assert chunk, received
                received += chunk
    head = received.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 " + status), head
    assert b"\r\nconnection: close" in head, head
    # A request whose body has all come keeps its connection.
    async with await trio.open_tcp_stream("127.0.0.1", d.port) as stream:
        await stream.send_all(b"POST /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
        received = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in received or not received.endswith(b"}\n"):
                received += await stream.receive_some()
        assert received.startswith(b"HTTP/1.1 405") and b"connection: close" not in received.lower(), received
        await request_on(stream)
    await d.stop()


async def test_an_answer_with_no_body_names_no_type_of_one(start_daemon) -> None:
    """A 204 said `text/html`: a client that reads the type before the status looked for a page."""
    d = start_daemon()
    await d.wait_http_ready()
    async with Api(d.url("")) as api:
        await api.sign_up()
        r = await api.client.delete(f"/api/schemas/{await api.create_schema()}", headers=api.headers)
    assert r.status_code == 204 and r.content == b""
    assert "content-type" not in r.headers, r.headers
    assert r.headers["x-content-type-options"] == "nosniff"
    await d.stop()
