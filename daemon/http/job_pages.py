"""What the console shows beside a job's values: its document's pages as pictures
(`GET /api/jobs/:id/pages/:n`), or the lines of a document that has none
(`GET /api/jobs/:id/text`). Same tenancy as `GET /api/jobs/:id`: another user's job is 404.

The file of a job never changes, so a picture carries a strong ETag (job, page, width
and the file's hash) and may be kept by the browser; a repeat with If-None-Match is a
304 without rendering anything.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import trio
from pydantic import Field
from quart import Blueprint, request
from quart_schema import document_response, tag_blueprint, validate_querystring
from quart_trio.wrappers.response import TrioResponse as Response

from daemon.auth.guard import current_principal
from daemon.errors import ApiError, Conflict, NotFound, PermanentJobError
from daemon.extraction.pages import (
    MAX_TEXT_LINES,
    PICTURE_HEAD_BYTES,
    PICTURED,
    SERVED_AS_STORED,
    PageImage,
    document_text_json,
    render_page,
    stored_picture_refusal,
)
from daemon.extraction.pipeline import in_worker, parse_options
from daemon.http.context import services, streamed
from daemon.http.models import ApiModel, QueryInt
from daemon.http.openapi import FileBytes, error_responses
from daemon.jobs.records import Job
from daemon.limiters import KeyedLimiter
from daemon.storage.repos import jobs as repo

blueprint = Blueprint("job_pages", __name__, url_prefix="/api")
tag_blueprint(blueprint, ["jobs"])

DEFAULT_WIDTH = 1400  # a page beside a column of values on a laptop's screen, sharp at 2x zoom
_MAX_WIDTH = 4000
# A job's file never changes; a week keeps a reviewer's pages across days of work.
_CACHE_CONTROL = "private, max-age=604800"


# Pictures are rendered in the parser processes that read jobs' documents. At most half of
# them render at once (one on two cores), so a flood of pictures leaves jobs a process; and a
# user renders one picture at a time, so one user's flood leaves the others' pictures a turn.
_RENDER_SLOTS = trio.CapacityLimiter(max(1, (os.cpu_count() or 1) // 2))
_renders_by_user = KeyedLimiter(1)


class PageQuery(ApiModel):
    width: QueryInt = Field(default=DEFAULT_WIDTH, ge=100, le=_MAX_WIDTH,
                       description="pixels across for a PDF page (the height follows); the picture is "
                                   "narrower when extraction.max_render_pixels requires")


class PagePicture(FileBytes):
    """The page as a picture: PNG (a PDF page rendered, a TIFF or WEBP frame), or a PNG or
    JPEG scan's own bytes. Carries a strong ETag and Cache-Control; a request with a matching
    If-None-Match gets 304 without a body."""

    content_type = "image/*"


class TextLine(ApiModel):
    text: str
    bbox: list[float] = Field(description="[x0, y0, x1, y1] as fractions of the page, like resultMeta.fields' bbox")


class TextPage(ApiModel):
    number: int
    lines: list[TextLine]


class DocumentText(ApiModel):
    pages: list[TextPage] = Field(description=f"the first {MAX_TEXT_LINES:,} lines at most, page by page; "
                                              "pages after the last line kept are left out")
    lineCount: int = Field(description="lines of the whole document")
    truncated: bool = Field(description="true when lines (and pages) after the first "
                                        f"{MAX_TEXT_LINES:,} were left out")


async def _job_with_file(job_id: str) -> tuple[Job, str]:
    job = await services().db.read(repo.get_job, current_principal().user_id, job_id)
    if job is None:
        raise NotFound("Job not found")
    if not job.blob_key or not job.mime_type:
        raise NotFound("This job has no file yet")
    return job, job.blob_key


def _gone() -> ApiError:
    return ApiError("The job's file no longer exists", status=410)


def _unshowable(exc: PermanentJobError) -> ApiError:
    """A document the daemon cannot show (corrupt, over a limit): 422 with its errorCode."""
    if exc.code == "PAGE_NOT_FOUND":
        return NotFound(exc.message)
    return ApiError(f"The document cannot be shown: {exc.message}", status=422, details={"errorCode": exc.code})


@blueprint.get("/jobs/<job_id>/pages/<int:number>")
@validate_querystring(PageQuery)
@document_response(PagePicture)
@error_responses(409, 410, 422)
async def get_page(job_id: str, number: int, query_args: PageQuery) -> Response:
    """Page `number` (from 1) of the job's document as a picture, for a person to compare
    with the values: a PDF page rendered `width` pixels across, an image's frame. A
    document without pages to show (DOCX, XLSX, CSV, TXT, HTML) is 409: its lines are at
    GET /api/jobs/:id/text."""
    job, blob_key = await _job_with_file(job_id)
    mime = job.mime_type or ""
    if mime not in PICTURED:
        raise Conflict("This job's document has no page images (it is not a PDF or an image); "
                       f"GET /api/jobs/{job.id}/text gives its text")
    as_stored = mime in SERVED_AS_STORED
    etag = _etag(job, number, None if as_stored else query_args.width)
    headers = {"ETag": etag, "Cache-Control": _CACHE_CONTROL, "Vary": "Authorization"}
    if _matches(request.headers.get("If-None-Match"), etag):
        return Response(b"", status=304, headers=headers)
    if as_stored:
        if number != 1:
            raise NotFound(f"The image has 1 page; there is no page {number}")
        return await _stored(blob_key, mime, headers, services().config.extraction.max_image_pixels)
    config = services().config
    try:
        async with _renders_by_user.hold(job.user_id), _RENDER_SLOTS, services().blobs.open_local(blob_key) as path:
            picture = await in_worker(render_page, str(path), mime, number, query_args.width,
                                      parse_options(config), timeout_s=config.extraction.parse_timeout_s)
    except FileNotFoundError:
        raise _gone() from None
    except PermanentJobError as exc:
        raise _unshowable(exc) from exc
    assert isinstance(picture, PageImage)
    return Response(picture.png, content_type="image/png", headers=headers)


async def _stored(blob_key: str, mime: str, headers: dict[str, str], max_image_pixels: int) -> Response:
    """The stored picture, streamed; 410 when the blob is gone and 422 when the picture is
    larger than extraction.max_image_pixels (both found before answering)."""
    chunks = services().blobs.read(blob_key).__aiter__()
    head: list[bytes] = []
    size = 0
    try:
        while size < PICTURE_HEAD_BYTES:
            head.append(await chunks.__anext__())
            size += len(head[-1])
    except FileNotFoundError:
        raise _gone() from None
    except StopAsyncIteration:
        pass
    refusal = await trio.to_thread.run_sync(stored_picture_refusal, b"".join(head), max_image_pixels)
    if refusal is not None:
        raise _unshowable(refusal)

    async def stream() -> AsyncIterator[bytes]:
        for chunk in head:
            yield chunk
        async for chunk in chunks:
            yield chunk

    return streamed(stream(), content_type=mime, headers=headers)


def _etag(job: Job, number: int, width: int | None) -> str:
    identity = f"{job.id}:{number}:{width or 'stored'}:{job.sha256}"
    return '"' + hashlib.sha256(identity.encode()).hexdigest()[:32] + '"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


@blueprint.get("/jobs/<job_id>/text")
@document_response(DocumentText)
@error_responses(409, 410, 422)
async def get_text(job_id: str) -> Response:
    """The lines of a DOCX, XLSX, CSV, TXT or HTML job's document as docex read them, each
    with its box on the page (for a console to show beside the values). A PDF or image is
    409: its pages are pictures at GET /api/jobs/:id/pages/:n."""
    job, blob_key = await _job_with_file(job_id)
    mime = job.mime_type or ""
    if mime in PICTURED:
        raise Conflict("This job's document is a PDF or an image; "
                       f"GET /api/jobs/{job.id}/pages/1 shows its pages")
    config = services().config
    try:
        async with services().blobs.open_local(blob_key) as path:
            body = await in_worker(document_text_json, str(Path(path)), mime, parse_options(config),
                                   timeout_s=config.extraction.parse_timeout_s)
    except FileNotFoundError:
        raise _gone() from None
    except PermanentJobError as exc:
        raise _unshowable(exc) from exc
    return Response(body, content_type="application/json")  # encoded by the worker: see document_text_json
