"""/api/jobs and /api/job-runs (SPEC §6, §8)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import trio
from pydantic import Field, ValidationInfo, field_validator
from quart import Blueprint, request
from quart_schema import document_response, tag_blueprint, validate_querystring, validate_request
from quart_trio.wrappers.response import TrioResponse as Response
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from daemon.auth.guard import current_principal
from daemon.clock import utcnow
from daemon.errors import BadRequest, Conflict, NotFound
from daemon.extraction import learning
from daemon.extraction.pipeline import schema_of
from daemon.http.context import no_content, services, streamed
from daemon.http.models import ApiModel, IsoDateTime
from daemon.http.openapi import FileBytes, NoContent, error_responses, request_bodies
from daemon.http.pagination import PageQuery, encoded, page, page_of
from daemon.http.requests import current_request
from daemon.http.validation import in_utc, parse
from daemon.integrations.job_sources import SourceIn, job_sources
from daemon.jobs import filetypes
from daemon.jobs.models import JOB_TYPE_EXTRACTION, JobStatus, RunStatus
from daemon.jobs.records import Job, JobRun, job_json, run_json, version_of
from daemon.jobs.transitions import check_approve
from daemon.jobs.upload import StoredFile, Upload, file_too_large, receive_upload
from daemon.schemas.definition import ResultCheck, check_result, incomplete_fails, learning_on
from daemon.storage.ids import looks_like_id
from daemon.storage.repos import jobs as repo
from daemon.storage.repos import learning as learning_repo
from daemon.storage.repos.accounts import Role
from daemon.storage.repos.jobs import JobFilter, NewJob
from daemon.storage.repos.schemas import get_schema

log = logging.getLogger(__name__)
blueprint = Blueprint("jobs", __name__, url_prefix="/api")
tag_blueprint(blueprint, ["jobs"])

# Multipart framing around one file: boundaries and part headers.
_MULTIPART_SLACK_BYTES = 64 * 1024
MAX_FILES_PER_RUN = 1000
# Deleting a failed request's blobs must finish, but never hang a cancelled request.
_CLEANUP_S = 10.0


class JobQuery(PageQuery):
    status: JobStatus | None = None
    schemaId: str | None = None
    jobRunId: str | None = None
    createdAfter: IsoDateTime | None = None
    createdBefore: IsoDateTime | None = None
    complete: bool | None = Field(
        default=None, description="true: COMPLETED jobs whose result has every required value; false: COMPLETED "
        "jobs whose result lacks some (resultMeta.complete false), for a person to finish")
    review: Literal["pending"] | None = Field(
        default=None, description="pending: the review queue, OLDEST first: COMPLETED jobs nobody approved whose "
        "result has a value under review.confidence_threshold or lacks a required value")

    @field_validator("createdAfter", "createdBefore")
    @classmethod
    def _in_utc_range(cls, value: dt.datetime | None, info: ValidationInfo) -> dt.datetime | None:
        # The database compares in UTC (a date with no UTC datetime was a 500, or a cut-off export stream).
        return value if value is None or value.tzinfo is None else in_utc(value, str(info.field_name))

    def filter(self) -> JobFilter:
        return JobFilter(
            status=self.status,
            schema_id=self.schemaId,
            job_run_id=self.jobRunId,
            created_after=_aware(self.createdAfter),
            created_before=_aware(self.createdBefore),
            complete=self.complete,
            review_below=services().config.review.confidence_threshold if self.review == "pending" else None,
        )


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    return value.replace(tzinfo=dt.UTC) if value is not None and value.tzinfo is None else value


class CreateJobJson(ApiModel):
    """A job whose file a worker fetches from an integration (PENDING until then)."""

    type: str
    schemaId: str
    source: SourceIn


class CreateRunJson(ApiModel):
    """A batch run of remote files: each source one file, or (`folderPath` alone, or an S3
    `prefix`) a folder listed into one job per file."""

    type: str
    schemaId: str
    sources: list[SourceIn] = Field(min_length=1, max_length=MAX_FILES_PER_RUN)


class CreateJobForm(ApiModel):
    """An upload: the document in `file`."""

    type: Literal["EXTRACTION"]
    schemaId: str
    file: bytes = Field(description="the document (PDF, PNG, JPEG, TIFF, WEBP, DOCX, XLSX, CSV, TXT or HTML)")


class CreateRunForm(ApiModel):
    """An upload: one document per `files` part."""

    type: Literal["EXTRACTION"]
    schemaId: str
    files: list[bytes] = Field(min_length=1, max_length=MAX_FILES_PER_RUN)


class PatchResultBody(ApiModel):
    result: dict[str, Any]


class ResultMetaOut(ApiModel):
    """How a COMPLETED job's result was made, and whether it is whole (SPEC §6, §7)."""

    provider: str = Field(description="rules, openai or anthropic")
    model: str | None = Field(description="the AI model; null for rules")
    durationMs: int
    fields: dict[str, dict[str, Any]] = Field(
        description="each value's JSON pointer → {confidence 0..1, page, bbox?, text}: where the document says it; "
        "a value read with what corrections taught also has learnedFrom (the learned example's id, "
        "GET /api/schemas/{schema_id}/examples) and learnedExamples (how many of the issuer's examples agreed)")
    usage: dict[str, int] | None = Field(default=None, description="AI providers: requests, inputTokens, outputTokens")
    complete: bool = Field(description="false: required values were not found (see missing); the job needs a person")
    missing: list[str] = Field(description="the JSON pointers of the required values not found (/address, "
                               "/vendor/name, /items/0/amount); empty when complete")


