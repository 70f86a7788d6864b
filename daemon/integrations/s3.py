"""S3 and S3-compatible object stores (MinIO, Ceph, R2, …) through boto3.

boto3 is blocking: every call runs in `trio.to_thread.run_sync` (SPEC §1), on a
client made once per use (`open_s3_source`) and closed after. botocore clients
are thread-safe, so chunks of one download may be read from different threads
one after the other.

The client, its settings and `s3_error`, the one translation of botocore's exceptions
into SPEC §6 codes, are storage's (`daemon.storage.s3`): the S3 blob store uses them too.

An integration's endpoint is chosen by a user, so its client goes through the SSRF
guard (`daemon.webhooks.ssrf`) unless ``integrations.allow_private_networks``: every
connection resolves and vets its host and opens its socket to the address vetted (no
second lookup that DNS rebinding could answer differently), while the Host header, TLS
SNI and the certificate check keep the name. No proxy from the environment is used
(a proxy would connect on the client's behalf, past the guard), and botocore follows
no HTTP redirects. And whatever the endpoint does short of answering like S3 (nothing
listening, no answer in time, another protocol or an HTTP server that is not S3) is
one and the same error (`_endpoint_error`), so the errors do not map what listens where.

The blob store's client (`make_client` without the guard) is the operator's own
configuration and is not guarded.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import functools
import http.client
import posixpath
import socket
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from daemon.errors import JobError, PermanentJobError, TransientJobError
from daemon.integrations.base import FileRef, PageTokens, RemoteEntry, RemoteFile
from daemon.jobs.models import ErrorCode
from daemon.storage.s3 import S3Settings, make_client, s3_error
from daemon.webhooks import ssrf

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client  # boto3-stubs[s3], a dev dependency
    from mypy_boto3_s3.type_defs import ListObjectsV2OutputTypeDef

T = TypeVar("T")

CHUNK_BYTES = 256 * 1024
PRIVATE_NETWORKS_SETTING = "integrations.allow_private_networks"
# The threads integrations' SDK calls may hold at once. Each waits on an endpoint a user chose,
# up to its read timeout (60 s) per attempt; in trio's default pool (40 threads, shared with
# the blob store and the parsers) 60 calls to an endpoint that accepts and never answers made
# another user's upload wait 41 s (with 6 s timeouts). Calls beyond these wait their turn here.
_ENDPOINT_THREADS = trio.CapacityLimiter(16)
# Building a client is CPU work under the GIL (boto3 loads S3's service model, 0.1-0.3 s):
# many at once starved the event loop of the GIL (an upload took 18 s, 2.4 s with two at a
# time). Under the GIL they never ran in parallel anyway: one at a time costs no throughput.
_CLIENT_BUILDS = trio.CapacityLimiter(1)




class _Connections:
    """The sockets one `S3Source` opened, shut down when it closes: a thread still waiting on
    one (a call abandoned; an endpoint that never answers, or trickles a byte under the read
    timeout) gets an error then and ends, giving back its endpoint thread. Closing the client
    alone closes only its idle connections, and botocore would retry on a new one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # added to from the SDK's threads
        self._open: set[socket.socket] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def add(self, sock: socket.socket) -> bool:
        """Keep `sock`; False (and `sock` closed) once the source closed."""
        with self._lock:
            if not self._closed:
                self._open.add(sock)
                return True
        sock.close()
        return False

    def shut_down(self) -> None:
        with self._lock:
            self._closed = True
            opened, self._open = self._open, set()
        for sock in opened:
            with contextlib.suppress(OSError):  # closed already
                sock.shutdown(socket.SHUT_RDWR)


# The connections of the `S3Source` whose `_call` runs in this thread (each thread runs in its
# own copy of the context: set there, seen only there).
_CONNECTIONS: contextvars.ContextVar[_Connections] = contextvars.ContextVar("s3_connections")
# The bytes a listing's answer may have: S3's page of 1,000 keys is about 300 KB. The endpoint
# is any user's choice, and a 200 MB answer, parsed whole by botocore, took the daemon to 2 GB.
MAX_LISTING_BYTES = 8 * 1024 * 1024
_ANSWER_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("s3_answer_cap", default=None)


