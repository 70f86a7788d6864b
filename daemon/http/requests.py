"""The request class: JSON errors in our shape, and a body that streams uploads."""

from __future__ import annotations

from typing import Any, NoReturn, cast

from quart import request
from quart_trio.wrappers import TrioRequest
from quart_trio.wrappers.request import TrioBody
from werkzeug.exceptions import RequestEntityTooLarge

from daemon.errors import BadRequest


class LimitedBody(TrioBody):
    """Quart's body, limited by the bytes *received* rather than the bytes still
    buffered, and able to `discard` the rest of an upload it has refused, so a
    refused upload is dropped as it arrives instead of piling up in memory."""

    def __init__(self, expected_content_length: int | None, max_content_length: int | None) -> None:
        super().__init__(expected_content_length, max_content_length)
        self.received = 0
        # Set once the rest of the body is being dropped: the answer then closes the
        # connection, since the unread remainder would block the next request on it.
        self.discarded = self._must_raise is not None

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


class DocexRequest(TrioRequest):
    body_class = LimitedBody

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Uploads are streamed and their files counted one by one (daemon.jobs.upload);
        # only other bodies get the small JSON limit.
        if "multipart/form-data" in (args[4] if len(args) > 4 else kwargs["headers"]).get("Content-Type", ""):
            kwargs["max_content_length"] = None
        super().__init__(*args, **kwargs)

    body: LimitedBody

    def on_json_loading_failed(self, error: Exception) -> NoReturn:
        raise BadRequest(["request body is not valid JSON"]) from error


def current_request() -> DocexRequest:
    return cast(DocexRequest, request)
