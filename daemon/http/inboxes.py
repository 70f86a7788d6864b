"""/api/inboxes: watched folders whose new files become jobs (issue #17).

    POST   /api/inboxes        {kind, schemaId, path | prefix | folderId, integrationId?, after?} → 201
    GET    /api/inboxes        {data, nextCursor}
    GET    /api/inboxes/:id
    PATCH  /api/inboxes/:id    {paused} → 200
    DELETE /api/inboxes/:id    204 (its jobs stay)

A local folder is an ADMIN's only (403 otherwise) and lies under `inboxes.local_root`:
a path that is absolute, holds `..` or a NUL byte, or resolves (symlinks followed)
outside the root is refused with 400. An S3 prefix or a Google Drive folder goes through
one of the caller's integrations of that provider.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import trio
from pydantic import Field, StrictBool
from quart import Blueprint
from quart_schema import document_response, tag_blueprint, validate_querystring, validate_request
from quart_trio.wrappers.response import TrioResponse as Response

from daemon.auth.guard import current_principal
from daemon.clock import utcnow
from daemon.errors import BadRequest, Forbidden
from daemon.http.context import no_content, services
from daemon.http.models import ApiModel
from daemon.http.openapi import NoContent, error_responses
from daemon.http.pagination import PageQuery, page
from daemon.inboxes.local import PathRefused, one_spelling, resolve_folder, watched_elsewhere
from daemon.inboxes.models import After, InboxKind, inbox_json
from daemon.integrations.base import Provider
from daemon.storage.ids import looks_like_id
from daemon.storage.repos import inboxes as repo
from daemon.storage.repos.accounts import Role
from daemon.storage.repos.integrations import get_integration
from daemon.storage.repos.schemas import get_schema

blueprint = Blueprint("inboxes", __name__, url_prefix="/api/inboxes")
tag_blueprint(blueprint, ["inboxes"])

_PROVIDER_OF = {InboxKind.S3: Provider.S3, InboxKind.GOOGLE_DRIVE: Provider.GOOGLE_DRIVE}


class CreateInboxBody(ApiModel):
    """Where to look (`path` for local, `prefix` for s3, `folderId` for google-drive) and the
    schema the jobs are made with."""

    kind: InboxKind = Field(description="local (ADMIN only) | s3 | google-drive")
    schemaId: str = Field(min_length=1, max_length=64)
    path: str | None = Field(default=None, max_length=1024,
                             description="local: a folder relative to the server's inboxes.local_root")
    prefix: str | None = Field(default=None, max_length=1024,
                               description="s3: a key prefix under the integration's own prefix ('' for all)")
    folderId: str | None = Field(default=None, min_length=1, max_length=256,
                                 description="google-drive: the id of the folder ('root' for My Drive)")
    integrationId: str | None = Field(default=None, min_length=1, max_length=64,
                                      description="s3 and google-drive: one of your integrations of that provider")
    after: After | None = Field(default=None, description="local: move (default) each file into done/ or failed/ "
                                "beside it once its job ended, or keep it in place")


class PatchInboxBody(ApiModel):
    paused: StrictBool = Field(description="a paused inbox takes nothing until resumed")


class InboxOut(ApiModel):
    id: str
    kind: InboxKind
    schemaId: str
    integrationId: str | None
    path: str | None = Field(description="local: the folder under inboxes.local_root")
    prefix: str | None = Field(description="s3: the key prefix")
    folderId: str | None = Field(description="google-drive: the folder's id")
    after: After = Field(description="what becomes of a local file once its job ended (keep for remote files)")
    paused: bool
    createdAt: str
    updatedAt: str
    lastSweptAt: str | None = Field(description="when a process last listed it")
    lastError: str | None = Field(description="why the last sweep failed (folder gone, integration denied), "
                                  "null once one works")


class InboxPage(ApiModel):
    data: list[InboxOut]
    nextCursor: str | None


async def _checked(body: CreateInboxBody) -> tuple[str | None, str, After, Path | None]:
    """(integration id, where, after, the local folder resolved) of a valid request; 400
    naming every problem, 403 for a USER's local folder."""
    principal = current_principal()
    problems: list[str] = []
    schema_ok = looks_like_id(body.schemaId) and await services().db.read(
        get_schema, principal.user_id, body.schemaId) is not None
    if not schema_ok:
        problems.append("schemaId must be the id of one of your schemas")
    given = {name for name in ("path", "prefix", "folderId") if getattr(body, name) is not None}
    wanted = {InboxKind.LOCAL: "path", InboxKind.S3: "prefix", InboxKind.GOOGLE_DRIVE: "folderId"}[body.kind]
    for other in sorted(given - {wanted}):
        problems.append(f"{other} does not apply to a {body.kind} inbox (it takes {wanted})")
    if body.kind == InboxKind.LOCAL:
        if principal.role is not Role.ADMIN:
            raise Forbidden("Only an admin may watch a folder on the server")
        if body.integrationId is not None:
            problems.append("integrationId does not apply to a local inbox")
        root = services().config.inboxes.local_root
        try:
            folder = await trio.to_thread.run_sync(resolve_folder, root, body.path or "")
        except PathRefused as exc:
            problems.append(str(exc))
        if problems:
            raise BadRequest(problems)
        return None, one_spelling(body.path or ""), body.after or After.MOVE, folder
    if body.after == After.MOVE:
        problems.append("after: move applies to local folders only (remote files are left in place)")
    if body.kind == InboxKind.GOOGLE_DRIVE and body.folderId is None:
        problems.append("folderId should not be empty")
    row = None
    if body.integrationId is None:
        problems.append("integrationId should not be empty")
    else:
        row = await services().db.read(get_integration, principal.user_id, body.integrationId)
        if row is None:
            problems.append("integrationId must be the id of one of your integrations")
        elif row.provider != _PROVIDER_OF[body.kind]:
            problems.append(f"integrationId must be a {_PROVIDER_OF[body.kind]} integration for a {body.kind} inbox")
    if problems:
        raise BadRequest(problems)
    where = body.prefix or "" if body.kind == InboxKind.S3 else body.folderId or ""
    return body.integrationId, where.lstrip("/") if body.kind == InboxKind.S3 else where, After.KEEP, None


