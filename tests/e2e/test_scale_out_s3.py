"""Scale-out across hosts (SPEC §1): `docex serve --role api` and two `--role worker`
processes, each with its OWN data directory as on separate machines, sharing only
PostgreSQL and an S3 bucket (the session's moto server) as the blob store.

The api process streams uploads into the bucket; the workers download them to
temporary files for the parsers. Every job must run exactly once (one job.started
and one job.completed event, attempts == 1) and nothing may stay behind in the
processes' own directories. The processes share JWT_ACCESS_SECRET and
WEBHOOK_ENCRYPTION_KEY through the environment: with separate data directories
each would otherwise generate development secrets of its own.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from e2e_helpers import (
    QUICK_ENV,
    Api,
    assert_each_job_ran_once,
    needs_postgresql,
    sampled_split,
    start_api_and_workers,
    stop_all,
    upload_and_drain,
)

pytestmark = needs_postgresql

JOBS = 100
UPLOADERS = 8


def invoice(i: int) -> bytes:
    return f"Invoice Number: INV-{20000 + i}\nTotal: {i}.25\n".encode()


def _files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


async def test_api_and_workers_on_separate_data_dirs_share_an_s3_blob_store(
        start_daemon: Any, database_url: str, s3_server: Any, tmp_path: Path) -> None:
    bucket = s3_server.new_bucket()
    shared = {
        **QUICK_ENV,
        "DOCEX_JOBS_WORKERS": "4",
        "JWT_ACCESS_SECRET": secrets.token_urlsafe(48),
        "WEBHOOK_ENCRYPTION_KEY": secrets.token_hex(32),
        "DOCEX_STORAGE_BACKEND": "s3",
        "DOCEX_STORAGE_S3_BUCKET": bucket,
        "DOCEX_STORAGE_S3_REGION": "us-east-1",
        "DOCEX_STORAGE_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "DOCEX_STORAGE_S3_PREFIX": "blobs/",
        "DOCEX_STORAGE_S3_ACCESS_KEY_ID": s3_server.admin.access_key_id,
        "DOCEX_STORAGE_S3_SECRET_ACCESS_KEY": s3_server.admin.secret_access_key,
    }
    dirs = {name: tmp_path / name for name in ("api", "worker1", "worker2")}
    api_proc, workers = await start_api_and_workers(
        start_daemon, {**shared, "DOCEX_DATA_DIR": str(dirs["api"])},
        [{**shared, "DOCEX_DATA_DIR": str(dirs[name])} for name in ("worker1", "worker2")])
    processes = [api_proc, *workers]

    async with Api(api_proc.url("")) as api:
        await api.sign_up()
        schema_id = await api.create_schema()
        started = time.monotonic()
        created, seen_owner = await upload_and_drain(
            api, database_url, processes, schema_id=schema_id, document=invoice, jobs=JOBS, uploaders=UPLOADERS,
            statuses=None, timeout=60, sample_every=0.01)
        elapsed = time.monotonic() - started

        assert len(created) == JOBS
        await assert_each_job_ran_once(api, database_url, created, seen_owner, processes,
                                       lambda i: {"invoice_number": f"INV-{20000 + i}", "total": i + 0.25})
        # The original bytes come back from the bucket through the api process.
        some = next(iter(created))
        r = await api.client.get(f"/api/jobs/{some}/file", headers=api.headers)
        assert r.content == invoice(created[some])

    # The blobs are in the bucket only; the hosts' own directories hold no blob and no download.
    keys = s3_server.keys(bucket)
    assert len(keys) == JOBS and all(k.startswith("blobs/") for k in keys)
    for name, path in dirs.items():
        assert _files_under(path / "blobs") == [], name
        assert _files_under(path / "tmp") == [], name

    print(f"\n{JOBS} jobs in {elapsed:.1f}s on the S3 blob store; split as sampled: "
          f"{sampled_split(seen_owner, workers)}")

    await stop_all(*workers, api_proc)
    # A clean stop removes each process's temporary directory.
    for name, path in dirs.items():
        assert not [p for p in (path / "tmp").glob("blobs-*")], name
