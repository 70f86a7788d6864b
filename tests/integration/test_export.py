"""Exports of a run's jobs and of filtered job lists: CSV, XLSX (rows or sheets) and JSON Lines,
with nested values flattened, line items as rows or a sheet, corrected values, and formulas
neutralised (issue #17)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import openpyxl
import sqlalchemy as sa

from daemon.clock import utcnow
from daemon.jobs.models import completeness
from daemon.services import Services
from daemon.storage.repos import jobs as jobs_repo
from daemon.storage.repos.jobs import NewJob

PASSWORD = "correct horse 42"
SCHEMA = {
    "type": "object",
    "properties": {
        "invoiceNumber": {"type": "string"},
        "vendor": {"type": "object", "properties": {"name": {"type": "string"}, "vat": {"type": "string"}}},
        "total": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "amount": {"type": "number"}}}},
    },
}
META = {"provider": "rules", "model": None, "durationMs": 1.0, "fields": {}, **completeness([])}
FIRST = {"invoiceNumber": "A-1", "vendor": {"name": "=HYPERLINK(\"http://evil\",\"x\")", "vat": "DE1"},
         "total": 30.5, "tags": ["paper", "office"],
         "items": [{"description": "@SUM(1+1)", "amount": 10.5}, {"description": "Pens", "amount": 20}]}
SECOND = {"invoiceNumber": "A-2", "vendor": {"name": "Acme", "vat": None}, "total": -4, "items": []}


async def register(client: Any, email: str) -> dict[str, str]:
    r = await client.post("/api/auth/register", json={"name": "N", "email": email, "password": PASSWORD})
    return {"Authorization": f"Bearer {(await r.get_json())['accessToken']}"}


async def a_run(client: Any, services: Services, auth: dict[str, str]) -> tuple[str, str, list[str]]:
    """A schema and a run of two COMPLETED jobs (the first corrected afterwards) and a FAILED one."""
    schema = await (await client.post("/api/schemas", json={"name": "Invoice", "definition": SCHEMA},
                                      headers=auth)).get_json()
    user_id = (await (await client.get("/api/auth/me", headers=auth)).get_json())["id"]

    def fill(conn: sa.Connection) -> tuple[str, list[str]]:
        now = utcnow()
        files = [NewJob(file_name=f"{n}.pdf", file_size=3, mime_type="application/pdf", sha256="0" * 64,
                        blob_key=f"k{n}") for n in range(3)]
        run, _ = jobs_repo.create_run(conn, user_id=user_id, schema_id=schema["id"], items=files, now=now)
        ids = []
        for result in ({**FIRST, "invoiceNumber": "WRONG"}, SECOND):
            job = jobs_repo.claim_next(conn, owner="w", now=now, lease_s=60)
            jobs_repo.complete_job(conn, job_id=job.id, owner="w", result=result, meta=META, page_count=1, now=now)
            ids.append(job.id)
        jobs_repo.patch_result(conn, user_id, ids[0], FIRST, [], now)
        failed = jobs_repo.claim_next(conn, owner="w", now=now, lease_s=60)
        jobs_repo.fail_job(conn, job_id=failed.id, owner="w", code="CORRUPTED_FILE", message="bad", now=now,
                           retry_at=None)
        return run.id, [*ids, failed.id]

    run_id, job_ids = await services.db.run(fill)
    return schema["id"], run_id, job_ids


async def test_csv_has_a_column_per_value_and_a_row_per_line_item(client: Any, services: Services) -> None:
    auth = await register(client, "ann@example.com")
    _, run_id, (first, second, failed) = await a_run(client, services, auth)
    r = await client.get(f"/api/job-runs/{run_id}/export?format=csv", headers=auth)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert r.headers["Content-Disposition"] == f'attachment; filename="run-{run_id}.csv"'
    text = (await r.get_data()).decode("utf-8")
    assert text.startswith("\ufeff")
    rows = list(csv.DictReader(io.StringIO(text.removeprefix("\ufeff"))))
    assert list(rows[0]) == ["jobId", "fileName", "status", "complete", "reviewedAt", "createdAt", "finishedAt",
                             "errorCode", "invoiceNumber", "vendor.name", "vendor.vat", "total", "tags",
                             "items.description", "items.amount"]
    by_job: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_job.setdefault(row["jobId"], []).append(row)
    assert set(by_job) == {first, second, failed}
    corrected = by_job[first]
    # One row per line item, the job's columns repeated; the corrected value, not the extracted one.
    assert [(r["invoiceNumber"], r["items.description"], r["items.amount"]) for r in corrected] == [
        ("A-1", "'@SUM(1+1)", "10.5"), ("A-1", "Pens", "20")]
    assert corrected[0]["vendor.name"] == "'=HYPERLINK(\"http://evil\",\"x\")"  # shown as text, never run
    assert corrected[0]["tags"] == "paper; office" and corrected[0]["status"] == "COMPLETED"
    # A negative number is a number, not a formula; no items is one row with empty item cells.
    (plain,) = by_job[second]
    assert (plain["total"], plain["items.description"], plain["vendor.vat"]) == ("-4", "", "")
    (broken,) = by_job[failed]
    assert (broken["status"], broken["errorCode"], broken["invoiceNumber"]) == ("FAILED", "CORRUPTED_FILE", "")
    # A spreadsheet splitting on ";" (Excel in many European locales) reads each text whole:
    # unquoted, "paper; office" was two cells, and "x;=1+2" a formula in the second.
    for row in csv.reader(io.StringIO(text.removeprefix("\ufeff")), delimiter=";"):
        assert not any(cell.lstrip().startswith(("=", "+", "@")) for cell in row[1:]), row
    assert '"paper; office"' in text and ',-4,' in text  # texts quoted, numbers bare


async def test_xlsx_opens_in_openpyxl_with_values_and_text_cells(client: Any, services: Services) -> None:
    auth = await register(client, "ann@example.com")
    _, run_id, (first, _, _) = await a_run(client, services, auth)
    r = await client.get(f"/api/job-runs/{run_id}/export?format=xlsx", headers=auth)
    assert r.status_code == 200
    book = openpyxl.load_workbook(io.BytesIO(await r.get_data()))
    sheet = book["jobs"]
    header = [c.value for c in sheet[1]]
    rows = [dict(zip(header, (c for c in row), strict=True)) for row in sheet.iter_rows(min_row=2)]
    mine = [row for row in rows if row["jobId"].value == first]
    assert [(row["items.description"].value, row["items.amount"].value) for row in mine] == [
        ("@SUM(1+1)", 10.5), ("Pens", 20)]
    name = mine[0]["vendor.name"]
    assert name.value == FIRST["vendor"]["name"] and name.data_type == "s"  # the text, as a text cell
    assert mine[0]["total"].value == 30.5 and mine[0]["complete"].value is True

    r = await client.get(f"/api/job-runs/{run_id}/export?format=xlsx&items=sheets", headers=auth)
    book = openpyxl.load_workbook(io.BytesIO(await r.get_data()))
    assert book.sheetnames == ["jobs", "items"]
    assert [c.value for c in book["jobs"][1]][-2:] == ["total", "tags"]
    assert len(list(book["jobs"].iter_rows(min_row=2))) == 3
    items = [[c.value for c in row] for row in book["items"].iter_rows()]
    assert items == [["jobId", "description", "amount"], [first, "@SUM(1+1)", 10.5], [first, "Pens", 20]]


async def test_json_lines_carry_each_job_object(client: Any, services: Services) -> None:
    auth = await register(client, "ann@example.com")
    _, run_id, job_ids = await a_run(client, services, auth)
    r = await client.get(f"/api/job-runs/{run_id}/export?format=jsonl", headers=auth)
    assert r.headers["Content-Type"] == "application/x-ndjson"
    jobs = [json.loads(line) for line in (await r.get_data()).decode().splitlines()]
    assert {job["id"] for job in jobs} == set(job_ids)
    corrected = next(job for job in jobs if job["id"] == job_ids[0])
    assert corrected["result"] == FIRST and corrected["originalResult"]["invoiceNumber"] == "WRONG"


async def test_a_filtered_job_list_exports_what_the_list_shows(client: Any, services: Services) -> None:
    auth = await register(client, "ann@example.com")
    schema_id, _, (first, second, failed) = await a_run(client, services, auth)
    r = await client.get(f"/api/jobs/export?format=csv&status=COMPLETED&schemaId={schema_id}", headers=auth)
    rows = list(csv.DictReader(io.StringIO((await r.get_data()).decode().removeprefix("\ufeff"))))
    assert {row["jobId"] for row in rows} == {first, second}
    r = await client.get("/api/jobs/export?format=jsonl&status=FAILED", headers=auth)
    assert [json.loads(line)["id"] for line in (await r.get_data()).decode().splitlines()] == [failed]


async def test_refusals(client: Any, services: Services) -> None:
    auth = await register(client, "ann@example.com")
    schema_id, run_id, _ = await a_run(client, services, auth)
    other = await register(client, "bob@example.com")
    cases = [
        (auth, "/api/jobs/export?format=csv", 400),  # csv needs the schema for its columns
        (auth, "/api/jobs/export?format=pdf&schemaId=" + schema_id, 400),
        (auth, f"/api/job-runs/{run_id}/export?format=xlsx&items=columns", 400),
        (other, f"/api/job-runs/{run_id}/export?format=csv", 404),
        (other, f"/api/jobs/export?format=csv&schemaId={schema_id}", 400),
    ]
    for headers, path, status in cases:
        r = await client.get(path, headers=headers)
        assert r.status_code == status, path
        assert {"statusCode", "message", "error"} <= set(await r.get_json()), path
    r = await client.get(f"/api/jobs/export?format=jsonl&schemaId={schema_id}", headers=other)
    assert r.status_code == 200 and await r.get_data() == b""  # bob's list is empty


async def test_a_field_named_like_another_column_gets_a_header_of_its_own(client: Any, services: Services) -> None:
    """Before: a field "jobId" or "status" and a field "a.b" beside a → b each gave two columns
    of one header, and a reader going by header read the person's "INV-42" as the job's id."""
    auth = await register(client, "ann@example.com")
    definition = {"type": "object", "properties": {
        "jobId": {"type": "string"}, "status": {"type": "string"}, "a.b": {"type": "string"},
        "a": {"type": "object", "properties": {"b": {"type": "string"}}},
        "lines": {"type": "array", "items": {"type": "object", "properties": {"jobId": {"type": "string"}}}}}}
    schema = await (await client.post("/api/schemas", json={"name": "Clash", "definition": definition},
                                      headers=auth)).get_json()
    user_id = (await (await client.get("/api/auth/me", headers=auth)).get_json())["id"]
    result = {"jobId": "INV-42", "status": "PAID", "a.b": "FLAT", "a": {"b": "NESTED"}, "lines": [{"jobId": "L-1"}]}

    def fill(conn: sa.Connection) -> str:
        now = utcnow()
        jobs_repo.create_run(conn, user_id=user_id, schema_id=schema["id"], now=now, items=[
            NewJob(file_name="x.pdf", file_size=3, mime_type="application/pdf", sha256="0" * 64, blob_key="k")])
        job = jobs_repo.claim_next(conn, owner="w", now=now, lease_s=60)
        jobs_repo.complete_job(conn, job_id=job.id, owner="w", result=result, meta=META, page_count=1, now=now)
        return job.id

    job_id = await services.db.run(fill)
    r = await client.get(f"/api/jobs/export?format=csv&schemaId={schema['id']}", headers=auth)
    (row,) = csv.DictReader(io.StringIO((await r.get_data()).decode("utf-8").removeprefix("\ufeff")))
    assert (row["jobId"], row["status"]) == (job_id, "COMPLETED")
    assert (row["jobId (2)"], row["status (2)"], row["a.b"], row["a.b (2)"]) == ("INV-42", "PAID", "FLAT", "NESTED")
    assert row["lines.jobId"] == "L-1"

    r = await client.get(f"/api/jobs/export?format=xlsx&items=sheets&schemaId={schema['id']}", headers=auth)
    book = openpyxl.load_workbook(io.BytesIO(await r.get_data()))
    header = [c.value for c in book["jobs"][1]]
    assert len(set(header)) == len(header) and header[header.index("jobId (2)")] == "jobId (2)"
    assert [[c.value for c in row] for row in book["lines"].iter_rows()] == [["jobId", "jobId (2)"], [job_id, "L-1"]]
