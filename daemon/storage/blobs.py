"""Where uploaded files live: a seam with a local-directory implementation.

An S3 store (integrations issue) implements the same `BlobStore` protocol.
Writes are streamed: a `BlobWriter` takes chunks as they arrive and either
`commit`s (the blob appears atomically under its key) or `abort`s (nothing is
left behind), so a refused or broken upload never leaves a half file.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import trio

CHUNK_BYTES = 256 * 1024


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

    async def local_path(self, key: str) -> Path:
        """A local file with the blob's bytes, for parsers that need a path."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the blob; absent blobs are fine."""
        ...


class LocalBlobStore:
    """Blobs as files under ``<data_dir>/blobs/<2 chars>/<key>``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        if not key.isalnum():
            raise ValueError(f"invalid blob key {key!r}")
        return self.root / key[:2] / key

    async def open_writer(self) -> _LocalWriter:
        key = secrets.token_hex(16)
        final = self._path(key)
        await trio.to_thread.run_sync(lambda: final.parent.mkdir(parents=True, exist_ok=True))
        partial = final.with_name(final.name + ".partial")
        handle = await trio.open_file(partial, "wb")
        return _LocalWriter(key, handle, partial, final)

    async def read(self, key: str) -> AsyncIterator[bytes]:
        async with await trio.open_file(self._path(key), "rb") as handle:
            while chunk := await handle.read(CHUNK_BYTES):
                yield chunk

    async def local_path(self, key: str) -> Path:
        path = self._path(key)
        if not await trio.to_thread.run_sync(path.exists):
            raise FileNotFoundError(key)
        return path

    async def delete(self, key: str) -> None:
        path = self._path(key)
        await trio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))


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
