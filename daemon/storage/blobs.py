"""Where uploaded files live: a seam with two implementations.

    LocalBlobStore   files under <data_dir>/blobs (one host)
    S3BlobStore      objects in an S3-compatible bucket (processes on several hosts)

Writes are streamed: a `BlobWriter` takes chunks as they arrive and either
`commit`s (the blob appears atomically under its key) or `abort`s (nothing is
left behind), so a refused or broken upload never leaves a half file.

Parsers need a file path: `open_local` lends one for the duration of a block. The
local store lends its own file; the S3 store downloads into a temporary file under
``<data_dir>/tmp/blobs-<pid>-<random>/`` and deletes it when the block exits (also
on error or cancellation). The whole directory goes when the store closes, and a
store opening removes the directories of processes that are no longer running, so
a crash leaves nothing behind for long. The same for the local store's files being
written (``<data_dir>/blobs/partial/<pid>-<key>``), cut short by a crash mid-upload.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import trio

from daemon.errors import DocexError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client  # boto3-stubs[s3], a dev dependency
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

    from daemon.storage.s3 import S3Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

CHUNK_BYTES = 256 * 1024
# S3 multipart parts: at least 5 MiB except the last (AWS's rule); one part is held in memory.
PART_BYTES = 8 * 1024 * 1024


class BlobStoreError(DocexError):
    """The blob store failed (not a missing blob: that is FileNotFoundError).
    `transient` says whether trying again later may work (S3 throttling, outage)."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class BlobWriter(Protocol):
    key: str

    async def write(self, chunk: bytes) -> None: ...
    async def commit(self) -> None: ...
    async def abort(self) -> None: ...


class BlobStore(Protocol):
    async def open_writer(self) -> BlobWriter:
        """Start a new blob under a fresh key."""
        ...

    def read(self, key: str) -> AsyncIterator[bytes]:
        """The blob's bytes in chunks. Raises FileNotFoundError if absent."""
        ...

    def open_local(self, key: str) -> AbstractAsyncContextManager[Path]:
        """A local file with the blob's bytes for the duration of the block, for parsers
        that need a path; read it, never change it. Raises FileNotFoundError if absent."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the blob; absent blobs are fine."""
        ...

    async def aclose(self) -> None:
        """Release clients and temporary files (the process is stopping)."""
        ...


# Blobs being written: ``<root>/partial/<pid>-<key>`` (keys are hex: no blob directory is named so).
_PARTIAL_DIR = "partial"
_PARTIAL = re.compile(r"(\d+)-[0-9a-f]+")


def _sweep_partial(parent: Path) -> None:
    """Remove the files being written by local stores whose process is gone (a crash). Our
    own pid's too: this store is not writing yet, and a container restarted runs the new
    daemon under the dead one's pid (often 1)."""
    if not parent.is_dir():
        return
    for child in parent.iterdir():
        match = _PARTIAL.fullmatch(child.name)
        if match and (int(match.group(1)) == os.getpid() or not _pid_alive(int(match.group(1)))):
            child.unlink(missing_ok=True)
            log.info("removed a half-written upload", extra={"action": "blobs.partial_swept", "path": str(child)})


