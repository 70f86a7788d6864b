"""More hostile requests against the newer routes (job results and approvals, learned
examples, inboxes, exports, integrations), each answered with a 4xx in the SPEC §3 shape
and never stored half-valid: numbers JSON has no room for (NaN, Infinity, 1e309), query
dates that have no UTC datetime, S3 endpoints that mean something else to botocore than
to the check, and corrected values too large for a float."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from jobs_helpers import (
    ERROR_KEYS,
    INVOICE_RESULT,
    completed_job,
    create_job,
    register,
    user_id_of,
)

from daemon.http import jobs as jobs_routes
from daemon.schemas.definition import check_result
from daemon.services import Services
from daemon.storage.tables import integrations

JSON = {"Content-Type": "application/json"}
NOT_FINITE = ["request body is not valid JSON: it has NaN, Infinity or a number out of range (such as 1e309, "
              "or an integer of more than 309 digits)"]


async def _bad_request(response: Any) -> list[str]:
    body = await response.get_json()
    assert response.status_code == 400, body
    assert set(body) >= ERROR_KEYS and body["error"] == "Bad Request" and body["statusCode"] == 400, body
    return body["message"]  # type: ignore[no-any-return]




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
    job = await completed_job(client, services, alice, schema_id)
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
    ("POST", "/api/webhooks/01aaaaaaaaaaaaaaaaaaaaaaaa/send", '{"data": {"total": -1' + "0" * 400 + '}}'),
    ("POST", "/api/schemas", '{"name": "n", "definition": {"type": "object", "properties": {"a": '
                             '{"type": "integer", "enum": [1' + "0" * 309 + ']}}}}'),
    ("POST", "/api/schema/convert", '{"example": {"count": 2' + "0" * 5000 + '}}'),
])
async def test_nan_and_infinity_are_400_wherever_json_is_taken(
    client: Any, alice: dict[str, str], method: str, path: str, body: str
) -> None:
    r = await client.open(path, method=method, data=body.encode(), headers={**JSON, **alice})
    assert await _bad_request(r) == NOT_FINITE


async def test_large_finite_numbers_are_still_numbers(client: Any, alice: dict[str, str]) -> None:
    body = '{"example": {"total": 1e308, "count": 1e2, "big": 1' + "0" * 308 + "}}"
    r = await client.post("/api/schema/convert", data=body.encode(), headers=JSON)
    assert r.status_code == 200, await r.get_json()
    properties = (await r.get_json())["jsonSchema"]["properties"]
    assert properties["total"]["type"] == "number" and properties["big"]["type"] == "integer"


async def test_a_corrected_integer_beyond_a_double_is_400_and_changes_nothing(
    client: Any, services: Services, alice: dict[str, str], schema_id: str
) -> None:
    """10**400 is valid JSON, but no double holds it: stored, it broke the XLSX export midway
    (openpyxl writes numbers as doubles) and reads as Infinity in a browser and in most
    webhook receivers."""
    job = await completed_job(client, services, alice, schema_id)
    body = '{"result": {"invoice_number": "INV-42", "total": ' + "1" + "0" * 400 + "}}"
    r = await client.patch(f"/api/jobs/{job['id']}/result", data=body.encode(), headers={**JSON, **alice})
    assert await _bad_request(r) == NOT_FINITE
    r = await client.get(f"/api/jobs/{job['id']}", headers=alice)
    assert (await r.get_json())["result"] == INVOICE_RESULT
    r = await client.get(f"/api/schemas/{schema_id}/examples", headers=alice)
    assert (await r.get_json())["data"] == []


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



async def test_an_s3_endpoint_stored_before_the_check_fails_its_test_with_a_400(
    client: Any, services: Services, alice: dict[str, str]
) -> None:
    """An integration kept from before endpoints were checked at creation: botocore refuses
    its endpoint each time a client is built (ValueError), which was a 500 on /test."""
    r = await client.post("/api/integrations", json={"provider": "s3", "name": "x", "config": S3_CONFIG},
                          headers=alice)
    integration = await r.get_json()
    assert r.status_code == 201, integration

    def store_old_endpoint(conn: sa.Connection) -> None:
        conn.execute(integrations.update().where(integrations.c.id == integration["id"])
                     .values(config={**integration["config"], "endpointUrl": "http://127\u30020\u30020\u30021"}))

    await services.db.run(store_old_endpoint)
    r = await client.post(f"/api/integrations/{integration['id']}/test", headers=alice)
    body = await r.get_json()
    assert r.status_code == 400 and set(body) >= ERROR_KEYS, body
    assert body["details"] == {"errorCode": "INTEGRATION_ACCESS_DENIED", "retryable": False}
    assert "endpointUrl" in body["message"] and "s3cr3t-value" not in str(body)


# --- switches that only true and false turn ---------------------------------------------------

@pytest.mark.parametrize("value", ["yes", "false", 1, 0, None])
async def test_a_switch_given_anything_but_true_or_false_is_400_and_changes_nothing(
    client: Any, services: Services, alice: dict[str, str], schema_id: str, value: Any, tmp_path: Path
) -> None:
    """pydantic's lax mode read "yes", "false" and 1 as booleans: `{"paused": "yes"}` paused an inbox."""
    (tmp_path / "scans").mkdir()
    services.config = dataclasses.replace(services.config, inboxes=dataclasses.replace(
        services.config.inboxes, local_root=str(tmp_path)))
    r = await client.post("/api/inboxes", json={"kind": "local", "schemaId": schema_id, "path": "scans"},
                          headers=alice)
    inbox = await r.get_json()
    r = await client.post("/api/webhooks", json={"url": "https://hooks.example.com/x", "events": ["*"]},
                          headers=alice)
    webhook = await r.get_json()
    bob = await register(client, "bob@example.com")
    bob_id = await user_id_of(client, bob)
    for path, body in ((f"/api/inboxes/{inbox['id']}", {"paused": value}),
                       (f"/api/webhooks/{webhook['id']}", {"enabled": value}),
                       (f"/api/admin/users/{bob_id}", {"disabled": value})):
        r = await client.patch(path, json=body, headers=alice)
        if value is None and "inboxes" not in path:  # null changes nothing where the switch is optional
            answer = await r.get_json()
            assert r.status_code == 200 and answer[next(iter(body))] is ("admin" not in path), answer
            continue
        messages = await _bad_request(r)
        assert any(next(iter(body)) in message for message in messages), (path, messages)
    r = await client.get(f"/api/inboxes/{inbox['id']}", headers=alice)
    assert (await r.get_json())["paused"] is False
    r = await client.get(f"/api/webhooks/{webhook['id']}", headers=alice)
    assert (await r.get_json())["enabled"] is True
    r = await client.get("/api/auth/me", headers=bob)
    assert r.status_code == 200


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


# --- large corrections, checked off the event loop ------------------------------------------

async def test_a_correction_is_checked_off_the_event_loop(
    client: Any, services: Services, alice: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corrected result of 40,000 rows (3 MB, under the body limit) takes 1.4 s to check
    against its schema, which ran on the event loop: every other request waited. (Which
    thread checks is asserted, not how long others wait: a loaded machine makes that noise.)"""
    definition = {"type": "object", "properties": {
        "invoice_number": {"type": "string"}, "total": {"type": "number"},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "amount": {"type": "number"}}}}}}
    r = await client.post("/api/schemas", json={"name": "Rows", "definition": definition}, headers=alice)
    job = await completed_job(client, services, alice, (await r.get_json())["id"])
    on_the_loop: list[bool] = []

    def checked(*args: Any) -> Any:
        on_the_loop.append(threading.current_thread() is threading.main_thread())
        return check_result(*args)

    monkeypatch.setattr(jobs_routes, "check_result", checked)
    rows = [{"description": "x" * 20, "amount": 2.5}] * 1000
    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": {**INVOICE_RESULT, "items": rows}},
                           headers=alice)
    assert r.status_code == 200, await r.get_json()
    assert on_the_loop == [False]
