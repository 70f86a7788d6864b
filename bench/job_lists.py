"""How fast the first page of GET /api/jobs answers over a user's 10,000 jobs (issue #15).

    .venv/bin/python bench/job_lists.py [--jobs 10000] [--requests 100] [--database-url URL]

A console opens on the job list and the review queue; both must stay quick as jobs
pile up. The daemon (`docex serve`, no workers) gets --jobs jobs for the user measured
and as many for another user (so that the user filter matters), inserted straight into
its database: mixed statuses, two schemas, batch runs of 100, most COMPLETED jobs
approved, confidences spread over 0.5-1. Then, over loopback with one keep-alive
client, --requests requests of each first page (limit 20):

  all          GET /api/jobs
  status       ?status=FAILED
  schema       ?schemaId=<the second schema>
  run          ?jobRunId=<a run>
  complete     ?complete=false
  review       ?review=pending

and prints p50/p99 of each in milliseconds, with the database's plan for the query
behind it (SQLite: EXPLAIN QUERY PLAN; PostgreSQL: EXPLAIN). Then, in Debian's headless
chromium (Playwright; skipped with a note if either is missing), the web console: signed
in, the jobs screen is loaded --loads times and the time from navigation to its first
page of rows on screen is printed (p50 and worst). Last, one JSON line with every
figure. It prints figures, it does not judge them. SQLite unless --database-url names a
PostgreSQL database (a scratch schema, dropped at the end).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from harness import expect, percentile
from jobs import api_daemon

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}}
RUN_SIZE = 100


PASSWORD = "bench-password-0123"


def _user(client: httpx.Client, email: str) -> tuple[dict[str, str], list[str]]:
    pair = harness.register(client, email, PASSWORD)
    headers = {"Authorization": f"Bearer {pair['accessToken']}"}
    schemas = [str(expect(client.post("/api/schemas", json={"name": f"S{i}", "definition": SCHEMA},
                                      headers=headers), 201, "create schema")["id"]) for i in range(2)]
    return headers, schemas


def _fill(url: str, user_id: str, schema_ids: list[str], count: int, seed: int) -> list[str]:
    """Insert `count` jobs of `user_id` (and their runs); the ids of the runs."""
    import sqlalchemy as sa

    from daemon.storage.ids import new_id
    from daemon.storage.tables import job_runs, jobs

    rng = random.Random(seed)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    runs = [new_id() for _ in range(count // RUN_SIZE)]
    rows = []
    # new_id() is increasing within a process: id order is creation order, as in a daemon.
    for n in range(count):
        at = start + dt.timedelta(seconds=n * 60)
        status = rng.choices(["COMPLETED", "FAILED", "QUEUED", "CANCELLED"], [80, 10, 5, 5])[0]
        completed = status == "COMPLETED"
        confidence = round(rng.uniform(0.5, 1.0), 3) if completed else None
        rows.append({
            "id": new_id(), "user_id": user_id, "schema_id": schema_ids[n % 2],
            "job_run_id": runs[n // RUN_SIZE] if n // RUN_SIZE < len(runs) and n % 3 == 0 else None,
            "type": "EXTRACTION", "status": status, "file_name": f"r{n}.pdf", "file_size": 1000,
            "mime_type": "application/pdf", "sha256": "0" * 64, "blob_key": secrets.token_hex(16), "attempts": 1,
            "result": {"total": 1.0} if completed else None,
            "result_meta": {"provider": "rules", "model": None, "durationMs": 1.0, "complete": True, "missing": [],
                            "fields": {"/total": {"confidence": confidence, "page": 1, "text": "1.00"}}}
            if completed else None,
            "result_complete": (rng.random() > 0.05) if completed else None,
            "min_confidence": confidence,
            # The older nine tenths of the completed jobs were reviewed long ago.
            "reviewed_at": at + dt.timedelta(hours=1) if completed and n < count * 0.9 else None,
            "reviewed_by": user_id if completed and n < count * 0.9 else None,
            "created_at": at, "updated_at": at, "started_at": at, "finished_at": at,
        })
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(job_runs.insert(), [
                {"id": run_id, "user_id": user_id, "schema_id": schema_ids[0], "status": "COMPLETED",
                 "total": RUN_SIZE // 3 + 1, "created_at": start, "updated_at": start} for run_id in runs])
            for chunk in range(0, len(rows), 1000):
                conn.execute(jobs.insert(), rows[chunk:chunk + 1000])
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("ANALYZE jobs")  # what autovacuum does after a load this size
    finally:
        engine.dispose()
    return runs


def _plan(url: str, user_id: str, query: dict[str, str]) -> list[str]:
    """The database's plan for the first page of `query`, as repo.list_jobs builds it."""
    import sqlalchemy as sa

    from daemon.config import load_config
    from daemon.storage.repos import jobs as repo

    captured: list[tuple[str, Any]] = []
    engine = sa.create_engine(url)
    sa.event.listen(engine, "before_cursor_execute",
                    lambda conn, cursor, statement, params, context, many: captured.append((statement, params)))
    threshold = load_config(environ={}).review.confidence_threshold
    where = repo.JobFilter(status=query.get("status"), schema_id=query.get("schemaId"),
                           job_run_id=query.get("jobRunId"),
                           complete=False if query.get("complete") == "false" else None,
                           review_below=threshold if query.get("review") else None)
    try:
        with engine.connect() as conn:
            repo.list_jobs(conn, user_id, where, 20, None)
            statement, params = captured[-1]
            explain = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
            rows = conn.exec_driver_sql(explain + statement, params).all()
    finally:
        engine.dispose()
    return [str(row[-1]) for row in rows]