class LocalBlobStore:
    """Blobs as files under ``<data_dir>/blobs/<2 chars>/<key>``. Open it with `LocalBlobStore.open`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        if not key.isalnum():
            raise ValueError(f"invalid blob key {key!r}")
        return self.root / key[:2] / key

    @classmethod
    async def open(cls, root: Path) -> LocalBlobStore:
        """A store under `root`, rid of the half-written files of processes that died while
        receiving them (a SIGKILL mid-upload left each there for ever)."""
        await trio.to_thread.run_sync(_sweep_partial, root / _PARTIAL_DIR)
        return cls(root)

    async def open_writer(self) -> _LocalWriter:
        key = secrets.token_hex(16)
        final = self._path(key)
        # Written under partial/ with the writer's pid in the name, renamed into place on
        # commit: what a crash leaves is found (one directory) and told from live writes.
        partial = self.root / _PARTIAL_DIR / f"{os.getpid()}-{key}"

        def make_dirs() -> None:
            final.parent.mkdir(parents=True, exist_ok=True)
            partial.parent.mkdir(exist_ok=True)

        await trio.to_thread.run_sync(make_dirs)
        handle = await trio.open_file(partial, "wb")
        return _LocalWriter(key, handle, partial, final)

    async def read(self, key: str) -> AsyncIterator[bytes]:
        async with await trio.open_file(self._path(key), "rb") as handle:
            while chunk := await handle.read(CHUNK_BYTES):
                yield chunk

    @asynccontextmanager
    async def open_local(self, key: str) -> AsyncIterator[Path]:
        path = self._path(key)
        if not await trio.to_thread.run_sync(path.exists):
            raise FileNotFoundError(key)
        yield path

    async def delete(self, key: str) -> None:
        path = self._path(key)
        await trio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))

    async def aclose(self) -> None:
        return None


class _LocalWriter:
    def __init__(self, key: str, handle: trio.abc.AsyncResource, partial: Path, final: Path) -> None:
        self.key = key
        self._handle = handle
        self._partial = partial
        self._final = final

    async def write(self, chunk: bytes) -> None:
        await self._handle.write(chunk)  # type: ignore[attr-defined]

    async def commit(self) -> None:
        await self._handle.flush()  # type: ignore[attr-defined]
        await trio.to_thread.run_sync(os.fsync, self._handle.fileno())  # type: ignore[attr-defined]
        await self._handle.aclose()
        await trio.to_thread.run_sync(os.replace, self._partial, self._final)

    async def abort(self) -> None:
        with trio.CancelScope(shield=True):
            await self._handle.aclose()
            await trio.to_thread.run_sync(lambda: self._partial.unlink(missing_ok=True))


# --- S3 ----------------------------------------------------------------------------------

_TMP_DIR = re.compile(r"blobs-(\d+)-[0-9a-f]+")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _sweep_tmp(parent: Path) -> None:
    """Remove temporary directories of S3 stores whose process is gone (a crash)."""
    if not parent.is_dir():
        return
    for child in parent.iterdir():
        match = _TMP_DIR.fullmatch(child.name)
        if match and child.is_dir() and not _pid_alive(int(match.group(1))):
            shutil.rmtree(child, ignore_errors=True)
            log.info("removed stale blob downloads", extra={"action": "blobs.tmp_swept", "path": str(child)})


class S3BlobStore:
    """Blobs as objects ``<s3_prefix><key>`` in one bucket (storage.backend = "s3").

    Every SDK call runs in a thread (boto3 blocks). Uploads stream: the first 8 MiB
    are held in memory; a larger blob becomes a multipart upload part by part, and
    `abort` cancels it so no parts are left to pay for. Open it with `S3BlobStore.open`.
    """

    def __init__(self, bucket: str, prefix: str, client: S3Client, tmp_dir: Path) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self._client = client
        self._tmp_dir = tmp_dir

    @classmethod
    async def open(cls, settings: S3Settings, data_dir: Path) -> S3BlobStore:
        """A store on `settings`' bucket, its temporary downloads under ``data_dir/tmp``."""
        from daemon.storage.s3 import make_client

        parent = data_dir / "tmp"

        def prepare() -> Path:
            parent.mkdir(parents=True, exist_ok=True)
            _sweep_tmp(parent)
            tmp = parent / f"blobs-{os.getpid()}-{secrets.token_hex(4)}"
            tmp.mkdir(mode=0o700)
            return tmp

        tmp_dir = await trio.to_thread.run_sync(prepare)
        client = await trio.to_thread.run_sync(make_client, settings)
        prefix = settings.prefix.strip("/") + "/" if settings.prefix.strip("/") else ""
        return cls(settings.bucket, prefix, client, tmp_dir)

    def object_key(self, key: str) -> str:
        if not key.isalnum():
            raise ValueError(f"invalid blob key {key!r}")
        return self.prefix + key

    async def _call(self, fn: Callable[[], T], key: str | None = None) -> T:
        """One blocking SDK call in a thread; S3's "no such key" becomes FileNotFoundError and
        every other failure a `BlobStoreError` (transient or not, by `s3_error`)."""
        from daemon.jobs.models import ErrorCode
        from daemon.storage.s3 import s3_error

        try:
            return await trio.to_thread.run_sync(fn)
        except Exception as exc:
            error = s3_error(exc, bucket=self.bucket, key=key)
            if error.code == ErrorCode.REMOTE_FILE_NOT_FOUND:
                raise FileNotFoundError(key) from exc
            raise BlobStoreError(f"blob store: {error.message}", transient=error.retryable) from exc

    async def open_writer(self) -> _S3Writer:
        key = secrets.token_hex(16)
        return _S3Writer(self, key, self.object_key(key))

    async def read(self, key: str) -> AsyncIterator[bytes]:
        name = self.object_key(key)
        response = await self._call(lambda: self._client.get_object(Bucket=self.bucket, Key=name), name)
        body = response["Body"]
        try:
            while chunk := await self._call(lambda: body.read(CHUNK_BYTES), name):
                yield chunk
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(body.close)

    @asynccontextmanager
    async def open_local(self, key: str) -> AsyncIterator[Path]:
        name = self.object_key(key)
        path = self._tmp_dir / f"{key}-{secrets.token_hex(4)}"

        def download() -> None:
            body = self._client.get_object(Bucket=self.bucket, Key=name)["Body"]
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    for chunk in body.iter_chunks(1024 * 1024):
                        out.write(chunk)
            finally:
                body.close()

        try:
            await self._call(download, name)
            yield path
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))

    async def delete(self, key: str) -> None:
        name = self.object_key(key)
        await self._call(lambda: self._client.delete_object(Bucket=self.bucket, Key=name), name)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._client.close)
            await trio.to_thread.run_sync(lambda: shutil.rmtree(self._tmp_dir, ignore_errors=True))