class ListingTooLarge(OSError):
    """An answer to a listing over `MAX_LISTING_BYTES`, stopped while it was read."""


class _CappedResponse(http.client.HTTPResponse):
    """An HTTP answer that stops being read past the cap its call set (`_ANSWER_CAP`)."""

    _read_so_far = 0

    def _count(self, size: int) -> None:
        cap = _ANSWER_CAP.get()
        self._read_so_far += size
        if cap is not None and self._read_so_far > cap:
            raise ListingTooLarge(f"the answer is over {cap:,} bytes")

    def read(self, amt: int | None = None) -> bytes:
        data = super().read(amt)
        self._count(len(data))
        return data

    def read1(self, n: int = -1) -> bytes:
        data = super().read1(n)
        self._count(len(data))
        return data

    def readinto(self, b: Any) -> int:
        size = super().readinto(b)
        self._count(size)
        return size


def guarded_client(settings: S3Settings) -> S3Client:
    """An S3 client (blocking to build: call it in a thread) whose every connection passes
    the SSRF guard, with no proxy (see the module docstring)."""
    return _with_pools(make_client(settings, no_proxies=True), vetted=True)


def tracked_client(settings: S3Settings) -> S3Client:
    """An S3 client without the guard (``integrations.allow_private_networks``)."""
    return _with_pools(make_client(settings), vetted=False)


def _with_pools(client: S3Client, *, vetted: bool) -> S3Client:
    # botocore has no public seam for its connection classes: its HTTP session's pool
    # manager picks the pool class by scheme, and the pool its connection class.
    internals: Any = client
    internals._endpoint.http_session._manager.pool_classes_by_scheme = _pools(vetted)
    return client


@functools.cache
def _pools(vetted: bool) -> dict[str, type]:
    """botocore's connection pools whose connections are made known to their `S3Source`
    (`_OPEN_SOCKETS`) and, if `vetted`, pass the SSRF guard."""
    from botocore.awsrequest import (
        AWSHTTPConnection,
        AWSHTTPConnectionPool,
        AWSHTTPSConnection,
        AWSHTTPSConnectionPool,
    )
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
    from urllib3.util.connection import create_connection

    class Tracked:
        host: str
        port: int
        timeout: float | None
        source_address: tuple[str, int] | None
        socket_options: Any
        response_class = _CappedResponse

        def _new_conn(self) -> socket.socket:
            connections = _CONNECTIONS.get(None)
            closed = connections is not None and connections.closed  # botocore retrying after shut_down
            sock = None if closed else self._vetted_conn() if vetted else super()._new_conn()  # type: ignore[misc]
            if sock is None or (connections is not None and not connections.add(sock)):
                connection: Any = self
                raise NewConnectionError(connection, "The S3 source is closed")
            return sock

        def _vetted_conn(self) -> socket.socket:
            # urllib3 resolves and connects here; everything after (TLS included) uses the name.
            ip = ssrf.resolve_blocking(self.host, self.port, allow_private=False, setting=PRIVATE_NETWORKS_SETTING)
            try:
                return create_connection((str(ip), self.port), self.timeout, source_address=self.source_address,
                                         socket_options=self.socket_options)
            except TimeoutError as exc:
                raise ConnectTimeoutError(self, f"Connection to {self.host} timed out") from exc
            except OSError as exc:
                connection: Any = self
                raise NewConnectionError(connection, f"Failed to establish a new connection: {exc}") from exc

    class HTTPConnection(Tracked, AWSHTTPConnection):  # type: ignore[misc]
        pass

    class HTTPSConnection(Tracked, AWSHTTPSConnection):  # type: ignore[misc]
        pass

    class HTTPPool(AWSHTTPConnectionPool):
        ConnectionCls = HTTPConnection

    class HTTPSPool(AWSHTTPSConnectionPool):
        ConnectionCls = HTTPSConnection

    return {"http": HTTPPool, "https": HTTPSPool}