class JobOut(ApiModel):
    id: str
    type: str
    status: JobStatus
    schemaId: str
    jobRunId: str | None
    fileName: str | None
    fileSize: int | None
    mimeType: str | None
    sha256: str | None
    pageCount: int | None
    attempts: int
    result: dict[str, Any] | None
    resultMeta: ResultMetaOut | None
    errorMessage: str | None
    errorCode: str | None = Field(description="SPEC §6, e.g. PARSE_FAILED")
    createdAt: str
    updatedAt: str
    startedAt: str | None
    finishedAt: str | None
    reviewedAt: str | None = Field(description="when a person approved the result (POST /api/jobs/:id/approve); "
                                   "null until then, and again after a later correction")
    reviewedBy: str | None = Field(description="the id of the user who approved it")
    originalResult: dict[str, Any] | None = Field(default=None, description="the extracted result, once corrected")


class JobPage(ApiModel):
    data: list[JobOut]
    nextCursor: str | None


class RunCounts(ApiModel):
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int


class RunOut(ApiModel):
    id: str
    status: RunStatus
    schemaId: str
    total: int
    counts: RunCounts
    createdAt: str
    finishedAt: str | None


class RunCreatedOut(RunOut):
    jobs: list[JobOut]


class RunPage(ApiModel):
    data: list[RunOut]
    nextCursor: str | None


# --- shared checks -----------------------------------------------------------------------


async def _checked_schema(schema_id: str | None, type_: str | None) -> str:
    """The id of a live schema of the caller; 400 for a wrong type or an unknown schema."""
    problems = []
    if type_ != JOB_TYPE_EXTRACTION:
        problems.append(f"type must be one of the following values: {JOB_TYPE_EXTRACTION}")
    if not schema_id:
        problems.append("schemaId should not be empty")
    elif not looks_like_id(schema_id) or await services().db.read(get_schema, current_principal().user_id,
                                                                  schema_id) is None:
        problems.append("schemaId must be the id of one of your schemas")
    if problems:
        raise BadRequest(problems)
    assert schema_id is not None
    return schema_id


