"""The S3 blob store (storage.backend = "s3", SPEC §1): streamed single and multipart
writes, aborts that leave nothing, reads, temporary local copies that never outlive
their block, and the whole upload → extraction path on it. Against the session's moto
server; the HTTP part runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from jobs_helpers import (
    GARBAGE,
    INVOICE_RESULT,
    INVOICE_TXT,
    bad_request,
    create_schema,
    docx_bytes,
    post_job,
    register,
    running_workers,
    wait_for_status,
)

from daemon.config import Config, Secret, load_config
from daemon.errors import ConfigError
from daemon.http.app import create_app
from daemon.services import Services, open_services
from daemon.storage.blobs import PART_BYTES, BlobStoreError, S3BlobStore
from daemon.storage.migrate import upgrade
from daemon.storage.s3 import S3Settings

REPO = Path(__file__).resolve().parents[2]


def _settings(s3_server: Any, bucket: str, *, prefix: str = "docex/", credentials: Any = None,
              endpoint_url: str | None = None) -> S3Settings:
    creds = credentials or s3_server.admin
    return S3Settings(bucket=bucket, region="us-east-1", access_key_id=creds.access_key_id,
                      secret_access_key=Secret(creds.secret_access_key),
                      endpoint_url=endpoint_url or s3_server.endpoint_url, prefix=prefix)


@pytest.fixture
async def store(s3_server: Any, tmp_path: Path) -> AsyncIterator[S3BlobStore]:
    blobs = await S3BlobStore.open(_settings(s3_server, s3_server.new_bucket()), tmp_path)
    try:
        yield blobs
    finally:
        await blobs.aclose()


async def _write(store: S3BlobStore, data: bytes, chunk: int = 64 * 1024) -> str:
    writer = await store.open_writer()
    for i in range(0, len(data), chunk):
        await writer.write(data[i:i + chunk])
    await writer.commit()
    return writer.key


async def _read(store: S3BlobStore, key: str) -> bytes:
    return b"".join([chunk async for chunk in store.read(key)])


def _tmp_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "tmp").rglob("*") if p.is_file()]


async def test_small_blobs_round_trip_under_the_prefix(store: S3BlobStore, s3_server: Any, tmp_path: Path) -> None:
    key = await _write(store, INVOICE_TXT)
    assert await _read(store, key) == INVOICE_TXT
    assert s3_server.keys(store.bucket) == [f"docex/{key}"]
    async with store.open_local(key) as path:
        assert path.read_bytes() == INVOICE_TXT and path.is_relative_to(tmp_path / "tmp")
    assert _tmp_files(tmp_path) == []
    await store.delete(key)
    await store.delete(key)  # absent: fine
    assert s3_server.keys(store.bucket) == []
    with pytest.raises(FileNotFoundError):
        await _read(store, key)
    with pytest.raises(FileNotFoundError):
        async with store.open_local(key):
            pass
    assert _tmp_files(tmp_path) == []


async def test_large_blobs_go_up_in_parts_and_come_back_whole(store: S3BlobStore, s3_server: Any) -> None:
    data = os.urandom(2 * PART_BYTES + 12345)
    key = await _write(store, data, chunk=1024 * 1024)
    back = await _read(store, key)
    assert len(back) == len(data) and hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
    assert s3_server.uploads_in_progress(store.bucket) == []
    # Exactly one part's worth: a multipart upload of one part.
    key = await _write(store, data[:PART_BYTES])
    assert await _read(store, key) == data[:PART_BYTES]


async def test_an_aborted_write_leaves_nothing(store: S3BlobStore, s3_server: Any) -> None:
    writer = await store.open_writer()
    await writer.write(os.urandom(PART_BYTES + 1))  # one part is already up
    assert s3_server.uploads_in_progress(store.bucket) == [f"docex/{writer.key}"]
    await writer.abort()
    assert s3_server.uploads_in_progress(store.bucket) == [] and s3_server.keys(store.bucket) == []
    small = await store.open_writer()
    await small.write(b"abc")
    await small.abort()
    assert s3_server.keys(store.bucket) == []


async def test_a_local_copy_is_removed_even_when_its_user_fails(store: S3BlobStore, tmp_path: Path) -> None:
    key = await _write(store, INVOICE_TXT)
    with pytest.raises(RuntimeError):
        async with store.open_local(key) as path:
            assert path.exists()
            raise RuntimeError("parser crashed")
    with trio.move_on_after(0.01):
        async with store.open_local(key):
            await trio.sleep_forever()  # cancelled mid-use
    assert _tmp_files(tmp_path) == []


async def test_failures_are_blob_store_errors(s3_server: Any, tmp_path: Path, free_tcp_port: int) -> None:
    bucket = s3_server.new_bucket()
    denied = await S3BlobStore.open(_settings(s3_server, bucket, credentials=s3_server.denied), tmp_path)
    try:
        with pytest.raises(BlobStoreError) as refused:
            await _write(denied, b"x")
        assert not refused.value.transient and "AccessDenied" in str(refused.value)
    finally:
        await denied.aclose()
    down = await S3BlobStore.open(_settings(s3_server, bucket, endpoint_url=f"http://127.0.0.1:{free_tcp_port}"),
                                  tmp_path)
    try:
        with pytest.raises(BlobStoreError) as unreachable:
            await _read(down, "abc")
        assert unreachable.value.transient
    finally:
        await down.aclose()


async def test_temporary_directories_of_dead_processes_are_swept(s3_server: Any, tmp_path: Path) -> None:
    stale = tmp_path / "tmp" / "blobs-999999999-0123abcd"
    stale.mkdir(parents=True)
    (stale / "left-behind").write_bytes(b"x")
    mine = tmp_path / "tmp" / f"blobs-{os.getpid()}-89abcdef"  # a live process's: kept
    mine.mkdir()
    store = await S3BlobStore.open(_settings(s3_server, s3_server.new_bucket()), tmp_path)
    assert not stale.exists() and mine.exists()
    own = [p for p in (tmp_path / "tmp").iterdir() if p not in (mine,)]
    assert len(own) == 1
    await store.aclose()
    assert not own[0].exists()


# --- the daemon on the S3 backend ------------------------------------------------------------


@pytest.fixture
def s3_config(config: Config, s3_server: Any) -> Config:
    bucket = s3_server.new_bucket()
    return dataclasses.replace(config, storage=dataclasses.replace(
        config.storage, backend="s3", s3_bucket=bucket, s3_region="us-east-1",
        s3_endpoint_url=s3_server.endpoint_url, s3_prefix="blobs/",
        s3_access_key_id=s3_server.admin.access_key_id,
        s3_secret_access_key=Secret(s3_server.admin.secret_access_key)))


@pytest.fixture
async def s3_services(s3_config: Config) -> AsyncIterator[Services]:
    await trio.Path(s3_config.data_dir).mkdir(parents=True, exist_ok=True)
    async with open_services(s3_config) as services:
        await trio.to_thread.run_sync(upgrade, services.db.engine)
        yield services


async def test_uploads_and_jobs_on_the_s3_blob_store(s3_services: Services, s3_server: Any) -> None:
    services = s3_services
    assert isinstance(services.blobs, S3BlobStore)
    bucket = services.config.storage.s3_bucket
    client = create_app(services).test_client()
    alice = await register(client)
    schema_id = await create_schema(client, alice)

    r = await post_job(client, alice, schema_id, INVOICE_TXT, "invoice.txt")
    job = await r.get_json()
    assert r.status_code == 201, job
    docx = await (await post_job(client, alice, schema_id, docx_bytes("Invoice Number: INV-42"), "a.docx")).get_json()
    assert docx["mimeType"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    await bad_request(await post_job(client, alice, schema_id, GARBAGE, "junk.bin"))
    assert len(s3_server.keys(bucket)) == 2 and all(k.startswith("blobs/") for k in s3_server.keys(bucket))

    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED")
        docx = await wait_for_status(client, alice, docx["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED" and done["result"] == INVOICE_RESULT, done
    assert docx["status"] == "COMPLETED", docx
    r = await client.get(f"/api/jobs/{job['id']}/file", headers=alice)
    assert await r.get_data() == INVOICE_TXT
    assert [p for p in (Path(services.config.data_dir) / "tmp").rglob("*") if p.is_file()] == []
    assert (await client.delete(f"/api/jobs/{job['id']}", headers=alice)).status_code == 204
    assert len(s3_server.keys(bucket)) == 1


# --- configuration -----------------------------------------------------------------------------


def test_the_s3_backend_needs_a_bucket() -> None:
    with pytest.raises(ConfigError) as error:
        load_config(environ={"DOCEX_STORAGE_BACKEND": "s3", "DOCEX_STORAGE_S3_ACCESS_KEY_ID": "AKIA1"})
    assert error.value.problems == [
        'storage.s3_bucket: required when storage.backend = "s3"',
        "storage.s3_access_key_id and storage.s3_secret_access_key: set both or neither",
    ]
    config = load_config(environ={
        "DOCEX_STORAGE_BACKEND": "s3", "DOCEX_STORAGE_S3_BUCKET": "b", "DOCEX_STORAGE_S3_ENDPOINT_URL":
        "http://minio:9000", "DOCEX_STORAGE_S3_ACCESS_KEY_ID": "AKIA1", "DOCEX_STORAGE_S3_SECRET_ACCESS_KEY": "s",
        "DOCEX_STORAGE_S3_PREFIX": "docex/", "DOCEX_GOOGLE_CLIENT_ID": "id", "DOCEX_GOOGLE_CLIENT_SECRET": "cs",
        "DOCEX_GOOGLE_REDIRECT_URL": "https://docex.example.com/api/integrations/google-drive/callback",
    })
    assert (config.storage.s3_bucket, config.storage.s3_endpoint_url) == ("b", "http://minio:9000")
    assert config.storage.s3_secret_access_key == Secret("s") and "s'" not in repr(config.storage)
    assert config.google.configured and "cs" not in repr(config.google)


def test_serve_refuses_the_s3_backend_without_a_bucket(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCEX_", "JWT_", "WEBHOOK_"))}
    env |= {"DOCEX_DATA_DIR": str(tmp_path), "DOCEX_STORAGE_BACKEND": "s3"}
    done = subprocess.run([sys.executable, "-m", "daemon.cli", "serve"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert 'storage.s3_bucket: required when storage.backend = "s3"' in done.stderr
