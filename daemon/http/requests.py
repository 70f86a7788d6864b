"""The request side of HTTP: JSON bodies parsed within limits, ids that cannot
exist refused as 404, and request bodies that stream with backpressure.

Quart's own connection appends every chunk of a body to a buffer as fast as
the client sends it, whether or not the handler reads it, so a fast upload
to a slower blob store would pile up in memory. Here the connection waits
for the buffer to drain below `HIGH_WATER_BYTES` before taking the next chunk
from hypercorn, whose bounded queue then stops reading the socket: TCP
flow control carries the backpressure to the client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

import trio
from hypercorn.typing import HTTPScope
from quart import Quart, request
from quart_trio.asgi import TrioASGIHTTPConnection
from quart_trio.wrappers import TrioRequest
from quart_trio.wrappers.request import TrioBody
from werkzeug.datastructures import Headers
from werkzeug.exceptions import MethodNotAllowed, RequestEntityTooLarge

from daemon import jsonvalues
from daemon.errors import BadRequest, NotFound
from daemon.jobs.upload import is_multipart
from daemon.storage.ids import looks_like_id

V = TypeVar("V", bound=Callable[..., Any])
HIGH_WATER_BYTES = 1024 * 1024
# JSON bodies larger than this are parsed in a thread, a few at a time.
THREAD_JSON_BYTES = 256 * 1024
_PARSERS = trio.CapacityLimiter(2)
# The body of a public route that takes a credential or a token (login, register, refresh,
# logout): read and parsed before anyone is known, and never more than a few hundred bytes.
PUBLIC_BODY_BYTES = 64 * 1024
# Levels of arrays and objects a JSON body may nest: far more than any schema, result or
# event payload needs (a definition nests properties 5 deep, 11 JSON levels), and few
# enough that no recursive step after parsing (pydantic, jsonschema, the database's JSON
# encoder) can run out of stack.
MAX_JSON_DEPTH = 64

# An escaped NUL or surrogate half, not preceded by an escaped backslash (`\\u0000` is text).
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


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

    @property
    def arriving(self) -> bool:
        """Whether more of the body is still to come from the client."""
        return not self._complete.is_set()

    async def complete(self) -> None:
        """Return when the whole body has come (or been discarded)."""
        await self._complete.wait()

    def lower_limit(self, limit: int) -> None:
        """Take at most `limit` bytes of this body (a route's own bound, below the app's)."""
        if self._max_content_length is None or limit < self._max_content_length:
            self._max_content_length = limit
            if self.received > limit:
                self.discard()

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

    def __init__(self, method: str, scheme: str, path: str, query_string: bytes, headers: Headers,
                 root_path: str, http_version: str, scope: HTTPScope, *, max_content_length: int | None = None,
                 **kwargs: Any) -> None:
        # Uploads are streamed and their files counted one by one (daemon.jobs.upload);
        # only other bodies get the small JSON limit.
        multipart = is_multipart(headers.get("Content-Type", ""))
        super().__init__(method, scheme, path, query_string, headers, root_path, http_version, scope,
                         max_content_length=None if multipart else max_content_length, **kwargs)
        if multipart:
            # Upload routes stream their body; hold it back from the first byte, or a fast
            # client fills memory while the guard is still looking up the credential.
            self.body.flow_controlled = True

    body: LimitedBody

    async def get_json(self, force: bool = False, silent: bool = False, cache: bool = True) -> Any:
        """Quart's `get_json` for every JSON route (quart-schema's `validate_request` calls it
        too), parsing with `parse_json_body`: every malformed body is a 400 here, in one place."""
        if cache and self._cached_json[silent] is not Ellipsis:
            return self._cached_json[silent]
        if not (force or self.is_json):
            return None
        raw = await self.get_data(cache=cache, as_text=False, parse_form_data=False)
        try:
            if len(raw) <= THREAD_JSON_BYTES:
                result = parse_json_body(raw)
            else:  # seconds of work for 4 MiB of numbers: the event loop serves others meanwhile
                result = await trio.to_thread.run_sync(parse_json_body, raw, limiter=_PARSERS)
        except BadRequest:
            if not silent:
                raise
            result = None
        if cache:
            self._cached_json[silent] = result
        return result


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, or a BadRequest that says why there is none.

    Refused: bodies that are not UTF-8 (RFC 8259 §8.1), not JSON, nested deeper than
    `MAX_JSON_DEPTH`, or holding strings no database stores (NUL, which PostgreSQL refuses
    in text and JSON, and unpaired UTF-16 surrogates, which are not Unicode text).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(["request body is not valid JSON: it must be UTF-8"]) from None
    too_deep = BadRequest([f"request body is nested deeper than {MAX_JSON_DEPTH} levels"])
    try:
        value = jsonvalues.loads(text)
    except RecursionError:  # json.loads recurses once per level: past ~1000 it gives up
        raise too_deep from None
    except jsonvalues.NotFinite:
        raise BadRequest(["request body is not valid JSON: it has NaN, Infinity or a number out of range "
                          "(such as 1e309, or an integer of more than 309 digits)"]) from None
    except ValueError:
        raise BadRequest(["request body is not valid JSON"]) from None
    # Depth cannot exceed the number of opening brackets: most bodies skip the count.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and nests_deeper(text, MAX_JSON_DEPTH):
        raise too_deep
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise BadRequest(["request body must not contain NUL characters (\\u0000)"])
    if _ESCAPED_SURROGATE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(["request body is not valid JSON: it has an unpaired surrogate escape"]) from None
    return value


def nests_deeper(text: str, limit: int) -> bool:
    """Whether the arrays and objects of JSON `text` (valid: parsed already) nest more than
    `limit` levels deep, found by string operations alone: a walk over the parsed value
    took 3.5 s for a 4 MiB body of empty arrays, on the event loop of a public route.
    Brackets inside strings do not count; objects' braces count as brackets, and each
    pass drops the innermost level everywhere."""
    brackets = _STRING.sub("", text).translate(_BRACKETS_ONLY)
    for _ in range(limit + 1):
        if not brackets:
            return False
        brackets = brackets.replace("[]", "")
    return True


# A JSON string (escapes included); what JSON holds besides strings and brackets dropped,
# and braces made brackets.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS_ONLY = str.maketrans("{}", "[]", ",:0123456789+-.eEtrufalsn \t\r\n")


def small_body(max_bytes: int) -> Callable[[V], V]:
    """Bound a route's body below the app's JSON limit (413 past it): a public route's body is
    read and parsed before any credential could be checked."""

    def mark(view: V) -> V:
        setattr(view, _BODY_LIMIT, max_bytes)
        return view

    return mark


_BODY_LIMIT = "_docex_body_limit"


def refuse_unusable_requests(app: Quart) -> None:
    """Refuse, before any handler runs, what no handler can use and a database may choke on:

    - a path id that no resource can have (every id is a ULID): 404, before anything
      encodes, seals or queries it (non-ASCII, NUL, `..`, 5,000 characters);
    - NUL in the query string, which PostgreSQL refuses in a query parameter: 400;
    - a body past its route's own bound (`small_body`): 413, unread.

    Install it after the guard, so a request without credentials is still a 401.
    """

    @app.before_request
    async def _refuse() -> None:
        view = app.view_functions.get(request.endpoint or "")
        if (limit := getattr(view, _BODY_LIMIT, None)) is not None:
            current_request().body.lower_limit(limit)
        for name, value in (request.view_args or {}).items():
            if name.endswith("_id") and isinstance(value, str) and not looks_like_id(value):
                if methods := _fixed_route_methods(app, request.path):
                    raise MethodNotAllowed(valid_methods=methods)
                raise NotFound(f"{_RESOURCES.get(name, 'Resource')} not found")
        if b"%00" in request.query_string:
            raise BadRequest(["query string must not contain NUL characters (%00)"])


def _fixed_route_methods(app: Quart, path: str) -> list[str]:
    """The methods of a route without parameters that is `path` itself: another method on
    it ("DELETE /api/jobs/export") matched the route beside it that takes an id there
    ("/api/jobs/<job_id>"), and is a 405, not a job that was not found."""
    return sorted({method for rule in app.url_map.iter_rules() if not rule.arguments and rule.rule == path
                   for method in rule.methods or ()})


# What each path parameter names, worded as the handlers' own 404s.
_RESOURCES = {
    "schema_id": "Schema", "job_id": "Job", "run_id": "Job run", "endpoint_id": "Webhook endpoint",
    "delivery_id": "Webhook delivery", "integration_id": "Integration", "session_id": "Session",
    "key_id": "API key", "user_id": "User", "inbox_id": "Inbox", "example_id": "Example",
}


def current_request() -> DocexRequest:
    return cast(DocexRequest, request)