async def _typed(stored: StoredFile) -> NewJob:
    """The job made from an uploaded file, its type confirmed from its bytes (400 otherwise)."""
    mime = stored.mime_type
    if mime == filetypes.ZIP:
        async with services().blobs.open_local(stored.blob_key) as path:
            mime = await _in_thread(_zip_type, path) or ""
    if mime not in filetypes.SUPPORTED:
        accepted = "PDF, PNG, JPEG, TIFF, WEBP, DOCX, XLSX, CSV, TXT, HTML"
        raise BadRequest([f"Unsupported file type: {stored.file_name} (accepted: {accepted})"])
    return NewJob(
        file_name=stored.file_name,
        file_size=stored.size,
        mime_type=mime,
        sha256=stored.sha256,
        blob_key=stored.blob_key,
    )


def _zip_type(path: Path) -> str | None:
    """DOCX, XLSX or None for the ZIP file at `path` (blocking: run it in a thread)."""
    with path.open("rb") as handle:
        head = handle.read(filetypes.SNIFF_BYTES)
    return filetypes.refine_zip(path, head)


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await trio.to_thread.run_sync(fn, *args)


async def _forget(upload: Upload) -> None:
    for stored in upload.files:
        await services().blobs.delete(stored.blob_key)


def _refuse_oversized(max_file_bytes: int) -> None:
    """Refuse at once an upload whose declared length already exceeds what it may carry: a
    file of at most `max_file_bytes` and the form around it."""
    length = request.content_length
    if length is not None and length > max_file_bytes + _MULTIPART_SLACK_BYTES:
        current_request().body.discard()
        raise file_too_large(max_file_bytes)


def _request_hash(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


# A created resource's answer: its JSON, or for a replayed run a streamed one.
Answer = tuple[dict[str, Any] | Response, int, dict[str, str]]


async def _create_run_idempotently(
    request_hash: str, user_id: str, schema_id: str, items: list[NewJob], cleanup: Callable[[], Awaitable[None]],
    prepare: Callable[[], Awaitable[None]] | None = None,
) -> Answer:
    """`_create_idempotently` for a batch run of `items` (uploads or remote sources; the
    list may be filled by `prepare`), answered with the run and its jobs."""
    return await _create_idempotently(
        "job_run",
        request_hash,
        lambda conn: _created_run(
            conn, *repo.create_run(conn, user_id=user_id, schema_id=schema_id, items=items, now=utcnow())
        ),
        _run_replay,
        cleanup,
        prepare=prepare,
    )


async def _create_idempotently(
    resource_type: str,
    request_hash: str,
    create: Callable[[Connection], tuple[str, dict[str, Any]]],
    render: Callable[[str], Awaitable[dict[str, Any] | Response]],
    cleanup: Callable[[], Awaitable[None]],
    prepare: Callable[[], Awaitable[None]] | None = None,
) -> Answer:
    """Create once per Idempotency-Key (SPEC §6): a repeat of the same request replays the
    original (200, Idempotent-Replayed), a different request with the key is 409, and two
    concurrent requests with one key create one resource (the key's row is the arbiter).

    `prepare` runs only when the request is not a replay, before `create` (listing a
    remote folder: a replay answers the original run even if the folder changed since)."""
    key = request.headers.get("Idempotency-Key")
    principal = current_principal()
    user_id = principal.user_id
    db = services().db
    if key is not None and not 1 <= len(key) <= 255:
        await cleanup()
        raise BadRequest(["Idempotency-Key must be 1 to 255 characters"])
    if key is not None and principal.api_key_id is not None:
        # Keys are per principal (SPEC §6), and each API key is one: two integrations of an
        # account that make keys alike (a file's hash) got a 409 or the other one's job.
        # A user's sign-ins share the user's keys. Hashed to fit the column.
        key = f"apikey:{principal.api_key_id}:{hashlib.sha256(key.encode()).hexdigest()}"

    async def replay() -> Answer | None:
        assert key is not None
        seen = await db.read(repo.find_idempotency_key, user_id, key, utcnow())
        if seen is None:
            return None
        if seen.request_hash != request_hash or seen.resource_type != resource_type:
            await cleanup()
            raise Conflict("Idempotency-Key was already used with a different request")
        try:
            answer = await render(seen.resource_id)
        except NotFound:
            # Its job was deleted since the key was read, and the key went with it
            # (`delete_job`): the key is free, and this request creates (the upload kept).
            return None
        await cleanup()
        return answer, 200, {"Idempotent-Replayed": "true"}

    if key is not None and (replayed := await replay()) is not None:
        return replayed
    if prepare is not None:
        await prepare()

    def unit(conn: Connection) -> tuple[str, dict[str, Any]]:
        # The answer is rendered in the creating transaction: a worker may claim the job
        # the moment it commits, and the 201 shows it as created (QUEUED).
        resource_id, body = create(conn)
        if key is not None:
            repo.remember_idempotency_key(
                conn,
                user_id=user_id,
                key=key,
                request_hash=request_hash,
                resource_type=resource_type,
                resource_id=resource_id,
                now=utcnow(),
                ttl_s=services().config.jobs.idempotency_ttl_s,
            )
        return resource_id, body

    for attempt in range(2):
        try:
            _, body = await db.run(unit)
        except IntegrityError:
            if key is not None and (replayed := await replay()) is not None:
                return replayed  # a concurrent request with the key won; replay() cleaned up
            if key is not None and attempt == 0:
                continue  # the winner's job was deleted before its replay, with the key: free again
            await _cleanup_after_failure(cleanup)
            raise
        except BaseException:
            await _cleanup_after_failure(cleanup)
            raise
        return body, 201, {}
    raise AssertionError("unreachable: the second attempt returns or raises")


async def _cleanup_after_failure(cleanup: Callable[[], Awaitable[None]]) -> None:
    """Delete the upload of a request whose create failed: no job refers to its blobs, and
    nothing else would ever delete them. Shielded: a cancelled request cleans up too."""
    with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_S):
        await cleanup()


