"""/api/admin: users and statistics, for ADMIN principals only (403 for USER)."""

from __future__ import annotations

from typing import Any

from pydantic import StrictBool
from quart import Blueprint
from quart_schema import document_response, tag_blueprint, validate_querystring, validate_request

from daemon.auth.accounts import log as audit
from daemon.auth.guard import admin_only, current_principal
from daemon.clock import iso, utcnow
from daemon.errors import Conflict, NotFound
from daemon.http.context import services
from daemon.http.models import ApiModel
from daemon.http.openapi import error_responses
from daemon.http.pagination import PageQuery, page
from daemon.storage.repos import accounts as repo
from daemon.storage.repos.accounts import Role

blueprint = Blueprint("admin", __name__, url_prefix="/api/admin")
tag_blueprint(blueprint, ["admin"])


class AdminUserOut(ApiModel):
    id: str
    name: str
    email: str
    role: Role
    disabled: bool
    createdAt: str
    updatedAt: str


class AdminUserPage(ApiModel):
    data: list[AdminUserOut]
    nextCursor: str | None


class StatsOut(ApiModel):
    users: int
    admins: int
    disabledUsers: int
    activeSessions: int
    activeApiKeys: int


class UpdateUserBody(ApiModel):
    role: Role | None = None
    disabled: StrictBool | None = None


def admin_user_json(row: Any) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "email": row.email, "role": row.role, "disabled": row.disabled,
            "createdAt": iso(row.created_at), "updatedAt": iso(row.updated_at)}


@blueprint.get("/users")
@admin_only
@validate_querystring(PageQuery)
@document_response(AdminUserPage)
@error_responses(403)
async def list_users(query_args: PageQuery) -> dict[str, Any]:
    rows = await services().db.read(repo.list_users, query_args.limit, query_args.cursor)
    return page(rows, query_args.limit, admin_user_json)


@blueprint.patch("/users/<user_id>")
@admin_only
@validate_request(UpdateUserBody)
@document_response(AdminUserOut)
@error_responses(403, 409)
async def update_user(user_id: str, data: UpdateUserBody) -> dict[str, Any]:
    """Change a user's role or disable them. Disabling ends the user's sessions for good
    (enabling the account again does not bring them back) and refuses their API keys while
    it lasts."""
    changes = data.model_dump(exclude_none=True)
    demoting_self = user_id == current_principal().user_id and (
        changes.get("role") == Role.USER or changes.get("disabled") is True
    )
    if demoting_self:
        # An admin locking themselves out is almost always a mistake, and may leave no admin.
        raise Conflict("Admins cannot demote or disable themselves; ask another admin")
    row = await services().db.run(repo.update_user, user_id, changes, utcnow())
    if row is None:
        raise NotFound("User not found")
    if changes:
        audit.info("account changed by an admin", extra={"action": "admin.user_updated", "user_id": user_id,
                                                         "by": current_principal().user_id, **changes})
    return admin_user_json(row)


@blueprint.get("/stats")
@admin_only
@document_response(StatsOut)
@error_responses(403)
async def stats() -> dict[str, Any]:
    """Counts across the whole installation."""
    return await services().db.read(repo.account_stats, utcnow())
