"""A job's version (its ETag) guards a reviewer's writes: two tabs or two people on one job
silently undid each other (the later save sent its whole stale form back, reverting the
other's correction and clearing its approval). With `If-Match`, a write made from an older
reading of the job is refused with 412. Runs on SQLite and, with DOCEX_TEST_DATABASE_URL,
PostgreSQL."""

from __future__ import annotations

from typing import Any

from jobs_helpers import completed_job, error_of

from daemon.services import Services


async def read(client: Any, auth: dict[str, str], job_id: str) -> tuple[dict[str, Any], str]:
    r = await client.get(f"/api/jobs/{job_id}", headers=auth)
    assert r.status_code == 200
    return await r.get_json(), r.headers["ETag"]


async def test_a_write_from_an_older_reading_is_412_and_changes_nothing(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    job = await completed_job(client, services, alice, schema_id)
    path = f"/api/jobs/{job['id']}"
    seen, tag = await read(client, alice, job["id"])
    assert tag == f'"{seen["updatedAt"]}"'

    # Tab A saves from what it read: accepted, with the new version.
    r = await client.patch(f"{path}/result", json={"result": {"invoice_number": "A", "total": 1}},
                           headers={**alice, "If-Match": tag})
    assert r.status_code == 200
    a_saved = await r.get_json()
    assert r.headers["ETag"] == f'"{a_saved["updatedAt"]}"' != tag
    r = await client.post(f"{path}/approve", headers={**alice, "If-Match": r.headers["ETag"]})
    assert r.status_code == 200 and (await r.get_json())["reviewedAt"] is not None

    # Tab B still holds the first reading: its save and its approval are refused.
    for r in (await client.patch(f"{path}/result", json={"result": {"invoice_number": "B", "total": 2}},
                                 headers={**alice, "If-Match": tag}),
              await client.post(f"{path}/approve", headers={**alice, "If-Match": tag})):
        body = await error_of(r, 412)
        assert body["error"] == "Precondition Failed"
        assert body["message"].startswith("The job changed since you read it") and body["message"].endswith(
            "read it again")
    now, _ = await read(client, alice, job["id"])
    assert now["result"]["invoice_number"] == "A" and now["reviewedAt"] is not None  # A's work stands


async def test_without_if_match_or_with_a_star_any_version_is_written(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    job = await completed_job(client, services, alice, schema_id)
    path = f"/api/jobs/{job['id']}/result"
    body = {"result": {"invoice_number": "X", "total": 3}}
    assert (await client.patch(path, json=body, headers=alice)).status_code == 200
    assert (await client.patch(path, json=body, headers={**alice, "If-Match": "*"})).status_code == 200
    # A weak tag names a version as well: the first reading's is stale by now.
    await error_of(await client.patch(path, json=body, headers={**alice, "If-Match": f'W/"{job["updatedAt"]}"'}), 412)
    _, tag = await read(client, alice, job["id"])
    assert (await client.patch(path, json=body, headers={**alice, "If-Match": f"W/{tag}"})).status_code == 200


async def test_an_if_match_that_is_no_etag_is_400(client: Any, services: Services, alice: dict[str, str],
                                                  schema_id: str) -> None:
    job = await completed_job(client, services, alice, schema_id)
    r = await client.post(f"/api/jobs/{job['id']}/approve", headers={**alice, "If-Match": job["updatedAt"]})
    body = await error_of(r, 400)
    assert body["message"] == ["If-Match must be ETags of the job (quoted strings, as GET /api/jobs/:id sends)"]
    r = await client.post(f"/api/jobs/{job['id']}/approve", headers={**alice, "If-Match": '"x", y'})
    await error_of(r, 400)


async def test_an_if_match_list_holds_when_any_of_its_tags_is_the_jobs(
        client: Any, services: Services, alice: dict[str, str], schema_id: str) -> None:
    """RFC 9110 §13.1.1. Before: any list was 412, "changed since you read it", even one
    naming the job's version."""
    job = await completed_job(client, services, alice, schema_id)
    path = f"/api/jobs/{job['id']}/result"
    body = {"result": {"invoice_number": "X", "total": 3}}
    _, tag = await read(client, alice, job["id"])
    for listed in ('"2000-01-01T00:00:00.000Z", {}', '{},"x"', ' W/"old" ,  W/{} '):
        r = await client.patch(path, json=body, headers={**alice, "If-Match": listed.format(tag)})
        assert r.status_code == 200, (listed, await r.get_json())
        tag = r.headers["ETag"]
    await error_of(await client.patch(path, json=body, headers={**alice, "If-Match": '"old", "older"'}), 412)