async def _owned_job(job_id: str) -> Job:
    job = await services().db.read(repo.get_job, current_principal().user_id, job_id)
    if job is None:
        raise NotFound("Job not found")
    return job


async def _job_body(job_id: str) -> dict[str, Any]:
    return job_json(await _owned_job(job_id))


def _versioned(job: Job) -> tuple[dict[str, Any], int, dict[str, str]]:
    """A job's answer with its version as the ETag: sent back as If-Match, a correction or an
    approval is refused (412) if the job changed meanwhile (another tab, another reviewer)."""
    return job_json(job), 200, {"ETag": f'"{version_of(job)}"'}


def _if_match() -> frozenset[str] | None:
    """The versions named by the request's If-Match, a list of tags (RFC 9110 §13.1.1: it
    holds when any of them is the job's; None: none, or `*`, any)."""
    header = ", ".join(request.headers.getlist("If-Match")).strip()
    if not header or header == "*":
        return None
    tags = [_ENTITY_TAG.fullmatch(part) for part in header.split(",")]
    if not all(tags):
        raise BadRequest(['If-Match must be ETags of the job (quoted strings, as GET /api/jobs/:id sends)'])
    return frozenset(tag.group(1) for tag in tags if tag is not None)


# An entity tag, weak or strong, with the spaces around it in a list.
_ENTITY_TAG = re.compile(r'\s*(?:W/)?"([^"]*)"\s*')


async def _run_body(run_id: str) -> dict[str, Any]:
    user_id = current_principal().user_id

    def load(conn: Connection) -> dict[str, Any]:
        run = repo.get_run(conn, user_id, run_id)
        if run is None:
            raise NotFound("Job run not found")
        return run_json(run, repo.run_counts(conn, run_id))

    return await services().db.read(load)


async def _run_replay(run_id: str) -> Response:
    """A run and its jobs as they are now, for the replay of its creation, streamed a page
    of jobs at a time: 40 jobs of large corrections made each replay 140 MB in memory."""
    body = await _run_body(run_id)
    user_id = current_principal().user_id
    db = services().db

    async def chunks() -> AsyncIterator[bytes]:
        yield json.dumps({**body, "jobs": []})[:-2].encode()  # up to the jobs' "["
        cursor, first = None, True
        while True:
            found = await db.read(repo.list_jobs, user_id, JobFilter(job_run_id=run_id), 100, cursor,
                                  oldest_first=True)
            if found.jobs:
                encoded = await trio.to_thread.run_sync(_encoded_jobs, found.jobs)
                yield (encoded if first else "," + encoded).encode()
                first = False
            if found.after is None:
                break
            cursor = found.after
        yield b"]}"

    return streamed(chunks(), content_type="application/json")


