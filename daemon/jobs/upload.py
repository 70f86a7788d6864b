"""Receive a multipart upload as a stream: each file goes to the blob store as its
bytes arrive, hashed and counted on the way, its type told from its first bytes.

Nothing holds a whole file in memory: the body is read chunk by chunk, a file
part is written out as it is decoded, and a file over the size limit is
refused (413) the moment it crosses the limit, the rest of the body dropped.
Every blob written for a request that then fails is deleted again.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import trio
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.sansio.multipart import Data, Epilogue, File, MultipartDecoder, NeedData, State
from werkzeug.sansio.multipart import Field as FieldEvent

from daemon.errors import ApiError, BadRequest, PayloadTooLarge
from daemon.jobs import filetypes
from daemon.storage.blobs import BlobStore, BlobWriter
from daemon.storage.repos.jobs import stored_file_name

# Plain form fields (type, schemaId, …) are small; a larger one is not a field we take.
_MAX_FIELD_BYTES = 64 * 1024
_MAX_PARTS = 1100
# An upload has this long, plus a second for each KiB it has sent, and never this long
# without a byte, or it is ended (408): a client sending a byte every 20 s held a socket and
# a partial file for ever. Any real link is far faster (50 MiB over 1 Mbit/s: 7 minutes).
UPLOAD_GRACE_S = 60.0
UPLOAD_MIN_BYTES_PER_S = 1024


def file_too_large(max_bytes: int) -> PayloadTooLarge:
    """The 413 of a file over `jobs.max_file_size` (MAX_FILE_SIZE), its limit as it was set."""
    return PayloadTooLarge(f"File exceeds the maximum size of {max_bytes:,} bytes "
                           f"({max_bytes / 2**20:g} MiB, MAX_FILE_SIZE)")


@dataclass
class StoredFile:
    """A file part, now a committed blob."""

    blob_key: str
    file_name: str
    size: int
    sha256: str
    mime_type: str


@dataclass
class Upload:
    fields: dict[str, list[str]] = field(default_factory=dict)
    files: list[StoredFile] = field(default_factory=list)

    def field(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else None


class _FileSink:
    def __init__(self, writer: BlobWriter, name: str, max_bytes: int) -> None:
        self.writer = writer
        self.name = name
        self.max_bytes = max_bytes
        self.size = 0
        self.hasher = hashlib.sha256()
        self.head = bytearray()

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_bytes:
            raise file_too_large(self.max_bytes)
        if len(self.head) < filetypes.SNIFF_BYTES:
            self.head += data[: filetypes.SNIFF_BYTES - len(self.head)]
        self.hasher.update(data)
        await self.writer.write(data)


def is_multipart(content_type: str) -> bool:
    """Whether a Content-Type is multipart/form-data (a media type is case-insensitive)."""
    return content_type.partition(";")[0].strip().lower() == "multipart/form-data"


def boundary_of(content_type: str) -> bytes:
    match = re.search(r'(?i)boundary="?([^";]+)"?', content_type)
    if not is_multipart(content_type) or not match:
        raise BadRequest(["request must be multipart/form-data with a boundary"])
    return match.group(1).encode("latin-1")


async def receive_upload(request: Any, blobs: BlobStore, *, file_field: str, max_file_bytes: int,
                         max_files: int, max_total_bytes: int | None = None) -> Upload:
    """Stream `request`'s multipart body: fields into memory, `file_field` parts into blobs.

    Raises:
        PayloadTooLarge: a file is over `max_file_bytes`, or the files over
            `max_total_bytes` in all (a run of 1,000 files of 50 MiB wrote 50 GB).
        BadRequest: not multipart, malformed, too many files, an unsupported file type.
    On any error every blob this call wrote is deleted.
    """
    upload = Upload()
    sink: _FileSink | None = None
    field_name: str | None = None
    field_value = bytearray()
    # Parts are counted here, not by the decoder's max_parts: its RequestEntityTooLarge
    # cannot be told from a file's, and a request of small fields was told its file was too big.
    decoder = MultipartDecoder(boundary_of(request.headers.get("Content-Type", "")))
    parts = file_bytes = 0
    started, received = trio.current_time(), 0
    try:
        body = request.body.__aiter__()
        done = ended = False
        while not done:
            event = decoder.next_event()
            if isinstance(event, NeedData):
                if ended:
                    raise BadRequest(["multipart body ended early"])
                # werkzeug keeps what is not yet a part's data (the preamble, a part's
                # headers, the epilogue) whole until its end arrives: a chunked body of
                # "x" without a boundary grew the process by every MiB sent.
                if decoder.state == State.EPILOGUE:
                    del decoder.buffer[:]  # nothing reads it
                elif len(decoder.buffer) > _MAX_FIELD_BYTES:
                    raise BadRequest(["multipart preamble or part headers over 64 KiB"])
                deadline = min(started + UPLOAD_GRACE_S + received / UPLOAD_MIN_BYTES_PER_S,
                               trio.current_time() + UPLOAD_GRACE_S)
                try:
                    with trio.move_on_at(deadline) as late:
                        chunk: bytes | None = await body.__anext__()
                except StopAsyncIteration:
                    chunk, ended = None, True
                if late.cancelled_caught:
                    raise ApiError(f"the upload is too slow: under {UPLOAD_MIN_BYTES_PER_S // 1024} KiB/s after its "
                                   f"first {UPLOAD_GRACE_S:g} s, or {UPLOAD_GRACE_S:g} s without data; send it again",
                                   status=408)
                received += len(chunk or b"")
                decoder.receive_data(chunk)
                continue
            if isinstance(event, File | FieldEvent):
                parts += 1
                if parts > _MAX_PARTS:
                    raise PayloadTooLarge(f"at most {_MAX_PARTS} parts per request")
            if isinstance(event, File):
                if event.name != file_field:
                    raise BadRequest([f"unexpected file part {event.name!r}; send files as {file_field!r}"])
                if len(upload.files) >= max_files:
                    raise BadRequest([f"at most {max_files} files per request"])
                sink = _FileSink(await blobs.open_writer(), event.filename or "upload", max_file_bytes)
            elif isinstance(event, FieldEvent):
                field_name, field_value = event.name, bytearray()
            elif isinstance(event, Data):
                if sink is not None:
                    file_bytes += len(event.data)
                    if max_total_bytes is not None and file_bytes > max_total_bytes:
                        raise PayloadTooLarge(f"the files of a request may hold at most {max_total_bytes:,} bytes "
                                              "in all (jobs.max_run_size): send them in several runs")
                    await sink.write(event.data)
                    if not event.more_data:
                        upload.files.append(await _finish(sink))
                        sink = None
                elif field_name is not None:
                    field_value += event.data
                    if len(field_value) > _MAX_FIELD_BYTES:
                        raise BadRequest([f"{field_name} is too long"])
                    if not event.more_data:
                        upload.fields.setdefault(field_name, []).append(field_value.decode("utf-8", "replace"))
                        field_name = None
            elif isinstance(event, Epilogue):
                done = True
    except BaseException as exc:
        request.body.discard()
        with trio.CancelScope(shield=True):
            if sink is not None:
                await sink.writer.abort()
            for stored in upload.files:
                await blobs.delete(stored.blob_key)
        if isinstance(exc, RequestEntityTooLarge):
            raise file_too_large(max_file_bytes) from exc
        if isinstance(exc, ValueError):  # werkzeug's decoder on a malformed body
            raise BadRequest(["malformed multipart body"]) from exc
        raise
    return upload


async def _finish(sink: _FileSink) -> StoredFile:
    """Commit the blob, then tell its type from its bytes (ZIPs by their members)."""
    await sink.writer.commit()
    mime = filetypes.sniff(bytes(sink.head))
    name = stored_file_name(sink.name) or "upload"  # a multipart file part always has a name
    return StoredFile(sink.writer.key, name, sink.size, sink.hasher.hexdigest(), mime or "")