@blueprint.post("")
@validate_request(CreateInboxBody)
@document_response(InboxOut, 201)
@error_responses(403, 409)
async def create_inbox(data: CreateInboxBody) -> tuple[dict[str, Any], int]:
    """Watch a folder: each new file becomes a job, one batch run per sweep (inbox.swept)."""
    integration_id, where, after, folder = await _checked(data)
    root = services().config.inboxes.local_root
    clashes = None if folder is None else functools.partial(watched_elsewhere, root, folder)
    inbox = await services().db.run(
        repo.create_inbox, user_id=current_principal().user_id, schema_id=data.schemaId, kind=data.kind,
        integration_id=integration_id, path=where, after=after, now=utcnow(), clashes=clashes)
    services().inboxes_changed.set()
    return inbox_json(inbox), 201


@blueprint.get("")
@validate_querystring(PageQuery)
@document_response(InboxPage)
async def list_inboxes(query_args: PageQuery) -> dict[str, Any]:
    """The caller's inboxes, newest first."""
    rows = await services().db.read(repo.list_inboxes, current_principal().user_id, query_args.limit,
                                    query_args.cursor)
    return page(rows, query_args.limit, inbox_json)


@blueprint.get("/<inbox_id>")
@document_response(InboxOut)
async def get_inbox(inbox_id: str) -> dict[str, Any]:
    return inbox_json(await services().db.read(repo.owned_inbox, current_principal().user_id, inbox_id))


@blueprint.patch("/<inbox_id>")
@validate_request(PatchInboxBody)
@document_response(InboxOut)
async def patch_inbox(inbox_id: str, data: PatchInboxBody) -> dict[str, Any]:
    """Pause or resume the inbox. Files added while paused are taken once resumed."""
    inbox = await services().db.run(repo.set_paused, current_principal().user_id, inbox_id, data.paused, utcnow())
    services().inboxes_changed.set()
    return inbox_json(inbox)


@blueprint.delete("/<inbox_id>")
@document_response(NoContent, 204)
async def delete_inbox(inbox_id: str) -> Response:
    """Stop watching; the jobs it made stay, and its files are left where they are."""
    await services().db.run(repo.delete_inbox, current_principal().user_id, inbox_id)
    services().inboxes_changed.set()
    return no_content()