class _S3Writer:
    """One blob being written: a single PUT if it stays under a part, else a multipart upload."""

    def __init__(self, store: S3BlobStore, key: str, name: str) -> None:
        self.key = key
        self._store = store
        self._name = name
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[CompletedPartTypeDef] = []

    async def write(self, chunk: bytes) -> None:
        self._buffer += chunk
        while len(self._buffer) >= PART_BYTES:
            part = bytes(self._buffer[:PART_BYTES])
            del self._buffer[:PART_BYTES]
            await self._upload_part(part)

    async def _upload_part(self, data: bytes) -> None:
        store, client = self._store, self._store._client
        if self._upload_id is None:
            created = await store._call(
                lambda: client.create_multipart_upload(Bucket=store.bucket, Key=self._name), self._name
            )
            self._upload_id = str(created["UploadId"])
        number = len(self._parts) + 1
        upload_id = self._upload_id
        answer = await store._call(
            lambda: client.upload_part(Bucket=store.bucket, Key=self._name, UploadId=upload_id,
                                       PartNumber=number, Body=data),
            self._name,
        )
        self._parts.append({"PartNumber": number, "ETag": answer["ETag"]})

    async def commit(self) -> None:
        store, client = self._store, self._store._client
        if self._upload_id is None:
            data = bytes(self._buffer)
            await store._call(lambda: client.put_object(Bucket=store.bucket, Key=self._name, Body=data), self._name)
        else:
            if self._buffer or not self._parts:
                await self._upload_part(bytes(self._buffer))
            upload_id, parts = self._upload_id, list(self._parts)
            await store._call(
                lambda: client.complete_multipart_upload(Bucket=store.bucket, Key=self._name, UploadId=upload_id,
                                                         MultipartUpload={"Parts": parts}),
                self._name,
            )
        self._buffer = bytearray()

    async def abort(self) -> None:
        self._buffer = bytearray()
        if self._upload_id is None:
            return
        store, client, upload_id = self._store, self._store._client, self._upload_id
        with trio.CancelScope(shield=True):
            try:
                await store._call(
                    lambda: client.abort_multipart_upload(Bucket=store.bucket, Key=self._name, UploadId=upload_id),
                    self._name,
                )
            except (BlobStoreError, FileNotFoundError):
                log.warning("multipart upload not aborted", extra={"action": "blobs.abort_failed",
                                                                   "key": self._name})
