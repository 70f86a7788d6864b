"""/api/auth: register, login, refresh, logout, sessions, API keys, me, verify (SPEC §4)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal, cast

import email_validator
from email_validator import EmailNotValidError, validate_email
from pydantic import Field, ValidationInfo, field_validator
from quart import Blueprint, Response, make_response, request
from quart_schema import document_response, security_scheme, tag_blueprint, validate_querystring, validate_request

from daemon.auth import accounts
from daemon.auth.emails import email_key
from daemon.auth.guard import current_principal, jwt_only, public
from daemon.auth.passwords import MAX_PASSWORD_BYTES, normalized
from daemon.auth.principal import Credential
from daemon.clock import iso, utcnow
from daemon.errors import BadRequest, Forbidden, NotFound
from daemon.http.context import client_ip, enforce_limit, limited_per_ip, no_content, services
from daemon.http.models import ApiModel, IsoDateTime
from daemon.http.openapi import ACCESS_TOKEN, NoContent, error_responses
from daemon.http.pagination import PageQuery, page
from daemon.http.requests import PUBLIC_BODY_BYTES, small_body
from daemon.http.validation import in_utc
from daemon.storage.repos import accounts as repo
from daemon.storage.repos.accounts import Role

blueprint = Blueprint("auth", __name__, url_prefix="/api/auth")
tag_blueprint(blueprint, ["auth"])

# --- request and response models -------------------------------------------------------

# Self-hosted teams sign in with internal addresses such as ada@corp.local, which the
# library refuses by default as "special-use"; the other special names stay refused.
if "local" in email_validator.SPECIAL_USE_DOMAIN_NAMES:
    email_validator.SPECIAL_USE_DOMAIN_NAMES.remove("local")


def checked_email(value: str) -> str:
    value = value.strip()
    try:
        validate_email(value, check_deliverability=False)
    except EmailNotValidError:
        raise ValueError("email must be an email") from None
    return value


def checked_name(value: str) -> str:
    if not value.strip():
        raise ValueError("name should not be empty")
    return value.strip()


def checked_password(value: str, info: ValidationInfo) -> str:
    if len(normalized(value).encode()) > MAX_PASSWORD_BYTES:
        raise ValueError(f"{info.field_name} must be shorter than or equal to {MAX_PASSWORD_BYTES} bytes "
                         "(bcrypt's limit)")
    return value


class RegisterBody(ApiModel):
    name: str = Field(min_length=1, max_length=100)
    email: str = Field(max_length=320)
    password: str = Field(min_length=6)

    _email = field_validator("email")(checked_email)
    _name = field_validator("name")(checked_name)
    _password = field_validator("password")(checked_password)


class ResetPasswordBody(ApiModel):
    """`docex users set-password`: an administrator's reset, on the server."""

    email: str = Field(max_length=320)
    newPassword: str = Field(min_length=6)

    _email = field_validator("email")(checked_email)
    _password = field_validator("newPassword")(checked_password)


class ChangePasswordBody(ApiModel):
    currentPassword: str = Field(min_length=1, max_length=1024)
    newPassword: str = Field(min_length=6)

    _password = field_validator("newPassword")(checked_password)


class LoginBody(ApiModel):
    email: str = Field(max_length=320)
    password: str = Field(min_length=1, max_length=1024)

    _email = field_validator("email")(checked_email)


class RefreshBody(ApiModel):
    refreshToken: str | None = Field(
        default=None, min_length=1, max_length=512,
        description="required unless the session is the cookie (header `X-Docex-Session: cookie`, body `{}`)")


class UserOut(ApiModel):
    id: str
    name: str
    email: str
    role: Role
    createdAt: str


class TokenPairOut(ApiModel):
    user: UserOut
    accessToken: str
    refreshToken: str | None = Field(
        default=None, description="absent when the request said `X-Docex-Session: cookie`: the refresh token is "
                                  "then in an httpOnly cookie the page's scripts cannot read")
    expiresIn: int = Field(description="access-token lifetime in seconds")


