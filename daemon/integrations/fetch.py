"""A PENDING job's file, streamed from its integration into the blob store (SPEC §6).

The same checks as an upload (`daemon.jobs.upload`): hashed and counted as the bytes
arrive, refused the moment it exceeds MAX_FILE_SIZE, its type told from its bytes.
Over the limit there is no 413 to answer: the job fails with UNSUPPORTED_FILE and an
errorMessage that says the file is too large (SPEC §6 has no code of its own for it).

The worker pool (`daemon.jobs.pool.fetch_job`) holds the job's lease meanwhile and
records the outcome; this module only moves bytes and decides their type.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import trio

from daemon.errors import PermanentJobError
from daemon.integrations.base import FileRef
from daemon.integrations.sources import open_source
from daemon.jobs import filetypes
from daemon.jobs.models import ErrorCode
from daemon.services import Services
from daemon.storage.repos import integrations as repo

log = logging.getLogger(__name__)

ACCEPTED = "PDF, PNG, JPEG, TIFF, WEBP, DOCX, XLSX, CSV, TXT, HTML"


@dataclass(frozen=True)
class FetchedFile:
    """A remote file now in the blob store under `blob_key`, of a supported type."""

    file_name: str
    file_size: int
    mime_type: str
    sha256: str
    blob_key: str


def _too_large(name: str, max_bytes: int, size: int | None = None) -> PermanentJobError:
    told = f" is {size} bytes," if size is not None else ""
    return PermanentJobError(
        ErrorCode.UNSUPPORTED_FILE,
        f"File too large: {name}{told} over the maximum of {max_bytes} bytes (MAX_FILE_SIZE)",
    )


async def fetch_file(services: Services, job: Any) -> FetchedFile:
    """Stream `job`'s remote file into the blob store and type it.

    Raises:
        JobError: the integration's errors (see `daemon.integrations.base`), UNSUPPORTED_FILE
            for a file over MAX_FILE_SIZE or of an unsupported type, INTEGRATION_ACCESS_DENIED
            if the integration was deleted.
        BlobStoreError: the blob store failed.
    Whatever goes wrong (cancellation included), no blob is left behind.
    """
    source: dict[str, Any] = dict(job.source or {})
    integration_id = str(source.get("integrationId", ""))
    row = await services.db.read(repo.get_integration, job.user_id, integration_id)
    if row is None:
        raise PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED,
                                f"Integration {integration_id} no longer exists")
    max_bytes = services.config.jobs.max_file_size_bytes
    blobs = services.blobs
    async with open_source(services, row) as remote, remote.open(FileRef.from_source(source)) as file:
        name = file.name[:500] or "document"
        if file.size is not None and file.size > max_bytes:
            raise _too_large(name, max_bytes, file.size)
        writer = await blobs.open_writer()
        size, hasher, head = 0, hashlib.sha256(), bytearray()
        try:
            async for chunk in file.chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise _too_large(name, max_bytes)
                if len(head) < filetypes.SNIFF_BYTES:
                    head += chunk[: filetypes.SNIFF_BYTES - len(head)]
                hasher.update(chunk)
                await writer.write(chunk)
            await writer.commit()
        except BaseException:
            await writer.abort()
            raise
    try:
        mime = filetypes.sniff(bytes(head))
        if mime == filetypes.ZIP:
            async with blobs.open_local(writer.key) as path:
                mime = await trio.to_thread.run_sync(filetypes.refine_zip, path, bytes(head))
        if mime not in filetypes.SUPPORTED:
            raise PermanentJobError(ErrorCode.UNSUPPORTED_FILE, f"Unsupported file type: {name} (accepted: {ACCEPTED})")
    except BaseException:
        with trio.CancelScope(shield=True):
            await blobs.delete(writer.key)
        raise
    assert mime is not None
    log.info("remote file fetched", extra={"action": "job.fetched", "job_id": job.id, "integration_id": row.id,
                                           "size": size, "mime_type": mime})
    return FetchedFile(file_name=name, file_size=size, mime_type=mime, sha256=hasher.hexdigest(),
                       blob_key=writer.key)
