"""More hostile requests against the newer routes (job results and approvals, learned
examples, inboxes, exports, integrations), each answered with a 4xx in the SPEC §3 shape
and never stored half-valid: numbers JSON has no room for (NaN, Infinity, 1e309), query
dates that have no UTC datetime, S3 endpoints that mean something else to botocore than
to the check, and corrected values too large for a float."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jobs_helpers import (
    ERROR_KEYS,
    INVOICE_RESULT,
    create_job,
    running_workers,
    wait_for_status,
)

from daemon.services import Services

JSON = {"Content-Type": "application/json"}
NOT_FINITE = ["request body is not valid JSON: it has NaN, Infinity or a number out of range (such as 1e309)"]


async def _bad_request(response: Any) -> list[str]:
    body = await response.get_json()
    assert response.status_code == 400, body
    assert set(body) >= ERROR_KEYS and body["error"] == "Bad Request" and body["statusCode"] == 400, body
    return body["message"]  # type: ignore[no-any-return]


async def _completed(client: Any, services: Services, auth: dict[str, str], schema_id: str) -> dict[str, Any]:
    job = await create_job(client, auth, schema_id)
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, auth, job["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done
    return done


def _strict_json(text: str) -> Any:
    """What a browser's JSON.parse (and PostgreSQL's jsonb) accepts: no NaN or Infinity."""
    def refuse(literal: str) -> Any:
        raise ValueError(f"{literal} is not JSON")
    return json.loads(text, parse_constant=refuse)


# --- numbers JSON has no room for ----------------------------------------------------------

@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e309", "-1e309", "1E+400"])
async def test_a_corrected_result_with_a_number_json_cannot_carry_is_400_and_changes_nothing(
    client: Any, services: Services, alice: dict[str, str], schema_id: str, number: str
) -> None:
    """Accepted before, such a value was stored: every later answer for the job (GET, the list,
    the export, the job.updated webhook) carried `NaN`, which the console's JSON.parse refuses."""
    job = await _completed(client, services, alice, schema_id)
    body = '{"result": {"invoice_number": "INV-42", "total": ' + number + "}}"
    r = await client.patch(f"/api/jobs/{job['id']}/result", data=body.encode(), headers={**JSON, **alice})
    assert await _bad_request(r) == NOT_FINITE
    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    assert _strict_json((await r.get_data()).decode())["result"] == INVOICE_RESULT


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/api/inboxes", '{"kind": "s3", "schemaId": "x", "prefix": "", "n": NaN}'),
    ("PATCH", "/api/inboxes/01aaaaaaaaaaaaaaaaaaaaaaaa", '{"paused": true, "n": Infinity}'),
    ("PATCH", "/api/admin/users/01aaaaaaaaaaaaaaaaaaaaaaaa", '{"disabled": false, "n": -Infinity}'),
    ("POST", "/api/schemas", '{"name": "n", "definition": {"type": "object", "properties": {"a": '
                             '{"type": "number", "enum": [1e309]}}}}'),
    ("POST", "/api/schema/convert", '{"example": {"total": NaN}}'),
    ("POST", "/api/webhooks/01aaaaaaaaaaaaaaaaaaaaaaaa/send", '{"data": {"total": NaN}}'),
])
async def test_nan_and_infinity_are_400_wherever_json_is_taken(
    client: Any, alice: dict[str, str], method: str, path: str, body: str
) -> None:
    r = await client.open(path, method=method, data=body.encode(), headers={**JSON, **alice})
    assert await _bad_request(r) == NOT_FINITE


async def test_large_finite_numbers_are_still_numbers(client: Any, alice: dict[str, str]) -> None:
    r = await client.post("/api/schema/convert", data=b'{"example": {"total": 1e308, "count": 1e2}}', headers=JSON)
    assert r.status_code == 200, await r.get_json()
    assert (await r.get_json())["jsonSchema"]["properties"]["total"]["type"] == "number"


async def test_a_corrected_integer_too_large_for_a_float_is_still_learned_from(
    client: Any, services: Services, alice: dict[str, str], schema_id: str
) -> None:
    """Any JSON integer is a number (10**400 is valid JSON): comparing it with what the document
    said raised OverflowError, so the correction was saved but taught nothing (and logged an error)."""
    job = await _completed(client, services, alice, schema_id)
    r = await client.patch(f"/api/jobs/{job['id']}/result",
                           json={"result": {"invoice_number": "INV-42", "total": 10**400}}, headers=alice)
    assert r.status_code == 200, await r.get_json()
    r = await client.get(f"/api/schemas/{schema_id}/examples", headers=alice)
    body = await r.get_json()
    assert r.status_code == 200, body
    assert [example["jobId"] for example in body["data"]] == [job["id"]]


