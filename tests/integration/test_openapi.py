"""The served OpenAPI document is valid and complete enough to generate a client from
(issue 12, defect 8): every operation documents its success answer, its errors in the
SPEC §3 shape, its request body and its security."""

from __future__ import annotations

from typing import Any

import pytest
from jobs_helpers import INVOICE_TXT, create_job, multipart
from openapi_spec_validator import validate

ERROR_REF = "#/components/schemas/Error"
METHODS = ("get", "put", "post", "patch", "delete")


@pytest.fixture
async def document(client: Any) -> dict[str, Any]:
    r = await client.get("/api/openapi.json")
    assert r.status_code == 200
    return await r.get_json()  # type: ignore[no-any-return]


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, item in document["paths"].items()
            for method, op in item.items() if method in METHODS]


async def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)
    assert len(operations(document)) >= 56


async def test_every_operation_documents_success_and_an_error_in_the_error_shape(document: dict[str, Any]) -> None:
    for method, path, op in operations(document):
        statuses = {int(s) for s in op["responses"]}
        assert any(200 <= s < 300 for s in statuses), (method, path)
        errors = [r for s, r in op["responses"].items() if int(s) >= 400
                  and r.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref") == ERROR_REF]
        assert errors, (method, path)
    error = document["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"statusCode", "message", "error"}


def named(document: dict[str, Any], media: dict[str, Any]) -> dict[str, Any]:
    """A body's or answer's schema, looked up in components when the document refers to it."""
    schema: dict[str, Any] = media["schema"]
    if "$ref" in schema:
        return document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]  # type: ignore[no-any-return]
    return schema


async def test_answers_and_bodies_refer_to_named_models(document: dict[str, Any]) -> None:
    # One JobOut for a job's 201 and its replay's 200: client generators name it once.
    answers = document["paths"]["/api/jobs"]["post"]["responses"]
    assert answers["201"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/JobOut"}
    assert answers["200"]["content"] == answers["201"]["content"]


async def test_every_body_taking_operation_documents_its_body(document: dict[str, Any]) -> None:
    bodies = {(m, p): set(op["requestBody"]["content"]) for m, p, op in operations(document) if "requestBody" in op}
    assert bodies[("post", "/api/jobs")] == {"application/json", "multipart/form-data"}
    assert bodies[("post", "/api/job-runs")] == {"application/json", "multipart/form-data"}
    upload = named(document, document["paths"]["/api/jobs"]["post"]["requestBody"]["content"]["multipart/form-data"])
    assert upload["properties"]["file"] == {**upload["properties"]["file"], "type": "string", "format": "binary"}
    files = named(document, document["paths"]["/api/job-runs"]["post"]["requestBody"]["content"]["multipart/form-data"])
    assert files["properties"]["files"]["items"]["format"] == "binary"
    integrations = document["paths"]["/api/integrations"]["post"]
    integration = named(document, integrations["requestBody"]["content"]["application/json"])
    assert integration["discriminator"]["propertyName"] == "provider"
    assert set(integration["discriminator"]["mapping"]) == {"s3", "google-drive"}
    for method in ("post", "patch"):
        for path, item in document["paths"].items():
            if method in item and not path.endswith(("/restart", "/cancel", "/test", "/rotate-secret", "/replay",
                                                     "/reconnect", "/logout-all", "/approve")):
                assert (method, path) in bodies, (method, path)


async def test_deletes_are_204_without_content(document: dict[str, Any]) -> None:
    deletes = [(p, op) for m, p, op in operations(document) if m == "delete"]
    assert len(deletes) == 8  # sessions, keys, schemas, learned examples, jobs, webhooks, integrations, inboxes
    for path, op in deletes:
        assert "content" not in op["responses"]["204"], path


async def test_protected_operations_name_their_security_and_public_ones_none(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["accessToken"]["scheme"] == "bearer" and schemes["apiKey"]["scheme"] == "bearer"
    public = {p for m, p, op in operations(document) if op["security"] == []}
    assert public == {"/api/health", "/api/ready", "/api/settings", "/metrics", "/api/auth/register", "/api/auth/login",
                      "/api/auth/refresh", "/api/auth/logout", "/api/schema/convert",
                      "/api/integrations/google-drive/callback"}
    for method, path, op in operations(document):
        if path not in public:
            assert "401" in op["responses"], (method, path)
    assert document["paths"]["/api/auth/api-keys"]["post"]["security"] == [{"accessToken": []}]


def answer_schema(document: dict[str, Any], method: str, path: str, status: int) -> Any:
    from jsonschema import Draft202012Validator

    response = document["paths"][path][method]["responses"][str(status)]
    return Draft202012Validator({**response["content"]["application/json"]["schema"],
                                 "components": document["components"]})


async def test_real_answers_match_the_documented_job_and_run_models(
    client: Any, alice: dict[str, str], schema_id: str, document: dict[str, Any]
) -> None:
    """Checked here for the models this change added; the fuzz test
    (tests/e2e/test_fuzz_openapi.py) checks every operation's answers the same way."""
    job = await create_job(client, alice, schema_id)
    answer_schema(document, "post", "/api/jobs", 201).validate(job)
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)],
                                   [("files", "a.txt", INVOICE_TXT), ("files", "b.txt", INVOICE_TXT)])
    r = await client.post("/api/job-runs", data=body, headers={**alice, **content_type})
    assert r.status_code == 201
    answer_schema(document, "post", "/api/job-runs", 201).validate(await r.get_json())
    r = await client.get("/api/job-runs", headers=alice)
    answer_schema(document, "get", "/api/job-runs", 200).validate(await r.get_json())
    r = await client.get("/api/jobs", headers=alice)
    answer_schema(document, "get", "/api/jobs", 200).validate(await r.get_json())
    r = await client.get("/api/admin/stats", headers=alice)  # the first account is ADMIN
    answer_schema(document, "get", "/api/admin/stats", 200).validate(await r.get_json())
    r = await client.get(f"/api/jobs/{job['id']}x", headers=alice)
    assert r.status_code == 404
    answer_schema(document, "get", "/api/jobs/{job_id}", 404).validate(await r.get_json())


async def test_the_drive_callback_documents_its_html_pages(document: dict[str, Any]) -> None:
    responses = document["paths"]["/api/integrations/google-drive/callback"]["get"]["responses"]
    for status in ("200", "502"):
        assert set(responses[status]["content"]) == {"text/html"}, status
    # The page, or the error model for a query refused before the route runs (NUL).
    assert set(responses["400"]["content"]) == {"text/html", "application/json"}
