"""The seam to remote file stores: what a job's `source` names, and the `RemoteSource`
protocol every provider implements (S3 in `s3.py`, Google Drive in `google_drive.py`).

A job's source (SPEC §6, §10) is ``{integrationId, fileId | key, folderPath?}``:

- S3: `key` is an object key relative to the integration's `prefix`; `folderPath`,
  if given, sits between the two (``prefix/folderPath/key``). `fileId` does not apply.
- Google Drive: `fileId` is a Drive file id; or `key` is a file *name* inside the
  folder `folderPath` (a path of folder names from My Drive's root, ``/`` apart).

Errors: every provider translates its library's exceptions at this seam into
`JobError`s carrying a SPEC §6 errorCode, most specific first, chained with
``raise … from exc``:

    PermanentJobError
    ├── INTEGRATION_AUTH_EXPIRED       the OAuth grant expired or was revoked: reconnect
    ├── INTEGRATION_PERMISSION_DENIED  the grant lacks a scope, or the file is not shared
    ├── INTEGRATION_ACCESS_DENIED      wrong S3 credentials, bucket or region
    ├── REMOTE_FILE_NOT_FOUND          no such object, file or folder
    └── UNSUPPORTED_FILE               a folder, a form, a file too large
    TransientJobError                  throttling, 5xx, timeouts, connection errors (retried)

Messages name the key, id or path at fault and never carry a credential.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from daemon.errors import TransientJobError
from daemon.jobs.models import ErrorCode


class Provider(StrEnum):
    S3 = "s3"
    GOOGLE_DRIVE = "google-drive"


class IntegrationStatus(StrEnum):
    CONNECTED = "connected"
    # A Google Drive integration whose user has not completed the OAuth consent yet.
    PENDING_AUTHORIZATION = "pending_authorization"
    # Its OAuth grant expired or was revoked: the user must authorize again.
    NEEDS_RECONNECTION = "needs_reconnection"


@dataclass(frozen=True)
class FileRef:
    """One remote file, as a job's `source` names it (see the module docstring)."""

    key: str | None = None
    file_id: str | None = None
    folder_path: str | None = None

    @classmethod
    def from_source(cls, source: dict[str, Any]) -> FileRef:
        return cls(key=source.get("key"), file_id=source.get("fileId"), folder_path=source.get("folderPath"))

    def source(self, integration_id: str) -> dict[str, Any]:
        """The job `source` JSON naming this file."""
        out: dict[str, Any] = {"integrationId": integration_id}
        if self.file_id is not None:
            out["fileId"] = self.file_id
        if self.key is not None:
            out["key"] = self.key
        if self.folder_path is not None:
            out["folderPath"] = self.folder_path
        return out

    def describe(self) -> str:
        if self.file_id is not None:
            return f"file {self.file_id}"
        where = f"{self.folder_path.strip('/')}/" if self.folder_path and self.folder_path.strip("/") else ""
        return f"{where}{self.key}"


@dataclass(frozen=True)
class RemoteEntry:
    """A file found by `RemoteSource.list`."""

    ref: FileRef
    name: str
    size: int | None
    # What changes when the file's content does (S3: the ETag; Drive: its head revision, or
    # for a Google format, whose content has no revision, its version), for inboxes that take
    # each version of a file once.
    version: str | None = None
    # What earlier releases took as `version` where it differs (Drive's version of a file
    # with a head revision), so that a file they took is not taken again.
    former_version: str | None = None


@dataclass
class RemoteFile:
    """An opened remote file: its name, its size if the store says it, and its bytes.

    `chunks` yields the bytes as they arrive and raises `JobError` (transient for a broken
    connection) if the transfer fails half-way; it is closed with the `open` block, read
    to the end or not. `mime_type` is the store's claim, for the log only: the job's type
    is told from the bytes (`daemon.jobs.filetypes`).
    """

    name: str
    size: int | None
    mime_type: str | None
    chunks: AsyncIterator[bytes]


class RemoteSource(Protocol):
    """A connected remote file store. Implementations do blocking I/O off the trio thread."""

    async def test(self) -> None:
        """Check that the credentials work and reach what they should (bucket, Drive).

        Raises:
            JobError: with the SPEC §6 code of what is wrong.
        """
        ...

    def open(self, ref: FileRef) -> AbstractAsyncContextManager[RemoteFile]:
        """Open one file for streaming; the transfer is closed when the block exits.

        Raises (on entry or while iterating `chunks`):
            JobError: REMOTE_FILE_NOT_FOUND, the integration's denial codes, or transient.
        """
        ...

    async def list(self, folder: str, *, limit: int) -> list[RemoteEntry]:
        """The files under `folder` (S3: a key prefix; Drive: a folder path), at most
        ``limit + 1`` of them so the caller can tell that there are more than `limit`.

        Raises:
            JobError: as `open`.
        """
        ...


# A listing reads at most this many pages. A store hands over up to 1000 entries a page, so
# this is far past any listing's `limit` (10,000 for an inbox); a store that keeps answering
# "there is more" (the same continuation token again, or a new one with each empty page)
# would otherwise hold the request or the inbox sweep forever.
MAX_LIST_PAGES = 1000


class PageTokens:
    """The continuation tokens of one listing, to stop a listing that does not end."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._seen: set[str] = set()

    def next(self, token: str) -> str:
        """`token`, the next page's, if following it is still a listing that ends.

        Raises:
            TransientJobError: the token came before (a loop) or the pages exceed MAX_LIST_PAGES.
        """
        if token in self._seen or len(self._seen) + 1 >= MAX_LIST_PAGES:
            raise TransientJobError(
                ErrorCode.INTERNAL_ERROR,
                f"The listing of {self.what} does not end: "
                + ("the store repeated a page token" if token in self._seen
                   else f"more than {MAX_LIST_PAGES} pages"))
        self._seen.add(token)
        return token


def unreachable(what: str, exc: BaseException) -> TransientJobError:
    """A network failure talking to a store: retried with backoff. (There is no SPEC code
    for an unreachable store; a job that runs out of attempts fails as INTERNAL_ERROR.)"""
    return TransientJobError(ErrorCode.INTERNAL_ERROR, f"Cannot reach {what} ({type(exc).__name__})")