# --- dates in a query that have no UTC datetime -------------------------------------------

@pytest.mark.parametrize(("name", "value"), [
    ("createdAfter", "9999-12-31T23:59:59-23:59"),
    ("createdBefore", "0001-01-01T00:00:00%2B23:59"),
])
@pytest.mark.parametrize("path", ["/api/jobs", "/api/jobs/export?format=jsonl&"])
async def test_a_query_date_beyond_the_utc_range_is_400(
    client: Any, alice: dict[str, str], name: str, value: str, path: str
) -> None:
    """Valid ISO 8601, but past year 9999 (or before year 1) once in UTC: a 500 for the list,
    a 200 whose stream broke off for the export."""
    separator = "" if path.endswith("&") else "?"
    r = await client.get(f"{path}{separator}{name}={value}", headers=alice)
    assert await _bad_request(r) == [f"{name} must be a date between 0001-01-01 and 9999-12-31 in UTC"]


async def test_dates_at_the_edges_of_the_range_still_filter(
    client: Any, alice: dict[str, str], schema_id: str
) -> None:
    job = await create_job(client, alice, schema_id)
    for query in ("createdAfter=0001-01-01T00:00:00", "createdAfter=0001-01-01T00:00:00-05:00",
                  "createdBefore=9999-12-31T23:59:59%2B05:00", "createdBefore=9999-12-31T23:59:59"):
        r = await client.get(f"/api/jobs?{query}", headers=alice)
        body = await r.get_json()
        assert r.status_code == 200, (query, body)
        assert [j["id"] for j in body["data"]] == [job["id"]], query


# --- S3 endpoints ---------------------------------------------------------------------------

S3_CONFIG = {"accessKeyId": "AKIA1234", "secretAccessKey": "s3cr3t-value", "bucket": "my-bucket",
             "region": "eu-west-1"}


@pytest.mark.parametrize("endpoint", [
    "http://127.0.0.1\\@example.com",  # urllib3 connects to 127.0.0.1, urlsplit sees example.com
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # full-width digits: 127.0.0.1 once IDNA-encoded
    "http://127\u30020\u30020\u30021",  # ideographic full stops: botocore refused it at every use (a 500)
    "http://\u04553.example.com",  # a Cyrillic letter: not a host botocore takes
])
async def test_an_s3_endpoint_botocore_would_read_otherwise_is_400(
    client: Any, alice: dict[str, str], endpoint: str
) -> None:
    r = await client.post("/api/integrations", json={"provider": "s3", "name": "x",
                                                     "config": {**S3_CONFIG, "endpointUrl": endpoint}},
                          headers=alice)
    messages = await _bad_request(r)
    assert messages == ["config.endpointUrl must be an http(s) URL"], messages
    assert "s3cr3t-value" not in str(messages)


async def test_ordinary_s3_endpoints_are_still_taken(client: Any, alice: dict[str, str]) -> None:
    for endpoint in ("https://minio.example.com:9000", "https://s3.eu-west-1.amazonaws.com",
                     "http://[2001:4860:4860::8888]:9000", "https://storage.example.com/base/"):
        r = await client.post("/api/integrations", json={"provider": "s3", "name": "x",
                                                         "config": {**S3_CONFIG, "endpointUrl": endpoint}},
                              headers=alice)
        body = await r.get_json()
        assert r.status_code == 201, (endpoint, body)
        assert body["config"]["endpointUrl"] == endpoint



# --- ids that cannot name anything ----------------------------------------------------------

@pytest.mark.parametrize(("path", "message"), [
    ("/api/inboxes/not-an-id", "Inbox not found"),
    ("/api/schemas/{schema_id}/examples/not-an-id", "Example not found"),
])
async def test_a_malformed_id_is_404_naming_what_it_was_for(
    client: Any, alice: dict[str, str], schema_id: str, path: str, message: str
) -> None:
    method = "GET" if "inboxes" in path else "DELETE"
    r = await client.open(path.format(schema_id=schema_id), method=method, headers=alice)
    body = await r.get_json()
    assert r.status_code == 404 and set(body) >= ERROR_KEYS and body["message"] == message, body
