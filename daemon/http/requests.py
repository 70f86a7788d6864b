"""The request side of HTTP: JSON errors in our shape, and request bodies that
stream with backpressure.

Quart's own connection appends every chunk of a body to a buffer as fast as
the client sends it, whether or not the handler reads it, so a fast upload
to a slower blob store would pile up in memory. Here the connection waits
for the buffer to drain below `HIGH_WATER_BYTES` before taking the next chunk
from hypercorn, whose bounded queue then stops reading the socket: TCP
flow control carries the backpressure to the client.
"""

from __future__ import annotations

from typing import Any, NoReturn, cast

import trio
from quart import request
from quart_trio.asgi import TrioASGIHTTPConnection
from quart_trio.wrappers import TrioRequest
from quart_trio.wrappers.request import TrioBody
from werkzeug.exceptions import RequestEntityTooLarge

from daemon.errors import BadRequest

HIGH_WATER_BYTES = 1024 * 1024


class LimitedBody(TrioBody):
    """Quart's body, limited by the bytes *received* rather than the bytes still
    buffered, flow-controlled while a handler streams it, and able to `discard`
    the rest of an upload it has refused."""

    def __init__(self, expected_content_length: int | None, max_content_length: int | None) -> None:
        super().__init__(expected_content_length, max_content_length)
        self.received = 0
        # Set once the rest of the body is being dropped: the answer then closes the
        # connection, since the unread remainder would block the next request on it.
        self.discarded = self._must_raise is not None
        # Flow control applies to bodies a handler streams (uploads, from their first byte)
        # or starts to iterate; a handler that awaits a whole body needs it all buffered,
        # and gets the small JSON limit instead.
        self.flow_controlled = False
        self._drained = trio.Event()

    async def __anext__(self) -> bytes:
        self.flow_controlled = True
        try:
            return await super().__anext__()
        finally:
            self._drained.set()

    async def wait_for_room(self) -> None:
        """Return when another chunk may be buffered."""
        while self.flow_controlled and not self.discarded and len(self._data) >= HIGH_WATER_BYTES:
            self._drained = trio.Event()
            await self._drained.wait()

    def append(self, data: bytes) -> None:
        self.received += len(data)
        limit = self._max_content_length
        if limit is not None and self.received > limit and self._must_raise is None:
            self._must_raise = RequestEntityTooLarge()
            self.discard()
        super().append(data)

    def discard(self) -> None:
        """Stop buffering: what is buffered is freed and whatever still arrives is dropped."""
        if self._must_raise is None:
            self._must_raise = RequestEntityTooLarge()
        self.discarded = True
        self._data.clear()
        self.set_complete()
        self._drained.set()


class FlowControlledHTTPConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection, taking body chunks only as the body has room."""

    async def handle_messages(  # type: ignore[override]
        self, nursery: trio.Nursery, request: DocexRequest, receive: Any
    ) -> None:
        body = request.body
        while True:
            await body.wait_for_room()
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    body.set_complete()
            elif message["type"] == "http.disconnect":
                break
        nursery.cancel_scope.cancel()


class DocexRequest(TrioRequest):
    body_class = LimitedBody

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Uploads are streamed and their files counted one by one (daemon.jobs.upload);
        # only other bodies get the small JSON limit.
        multipart = "multipart/form-data" in (args[4] if len(args) > 4 else kwargs["headers"]).get("Content-Type", "")
        if multipart:
            kwargs["max_content_length"] = None
        super().__init__(*args, **kwargs)
        if multipart:
            # Upload routes stream their body; hold it back from the first byte, or a fast
            # client fills memory while the guard is still looking up the credential.
            self.body.flow_controlled = True

    body: LimitedBody

    def on_json_loading_failed(self, error: Exception) -> NoReturn:
        raise BadRequest(["request body is not valid JSON"]) from error


def current_request() -> DocexRequest:
    return cast(DocexRequest, request)