def _console_first_page(base: str, email: str, loads: int) -> dict[str, Any] | None:
    """Milliseconds from navigating to the console's jobs screen to its first rows on screen."""
    import shutil

    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if chromium is None or sync_playwright is None:
        print("console: skipped (needs Debian's chromium and the pip package playwright)")
        return None
    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{base}/#/signin")
            page.get_by_label("Email").fill(email)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("heading", name="Jobs").wait_for()
            for _ in range(loads):
                # A reload: the page, its modules (revalidated), a token from the cookie, then the lists.
                t = time.perf_counter()
                page.goto(f"{base}/?load={_}#/jobs")  # a new URL: a whole new document
                page.locator("table.grid tbody tr").nth(19).wait_for()
                times.append((time.perf_counter() - t) * 1000)
        finally:
            browser.close()
    figures = {"p50_ms": round(percentile(times, 0.5), 1), "max_ms": round(max(times), 1)}
    print(f"console   jobs screen, navigation to 20 rows on screen: p50 {figures['p50_ms']:.0f} ms, "
          f"worst {figures['max_ms']:.0f} ms of {loads} loads")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs of the user measured (another has as many)")
    parser.add_argument("--requests", type=int, default=100, help="requests of each first page")
    parser.add_argument("--database-url", default=None, help="PostgreSQL URL (default SQLite)")
    parser.add_argument("--loads", type=int, default=10, help="loads of the console's jobs screen")
    args = parser.parse_args()
    if not harness.require_docex():
        return 1
    figures: dict[str, Any] = {"jobs": args.jobs, "requests": args.requests,
                               "database": "postgresql" if args.database_url else "sqlite"}
    with api_daemon("docex-bench-lists-", args.database_url) as (daemon, url):
        with httpx.Client(base_url=daemon.base, timeout=30) as client:
            email = f"bench-{secrets.token_hex(4)}@example.com"
            headers, schemas = _user(client, email)
            user_id = expect(client.get("/api/auth/me", headers=headers), 200, "me")["id"]
            other_headers, other_schemas = _user(client, f"bench-{secrets.token_hex(4)}@example.com")
            other_id = expect(client.get("/api/auth/me", headers=other_headers), 200, "me")["id"]
            t0 = time.perf_counter()
            runs = _fill(url, user_id, schemas, args.jobs, seed=1)
            _fill(url, other_id, other_schemas, args.jobs, seed=2)
            print(f"inserted {2 * args.jobs} jobs in {time.perf_counter() - t0:.1f} s ({figures['database']})")
            cases = {"all": {}, "status": {"status": "FAILED"}, "schema": {"schemaId": schemas[1]},
                     "run": {"jobRunId": runs[len(runs) // 2]}, "complete": {"complete": "false"},
                     "review": {"review": "pending"}}
            for name, query in cases.items():
                page = expect(client.get("/api/jobs", params=query, headers=headers), 200, name)
                times = []
                for _ in range(args.requests):
                    t = time.perf_counter()
                    r = client.get("/api/jobs", params=query, headers=headers)
                    times.append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200
                figures[name] = {"p50_ms": round(percentile(times, 0.5), 2),
                                 "p99_ms": round(percentile(times, 0.99), 2), "shown": len(page["data"])}
                print(f"{name:9} p50 {figures[name]['p50_ms']:7.2f} ms  p99 {figures[name]['p99_ms']:7.2f} ms  "
                      f"({len(page['data'])} jobs shown)")
                for line in _plan(url, user_id, query):
                    print(f"            {line}")
        figures["console"] = _console_first_page(daemon.base, email, args.loads)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
