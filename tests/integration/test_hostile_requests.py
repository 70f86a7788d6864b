"""Hostile request bodies and path ids get a 4xx in the SPEC §3 shape, never a 500
(issue 12, defects 2 and 3): bodies that are not UTF-8, nest deeper than the JSON
depth limit or carry what a database cannot store, and ids that cannot exist."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jobs_helpers import ERROR_KEYS, INVOICE_SCHEMA, create_job, create_schema

from daemon.http.requests import MAX_JSON_DEPTH, PUBLIC_BODY_BYTES
from daemon.http.schemas import CONVERT_BODY_BYTES

JSON = {"Content-Type": "application/json"}
NOT_UTF8 = b'{"email": "\xff\xfe@example.com", "password": "secret1"}'

# Every route that reads a JSON body, public ones first.
JSON_ROUTES = [
    ("POST", "/api/auth/register"),
    ("POST", "/api/auth/login"),
    ("POST", "/api/auth/refresh"),
    ("POST", "/api/auth/logout"),
    ("POST", "/api/schema/convert"),
    ("POST", "/api/schemas"),
    ("POST", "/api/jobs"),
    ("POST", "/api/job-runs"),
    ("POST", "/api/integrations"),
    ("POST", "/api/webhooks"),
    ("POST", "/api/auth/api-keys"),
]

# The public routes' bounds, below the 4 MiB of every other JSON body.
SMALL_BODIES = {
    "/api/auth/register": PUBLIC_BODY_BYTES, "/api/auth/login": PUBLIC_BODY_BYTES,
    "/api/auth/refresh": PUBLIC_BODY_BYTES, "/api/auth/logout": PUBLIC_BODY_BYTES,
    "/api/schema/convert": CONVERT_BODY_BYTES,
}


async def _bad_request(response: Any) -> list[str]:
    body = await response.get_json()
    assert response.status_code == 400, body
    assert set(body) >= ERROR_KEYS and body["error"] == "Bad Request" and body["statusCode"] == 400, body
    return body["message"]  # type: ignore[no-any-return]


def nested_definition(levels: int) -> str:
    """A schema definition whose properties nest `levels` objects deep (2 JSON levels each),
    as text: json.dumps would recurse too deep to write it."""
    return '{"type": "object", "properties": {"a": ' * levels + '{"type": "string"}' + "}}" * levels


def deep_json(levels: int) -> str:
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_a_body_that_is_not_utf8_is_400(client: Any, alice: dict[str, str], method: str, path: str) -> None:
    r = await client.open(path, method=method, data=NOT_UTF8, headers={**JSON, **alice})
    assert await _bad_request(r) == ["request body is not valid JSON: it must be UTF-8"]


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_a_body_nested_past_the_limit_is_400_whatever_the_depth(
    client: Any, alice: dict[str, str], method: str, path: str
) -> None:
    # Just past the limit, past what the schema checks recurse through, past json.loads' own
    # recursion limit (600 KB: past what the public routes read, refused unread).
    for levels in (MAX_JSON_DEPTH + 1, 990, 100_000):
        body = deep_json(levels).encode()
        r = await client.open(path, method=method, data=body, headers={**JSON, **alice})
        if len(body) > SMALL_BODIES.get(path, len(body)):
            assert r.status_code == 413, await r.get_json()
        else:
            assert await _bad_request(r) == [f"request body is nested deeper than {MAX_JSON_DEPTH} levels"]


async def test_public_routes_read_small_bodies_only(client: Any) -> None:
    """Before: each public route parsed 4 MiB bodies on the event loop before anyone was known:
    6 logins of 4 MiB of empty arrays held every other request for 10 s."""
    for path, limit in SMALL_BODIES.items():
        padding = limit - len('{"email":"a@example.com","password":"secret123","x":""}')
        body = json.dumps({"email": "a@example.com", "password": "secret123", "x": "y" * padding},
                          separators=(",", ":"))
        assert len(body) == limit
        r = await client.post(path, data=body.encode(), headers=JSON)
        assert r.status_code in (400, 401), (path, await r.get_json())  # read, and refused by the route
        r = await client.post(path, data=body.encode() + b" ", headers=JSON)
        answer = await r.get_json()
        assert r.status_code == 413 and answer["statusCode"] == 413, (path, answer)


async def test_a_body_at_the_limit_is_parsed(client: Any) -> None:
    r = await client.post("/api/schema/convert", data=deep_json(MAX_JSON_DEPTH).encode(), headers=JSON)
    # Parsed, then refused by the route's own rules, not by the depth limit.
    assert await _bad_request(r) != [f"request body is nested deeper than {MAX_JSON_DEPTH} levels"]


async def test_a_schema_nested_495_levels_is_a_clear_400(client: Any, alice: dict[str, str]) -> None:
    body = '{"name": "deep", "definition": ' + nested_definition(495) + "}"
    r = await client.post("/api/schemas", data=body.encode(), headers={**JSON, **alice})
    assert await _bad_request(r) == [f"request body is nested deeper than {MAX_JSON_DEPTH} levels"]
    # Within the body limit, the definition's own limit names the place.
    body = '{"name": "deep", "definition": ' + nested_definition(20) + "}"
    r = await client.post("/api/schemas", data=body.encode(), headers={**JSON, **alice})
    assert any("nested deeper than 5 levels" in m for m in await _bad_request(r))


async def test_deep_data_where_any_json_is_taken_is_refused_before_it_is_used(
    client: Any, alice: dict[str, str], schema_id: str
) -> None:
    too_deep = json.loads(deep_json(MAX_JSON_DEPTH - 1))  # the body wraps it in two more levels
    limit = [f"request body is nested deeper than {MAX_JSON_DEPTH} levels"]
    r = await client.post("/api/schema/convert", json={"example": {"a": too_deep}}, headers=alice)
    assert await _bad_request(r) == limit
    r = await client.post("/api/webhooks/01aaaaaaaaaaaaaaaaaaaaaaaa/send", json={"data": {"a": too_deep}},
                          headers=alice)
    assert await _bad_request(r) == limit
    job = await create_job(client, alice, schema_id)
    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": {"total": too_deep}}, headers=alice)
    assert await _bad_request(r) == limit
    # Within the limit, the result is checked against the schema (the job need not be COMPLETED for that).
    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": {"total": {"a": {"b": [1]}}}},
                           headers=alice)
    assert r.status_code in (400, 409)


@pytest.mark.parametrize("escaped", ["\\u0000", "\\ud800", "\\udfff", "a\\ud83d"])
async def test_strings_no_database_can_store_are_400(client: Any, alice: dict[str, str], escaped: str) -> None:
    """NUL and unpaired surrogates: PostgreSQL refuses both in text and JSON, SQLite the surrogates."""
    body = '{"name": "x", "definition": {"type": "object", "properties": {"a": {"type": "string", "description": "'
    body += escaped + '"}}}}'
    r = await client.post("/api/schemas", data=body.encode(), headers={**JSON, **alice})
    assert (await _bad_request(r))[0].startswith("request body")
    r = await client.post("/api/schemas", data=body.replace('"a"', f'"{escaped}"').encode(), headers={**JSON, **alice})
    assert (await _bad_request(r))[0].startswith("request body")


async def test_escaped_backslashes_and_surrogate_pairs_are_fine(client: Any, alice: dict[str, str]) -> None:
    body = ('{"name": "x \\\\u0000 \\ud83d\\ude00", "definition": '
            + json.dumps(INVOICE_SCHEMA) + "}").encode()
    r = await client.post("/api/schemas", data=body, headers={**JSON, **alice})
    assert r.status_code == 201, await r.get_json()
    assert (await r.get_json())["name"] == "x \\u0000 \U0001f600"


# --- ids that cannot exist ------------------------------------------------------------------

HOSTILE_IDS = ["%C3%A9", "\u00e9", "x" * 5000, "%00", "a%00b", "..", "%2E%2E", "01aaaaaaaaaaaaaaaaaaaaaaa%00"]

ID_ROUTES = [
    ("GET", "/api/schemas/{}"), ("PATCH", "/api/schemas/{}"), ("DELETE", "/api/schemas/{}"),
    ("GET", "/api/jobs/{}"), ("GET", "/api/jobs/{}/file"), ("POST", "/api/jobs/{}/restart"),
    ("POST", "/api/jobs/{}/cancel"), ("PATCH", "/api/jobs/{}/result"), ("DELETE", "/api/jobs/{}"),
    ("GET", "/api/job-runs/{}"), ("GET", "/api/job-runs/{}/jobs"), ("POST", "/api/job-runs/{}/cancel"),
    ("GET", "/api/webhooks/{}"), ("PATCH", "/api/webhooks/{}"), ("DELETE", "/api/webhooks/{}"),
    ("POST", "/api/webhooks/{}/rotate-secret"), ("POST", "/api/webhooks/{}/test"), ("POST", "/api/webhooks/{}/send"),
    ("GET", "/api/webhooks/{}/deliveries"), ("GET", "/api/webhooks/deliveries/{}"),
    ("POST", "/api/webhooks/deliveries/{}/replay"),
    ("GET", "/api/integrations/{}"), ("DELETE", "/api/integrations/{}"), ("POST", "/api/integrations/{}/test"),
    ("POST", "/api/integrations/{}/reconnect"),
    ("DELETE", "/api/auth/sessions/{}"), ("DELETE", "/api/auth/api-keys/{}"), ("PATCH", "/api/admin/users/{}"),
]
VALID_BODIES = {"/result": {"result": {}}, "/send": {"data": {}}, "/api/admin/users/{}": {"disabled": False},
                "/api/schemas/{}": {"name": "n"}, "/api/webhooks/{}": {"description": "d"}}


def _body_for(method: str, template: str) -> dict[str, Any] | None:
    if method not in ("POST", "PATCH"):
        return None
    for suffix, body in VALID_BODIES.items():
        if template.endswith(suffix):
            return body
    return None


@pytest.mark.parametrize(("method", "template"), ID_ROUTES)
async def test_ids_that_cannot_exist_are_404(client: Any, alice: dict[str, str], method: str, template: str) -> None:
    """The first account is ADMIN, so the admin route is reached too."""
    for hostile in HOSTILE_IDS:
        path = template.format(hostile)
        r = await client.open(path, method=method, json=_body_for(method, template), headers=alice)
        body = await r.get_json()
        assert r.status_code == 404, (path, body)
        assert set(body) >= ERROR_KEYS and body["statusCode"] == 404, body


async def test_rotating_the_secret_of_a_non_ascii_id_is_404_and_stores_nothing(
    client: Any, alice: dict[str, str]
) -> None:
    r = await client.post("/api/webhooks/\u00e9t\u00e9/rotate-secret", headers=alice)
    assert r.status_code == 404
    assert (await r.get_json())["message"] == "Webhook endpoint not found"


async def test_a_real_id_still_works_after_the_id_check(client: Any, alice: dict[str, str]) -> None:
    schema_id = await create_schema(client, alice)
    r = await client.get(f"/api/schemas/{schema_id}", headers=alice)
    assert r.status_code == 200
    r = await client.get(f"/api/schemas/{schema_id.upper()}", headers=alice)
    assert r.status_code == 404


# --- NUL where a query or form field reaches the database ------------------------------------

@pytest.mark.parametrize("path", [
    "/api/jobs?schemaId=%00", "/api/jobs?jobRunId=a%00b", "/api/job-runs/01aaaaaaaaaaaaaaaaaaaaaaaa/jobs?schemaId=%00",
    "/api/webhooks/01aaaaaaaaaaaaaaaaaaaaaaaa/deliveries?eventType=%00",
])
async def test_nul_in_a_query_string_is_400(client: Any, alice: dict[str, str], path: str) -> None:
    r = await client.get(path, headers=alice)
    assert await _bad_request(r) == ["query string must not contain NUL characters (%00)"]


async def test_nul_in_a_form_field_is_400(client: Any, alice: dict[str, str]) -> None:
    from jobs_helpers import INVOICE_TXT, multipart

    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", "\x00")], [("file", "a.txt", INVOICE_TXT)])
    r = await client.post("/api/jobs", data=body, headers={**alice, **content_type})
    assert "schemaId must be the id of one of your schemas" in await _bad_request(r)