def _encoded_jobs(jobs: list[Job]) -> str:
    return ",".join(json.dumps(job_json(job)) for job in jobs)


def _created_job(job: Job) -> tuple[str, dict[str, Any]]:
    return job.id, job_json(job)


def _created_run(conn: Connection, run: JobRun, created: list[Job]) -> tuple[str, dict[str, Any]]:
    return run.id, {**run_json(run, repo.run_counts(conn, run.id)), "jobs": [job_json(job) for job in created]}


async def _nothing() -> None:
    return None


async def _create_from_sources(body: CreateJobJson | CreateRunJson) -> Answer:
    """A PENDING job (`source`) or a run of PENDING jobs (`sources`); workers fetch the files."""
    schema_id = await _checked_schema(body.schemaId, body.type)
    user_id = current_principal().user_id
    # Sources are checked (and folders listed, remote I/O) only for a request that is not a
    # replay: a replay answers the original even if the integration changed since.
    items: list[NewJob] = []
    if isinstance(body, CreateJobJson):
        source = body.source

        async def check() -> None:
            items.extend(await job_sources(services(), user_id, [source], path="source", allow_listing=False,
                                           limit=1))

        return await _create_idempotently(
            "job",
            _request_hash(kind="job", schemaId=schema_id, source=source.model_dump()),
            lambda conn: _created_job(
                repo.create_job(conn, user_id=user_id, schema_id=schema_id, new=items[0], now=utcnow())
            ),
            _job_body,
            _nothing,
            prepare=check,
        )
    sources = body.sources

    async def expand() -> None:
        items.extend(await job_sources(services(), user_id, sources, path="sources", allow_listing=True,
                                       limit=MAX_FILES_PER_RUN))

    request_hash = _request_hash(kind="run", schemaId=schema_id, sources=[s.model_dump() for s in sources])
    return await _create_run_idempotently(request_hash, user_id, schema_id, items, _nothing, prepare=expand)


# --- jobs -----------------------------------------------------------------------------


@blueprint.post("/jobs")
@request_bodies(json=CreateJobJson, multipart=CreateJobForm)
@document_response(JobOut, 201)
@document_response(JobOut, 200)  # an Idempotency-Key replay
@error_responses(409)
async def create_job() -> Answer:
    """Create an extraction job from a multipart upload (`file`, `type`, `schemaId`),
    or from JSON `{type, schemaId, source}` naming a file of an integration."""
    config = services().config
    if request.mimetype == "application/json":
        return await _create_from_sources(parse(CreateJobJson, await request.get_json()))
    _refuse_oversized(config.jobs.max_file_size_bytes)
    upload = await receive_upload(
        request, services().blobs, file_field="file", max_file_bytes=config.jobs.max_file_size_bytes, max_files=1
    )
    try:
        schema_id = await _checked_schema(upload.field("schemaId"), upload.field("type"))
        if not upload.files:
            raise BadRequest(["file should not be empty"])
        new = await _typed(upload.files[0])
    except BaseException:
        await _forget(upload)
        raise
    user_id = current_principal().user_id
    request_hash = _request_hash(kind="job", schemaId=schema_id, sha256=new.sha256, fileName=new.file_name)
    return await _create_idempotently(
        "job",
        request_hash,
        lambda conn: _created_job(repo.create_job(conn, user_id=user_id, schema_id=schema_id, new=new, now=utcnow())),
        _job_body,
        lambda: _forget(upload),
    )


