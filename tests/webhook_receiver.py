"""A real HTTP receiver for webhook tests and the bench: trio's TCP server and h11.

    async with open_receiver(handler) as receiver:
        ... receiver.url("/hook") ...
        await receiver.wait_for(3)
        receiver.requests[0].headers["x-webhook-signature"]

`handler(request)` returns ``(status, headers, body)`` and may sleep first (a slow
receiver); the default answers 200 "ok". Every request is recorded with its raw
body and the wall-clock time it arrived. Keep-alive is honoured, as a real server
would.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import h11
import trio


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float  # time.time() when the whole request had arrived


Reply = tuple[int, dict[str, str], bytes]
Handler = Callable[[Received], Awaitable[Reply]]


async def ok(request: Received) -> Reply:
    return 200, {}, b"ok"


class Receiver:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Received] = []
        self.port = 0
        self._changed = trio.Event()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:  # noqa: ASYNC109
        """Wait until at least `count` requests have arrived; fail after `timeout` seconds."""
        with trio.fail_after(timeout):
            while len(self.requests) < count:
                await self._changed.wait()
        return self.requests

    async def serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            async with stream:
                while True:
                    event = await _next(conn, stream)
                    if not isinstance(event, h11.Request):
                        return
                    body = bytearray()
                    while True:
                        part = await _next(conn, stream)
                        if isinstance(part, h11.Data):
                            body += part.data
                        elif isinstance(part, h11.EndOfMessage):
                            break
                        else:
                            return
                    request = Received(
                        method=event.method.decode(),
                        path=event.target.decode(),
                        headers={k.decode().lower(): v.decode("latin-1") for k, v in event.headers},
                        body=bytes(body),
                        at=time.time(),
                    )
                    self.requests.append(request)
                    self._changed.set()
                    self._changed = trio.Event()
                    status, headers, content = await self.handler(request)
                    out = [(k, v) for k, v in headers.items()] + [("Content-Length", str(len(content)))]
                    await stream.send_all(b"".join(conn.send(e) or b"" for e in (
                        h11.Response(status_code=status, headers=out), h11.Data(data=content), h11.EndOfMessage())))
                    if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                        return
                    conn.start_next_cycle()


async def _next(conn: h11.Connection, stream: trio.SocketStream) -> object:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
            continue
        return event


@contextlib.asynccontextmanager
async def open_receiver(handler: Handler = ok, port: int = 0) -> AsyncIterator[Receiver]:
    """A receiver listening on 127.0.0.1 (`port`, or a free one) until the block ends."""
    receiver = Receiver(handler)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, receiver.serve, port, host="127.0.0.1"))
        receiver.port = listeners[0].socket.getsockname()[1]
        try:
            yield receiver
        finally:
            nursery.cancel_scope.cancel()
