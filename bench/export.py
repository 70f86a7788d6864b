"""Exports stream in flat memory: the daemon's RSS while it sends a run of 10,000 and one of
100,000 jobs as CSV, XLSX and JSON Lines (issue #17).

    .venv/bin/python bench/export.py [--small 10000] [--large 100000] [--database-url URL]

The daemon (`docex serve`, no workers) gets two batch runs of an invoice schema with a
nested vendor and three line items per job, inserted straight into its database. Each
export is read over loopback as a stream; the daemon's RSS is sampled as the bytes come.
For each format and run it prints the seconds, the bytes sent, and the RSS growth over
the daemon's RSS before the export (peak minus before): memory that does not grow with
the job count is what "streamed" means. Then one JSON line with every figure. SQLite
unless --database-url names a PostgreSQL database (a scratch schema, dropped at the end).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from harness import expect, proc_status
from jobs import api_daemon

SCHEMA = {
    "type": "object",
    "properties": {
        "invoiceNumber": {"type": "string"},
        "vendor": {"type": "object", "properties": {"name": {"type": "string"}, "vat": {"type": "string"}}},
        "total": {"type": "number"},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "quantity": {"type": "integer"}, "amount": {"type": "number"}}}},
    },
}


def _fill(url: str, user_id: str, schema_id: str, count: int) -> str:
    """A COMPLETED batch run of `count` jobs of `user_id`; its id."""
    import sqlalchemy as sa

    from daemon.storage.ids import new_id
    from daemon.storage.tables import job_runs, jobs

    run_id = new_id()
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(job_runs.insert(), [{"id": run_id, "user_id": user_id, "schema_id": schema_id,
                                              "status": "COMPLETED", "total": count, "created_at": start,
                                              "updated_at": start}])
            for chunk in range(0, count, 2000):
                rows = []
                for n in range(chunk, min(count, chunk + 2000)):
                    at = start + dt.timedelta(seconds=n)
                    rows.append({
                        "id": new_id(), "user_id": user_id, "schema_id": schema_id, "job_run_id": run_id,
                        "type": "EXTRACTION", "status": "COMPLETED", "file_name": f"invoice-{n}.pdf",
                        "file_size": 1000, "mime_type": "application/pdf", "sha256": "0" * 64,
                        "blob_key": secrets.token_hex(16), "attempts": 1,
                        "result": {"invoiceNumber": f"INV-{n:06d}", "vendor": {"name": f"Vendor {n % 97}",
                                                                               "vat": f"DE{n:09d}"},
                                   "total": round(n * 1.01, 2),
                                   "items": [{"description": f"Item {k} of {n}", "quantity": k + 1,
                                              "amount": round((k + 1) * 3.5, 2)} for k in range(3)]},
                        "result_meta": {"provider": "rules", "model": None, "durationMs": 1.0, "complete": True,
                                        "missing": [], "fields": {}},
                        "result_complete": True, "min_confidence": 0.95,
                        "created_at": at, "updated_at": at, "started_at": at, "finished_at": at,
                    })
                conn.execute(jobs.insert(), rows)
    finally:
        engine.dispose()
    return run_id


def _export(client: httpx.Client, pid: int, path: str, headers: dict[str, str]) -> dict[str, Any]:
    """Read one export as a stream, sampling the daemon's RSS; seconds, bytes, RSS growth."""
    before = proc_status(pid)["VmRSS"]
    peak = before
    sent = 0
    t = time.perf_counter()
    with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, response.read()
        for n, chunk in enumerate(response.iter_bytes()):
            sent += len(chunk)
            if n % 16 == 0:
                peak = max(peak, proc_status(pid).get("VmRSS", 0))
    peak = max(peak, proc_status(pid)["VmRSS"])
    return {"seconds": round(time.perf_counter() - t, 2), "bytes": sent,
            "rss_growth_mb": round((peak - before) / 2**20, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10_000, help="jobs of the smaller run")
    parser.add_argument("--large", type=int, default=100_000, help="jobs of the larger run")
    parser.add_argument("--database-url", default=None, help="PostgreSQL URL (default SQLite)")
    args = parser.parse_args()
    if not harness.require_docex():
        return 1
    figures: dict[str, Any] = {"database": "postgresql" if args.database_url else "sqlite"}
    with (api_daemon("docex-bench-export-", args.database_url) as (daemon, url),
          httpx.Client(base_url=daemon.base, timeout=600) as client):
        pair = harness.register(client, f"bench-{secrets.token_hex(4)}@example.com", "bench-password-0123")
        headers = {"Authorization": f"Bearer {pair['accessToken']}"}
        schema = expect(client.post("/api/schemas", json={"name": "Invoice", "definition": SCHEMA},
                                    headers=headers), 201, "schema")
        user_id = expect(client.get("/api/auth/me", headers=headers), 200, "me")["id"]
        t0 = time.perf_counter()
        runs = {count: _fill(url, user_id, schema["id"], count) for count in (args.small, args.large)}
        print(f"inserted {args.small + args.large} jobs in {time.perf_counter() - t0:.1f} s "
              f"({figures['database']}); daemon RSS {proc_status(daemon.pid)['VmRSS'] >> 20} MB")
        print(f"{'format':7} {'jobs':>8} {'seconds':>8} {'MB sent':>8} {'RSS growth':>11}")
        for fmt in ("csv", "xlsx", "jsonl"):
            for count, run_id in runs.items():
                row = _export(client, daemon.pid, f"/api/job-runs/{run_id}/export?format={fmt}", headers)
                figures[f"{fmt}_{count}"] = row
                print(f"{fmt:7} {count:>8} {row['seconds']:>8.1f} {row['bytes'] / 2**20:>8.1f} "
                      f"{row['rss_growth_mb']:>8.1f} MB")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