@blueprint.get("/jobs")
@validate_querystring(JobQuery)
@document_response(JobPage)
async def list_jobs(query_args: JobQuery) -> Response:
    """The caller's jobs, newest first, filtered by status, schema, run or creation time; or
    (`review=pending`) the jobs waiting for a person to check them, oldest first."""
    found = await services().db.read(
        repo.list_jobs, current_principal().user_id, query_args.filter(), query_args.limit, query_args.cursor
    )
    return await encoded(page_of(found.jobs, found.after, job_json))


@blueprint.get("/jobs/<job_id>")
@document_response(JobOut)
async def get_job(job_id: str) -> tuple[dict[str, Any], int, dict[str, str]]:
    """The job; its ETag is its version, for If-Match on PATCH /result and approve."""
    return _versioned(await _owned_job(job_id))


@blueprint.get("/jobs/<job_id>/file")
@document_response(FileBytes)
async def get_job_file(job_id: str) -> Response:
    """The original bytes of the job's file."""
    job = await services().db.read(repo.get_job, current_principal().user_id, job_id)
    if job is None:
        raise NotFound("Job not found")
    blob_key = job.blob_key
    if not blob_key:
        raise NotFound("This job has no file yet")
    blobs = services().blobs

    async def stream() -> AsyncIterator[bytes]:
        async for chunk in blobs.read(blob_key):
            yield chunk

    name = job.file_name or "document"
    # Printable ASCII only: a name from an inbox's file or a bucket's key may hold a line
    # break, which a header cannot carry (werkzeug refuses it: a 500 on every download).
    ascii_name = "".join(ch for ch in name.encode("ascii", "replace").decode()
                         if ch.isprintable() and ch not in '"\\')
    response = streamed(stream(), content_type=job.mime_type or "application/octet-stream")
    response.headers["Content-Disposition"] = (
        f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"
    )
    # An uploaded HTML or SVG file opened from here runs no script with the daemon's origin.
    response.headers["Content-Security-Policy"] = "sandbox"
    if job.file_size is not None:
        response.headers["Content-Length"] = str(job.file_size)
    return response


@blueprint.post("/jobs/<job_id>/restart")
@document_response(JobOut)
@error_responses(409)
async def restart_job(job_id: str) -> dict[str, Any]:
    """Queue a FAILED job again with its attempts reset (409 otherwise); emits job.queued."""
    job = await services().db.run(repo.restart_job, current_principal().user_id, job_id, utcnow())
    return job_json(job)


@blueprint.post("/jobs/<job_id>/cancel")
@document_response(JobOut)
@error_responses(409)
async def cancel_job(job_id: str) -> dict[str, Any]:
    """Cancel a PENDING or QUEUED job (409 otherwise); emits job.cancelled."""
    job = await services().db.run(repo.cancel_job, current_principal().user_id, job_id, utcnow())
    return job_json(job)


@blueprint.patch("/jobs/<job_id>/result")
@validate_request(PatchResultBody)
@document_response(JobOut)
@error_responses(409, 412)
async def patch_result(job_id: str, data: PatchResultBody) -> tuple[dict[str, Any], int, dict[str, str]]:
    """Correct a COMPLETED job's result; its values must match the schema. Required values it
    still lacks are listed in resultMeta.missing (complete once there are none), unless the
    schema says `"x-docex-incomplete": "fail"`: then they are refused. With `If-Match` (the
    ETag of GET /api/jobs/:id), 412 if the job changed since. Emits job.updated."""
    expected = _if_match()
    user_id = current_principal().user_id
    job = await services().db.read(repo.get_job, user_id, job_id)
    if job is None:
        raise NotFound("Job not found")
    schema = await _schema_of(job)
    missing: list[str] = []
    if schema is not None:
        check = await trio.to_thread.run_sync(check_result, schema.definition, data.result)
        problems = _result_problems(check, missing_required=incomplete_fails(schema.definition))
        if problems:
            raise BadRequest(problems)
        missing = check.missing
    lesson = await _lesson_of(job, schema, data.result)
    job = await services().db.run(_confirmed, lesson, repo.patch_result, user_id, job_id, data.result, missing,
                                  utcnow(), expected)
    return _versioned(job)


