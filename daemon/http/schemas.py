"""/api/schemas (a user's extraction schemas) and the public /api/schema/convert (SPEC §5)."""

from __future__ import annotations

from typing import Annotated, Any

import trio
from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator
from quart import Blueprint, Response
from quart_schema import document_response, tag_blueprint, validate_querystring, validate_request

from daemon.auth.guard import current_principal, public
from daemon.clock import iso, utcnow
from daemon.errors import BadRequest, NotFound
from daemon.http.context import limited_per_ip, no_content, services
from daemon.http.models import ApiModel
from daemon.http.openapi import NoContent
from daemon.http.pagination import PageQuery, encoded, page
from daemon.http.requests import small_body
from daemon.schemas.convert import (
    ConversionError,
    FieldSpec,
    field_json,
    fields_to_schema,
    infer_schema,
    schema_to_fields,
)
from daemon.schemas.definition import MAX_PROPERTIES, check_definition
from daemon.storage.repos import learning as learning_repo
from daemon.storage.repos import schemas as repo

blueprint = Blueprint("schemas", __name__, url_prefix="/api")
tag_blueprint(blueprint, ["schemas"])

MAX_BOUND_ENDPOINTS = 50
# POST /api/schema/convert is public: what it reads is parsed before anyone is known (four
# 4 MiB bodies held the event loop for seconds). 200 properties, each with a title and a
# description of 2,000 characters, are under 1 MiB; a 413 past it.
CONVERT_BODY_BYTES = 1024 * 1024

EndpointId = Annotated[str, StringConstraints(min_length=1, max_length=64)]


# --- request and response models -------------------------------------------------------

def _unique_ids(value: list[str] | None) -> list[str] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError("All webhookEndpointIds's elements must be unique")
    return value


def _not_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("name should not be empty")
    return value.strip() if value is not None else None


class CreateSchemaBody(ApiModel):
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    definition: dict[str, Any] = Field(description="a JSON Schema (draft 2020-12) whose root is an object")
    webhookEndpointIds: list[EndpointId] = Field(default_factory=list, max_length=MAX_BOUND_ENDPOINTS)

    _name = field_validator("name")(_not_blank)
    _ids = field_validator("webhookEndpointIds")(_unique_ids)


class UpdateSchemaBody(ApiModel):
    """Only the keys given change; `description: null` clears the description, null for the others changes nothing."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    definition: dict[str, Any] | None = None
    webhookEndpointIds: list[EndpointId] | None = Field(default=None, max_length=MAX_BOUND_ENDPOINTS)

    _name = field_validator("name")(_not_blank)
    _ids = field_validator("webhookEndpointIds")(_unique_ids)


class SchemaOut(ApiModel):
    id: str
    name: str
    description: str | None
    definition: dict[str, Any]
    webhookEndpointIds: list[str]
    createdAt: str
    updatedAt: str


class SchemaPage(ApiModel):
    data: list[SchemaOut]
    nextCursor: str | None


class ExampleOut(ApiModel):
    """What one confirmed result (a correction or an approval) taught about its issuer."""

    id: str
    schemaId: str
    jobId: str = Field(description="the job whose confirmed result taught it")
    fields: dict[str, Any] = Field(description="per JSON pointer: the confirmed `value`, whether the issuer prints "
                                   "it the same on every document (`constant`), and `spots`: the label it stood "
                                   "after (`where` right) or the line it stood under (`where` below), and its height "
                                   "on the page (`y`)")
    createdAt: str


class ExamplePage(ApiModel):
    data: list[ExampleOut]
    nextCursor: str | None


class ConvertBody(ApiModel):
    """Exactly one of the three forms."""

    model_config = ConfigDict(extra="forbid")

    fields: list[FieldSpec] | None = Field(default=None, min_length=1, max_length=MAX_PROPERTIES)
    jsonSchema: dict[str, Any] | None = None
    example: dict[str, Any] | None = Field(default=None, description="a sample result")

    @model_validator(mode="after")
    def _exactly_one(self) -> ConvertBody:
        given = [v for v in (self.fields, self.jsonSchema, self.example) if v is not None]
        if len(given) != 1:
            raise ValueError("exactly one of fields, jsonSchema or example must be given")
        return self


class ConvertOut(ApiModel):
    """`jsonSchema` for a `fields` or `example` request; `fields` for a `jsonSchema` one."""

    jsonSchema: dict[str, Any] | None = None
    fields: list[FieldSpec] | None = None


def schema_json(row: Any) -> dict[str, Any]:
    """The schema object of the API."""
    return {"id": row.id, "name": row.name, "description": row.description, "definition": row.definition,
            "webhookEndpointIds": list(row.webhook_endpoint_ids),
            "createdAt": iso(row.created_at), "updatedAt": iso(row.updated_at)}


async def checked_definition(definition: dict[str, Any]) -> dict[str, Any]:
    """`definition` if it is a supported schema; else BadRequest naming each problem's path.

    Checked in a thread: the check grows with the definition (a few seconds of CPU for one
    of 4 MiB, the body limit), which on the event loop would stall every other request."""
    problems = await trio.to_thread.run_sync(check_definition, definition)
    if problems:
        raise BadRequest(problems)
    return definition


# --- routes ---------------------------------------------------------------------------

@blueprint.post("/schemas")
@validate_request(CreateSchemaBody)
@document_response(SchemaOut, 201)
async def create_schema(data: CreateSchemaBody) -> tuple[dict[str, Any], int]:
    """Create a schema; an invalid definition is 400 with one message per problem."""
    definition = await checked_definition(data.definition)
    row = await services().db.run(
        repo.create_schema, user_id=current_principal().user_id, name=data.name, description=data.description,
        definition=definition, webhook_endpoint_ids=data.webhookEndpointIds, now=utcnow(),
    )
    return schema_json(row), 201


@blueprint.get("/schemas")
@validate_querystring(PageQuery)
@document_response(SchemaPage)
async def list_schemas(query_args: PageQuery) -> Response:
    """The current user's schemas that are not deleted, newest first."""
    rows = await services().db.read(repo.list_schemas, current_principal().user_id, query_args.limit,
                                    query_args.cursor)
    return await encoded(page(rows, query_args.limit, schema_json))


