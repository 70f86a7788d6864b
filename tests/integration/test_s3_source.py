"""Jobs and batch runs whose files come from S3 (SPEC §6, §10): PENDING until a worker has
fetched the file, then the usual life; every S3 failure mapped to its errorCode.

The bucket is the session's moto server (a real S3-protocol server on loopback, with
authentication on). S3 answers moto cannot give (a bucket in another region, throttling,
5xx) come from a small loopback server speaking S3's error format, through the same boto3
stack. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from typing import Any

import pytest
from integrations_helpers import (
    create_s3,
    post_source_job,
    post_source_run,
    private_networks,
)
from jobs_helpers import (
    GARBAGE,
    INVOICE_RESULT,
    INVOICE_TXT,
    bad_request,
    blob_files,
    docx_bytes,
    error_of,
    event_types,
    job_row,
    running_workers,
    wait_for_run,
    wait_for_status,
    with_jobs_config,
)
from webhook_receiver import Received, Reply, open_receiver

from daemon.clock import utcnow
from daemon.config import Config
from daemon.storage.repos import jobs as repo

DONE = ("COMPLETED", "FAILED", "CANCELLED")


@pytest.fixture
def config(config: Config) -> Config:
    """The S3 servers of these tests listen on loopback: the operator's setting lets them in.
    Retries wait 10 ms. (Set here: an autouse fixture that takes `services` is not run by pytest-trio.)"""
    fast = dataclasses.replace(config, jobs=dataclasses.replace(config.jobs, retry_backoff_initial_ms=10))
    return private_networks(fast)


async def _job(client: Any, auth: dict[str, str], schema_id: str, source: dict[str, Any]) -> dict[str, Any]:
    r = await post_source_job(client, auth, schema_id, source)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def test_a_job_from_an_s3_key_is_pending_then_fetched_and_extracted(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any) -> None:
    bucket = s3_server.new_bucket({"inbox/2024/invoice.txt": INVOICE_TXT})
    integration = await create_s3(client, alice, s3_server, bucket, prefix="inbox")
    job = await _job(client, alice, schema_id,
                     {"integrationId": integration["id"], "folderPath": "/2024/", "key": "invoice.txt"})
    assert job["status"] == "PENDING" and job["fileName"] == "invoice.txt" and job["fileSize"] is None
    assert job["attempts"] == 0 and job["mimeType"] is None and job["sha256"] is None

    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], *DONE)
    assert done["status"] == "COMPLETED", done
    assert done["result"] == INVOICE_RESULT and done["attempts"] == 1
    assert done["fileSize"] == len(INVOICE_TXT) and done["mimeType"] == "text/plain"
    assert done["sha256"] == hashlib.sha256(INVOICE_TXT).hexdigest()
    # job.queued was sent when the job was created: fetching does not send another.
    assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.started", "job.completed"]
    r = await client.get(f"/api/jobs/{job['id']}/file", headers=alice)
    assert r.status_code == 200 and await r.get_data() == INVOICE_TXT
    row = await job_row(services, job["id"])
    assert row.source == {"integrationId": integration["id"], "folderPath": "/2024/", "key": "invoice.txt"}


async def test_a_run_lists_a_prefix_into_one_job_per_object(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any) -> None:
    objects = {f"batch/2024/inv-{i}.txt": f"Invoice Number: INV-{i}\nTotal: {i}.50\n".encode() for i in range(3)}
    bucket = s3_server.new_bucket({**objects, "batch/2024/": b"", "batch/2023/old.txt": INVOICE_TXT,
                                   "single.txt": INVOICE_TXT})
    integration = await create_s3(client, alice, s3_server, bucket)
    iid = integration["id"]
    r = await post_source_run(client, alice, schema_id, [{"integrationId": iid, "prefix": "batch/2024/inv-"},
                                                         {"integrationId": iid, "key": "single.txt"}],
                              headers={"Idempotency-Key": "run-1"})
    run = await r.get_json()
    assert r.status_code == 201, run
    assert run["total"] == 4 and [j["fileName"] for j in run["jobs"]] == [
        "inv-0.txt", "inv-1.txt", "inv-2.txt", "single.txt"]
    assert {j["status"] for j in run["jobs"]} == {"PENDING"} and run["counts"]["queued"] == 4

    # The same request again is the same run, even though the bucket changed meanwhile.
    s3_server.client().put_object(Bucket=bucket, Key="batch/2024/inv-9.txt", Body=INVOICE_TXT)
    again = await post_source_run(client, alice, schema_id, [{"integrationId": iid, "prefix": "batch/2024/inv-"},
                                                             {"integrationId": iid, "key": "single.txt"}],
                                  headers={"Idempotency-Key": "run-1"})
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert (await again.get_json())["id"] == run["id"]

    async with running_workers(services, workers=3):
        finished = await wait_for_run(client, alice, run["id"], "COMPLETED", "FAILED")
    assert finished["status"] == "COMPLETED" and finished["counts"]["completed"] == 4, finished
    jobs = (await (await client.get(f"/api/job-runs/{run['id']}/jobs?limit=10", headers=alice)).get_json())["data"]
    results = {j["fileName"]: j["result"] for j in jobs}
    assert results["inv-2.txt"] == {"invoice_number": "INV-2", "total": 2.5}

    # folderPath lists a "directory" (recursively); an empty listing or a refused one is a 400.
    r = await post_source_run(client, alice, schema_id, [{"integrationId": iid, "folderPath": "batch"}])
    assert r.status_code == 201 and (await r.get_json())["total"] == 5
    messages = await bad_request(await post_source_run(client, alice, schema_id,
                                                       [{"integrationId": iid, "folderPath": "nothing-here"}]))
    assert messages == ["sources.0: there are no files under 'nothing-here'"]
    denied = await create_s3(client, alice, s3_server, bucket, credentials=s3_server.denied)
    r = await post_source_run(client, alice, schema_id, [{"integrationId": denied["id"], "prefix": "batch"}])
    body = await error_of(r, 400)
    assert body["details"] == {"errorCode": "INTEGRATION_ACCESS_DENIED"}


async def test_a_listing_over_the_run_limit_is_refused(client: Any, services: Any, alice: dict[str, str],
                                                       schema_id: str, s3_server: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import daemon.http.jobs

    monkeypatch.setattr(daemon.http.jobs, "MAX_FILES_PER_RUN", 3)
    bucket = s3_server.new_bucket({f"many/{i}.txt": INVOICE_TXT for i in range(4)})
    integration = await create_s3(client, alice, s3_server, bucket)
    messages = await bad_request(await post_source_run(client, alice, schema_id,
                                                       [{"integrationId": integration["id"], "prefix": "many/"}]))
    assert messages == ["sources name more than 3 files: split them over several runs"]


@pytest.mark.parametrize("case", ["missing key", "denied", "unknown key id", "wrong secret", "no bucket",
                                  "integration deleted"])
async def test_s3_failures_fail_the_job_with_their_code(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any, case: str) -> None:
    from moto_s3 import Credentials

    bucket = s3_server.new_bucket({"invoice.txt": INVOICE_TXT})
    kwargs: dict[str, Any] = {}
    key, code, words = "invoice.txt", "INTEGRATION_ACCESS_DENIED", ""
    if case == "missing key":
        key, code, words = "nope.txt", "REMOTE_FILE_NOT_FOUND", f"No object s3://{bucket}/nope.txt"
    elif case == "denied":
        kwargs, words = {"credentials": s3_server.denied}, "AccessDenied"
    elif case == "unknown key id":
        kwargs, words = {"credentials": Credentials("AKIAUNKNOWNUNKNOWN00", "x" * 40)}, "InvalidAccessKeyId"
    elif case == "wrong secret":
        kwargs = {"credentials": Credentials(s3_server.admin.access_key_id, "wrong" * 8)}
        words = "SignatureDoesNotMatch"
    elif case == "no bucket":
        bucket, words = "docex-missing-bucket", "Bucket docex-missing-bucket does not exist"
    integration = await create_s3(client, alice, s3_server, bucket, **kwargs)
    job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": key})
    if case == "integration deleted":
        assert (await client.delete(f"/api/integrations/{integration['id']}", headers=alice)).status_code == 204
        words = f"Integration {integration['id']} no longer exists"

    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE)
    assert failed["status"] == "FAILED" and failed["errorCode"] == code, failed
    assert words in failed["errorMessage"], failed
    assert failed["attempts"] == 1  # permanent: not retried
    assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.failed"]
    assert blob_files(services) == []


async def test_size_and_type_are_checked_as_for_uploads(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any) -> None:
    bucket = s3_server.new_bucket({"big.txt": b"Total: 1\n" * 200, "junk.bin": GARBAGE,
                                   "invoice.docx": docx_bytes("Invoice Number: INV-42")})
    integration = await create_s3(client, alice, s3_server, bucket)
    with_jobs_config(services, max_file_size_bytes=1500)
    big = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": "big.txt"})
    junk = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": "junk.bin"})
    async with running_workers(services):
        big = await wait_for_status(client, alice, big["id"], *DONE)
        junk = await wait_for_status(client, alice, junk["id"], *DONE)
        with_jobs_config(services, max_file_size_bytes=10 * 1024 * 1024)
        docx = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": "invoice.docx"})
        docx = await wait_for_status(client, alice, docx["id"], *DONE)
    assert (big["status"], big["errorCode"]) == ("FAILED", "UNSUPPORTED_FILE")
    assert big["errorMessage"] == ("File too large: big.txt is 1800 bytes, over the maximum of 1500 bytes "
                                   "(MAX_FILE_SIZE)")
    assert (junk["status"], junk["errorCode"]) == ("FAILED", "UNSUPPORTED_FILE")
    assert junk["errorMessage"].startswith("Unsupported file type: junk.bin")
    assert docx["mimeType"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document", docx
    assert docx["status"] == "COMPLETED", docx
    # Only the DOCX's blob is kept: the refused files left nothing behind.
    assert len(blob_files(services)) == 1


async def test_a_file_growing_past_the_limit_is_cut_off_while_streaming(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any) -> None:
    """The size S3 announces is checked first; a store that does not say is cut off mid-stream."""
    from daemon.integrations.fetch import _too_large

    calls = []

    async def handler(request: Received) -> Reply:
        calls.append(request.path)
        body = b"Total: 1\n" * 200
        return 200, {"Content-Type": "text/plain", "ETag": '"e"'}, body

    with_jobs_config(services, max_file_size_bytes=1000)
    async with open_receiver(handler) as fake:
        integration = await create_s3(client, alice, s3_server, "some-bucket", endpoint_url=fake.url(""))
        job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": "big.txt"})
        async with running_workers(services):
            failed = await wait_for_status(client, alice, job["id"], *DONE)
    assert failed["errorCode"] == "UNSUPPORTED_FILE" and "over the maximum of 1000 bytes" in failed["errorMessage"]
    assert _too_large("x", 10).message == "File too large: x over the maximum of 10 bytes (MAX_FILE_SIZE)"
    assert blob_files(services) == []


async def test_cancel_restart_and_the_fetch_lease(client: Any, services: Any, alice: dict[str, str],
                                                  schema_id: str, s3_server: Any) -> None:
    bucket = s3_server.new_bucket({})
    integration = await create_s3(client, alice, s3_server, bucket)
    source = {"integrationId": integration["id"], "key": "later.txt"}
    cancelled = await _job(client, alice, schema_id, source)
    r = await client.post(f"/api/jobs/{cancelled['id']}/cancel", headers=alice)
    assert (await r.get_json())["status"] == "CANCELLED"

    # Claimed to fetch: still PENDING, leased, not claimable twice; released and reaped back to PENDING.
    job = await _job(client, alice, schema_id, source)
    claimed = await services.db.run(repo.claim_next, owner="w1", now=utcnow(), lease_s=60)
    assert (claimed.id, claimed.status, claimed.lease_owner, claimed.attempts) == (job["id"], "PENDING", "w1", 1)
    assert await services.db.run(repo.claim_next, owner="w2", now=utcnow(), lease_s=60) is None
    assert await services.db.run(repo.release_job, job_id=job["id"], owner="w1", now=utcnow())
    row = await job_row(services, job["id"])
    assert (row.status, row.lease_owner, row.attempts) == ("PENDING", None, 0)
    # The worker that claimed it with a 1 s lease died: a second later the reaper gives it back.
    await services.db.run(repo.claim_next, owner="w3", now=utcnow(), lease_s=1)
    assert await services.db.run(repo.reap_expired, now=utcnow() + dt.timedelta(seconds=1.5), max_attempts=3) == 1
    row = await job_row(services, job["id"])
    assert (row.status, row.lease_owner) == ("PENDING", None)
    assert await services.db.read(repo.next_due) is not None

    # The object is missing: FAILED; once it exists, a restart fetches it (PENDING again) and runs.
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE)
        assert failed["errorCode"] == "REMOTE_FILE_NOT_FOUND"
        s3_server.client().put_object(Bucket=bucket, Key="later.txt", Body=INVOICE_TXT)
        r = await client.post(f"/api/jobs/{job['id']}/restart", headers=alice)
        assert (await r.get_json())["status"] == "PENDING"
        done = await wait_for_status(client, alice, job["id"], *DONE)
    assert done["status"] == "COMPLETED" and done["attempts"] == 1
    assert (await job_row(services, cancelled["id"])).status == "CANCELLED"
    assert await event_types(services, job_id=job["id"]) == [
        "job.queued", "job.failed", "job.queued", "job.started", "job.completed"]


async def test_idempotent_job_creation_from_a_source(client: Any, services: Any, alice: dict[str, str],
                                                     schema_id: str, s3_server: Any) -> None:
    bucket = s3_server.new_bucket({"a.txt": INVOICE_TXT})
    integration = await create_s3(client, alice, s3_server, bucket)
    source = {"integrationId": integration["id"], "key": "a.txt"}
    first = await post_source_job(client, alice, schema_id, source, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 201
    again = await post_source_job(client, alice, schema_id, source, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert (await again.get_json())["id"] == (await first.get_json())["id"]
    other = await post_source_job(client, alice, schema_id, {**source, "key": "b.txt"},
                                  headers={"Idempotency-Key": "k1"})
    await error_of(other, 409)


# --- S3 answers moto cannot give, from a loopback server speaking S3's error format ---------


def _s3_error(status: int, code: str, extra: dict[str, str] | None = None) -> Reply:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{code}</Message>'
            "<RequestId>1</RequestId></Error>").encode()
    return status, {"Content-Type": "application/xml", **(extra or {})}, body


@pytest.mark.parametrize("answer, code, words", [
    (_s3_error(301, "PermanentRedirect", {"x-amz-bucket-region": "eu-west-3"}), "INTEGRATION_ACCESS_DENIED",
     "in another region"),
    (_s3_error(400, "AuthorizationHeaderMalformed"), "INTEGRATION_ACCESS_DENIED", "in another region"),
    (_s3_error(500, "InternalError"), "INTERNAL_ERROR", "S3 is unavailable"),
    (_s3_error(503, "SlowDown"), "INTERNAL_ERROR", "S3 is unavailable"),
])
async def test_region_and_server_errors(client: Any, services: Any, alice: dict[str, str], schema_id: str,
                                        s3_server: Any, answer: Reply, code: str, words: str) -> None:
    async def handler(request: Received) -> Reply:
        return answer

    with_jobs_config(services, max_attempts=2)
    async with open_receiver(handler) as fake:
        integration = await create_s3(client, alice, s3_server, "some-bucket", endpoint_url=fake.url(""))
        job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": "a.txt"})
        async with running_workers(services):
            failed = await wait_for_status(client, alice, job["id"], *DONE)
        test = await error_of(await client.post(f"/api/integrations/{integration['id']}/test", headers=alice), 400)
    assert failed["status"] == "FAILED" and failed["errorCode"] == code, failed
    assert words in failed["errorMessage"], failed
    transient = code == "INTERNAL_ERROR"
    assert failed["attempts"] == (2 if transient else 1)  # transient errors were retried up to the limit
    assert test["details"] == {"errorCode": code, "retryable": transient}


async def test_a_transient_error_is_retried_until_the_file_comes(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any) -> None:
    calls: list[str] = []

    async def handler(request: Received) -> Reply:
        calls.append(request.method)
        if len(calls) <= 2:  # botocore's own retry and the first job attempt both see a 503
            return _s3_error(503, "SlowDown")
        return 200, {"Content-Type": "text/plain", "ETag": '"abc"', "Last-Modified":
                     "Wed, 21 Oct 2026 07:28:00 GMT"}, INVOICE_TXT

    async with open_receiver(handler) as fake:
        integration = await create_s3(client, alice, s3_server, "some-bucket", endpoint_url=fake.url(""))
        job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": "a.txt"})
        async with running_workers(services):
            done = await wait_for_status(client, alice, job["id"], *DONE)
    assert done["status"] == "COMPLETED", done
    assert done["result"] == INVOICE_RESULT and done["attempts"] == 1
    assert len(calls) >= 3


async def test_a_listing_answer_past_its_cap_is_refused_while_it_is_read(
        client: Any, services: Any, alice: dict[str, str], s3_server: Any) -> None:
    """The endpoint is the user's choice: a 200 MB listing, parsed whole, took the daemon to
    2 GB (and the test answered ok after 178 s)."""
    from daemon.integrations.s3 import MAX_LISTING_BYTES

    entry = b"<Contents><Key>k/%06d.txt</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>"
    body = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>some-bucket</Name>'
            + b"".join(entry % i for i in range(MAX_LISTING_BYTES // len(entry) + 1000)) + b"</ListBucketResult>")

    async def handler(request: Received) -> Reply:
        return 200, {"Content-Type": "application/xml"}, body

    async with open_receiver(handler) as fake:
        integration = await create_s3(client, alice, s3_server, "some-bucket", endpoint_url=fake.url(""))
        test = await error_of(await client.post(f"/api/integrations/{integration['id']}/test", headers=alice), 400)
    assert "more than 8,388,608 bytes" in test["message"], test
    assert test["details"] == {"errorCode": "INTERNAL_ERROR", "retryable": True}


async def test_a_full_disk_while_fetching_is_tried_again_not_failed(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any, monkeypatch: Any) -> None:
    """No space left to store the fetched file failed the job for good (INTERNAL_ERROR at the
    first attempt): an inbox's object, marked taken, was then never tried again."""
    import errno

    import daemon.jobs.pool as pool

    real_fetch, full = pool.fetch_file, [True]

    async def fetch_on_a_full_disk_once(*args: Any, **kwargs: Any) -> Any:
        if full.pop() if full else False:
            raise OSError(errno.ENOSPC, "No space left on device")
        return await real_fetch(*args, **kwargs)

    monkeypatch.setattr(pool, "fetch_file", fetch_on_a_full_disk_once)
    bucket = s3_server.new_bucket({"invoice.txt": INVOICE_TXT})
    integration = await create_s3(client, alice, s3_server, bucket)
    job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "key": "invoice.txt"})
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], *DONE)
    assert done["status"] == "COMPLETED" and not full, (done["attempts"], done)