@blueprint.post("/jobs/<job_id>/approve")
@document_response(JobOut)
@error_responses(409, 412)
async def approve_job(job_id: str) -> tuple[dict[str, Any], int, dict[str, str]]:
    """Record that a person checked the job's result: reviewedAt and reviewedBy (the caller).
    The job's owner or an ADMIN (any user's job); COMPLETED jobs with a complete result only
    (409 otherwise). With `If-Match`, 412 if the job changed since the reviewer read it. A
    later PATCH /result clears the approval. Emits job.updated."""
    expected = _if_match()
    principal = current_principal()
    owner = None if principal.role == Role.ADMIN else principal.user_id
    job = await services().db.read(repo.get_job, owner, job_id)
    lesson = None
    if job is not None:
        check_approve(job)  # its own 409 first (checked again as it is written)
        schema = await _schema_of(job)
        if schema is not None:
            await _still_matches(schema, job.result)
        if job.result is not None:
            lesson = await _lesson_of(job, schema, job.result)
    job = await services().db.run(_confirmed, lesson, repo.approve_job, job_id, owner, principal.user_id, utcnow(),
                                  expected)
    return _versioned(job)


async def _schema_of(job: Job) -> Row[Any] | None:
    """The schema `job` was read with, as it is now (None once purged)."""
    return await services().db.read(get_schema, job.user_id, job.schema_id, include_deleted=True)


def _result_problems(check: ResultCheck, *, missing_required: bool) -> list[str]:
    """The problems of a result `check`, named as the request's `result` members."""
    problems = [f"result{p}" for p in check.problems]
    return problems + ([f"result{p} is required" for p in check.missing] if missing_required else [])


async def _still_matches(schema: Row[Any], result: dict[str, Any] | None) -> None:
    """Refuse (409) to approve a result its schema, edited since the job ran, no longer
    accepts: the same values saved with PATCH /result were a 400, and approving them kept
    the job complete with a value of the wrong type or a new required one missing."""
    # In a thread, as for PATCH /result: a result of 4 MiB takes a second or two to check.
    check = await trio.to_thread.run_sync(check_result, schema.definition, result)
    problems = _result_problems(check, missing_required=True)
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise Conflict(f"The result does not match its schema as it is now ({shown}): "
                       "correct it with PATCH /result, then approve")


@dataclasses.dataclass(frozen=True)
class _Lesson:
    """What confirming `result` teaches about its issuer (`learning.learn`), and the keys
    that find it."""

    result: dict[str, Any]
    fields: dict[str, Any]
    keys: list[str]


async def _lesson_of(job: Job, schema: Row[Any] | None, result: dict[str, Any]) -> _Lesson | None:
    """What confirming `result` as `job`'s result teaches, for its owner and `schema` (issue
    #16): None when learning is off for it or it kept no reading (learning was off when it
    ran).

    A failure to learn is logged, never the caller's error: the correction or approval
    is saved all the same (it would answer 500 for a change that can take effect)."""
    svc = services()
    try:
        if schema is None or not learning_on(schema.definition, svc.config.learning.enabled):
            return None
        reading = await svc.db.read(learning_repo.job_reading, job.id)
        if reading is None:
            return None
        keys = reading.get("keys") or []
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise TypeError("the reading's keys are not a list of strings")
        fields = await trio.to_thread.run_sync(learning.learn, reading.get("lines") or [], result,
                                               schema_of(schema.definition))
    except Exception:
        log.exception("could not learn from job %s", job.id, extra={"action": "learning.failed", "job_id": job.id})
        return None
    return _Lesson(result, fields, keys)