def _endpoint_error(exc: Exception, settings: S3Settings, key: str | None) -> JobError:
    """`s3_error` for an integration, where the endpoint is the user's choice.

    An address the guard refuses is INTEGRATION_ACCESS_DENIED (the operator's setting
    decides, retrying changes nothing). Every failure before an answer in S3's own error
    format (refused or reset connection, timeout, a bare HTTP status or a body that is not
    S3's XML) is the same transient error with the same message, so that trying endpoints
    tells nothing about what listens where.
    """
    from botocore import exceptions as boto
    from botocore.parsers import ResponseParserError

    cause = exc.kwargs.get("error") if isinstance(exc, boto.HTTPClientError) else exc
    if _caused_by(exc, ListingTooLarge):
        return TransientJobError(ErrorCode.INTERNAL_ERROR, "The S3 endpoint answered a listing with more than "
                                 f"{MAX_LISTING_BYTES:,} bytes: no S3 service does; check endpointUrl")
    if isinstance(cause, ssrf.AddressRefused):
        what = f"is {cause.reason}" if cause.literal else f"resolves to {cause.reason}"
        return PermanentJobError(
            ErrorCode.INTEGRATION_ACCESS_DENIED,
            f"The S3 endpoint {cause.host} {what}: docex does not connect to private, loopback or "
            f"link-local addresses ({PRIVATE_NETWORKS_SETTING} is off)")
    no_answer = boto.ConnectionError | boto.HTTPClientError | ResponseParserError | boto.IncompleteReadError
    # S3 names its errors (NoSuchKey); for any other answer botocore has no code or a bare status.
    code = str(exc.response.get("Error", {}).get("Code", "")) if isinstance(exc, boto.ClientError) else "-"
    if isinstance(exc, no_answer | OSError) or not code or code.isdigit():
        return _no_s3_answer()
    return s3_error(exc, bucket=settings.bucket, key=key)


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    for _ in range(10):  # botocore and urllib3 wrap it a few times
        if seen is None:
            return False
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "kwargs", {}).get("error")
    return False


def _no_s3_answer() -> TransientJobError:
    return TransientJobError(ErrorCode.INTERNAL_ERROR, "No answer from an S3 service at the integration's endpoint: "
                             "check endpointUrl, and that the service is up")