@blueprint.get("/schemas/<schema_id>")
@document_response(SchemaOut)
async def get_schema(schema_id: str) -> dict[str, Any]:
    row = await services().db.read(repo.get_schema, current_principal().user_id, schema_id)
    if row is None:
        raise NotFound("Schema not found")
    return schema_json(row)


@blueprint.patch("/schemas/<schema_id>")
@validate_request(UpdateSchemaBody)
@document_response(SchemaOut)
async def update_schema(schema_id: str, data: UpdateSchemaBody) -> dict[str, Any]:
    """Change name, description, definition (checked again) or bound webhook endpoints."""
    given = data.model_dump(exclude_unset=True)
    changes: dict[str, Any] = {}
    if given.get("name") is not None:
        changes["name"] = given["name"]
    if "description" in given:
        changes["description"] = given["description"]
    if given.get("definition") is not None:
        changes["definition"] = await checked_definition(given["definition"])
    if given.get("webhookEndpointIds") is not None:
        changes["webhook_endpoint_ids"] = given["webhookEndpointIds"]
    row = await services().db.run(repo.update_schema, current_principal().user_id, schema_id, changes, utcnow())
    if row is None:
        raise NotFound("Schema not found")
    return schema_json(row)


@blueprint.delete("/schemas/<schema_id>")
@document_response(NoContent, 204)
async def delete_schema(schema_id: str) -> Response:
    """Soft-delete: jobs already queued on it fail with SCHEMA_NOT_FOUND."""
    if not await services().db.run(repo.delete_schema, current_principal().user_id, schema_id, utcnow()):
        raise NotFound("Schema not found")
    return no_content()


def example_json(row: Any) -> dict[str, Any]:
    return {"id": row.id, "schemaId": row.schema_id, "jobId": row.job_id, "fields": row.fields,
            "createdAt": iso(row.created_at)}


async def _own_schema(schema_id: str) -> str:
    """The caller's id, once `schema_id` is one of their schemas (404 otherwise)."""
    user_id = current_principal().user_id
    if await services().db.read(repo.get_schema, user_id, schema_id, include_deleted=True) is None:
        raise NotFound("Schema not found")
    return user_id


@blueprint.get("/schemas/<schema_id>/examples")
@validate_querystring(PageQuery)
@document_response(ExamplePage)
async def list_examples(schema_id: str, query_args: PageQuery) -> dict[str, Any]:
    """The examples the caller's corrections and approvals taught for this schema, newest first."""
    user_id = await _own_schema(schema_id)
    rows = await services().db.read(learning_repo.list_examples, user_id, schema_id, query_args.limit,
                                    query_args.cursor)
    return page(rows, query_args.limit, example_json)


@blueprint.delete("/schemas/<schema_id>/examples/<example_id>")
@document_response(NoContent, 204)
async def delete_example(schema_id: str, example_id: str) -> Response:
    """Forget one learned example: later documents are read without it."""
    user_id = await _own_schema(schema_id)
    if not await services().db.run(learning_repo.delete_example, user_id, schema_id, example_id):
        raise NotFound("Example not found")
    return no_content()


@blueprint.post("/schema/convert")
@public
@small_body(CONVERT_BODY_BYTES)
@limited_per_ip("schema_convert")
@validate_request(ConvertBody)
@document_response(ConvertOut)
async def convert(data: ConvertBody) -> dict[str, Any]:
    """Convert between field form and JSON Schema, or infer a JSON Schema from a sample result.

    `{"fields"}` → `{"jsonSchema"}`, `{"jsonSchema"}` → `{"fields"}`, `{"example"}` → `{"jsonSchema"}`.
    """
    try:
        # In a thread, like `checked_definition`: this route is public, and each conversion
        # checks the schema it reads or makes.
        return await trio.to_thread.run_sync(_converted, data)
    except ConversionError as exc:
        raise BadRequest(exc.problems) from exc


def _converted(data: ConvertBody) -> dict[str, Any]:
    if data.fields is not None:
        return {"jsonSchema": fields_to_schema(data.fields)}
    if data.jsonSchema is not None:
        return {"fields": [field_json(f) for f in schema_to_fields(data.jsonSchema)]}
    assert data.example is not None
    return {"jsonSchema": infer_schema(data.example)}