class SessionOut(ApiModel):
    id: str
    createdAt: str
    lastUsedAt: str
    expiresAt: str
    userAgent: str | None
    ip: str | None
    current: bool


class SessionPage(ApiModel):
    data: list[SessionOut]
    nextCursor: str | None


class CreateApiKeyBody(ApiModel):
    name: str = Field(min_length=1, max_length=100)
    role: Role | None = None
    expiresAt: IsoDateTime | None = None

    _name = field_validator("name")(checked_name)

    @field_validator("expiresAt")
    @classmethod
    def _future(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("expiresAt must be a valid ISO 8601 date string with a time zone")
        value = in_utc(value, "expiresAt")  # stored in UTC: 9999-12-31T23:59:59-23:59 has no such time
        if value <= utcnow():
            raise ValueError("expiresAt must be a date in the future")
        return value


class ApiKeyOut(ApiModel):
    id: str
    name: str
    role: Role
    prefix: str
    last4: str
    createdAt: str
    expiresAt: str | None
    lastUsedAt: str | None


class ApiKeyCreatedOut(ApiKeyOut):
    apiKey: str = Field(description="the key itself, shown only in this answer")


class ApiKeyPage(ApiModel):
    data: list[ApiKeyOut]
    nextCursor: str | None


class VerifyOut(ApiModel):
    valid: Literal[True]
    userId: str
    role: Role
    credential: Literal["access_token", "api_key"]
    sessionId: str | None
    apiKeyId: str | None


def user_json(row: Any) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "email": row.email, "role": row.role, "createdAt": iso(row.created_at)}


def pair_json(pair: accounts.TokenPair) -> dict[str, Any]:
    return {"user": user_json(pair.user), "accessToken": pair.access_token,
            "refreshToken": pair.refresh_token, "expiresIn": pair.expires_in}


# --- the console's session: the refresh token in an httpOnly cookie -------------------------
#
# A page keeps its access token in memory only; its refresh token lives in a cookie its
# scripts cannot read (an XSS cannot steal it), sent only to /api/auth. A request opts in
# with SESSION_HEADER. A cross-site form or <img> can neither set that header nor, under
# SameSite=Strict, carry the cookie: refresh and logout by cookie require both.
SESSION_HEADER = "X-Docex-Session"
SESSION_COOKIE = "docex_refresh"
_COOKIE_PATH = "/api/auth"


def _cookie_session() -> bool:
    return request.headers.get(SESSION_HEADER, "").strip().lower() == "cookie"


async def _pair_response(pair: accounts.TokenPair, status: int = 200) -> Response:
    """The token pair; with the cookie opt-in, its refresh token set as the session cookie
    instead of in the body."""
    body = pair_json(pair)
    if _cookie_session():
        del body["refreshToken"]
    response = cast(Response, await make_response(body, status))
    if not _cookie_session():
        return response
    response.set_cookie(SESSION_COOKIE, pair.refresh_token, max_age=services().config.auth.refresh_ttl_s,
                        path=_COOKIE_PATH, secure=request.scheme == "https", httponly=True, samesite="Strict")
    return response


def _presented_refresh_token(data: RefreshBody) -> str:
    """The refresh token of the body, else of the session cookie (which needs SESSION_HEADER)."""
    if data.refreshToken:
        return data.refreshToken
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise BadRequest(["refreshToken should not be empty"])
    if not _cookie_session():
        raise Forbidden(f"The session cookie is accepted only with the header {SESSION_HEADER}: cookie")
    return cookie


def _cleared(response: Response) -> Response:
    response.delete_cookie(SESSION_COOKIE, path=_COOKIE_PATH, secure=request.scheme == "https", httponly=True,
                           samesite="Strict")
    return response