class S3Source:
    """An S3 integration as a `RemoteSource`. Build it with `open_s3_source`."""

    def __init__(self, settings: S3Settings, client: S3Client) -> None:
        self.settings = settings
        self._client = client
        self._connections = _Connections()

    async def _call(self, fn: Callable[[], T], *, key: str | None = None, abandon_on_cancel: bool = False) -> T:
        """Run one blocking SDK call in a thread, its exceptions translated (`_endpoint_error`).

        `abandon_on_cancel`: a cancelled call returns at once, its thread left to end on its
        own (promptly once the source closes: `_Connections`); for calls whose result, once
        cancelled, nothing else uses (a listing's page, not a body read by chunks)."""
        def tracked() -> T:
            _CONNECTIONS.set(self._connections)
            return fn()

        try:
            return await trio.to_thread.run_sync(tracked, limiter=_ENDPOINT_THREADS,
                                                 abandon_on_cancel=abandon_on_cancel)
        except Exception as exc:
            raise _endpoint_error(exc, self.settings, key) from exc

    def shut_down(self) -> None:
        """Shut down the source's connections; it opens no more (see `_Connections`)."""
        self._connections.shut_down()

    async def _list_page(self, **kwargs: Any) -> ListObjectsV2OutputTypeDef:
        def capped() -> ListObjectsV2OutputTypeDef:
            _ANSWER_CAP.set(MAX_LISTING_BYTES)
            return self._client.list_objects_v2(Bucket=self.settings.bucket, **kwargs)

        page = await self._call(capped, abandon_on_cancel=True)
        # botocore reads any well-formed XML (an HTML page too) as an empty listing; S3's names the bucket.
        if page.get("Name") != self.settings.bucket:
            raise _no_s3_answer()
        return page

    async def test(self) -> None:
        """List one key under the prefix: that needs the right keys, bucket and region."""
        await self._list_page(Prefix=self.settings.folder_prefix(""), MaxKeys=1)

    @asynccontextmanager
    async def open(self, ref: FileRef) -> AsyncIterator[RemoteFile]:
        if ref.key is None:
            raise PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND, "An S3 source names its object with `key`")
        bucket = self.settings.bucket
        key = self.settings.object_key(ref.folder_path or "", ref.key)
        response = await self._call(lambda: self._client.get_object(Bucket=bucket, Key=key), key=key)
        body = response["Body"]

        async def chunks() -> AsyncGenerator[bytes, None]:
            while chunk := await self._call(lambda: body.read(CHUNK_BYTES), key=key):
                yield chunk

        stream = chunks()
        try:
            yield RemoteFile(
                name=posixpath.basename(key) or key,
                size=response.get("ContentLength"),
                mime_type=response.get("ContentType"),
                chunks=stream,
            )
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
                await trio.to_thread.run_sync(body.close, limiter=_ENDPOINT_THREADS)

    async def list(self, folder: str, *, limit: int) -> list[RemoteEntry]:
        """Every object under ``prefix/folder`` (recursively), keys relative to the integration's
        prefix; "directory" placeholders (keys ending in ``/``) are skipped."""
        return await self._list(self.settings.folder_prefix(folder), limit)

    async def list_prefix(self, prefix: str, *, limit: int) -> builtins.list[RemoteEntry]:
        """Like `list` for a raw key prefix (``2024/inv`` matches ``2024/invoice-1.pdf``)."""
        base = self.settings.folder_prefix("")
        return await self._list(base + prefix.lstrip("/"), limit)

    async def _list(self, prefix: str, limit: int) -> builtins.list[RemoteEntry]:
        base = self.settings.folder_prefix("")
        found: builtins.list[RemoteEntry] = []
        token: str | None = None
        tokens = PageTokens(f"s3://{self.settings.bucket}/{prefix}")
        while len(found) <= limit:
            kwargs: dict[str, Any] = {"Prefix": prefix, "MaxKeys": 1000}
            if token:
                kwargs["ContinuationToken"] = token
            page = await self._list_page(**kwargs)
            for item in page.get("Contents", []):
                key = str(item["Key"])
                if key.endswith("/"):
                    continue
                relative = key[len(base):]
                found.append(RemoteEntry(FileRef(key=relative), posixpath.basename(key), int(item.get("Size", 0)),
                                         version=str(item.get("ETag") or "") or None))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
            token = tokens.next(token)
        return found[: limit + 1]


@asynccontextmanager
async def open_s3_source(settings: S3Settings, *, allow_private_networks: bool) -> AsyncIterator[S3Source]:
    """An `S3Source` with its own client, closed when the block exits; its connections pass
    the SSRF guard unless `allow_private_networks`."""
    try:
        client = await trio.to_thread.run_sync(
            guarded_client if not allow_private_networks else tracked_client, settings, limiter=_CLIENT_BUILDS)
    except ValueError as exc:  # botocore's "Invalid endpoint": one stored before creation checked it
        raise PermanentJobError(
            ErrorCode.INTEGRATION_ACCESS_DENIED,
            "The integration's endpointUrl is not a URL botocore can use: create the integration again "
            "with an http(s) URL") from exc
    source = S3Source(settings, client)
    try:
        yield source
    finally:
        source.shut_down()
        with trio.CancelScope(shield=True):
            # Not among _ENDPOINT_THREADS: closing waits on no endpoint, and those threads may all
            # be taken by calls to endpoints that do not answer (shielded, this would wait for them).
            await trio.to_thread.run_sync(client.close)
