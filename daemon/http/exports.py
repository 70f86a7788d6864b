"""Exports: a run's jobs, or any filtered job list, as CSV, XLSX or JSON Lines.

    GET /api/job-runs/:id/export?format=csv|xlsx|jsonl[&items=rows|sheets]
    GET /api/jobs/export?format=...&status=&schemaId=&jobRunId=&createdAfter=&createdBefore=&complete=

Streamed in bounded memory: jobs are read a page of at most `PAGE_JSON_BYTES` of stored
JSON at a time (one job, however large, when it alone is more) and written as they come,
CSV in slices of rows (XLSX through openpyxl's write-only workbook into a temporary file,
then sent); a user runs at most `MAX_EXPORTS_PER_USER` at once in a process. The
columns and rows are daemon.jobs.export's; CSV cells that a spreadsheet would run as a
formula get a leading apostrophe, XLSX writes them as text cells.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import trio
from pydantic import Field
from quart import Blueprint
from quart_schema import document_response, tag_blueprint, validate_querystring
from quart_trio.wrappers.response import TrioResponse as Response

from daemon.auth.guard import current_principal
from daemon.errors import BadRequest, NotFound, TooManyRequests
from daemon.http.context import services, streamed
from daemon.http.jobs import JobQuery
from daemon.http.models import ApiModel
from daemon.http.openapi import FileBytes, error_responses
from daemon.jobs import export
from daemon.jobs.records import job_json
from daemon.services import Services
from daemon.storage.repos import jobs as jobs_repo
from daemon.storage.repos import schemas as schemas_repo
from daemon.storage.repos.jobs import JobFilter

blueprint = Blueprint("exports", __name__, url_prefix="/api")
tag_blueprint(blueprint, ["jobs"])

PAGE_SIZE = 500  # jobs read per database round trip, at most
# Stored JSON (results, originals, metadata) per page read: a correction may be 4 MiB of
# JSON, ten times that as Python objects, and exports read 20 or 500 such jobs at once
# (8 CSV exports of eight such jobs took a daemon from 390 MB to 3.1 GB).
PAGE_JSON_BYTES = 1024 * 1024
CHUNK_BYTES = 64 * 1024
# CSV rows written per trip to a worker thread (and per chunk sent): a job of 60,000 line
# items is 60,000 rows, each repeating the job's columns.
RENDER_ROWS = 2_000
# Exports one user runs at once (in each process): each holds a page of jobs in memory for
# as long as its client takes to read it.
MAX_EXPORTS_PER_USER = 2
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "jsonl": "application/x-ndjson",
}
Format = Literal["csv", "xlsx", "jsonl"]


class ExportOptions(ApiModel):
    format: Format = Field(default="csv", description="csv, xlsx or jsonl (one job object per line)")
    items: Literal["rows", "sheets"] = Field(
        default="rows", description="arrays of objects (line items): one row per item repeating the job's "
        "columns (rows), or in XLSX a sheet per array keyed by jobId (sheets)")


class RunExportQuery(ExportOptions):
    pass


class JobsExportQuery(ExportOptions, JobQuery):
    """The filters of GET /api/jobs (without cursor and limit: every job that matches)."""


async def _pages(state: Services, user_id: str, where: JobFilter) -> AsyncIterator[list[dict[str, Any]]]:
    """Every job matching `where`, as job objects, a page at a time."""
    cursor = None
    while True:
        found = await state.db.read(jobs_repo.list_jobs, user_id, where, PAGE_SIZE, cursor,
                                    max_json_bytes=PAGE_JSON_BYTES)
        if found.jobs:
            yield [job_json(job) for job in found.jobs]
        if found.after is None:
            return
        cursor = found.after


def _csv_header(shape: export.Layout) -> bytes:
    buffer = io.StringIO()
    buffer.write("\ufeff")  # a BOM: Excel then reads the file as UTF-8
    # The header is the schema's property names, chosen by a user like any value: neutralised too.
    export.csv_writer(buffer).writerow([export.neutralised(v) for v in export.distinct(export.rows_header(shape))])
    return buffer.getvalue().encode("utf-8")


def _csv_rows(rows: Iterator[list[Any]]) -> bytes:
    """The next `RENDER_ROWS` of `rows`, as CSV (empty when there are none left)."""
    buffer = io.StringIO()
    export.csv_writer(buffer).writerows([export.neutralised(v) for v in row]
                                        for row in itertools.islice(rows, RENDER_ROWS))
    return buffer.getvalue().encode("utf-8")


async def _csv(pages: AsyncIterator[list[dict[str, Any]]], shape: export.Layout) -> AsyncIterator[bytes]:
    """Rendered in worker threads: a result may hold thousands of line items, and their rows
    written on the event loop stalled every other request (60,000 items: 1.1 s)."""
    yield _csv_header(shape)
    async for page in pages:
        rows = itertools.chain.from_iterable(export.rows(job, shape) for job in page)
        while chunk := await trio.to_thread.run_sync(_csv_rows, rows):
            yield chunk


def _json_lines(jobs: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(job, ensure_ascii=False, separators=(",", ":")) + "\n" for job in jobs).encode("utf-8")


async def _jsonl(pages: AsyncIterator[list[dict[str, Any]]]) -> AsyncIterator[bytes]:
    async for page in pages:
        yield await trio.to_thread.run_sync(_json_lines, page)


class _Workbook:
    """An openpyxl write-only workbook on a temporary file: rows go to disk as they come."""

    def __init__(self, shape: export.Layout, items: str) -> None:
        from openpyxl import Workbook

        self.shape = shape
        self.book = Workbook(write_only=True)
        self.jobs = self.book.create_sheet("jobs")
        self.sheets = items == "sheets" and bool(shape.tables)
        self.tables = [(table, self.book.create_sheet(_sheet_name(table.name, i)))
                       for i, table in enumerate(shape.tables)] if self.sheets else []
        header = self.shape.header() if self.sheets else export.rows_header(shape)
        self.jobs.append(self._text_cells(export.distinct(header), self.jobs))
        for table, sheet in self.tables:
            sheet.append(self._text_cells(export.distinct(["jobId", *(name for name, _ in table.columns)]), sheet))

    @staticmethod
    def _text_cells(values: list[Any], sheet: Any) -> list[Any]:
        """The row, with each text openpyxl would store as a formula (it starts with "=") made a
        text cell, and the control characters XML 1.0 cannot carry (openpyxl raises on them,
        midway through the answer) replaced by U+FFFD; other values as they are (a cell
        object each would cost three times the time)."""
        from openpyxl.cell import WriteOnlyCell

        cells: list[Any] = []
        for value in values:
            if isinstance(value, str):
                value = _xml_text(value)
            elif isinstance(value, int) and value.bit_length() > _DOUBLE_BITS:
                value = str(value)  # a number cell is a double: openpyxl raised on a result kept before the limit
            if isinstance(value, str) and value.startswith("="):
                value = WriteOnlyCell(sheet, value=value)
                value.data_type = "s"
            cells.append(value)
        return cells

    def add(self, jobs: list[dict[str, Any]]) -> None:
        for job in jobs:
            if not self.sheets:
                for row in export.rows(job, self.shape):
                    self.jobs.append(self._text_cells(row, self.jobs))
                continue
            self.jobs.append(self._text_cells(export.job_cells(job, self.shape), self.jobs))
            for table, sheet in self.tables:
                for item in export.items(job, table):
                    sheet.append(self._text_cells([job["id"], *export.item_cells(item, table)], sheet))

    def save(self, path: str) -> None:
        self.book.save(path)


# Integers wider than this are written as text (a double's largest is just under 2**1024).
_DOUBLE_BITS = 1000


def _xml_text(text: str) -> str:
    """`text` without the control characters a worksheet cannot hold (U+FFFD instead)."""
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    return ILLEGAL_CHARACTERS_RE.sub("\ufffd", text)


def _sheet_name(name: str, index: int) -> str:
    # Excel: at most 31 characters, none of []:*?/\ , no ' first or last, not "History"
    # (Excel's own); "jobs" is taken. A control character would make workbook.xml invalid XML.
    cleaned = "".join(c for c in _xml_text(name) if c not in "[]:*?/\\")[:28].strip("'") or "items"
    return cleaned if cleaned.lower() not in ("jobs", "history") else f"{cleaned}{index + 1}"


async def _xlsx(pages: AsyncIterator[list[dict[str, Any]]], shape: export.Layout,
                items: str) -> AsyncIterator[bytes]:
    fd, path = tempfile.mkstemp(prefix="docex-export-", suffix=".xlsx")
    os.close(fd)
    try:
        book = await trio.to_thread.run_sync(_Workbook, shape, items)
        async for page in pages:
            await trio.to_thread.run_sync(book.add, page)
        await trio.to_thread.run_sync(book.save, path)
        async with await trio.open_file(path, "rb") as file:
            while chunk := await file.read(CHUNK_BYTES):
                yield chunk
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(os.unlink, path)


async def _export(user_id: str, where: JobFilter, schema_id: str | None, options: ExportOptions,
                  name: str) -> Response:
    state = services()
    shape = export.Layout((), ())
    if options.format != "jsonl":
        if schema_id is None:
            raise BadRequest(["schemaId is required for csv and xlsx: their columns are the schema's fields "
                              "(jsonl needs none)"])
        schema = await state.db.read(schemas_repo.get_schema, user_id, schema_id, include_deleted=True)
        if schema is None:
            raise BadRequest([f"schemaId {schema_id} is not one of your schemas"])
        shape = export.layout(schema.definition)
    if state.exports_running[user_id] >= MAX_EXPORTS_PER_USER:
        raise TooManyRequests(5, f"At most {MAX_EXPORTS_PER_USER} exports of yours at once: "
                                 "try again when one has finished")
    pages = _pages(state, user_id, where)
    body = (_jsonl(pages) if options.format == "jsonl" else _csv(pages, shape) if options.format == "csv"
            else _xlsx(pages, shape, options.items))
    counted = _counted(state.exports_running, user_id, body)
    # Counted now, with no checkpoint since the check: once the handler has answered, the
    # server sends the headers before the body, and requests arriving together all passed.
    await anext(counted)
    response = streamed(counted, content_type=CONTENT_TYPES[options.format])
    response.headers["Content-Disposition"] = f'attachment; filename="{name}.{options.format}"'
    response.headers["Cache-Control"] = "no-store"
    return response


async def _counted(running: Counter[str], user_id: str, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`body`, counted among the user's `running` exports from its first (empty) chunk until
    it is sent or dropped: once started, a generator's end is certain (Quart closes the
    body it sends, and trio one it drops)."""
    running[user_id] += 1
    try:
        yield b""
        async for chunk in body:
            yield chunk
    finally:
        running[user_id] -= 1
        if not running[user_id]:
            del running[user_id]


@blueprint.get("/job-runs/<run_id>/export")
@validate_querystring(RunExportQuery)
@document_response(FileBytes)
async def export_run(run_id: str, query_args: RunExportQuery) -> Response:
    """The run's jobs, newest first, as a CSV, XLSX or JSON Lines file (see the README's Export)."""
    user_id = current_principal().user_id
    run = await services().db.read(jobs_repo.get_run, user_id, run_id)
    if run is None:
        raise NotFound("Job run not found")
    return await _export(user_id, JobFilter(job_run_id=run.id), run.schema_id, query_args, f"run-{run.id}")


@blueprint.get("/jobs/export")
@validate_querystring(JobsExportQuery)
@document_response(FileBytes)
@error_responses(400)
async def export_jobs(query_args: JobsExportQuery) -> Response:
    """Every job GET /api/jobs would list with these filters, as a CSV, XLSX or JSON Lines file;
    csv and xlsx need schemaId (their columns are its fields)."""
    return await _export(current_principal().user_id, query_args.filter(), query_args.schemaId, query_args,
                         "jobs")