def _confirmed(conn: Connection, lesson: _Lesson | None, confirm: Callable[..., Job], *args: Any) -> Job:
    """`confirm(conn, *args)` (a correction or an approval) and the example its `lesson`
    records, in one transaction: a daemon stopped between two would keep a confirmed result
    that taught nothing. Corrections of one job commit one after the other (its row is
    locked), each with its own lesson, so the example is always the last result's. An
    approval whose job was corrected since its lesson was learned records nothing: the
    correction recorded the lesson of the result it approves."""
    job = confirm(conn, *args)
    if lesson is not None and job.result == lesson.result:
        learning_repo.record_example(conn, user_id=job.user_id, schema_id=job.schema_id, job_id=job.id,
                                     fields=lesson.fields, keys=lesson.keys, now=utcnow())
    return job


@blueprint.delete("/jobs/<job_id>")
@document_response(NoContent, 204)
@error_responses(409)
async def delete_job(job_id: str) -> Response:
    """Delete a job that is not RUNNING, and its file."""
    blob_key = await services().db.run(repo.delete_job, current_principal().user_id, job_id, utcnow())
    if blob_key:
        await services().blobs.delete(blob_key)
    return no_content()


# --- batch runs -------------------------------------------------------------------------


@blueprint.post("/job-runs")
@request_bodies(json=CreateRunJson, multipart=CreateRunForm)
@document_response(RunCreatedOut, 201)
@document_response(RunCreatedOut, 200)  # an Idempotency-Key replay
@error_responses(409)
async def create_run() -> Answer:
    """Create a batch run from several uploaded `files` (multipart, with `type` and
    `schemaId`), or from JSON `{type, schemaId, sources: [...]}`. Emits job_run.created."""
    config = services().config
    if request.mimetype == "application/json":
        return await _create_from_sources(parse(CreateRunJson, await request.get_json()))
    upload = await receive_upload(
        request,
        services().blobs,
        file_field="files",
        max_file_bytes=config.jobs.max_file_size_bytes,
        max_files=MAX_FILES_PER_RUN,
        max_total_bytes=config.jobs.max_run_size_bytes,
    )
    try:
        schema_id = await _checked_schema(upload.field("schemaId"), upload.field("type"))
        if not upload.files:
            raise BadRequest(["files should not be empty"])
        items = [await _typed(stored) for stored in upload.files]
    except BaseException:
        await _forget(upload)
        raise
    user_id = current_principal().user_id
    request_hash = _request_hash(
        kind="run", schemaId=schema_id, files=[[item.sha256, item.file_name] for item in items]
    )
    return await _create_run_idempotently(request_hash, user_id, schema_id, items, lambda: _forget(upload))


@blueprint.get("/job-runs")
@validate_querystring(PageQuery)
@document_response(RunPage)
async def list_runs(query_args: PageQuery) -> dict[str, Any]:
    user_id = current_principal().user_id

    def load(conn: Connection) -> dict[str, Any]:
        rows = repo.list_runs(conn, user_id, query_args.limit, query_args.cursor)
        return page(rows, query_args.limit, lambda run: run_json(run, repo.run_counts(conn, run.id)))

    return await services().db.read(load)


@blueprint.get("/job-runs/<run_id>")
@document_response(RunOut)
async def get_run(run_id: str) -> dict[str, Any]:
    return await _run_body(run_id)


@blueprint.get("/job-runs/<run_id>/jobs")
@validate_querystring(JobQuery)
@document_response(JobPage)
async def list_run_jobs(run_id: str, query_args: JobQuery) -> Response:
    user_id = current_principal().user_id
    if await services().db.read(repo.get_run, user_id, run_id) is None:
        raise NotFound("Job run not found")
    where = dataclasses.replace(query_args.filter(), job_run_id=run_id)
    found = await services().db.read(repo.list_jobs, user_id, where, query_args.limit, query_args.cursor)
    return await encoded(page_of(found.jobs, found.after, job_json))


@blueprint.post("/job-runs/<run_id>/cancel")
@document_response(RunOut)
@error_responses(409)
async def cancel_run(run_id: str) -> dict[str, Any]:
    """Cancel the run's PENDING and QUEUED jobs; running ones finish."""
    await services().db.run(repo.cancel_run, current_principal().user_id, run_id, utcnow())
    return await _run_body(run_id)