def api_key_json(row: Any) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "role": row.role, "prefix": row.prefix, "last4": row.last4,
            "createdAt": iso(row.created_at), "expiresAt": iso(row.expires_at), "lastUsedAt": iso(row.last_used_at)}


def this_client() -> accounts.Client:
    return accounts.Client(user_agent=request.headers.get("User-Agent"), ip=client_ip())


# --- routes ---------------------------------------------------------------------------

@blueprint.post("/register")
@public
@small_body(PUBLIC_BODY_BYTES)
@limited_per_ip("register")
@validate_request(RegisterBody)
@document_response(TokenPairOut, 201)
@error_responses(403, 409)
async def register(data: RegisterBody) -> Response:
    """Create an account (the first one is ADMIN) and log it in. With the header
    `X-Docex-Session: cookie` the refresh token is set as an httpOnly cookie, not in the body."""
    pair = await accounts.register(services(), name=data.name, email=data.email, password=data.password,
                                   client=this_client())
    return await _pair_response(pair, 201)


@blueprint.post("/login")
@public
@small_body(PUBLIC_BODY_BYTES)
@limited_per_ip("login")
@validate_request(LoginBody)
@document_response(TokenPairOut)
@error_responses(401, 403)
async def login(data: LoginBody) -> Response:
    """Exchange e-mail and password for a token pair. With the header `X-Docex-Session: cookie`
    the refresh token is set as an httpOnly cookie, not in the body."""
    await enforce_limit("login", f"email:{email_key(data.email)}")  # every spelling shares one limit
    pair = await accounts.login(services(), email=data.email, password=data.password, client=this_client())
    return await _pair_response(pair)


@blueprint.post("/refresh")
@public
@small_body(PUBLIC_BODY_BYTES)
@limited_per_ip("refresh")
@validate_request(RefreshBody)
@document_response(TokenPairOut)
@error_responses(401, 403)
async def refresh(data: RefreshBody) -> Response:
    """Rotate a refresh token: a new pair; the old session is revoked. Without `refreshToken`
    in the body, the session cookie's (which needs the header `X-Docex-Session: cookie`,
    else 403); with that header the new refresh token is set as the cookie."""
    return await _pair_response(await accounts.refresh(services(), _presented_refresh_token(data), this_client()))


@blueprint.post("/logout")
@public
@small_body(PUBLIC_BODY_BYTES)
@limited_per_ip("refresh")
@validate_request(RefreshBody)
@document_response(NoContent, 204)
@error_responses(401, 403)
async def logout(data: RefreshBody) -> Response:
    """Revoke the session of this refresh token, or of the session cookie (with the header
    `X-Docex-Session: cookie`, else 403), and clear the cookie."""
    await accounts.logout(services(), _presented_refresh_token(data))
    return _cleared(no_content()) if _cookie_session() else no_content()


@blueprint.post("/logout-all")
@jwt_only
@security_scheme(ACCESS_TOKEN)
@document_response(NoContent, 204)
@error_responses(403)
async def logout_all() -> Response:
    """Revoke every session of the current user (API keys stay valid)."""
    await services().db.run(repo.revoke_user_sessions, current_principal().user_id, utcnow())
    return no_content()


@blueprint.post("/password")
@jwt_only
@security_scheme(ACCESS_TOKEN)
@limited_per_ip("login")
@validate_request(ChangePasswordBody)
@document_response(NoContent, 204)
@error_responses(403)
async def change_password(data: ChangePasswordBody) -> Response:
    """Change the current user's password (the current one is asked again, 403 if wrong).
    Every other session of the account ends; this one and the API keys stay."""
    p = current_principal()
    await accounts.change_password(services(), user_id=p.user_id, current=data.currentPassword,
                                   new=data.newPassword, keep_session=p.session_id)
    return no_content()


@blueprint.get("/me")
@document_response(UserOut)
async def me() -> dict[str, Any]:
    p = current_principal()
    user = p.user if p.user is not None else await services().db.read(repo.get_user, p.user_id)
    if user is None:
        raise NotFound("User not found")
    return user_json(user)


