"""Schemas over HTTP: create, list, get, patch, soft delete, ownership, invalid definitions,
and the public /api/schema/convert (SPEC §5)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from auth_helpers import clear_of_window_end

from daemon.config import RateLimit

PASSWORD = "correct horse 42"
ERROR_KEYS = {"statusCode", "message", "error"}
SCHEMA_KEYS = {"id", "name", "description", "definition", "webhookEndpointIds", "createdAt", "updatedAt"}
ISO_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

INVOICE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoiceNumber": {"type": "string", "description": "Invoice no."},
        "issued": {"type": "string", "format": "date"},
        "total": {"type": "number"},
        "lines": {"type": "array", "items": {
            "type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku"],
        }},
    },
    "required": ["invoiceNumber", "total"],
}


# --- helpers ---------------------------------------------------------------------------

async def token(client: Any, email: str = "alice@example.com") -> dict[str, str]:
    """Register an account (the first one is ADMIN) and return its Authorization header."""
    r = await client.post("/api/auth/register", json={"name": "Someone", "email": email, "password": PASSWORD})
    body = await r.get_json()
    assert r.status_code == 201, body
    return {"Authorization": f"Bearer {body['accessToken']}"}


async def create(client: Any, auth: dict[str, str], **fields: Any) -> dict[str, Any]:
    r = await client.post("/api/schemas", json={"name": "Invoice", "definition": INVOICE, **fields}, headers=auth)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def bad_request(response: Any) -> list[str]:
    body = await response.get_json()
    assert response.status_code == 400, body
    assert set(body) == ERROR_KEYS and body["error"] == "Bad Request" and isinstance(body["message"], list)
    return body["message"]  # type: ignore[no-any-return]


@pytest.fixture
async def alice(client: Any) -> dict[str, str]:
    return await token(client)


# --- CRUD ------------------------------------------------------------------------------

async def test_create_get_list_patch_delete(client: Any, alice: dict[str, str]) -> None:
    endpoints = []
    for _ in range(2):
        r = await client.post("/api/webhooks", json={"url": "https://hooks.example.com/x", "events": ["*"]},
                              headers=alice)
        endpoints.append((await r.get_json())["id"])
    created = await create(client, alice, description="Supplier invoices", webhookEndpointIds=endpoints)
    assert set(created) == SCHEMA_KEYS
    assert created["name"] == "Invoice" and created["description"] == "Supplier invoices"
    assert created["definition"] == INVOICE and created["webhookEndpointIds"] == endpoints
    assert ISO_Z.fullmatch(created["createdAt"]) and created["updatedAt"] == created["createdAt"]
    url = f"/api/schemas/{created['id']}"

    r = await client.get(url, headers=alice)
    got = await r.get_json()
    assert r.status_code == 200 and got == created
    assert list(got["definition"]["properties"]) == list(INVOICE["properties"])  # order survives the database

    r = await client.get("/api/schemas", headers=alice)
    assert r.status_code == 200 and await r.get_json() == {"data": [created], "nextCursor": None}

    definition = {"type": "object", "properties": {"total": {"type": "number"}}}
    r = await client.patch(url, json={"name": "Receipt", "description": None, "definition": definition,
                                      "webhookEndpointIds": []}, headers=alice)
    patched = await r.get_json()
    assert r.status_code == 200, patched
    assert patched | {"updatedAt": None} == created | {"name": "Receipt", "description": None,
                                                       "definition": definition, "webhookEndpointIds": [],
                                                       "updatedAt": None}
    assert patched["updatedAt"] >= created["updatedAt"]

    r = await client.patch(url, json={"description": "only this"}, headers=alice)
    assert (await r.get_json()) | {"updatedAt": None} == patched | {"description": "only this", "updatedAt": None}

    r = await client.delete(url, headers=alice)
    assert r.status_code == 204 and await r.get_data() == b""
    for method in ("get", "patch", "delete"):
        r = await getattr(client, method)(url, headers=alice, **({"json": {"name": "x"}} if method == "patch" else {}))
        body = await r.get_json()
        assert r.status_code == 404, (method, body)
        assert body == {"statusCode": 404, "message": "Schema not found", "error": "Not Found"}
    r = await client.get("/api/schemas", headers=alice)
    assert await r.get_json() == {"data": [], "nextCursor": None}


async def test_a_deleted_schema_stays_in_the_database_for_jobs_queued_on_it(client: Any, services: Any,
                                                                            alice: dict[str, str]) -> None:
    from daemon.storage.repos.schemas import get_schema

    created = await create(client, alice)
    user_id = (await (await client.get("/api/auth/me", headers=alice)).get_json())["id"]
    await client.delete(f"/api/schemas/{created['id']}", headers=alice)
    assert await services.db.read(get_schema, user_id, created["id"]) is None
    row = await services.db.read(get_schema, user_id, created["id"], include_deleted=True)
    assert row is not None and row.deleted_at is not None


async def test_another_users_schema_is_404_and_not_listed(client: Any, alice: dict[str, str]) -> None:
    created = await create(client, alice)
    bob = await token(client, "bob@example.com")
    url = f"/api/schemas/{created['id']}"
    assert (await client.get(url, headers=bob)).status_code == 404
    assert (await client.patch(url, json={"name": "Mine now"}, headers=bob)).status_code == 404
    assert (await client.delete(url, headers=bob)).status_code == 404
    assert await (await client.get("/api/schemas", headers=bob)).get_json() == {"data": [], "nextCursor": None}
    r = await client.get(url, headers=alice)
    assert r.status_code == 200 and (await r.get_json())["name"] == "Invoice"


async def test_schemas_need_a_credential(client: Any) -> None:
    r = await client.get("/api/schemas")
    assert r.status_code == 401
    r = await client.post("/api/schemas", json={"name": "x", "definition": INVOICE})
    assert r.status_code == 401


async def test_pagination_is_newest_first_with_a_cursor(client: Any, alice: dict[str, str]) -> None:
    ids = [(await create(client, alice, name=f"S{i}"))["id"] for i in range(5)]
    r = await client.get("/api/schemas?limit=2", headers=alice)
    first = await r.get_json()
    assert [s["id"] for s in first["data"]] == ids[::-1][:2] and first["nextCursor"]
    r = await client.get(f"/api/schemas?limit=2&cursor={first['nextCursor']}", headers=alice)
    second = await r.get_json()
    assert [s["id"] for s in second["data"]] == ids[::-1][2:4] and second["nextCursor"]
    r = await client.get(f"/api/schemas?limit=2&cursor={second['nextCursor']}", headers=alice)
    assert await r.get_json() == {"data": [(await (await client.get(f"/api/schemas/{ids[0]}", headers=alice))
                                            .get_json())], "nextCursor": None}
    assert await bad_request(await client.get("/api/schemas?limit=101", headers=alice)) == [
        "limit must not be greater than 100"]
    assert await bad_request(await client.get("/api/schemas?cursor=nope", headers=alice)) == [
        "cursor must be a cursor returned by this list"]


# --- validation --------------------------------------------------------------------------

@pytest.mark.parametrize(("definition", "message"), [
    ({"type": "array", "items": {"type": "string"}},
     "definition.type must be object (the root of a schema is an object)"),
    ({"type": "object", "properties": {"total": {"type": "money"}}},
     "definition.properties.total.type must be one of string, number, integer, boolean, object, array"),
    ({"type": "object", "properties": {"d": {"type": "string", "format": "phone"}}},
     "definition.properties.d.format must be one of date, date-time, email, uri"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]},
     'definition.required[1] must name a declared property ("b" is not one)'),
    ({"type": "object", "properties": {"a": {"type": "string", "description": 5}}},
     "definition.properties.a.description: 5 is not of type 'string'"),
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {
        "c": {"type": "object", "properties": {"d": {"type": "object", "properties": {
            "e": {"type": "object", "properties": {"f": {"type": "string"}}}}}}}}}}}}},
     "definition.properties.a.properties.b.properties.c.properties.d.properties.e.properties "
     "is nested deeper than 5 levels"),
])
async def test_an_invalid_definition_is_400_naming_the_path(client: Any, alice: dict[str, str],
                                                            definition: dict[str, Any], message: str) -> None:
    r = await client.post("/api/schemas", json={"name": "Bad", "definition": definition}, headers=alice)
    assert await bad_request(r) == [message]
    created = await create(client, alice)
    r = await client.patch(f"/api/schemas/{created['id']}", json={"definition": definition}, headers=alice)
    assert await bad_request(r) == [message]
    r = await client.get(f"/api/schemas/{created['id']}", headers=alice)
    assert (await r.get_json())["definition"] == INVOICE


async def test_each_problem_of_a_definition_is_one_message(client: Any, alice: dict[str, str]) -> None:
    definition = {"type": "object", "properties": {"a": {"type": "money"}, "b": {"type": "string", "pattern": "x"}},
                  "required": ["c"]}
    r = await client.post("/api/schemas", json={"name": "Bad", "definition": definition}, headers=alice)
    assert len(await bad_request(r)) == 3


@pytest.mark.parametrize(("body", "message"), [
    ({"definition": INVOICE}, "name should not be empty"),
    ({"name": "", "definition": INVOICE}, "name should not be empty"),
    ({"name": "   ", "definition": INVOICE}, "name should not be empty"),
    ({"name": "x" * 201, "definition": INVOICE}, "name must be shorter than or equal to 200 characters"),
    ({"name": "x", "description": "d" * 2001, "definition": INVOICE},
     "description must be shorter than or equal to 2000 characters"),
    ({"name": "x"}, "definition should not be empty"),
    ({"name": "x", "definition": "{}"}, "definition must be an object"),
    ({"name": "x", "definition": INVOICE, "webhookEndpointIds": ["a", "a"]},
     "All webhookEndpointIds's elements must be unique"),
    ({"name": "x", "definition": INVOICE, "webhookEndpointIds": [f"e{i}" for i in range(51)]},
     "webhookEndpointIds must contain no more than 50 elements"),
    ({"name": "x", "definition": INVOICE, "webhookEndpointIds": "ep1"}, "webhookEndpointIds must be an array"),
])
async def test_create_body_validation(client: Any, alice: dict[str, str], body: dict[str, Any], message: str) -> None:
    assert message in await bad_request(await client.post("/api/schemas", json=body, headers=alice))


# --- /api/schema/convert ---------------------------------------------------------------

FIELDS: list[dict[str, Any]] = [
    {"name": "invoiceNumber", "type": "string", "required": True, "description": "Invoice no."},
    {"name": "issued", "type": "date", "required": False},
    {"name": "total", "type": "number", "required": True},
    {"name": "lines", "type": "array", "required": False, "fields": [
        {"name": "sku", "type": "string", "required": True},
        {"name": "qty", "type": "integer", "required": False},
    ]},
]


async def test_convert_fields_to_json_schema_and_back_without_a_credential(client: Any) -> None:
    r = await client.post("/api/schema/convert", json={"fields": FIELDS})
    body = await r.get_json()
    assert r.status_code == 200, body
    assert body == {"jsonSchema": INVOICE}
    r = await client.post("/api/schema/convert", json={"jsonSchema": body["jsonSchema"]})
    body = await r.get_json()
    assert r.status_code == 200, body
    assert body == {"fields": FIELDS}


async def test_convert_infers_a_json_schema_from_an_example(client: Any) -> None:
    example = {"invoiceNumber": "INV-1", "issued": "2024-03-01", "email": "a@acme.com", "total": 10.5,
               "note": None, "lines": [{"sku": "A", "qty": 1}, {"sku": "B"}]}
    r = await client.post("/api/schema/convert", json={"example": example})
    body = await r.get_json()
    assert r.status_code == 200, body
    assert body == {"jsonSchema": {
        "type": "object",
        "properties": {
            "invoiceNumber": {"type": "string"},
            "issued": {"type": "string", "format": "date"},
            "email": {"type": "string", "format": "email"},
            "total": {"type": "number"},
            "note": {"type": "string"},
            "lines": {"type": "array", "items": {"type": "object", "properties": {
                "sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku"]}},
        },
        "required": ["invoiceNumber", "issued", "email", "total", "lines"],
    }}
    # What convert infers is a schema the API accepts.
    alice = await token(client)
    await create(client, alice, definition=body["jsonSchema"])


@pytest.mark.parametrize(("body", "message"), [
    ({}, "exactly one of fields, jsonSchema or example must be given"),
    ({"fields": FIELDS, "example": {"a": 1}}, "exactly one of fields, jsonSchema or example must be given"),
    ({"jsonSchema": INVOICE, "example": {"a": 1}}, "exactly one of fields, jsonSchema or example must be given"),
    ({"fields": FIELDS, "extra": 1}, "property extra should not exist"),
    ({"fields": []}, "fields must contain at least 1 elements"),
    ({"fields": [{"name": "a", "type": "money"}]},
     "fields.0.type must be one of the following values: string, number, integer, boolean, date, object, array"),
    ({"fields": [{"name": "a", "type": "array"}]},
     "fields[0] must have either fields (an array of objects) or itemType (an array of scalars)"),
    ({"jsonSchema": {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}},
     "jsonSchema.properties.a.maxLength is not supported: a property may only use "
     "type, title, description, format, enum, properties, required, items"),
    ({"jsonSchema": {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}},
     "jsonSchema.properties.a.anyOf is not supported: a property may only use "
     "type, title, description, format, enum, properties, required, items"),
    ({"example": {"grid": [[1]]}}, "example.grid is an array of arrays, which a schema cannot hold"),
    ({"example": []}, "example must be an object"),
])
async def test_convert_rejects_invalid_input_naming_the_path(client: Any, body: dict[str, Any], message: str) -> None:
    assert message in await bad_request(await client.post("/api/schema/convert", json=body))


class TestConvertRateLimit:
    @pytest.fixture
    def config(self, config: Any) -> Any:
        # An hour-long window: a window rolling over mid-test would reset the count.
        return dataclasses.replace(config, rate_limits=dataclasses.replace(
            config.rate_limits, schema_convert=RateLimit(2, 3600)))

    async def test_the_third_conversion_from_one_ip_is_429(self, client: Any, config: Any) -> None:
        await clear_of_window_end(config.rate_limits.schema_convert)  # nor one ending on the hour
        for _ in range(2):
            assert (await client.post("/api/schema/convert", json={"fields": FIELDS})).status_code == 200
        r = await client.post("/api/schema/convert", json={"fields": FIELDS})
        body = await r.get_json()
        assert r.status_code == 429, body
        assert body["error"] == "Too Many Requests" and 1 <= int(r.headers["Retry-After"]) <= 3600
        # The limit is counted before the body is read: even a bad body is refused with 429.
        assert (await client.post("/api/schema/convert", json={})).status_code == 429
        # Another IP has its own count.
        other = await client.post("/api/schema/convert", json={"fields": FIELDS},
                                  scope_base={"client": ("10.9.8.7", 40000)})
        assert other.status_code == 200


async def test_a_schema_may_choose_its_extraction_provider(client: Any, alice: dict[str, str]) -> None:
    headers = alice
    definition = {"type": "object", "properties": {"total": {"type": "number"}}, "x-docex-provider": "openai"}
    r = await client.post("/api/schemas", json={"name": "ai", "definition": definition}, headers=headers)
    assert r.status_code == 201 and (await r.get_json())["definition"]["x-docex-provider"] == "openai"
    definition["x-docex-provider"] = "gpt"
    r = await client.post("/api/schemas", json={"name": "bad", "definition": definition}, headers=headers)
    assert r.status_code == 400
    assert (await r.get_json())["message"] == ['definition["x-docex-provider"] must be one of rules, openai, anthropic']