@blueprint.get("/verify")
@document_response(VerifyOut)
async def verify() -> dict[str, Any]:
    """Confirm the credential is valid, and say whose it is."""
    p = current_principal()
    return {"valid": True, "userId": p.user_id, "role": p.role, "credential": p.credential,
            "sessionId": p.session_id, "apiKeyId": p.api_key_id}


@blueprint.get("/sessions")
@jwt_only
@security_scheme(ACCESS_TOKEN)
@validate_querystring(PageQuery)
@document_response(SessionPage)
@error_responses(403)
async def list_sessions(query_args: PageQuery) -> dict[str, Any]:
    """Active refresh sessions of the current user, newest first. Needs an access token: a
    person's logins, with their addresses, are not a script's to read."""
    p = current_principal()
    rows = await services().db.read(repo.list_sessions, p.user_id, utcnow(), query_args.limit, query_args.cursor)
    return page(rows, query_args.limit, lambda r: {
        "id": r.id, "createdAt": iso(r.created_at), "lastUsedAt": iso(r.last_used_at),
        "expiresAt": iso(r.expires_at), "userAgent": r.user_agent, "ip": r.ip, "current": r.id == p.session_id,
    })


@blueprint.delete("/sessions/<session_id>")
@jwt_only
@security_scheme(ACCESS_TOKEN)
@document_response(NoContent, 204)
@error_responses(403)
async def delete_session(session_id: str) -> Response:
    """End one session. Needs an access token, as `logout-all` does: a leaked API key would
    otherwise sign its owner out everywhere."""
    if not await services().db.run(repo.revoke_session, current_principal().user_id, session_id, utcnow()):
        raise NotFound("Session not found")
    return no_content()


@blueprint.post("/api-keys")
@jwt_only
@security_scheme(ACCESS_TOKEN)
@validate_request(CreateApiKeyBody)
@document_response(ApiKeyCreatedOut, 201)
@error_responses(403, 409)
async def create_api_key(data: CreateApiKeyBody) -> tuple[dict[str, Any], int]:
    """Create an API key; `apiKey` is in this answer only. Needs an access token."""
    p = current_principal()
    new = await accounts.create_api_key(services(), user_id=p.user_id, owner_role=p.role, name=data.name,
                                        role=data.role, expires_at=data.expiresAt)
    accounts.log.info("API key created", extra={"action": "auth.api_key_created", "user_id": p.user_id,
                                                "api_key_id": new.row.id, "role": new.row.role})
    return {**api_key_json(new.row), "apiKey": new.plaintext}, 201


@blueprint.get("/api-keys")
@validate_querystring(PageQuery)
@document_response(ApiKeyPage)
async def list_api_keys(query_args: PageQuery) -> dict[str, Any]:
    """The current user's keys that are not revoked (metadata only), newest first."""
    rows = await services().db.read(repo.list_api_keys, current_principal().user_id, utcnow(),
                                    query_args.limit, query_args.cursor)
    return page(rows, query_args.limit, api_key_json)


@blueprint.delete("/api-keys/<key_id>")
@document_response(NoContent, 204)
@error_responses(403)
async def revoke_api_key(key_id: str) -> Response:
    """Revoke a key. An API key may revoke itself (a key found leaked); another key, which
    may hold a higher role, only an access token revokes."""
    p = current_principal()
    if p.credential is Credential.API_KEY and key_id != p.api_key_id:
        raise Forbidden("An API key may revoke only itself; revoking another key needs an access token")
    user_id = p.user_id
    if not await services().db.run(repo.revoke_api_key, user_id, key_id, utcnow()):
        raise NotFound("API key not found")
    accounts.log.info("API key revoked", extra={"action": "auth.api_key_revoked", "user_id": user_id,
                                                "api_key_id": key_id})
    return no_content()

