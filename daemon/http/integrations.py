"""/api/integrations: remote file stores a user's jobs can take their files from (SPEC §10).

    POST   /api/integrations                        s3 → 201 integration; google-drive → 201 with authorizationUrl
    GET    /api/integrations                        {data, nextCursor}
    GET    /api/integrations/:id
    DELETE /api/integrations/:id                    204
    POST   /api/integrations/:id/test               200 {ok: true} | 400 {details: {errorCode, retryable}}
    POST   /api/integrations/:id/reconnect          google-drive: 200 with a new authorizationUrl
    GET    /api/integrations/google-drive/callback  public; Google's redirect after consent → an HTML page

Credentials (the S3 secret key, OAuth tokens) are sealed at rest and never in an
answer or a log line.
"""

from __future__ import annotations

import contextlib
import hmac
import html
import logging
import re
import urllib.parse
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel, field_validator
from quart import Blueprint, request
from quart_schema import document_querystring, document_response, tag_blueprint, validate_querystring
from quart_trio.wrappers.response import TrioResponse as Response

from daemon.auth.guard import current_principal, public
from daemon.clock import utcnow
from daemon.errors import BadRequest, JobError
from daemon.http.context import no_content, services
from daemon.http.models import ApiModel
from daemon.http.openapi import HtmlPage, NoContent, error_responses, request_bodies
from daemon.http.pagination import PageQuery, page
from daemon.http.validation import parse
from daemon.integrations.base import IntegrationStatus, Provider
from daemon.integrations.google_drive import SCOPES, DriveSource, OAuthClient, TokenKeeper
from daemon.integrations.models import integration_json, mask_key_id
from daemon.integrations.oauth import (
    InvalidState,
    Tokens,
    authorization_url,
    missing_scopes,
    new_nonce,
    pkce_challenge,
    pkce_verifier,
    sign_state,
    state_key,
    verify_state,
)
from daemon.integrations.s3 import PRIVATE_NETWORKS_SETTING
from daemon.integrations.sealing import seal_secrets
from daemon.integrations.sources import google_client, open_source, revoke_grant
from daemon.storage.ids import new_id
from daemon.storage.repos import integrations as repo
from daemon.storage.repos.accounts import get_user
from daemon.webhooks import ssrf

log = logging.getLogger(__name__)

blueprint = Blueprint("integrations", __name__, url_prefix="/api/integrations")
tag_blueprint(blueprint, ["integrations"])

# Bucket names per https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (loosely:
# compatibles allow a little more, and S3 itself says the rest).
_BUCKET = r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]$"
_URL = re.compile(r"https?://[^\s/]+(/\S*)?")


# --- request and response models -------------------------------------------------------


def _http_url(value: str | None) -> str | None:
    # ASCII without backslashes, and a URL botocore takes: otherwise a host that is loopback to
    # urllib3 passed the literal check here (`http://127.0.0.1\@example.com`, `http://１２７.０.０.１`),
    # or botocore refused the endpoint at each use (`http://127。0。0。1`: POST .../test was a 500).
    if value is None:
        return value
    if not (_URL.fullmatch(value) and value.isascii() and "\\" not in value and _host(value)
            and _botocore_accepts(value)):
        raise ValueError("config.endpointUrl must be an http(s) URL")
    parts = urllib.parse.urlsplit(value)
    if "@" in parts.netloc:  # it would be answered and stored as given: never a secret's place
        raise ValueError("config.endpointUrl must not contain a user name or password "
                         "(send the credentials as accessKeyId and secretAccessKey)")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # out of range: accepted, then every use of the integration failed
        raise ValueError("config.endpointUrl must have a port from 1 to 65535")
    return value


def _botocore_accepts(url: str) -> bool:
    from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url

    return bool(is_valid_endpoint_url(url) or is_valid_ipv6_endpoint_url(url))


def _host(url: str) -> str | None:
    try:
        return urllib.parse.urlsplit(url).hostname
    except ValueError:  # a broken [IPv6] literal or port
        return None


class S3ConfigIn(ApiModel):
    model_config = ConfigDict(extra="forbid")

    accessKeyId: str = Field(min_length=1, max_length=128)
    secretAccessKey: str = Field(min_length=1, max_length=256)
    bucket: str = Field(min_length=3, max_length=63, pattern=_BUCKET)
    region: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9\-]+$")
    endpointUrl: str | None = Field(default=None, max_length=2048, description="for MinIO and other compatibles")
    prefix: str | None = Field(default=None, max_length=1024, description="keys are relative to it")

    _endpoint = field_validator("endpointUrl")(_http_url)


class _CreateBase(ApiModel):
    provider: Provider
    name: str = Field(min_length=1, max_length=100)


class CreateS3Body(ApiModel):
    model_config = ConfigDict(extra="forbid")

    provider: Literal["s3"]
    name: str = Field(min_length=1, max_length=100)
    config: S3ConfigIn


class CreateDriveBody(ApiModel):
    """Answered with an `authorizationUrl` to open in the user's browser."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["google-drive"]
    name: str = Field(min_length=1, max_length=100)


class CreateIntegrationBody(RootModel[Annotated[CreateS3Body | CreateDriveBody, Field(discriminator="provider")]]):
    """An S3 bucket (with its credentials) or a Google Drive to authorize in the browser."""


class IntegrationOut(ApiModel):
    id: str
    provider: Provider
    name: str
    status: IntegrationStatus
    config: dict[str, Any] = Field(description="settings without secrets; S3 accessKeyId masked to its last 4")
    createdAt: str
    updatedAt: str


class AuthorizingOut(IntegrationOut):
    authorizationUrl: str = Field(description="Google's consent page; it redirects to the callback")


class CreatedIntegrationOut(IntegrationOut):
    authorizationUrl: str | None = Field(default=None, description="google-drive only: Google's consent page")


class IntegrationPage(ApiModel):
    data: list[IntegrationOut]
    nextCursor: str | None


class TestOut(ApiModel):
    ok: bool


class CallbackQuery(ApiModel):
    """What Google appends to the redirect: `code` and `state`, or `error`."""

    code: str | None = None
    state: str | None = None
    error: str | None = None


# --- helpers -----------------------------------------------------------------------------


def _authorization_url(integration_id: str, nonce: str) -> str:
    config = services().config
    secret = config.auth.jwt_access_secret
    assert secret is not None  # filled in at start (with_dev_secrets) or required in production
    key = state_key(secret.reveal())
    state = sign_state(key, user_id=current_principal().user_id, integration_id=integration_id, nonce=nonce,
                       now=utcnow())
    return authorization_url(config.google.auth_url, client_id=config.google.client_id,
                             redirect_url=config.google.redirect_url, scopes=SCOPES, state=state,
                             code_challenge=pkce_challenge(pkce_verifier(key, nonce)))


def _require_google() -> None:
    if not services().config.google.configured:
        raise BadRequest(["Google Drive is not configured on this server: the operator sets google.client_id, "
                          "google.client_secret and google.redirect_url"])


def _refused_endpoint(url: str) -> bool:
    """An endpoint the SSRF guard refuses without a lookup (a name is checked at each connection)."""
    return ssrf.literal_refused(_host(url) or "")


async def _owned(integration_id: str) -> Any:
    return await services().db.read(repo.owned_integration, current_principal().user_id, integration_id)


# --- routes ------------------------------------------------------------------------------


@blueprint.post("")
@request_bodies(json=CreateIntegrationBody)
@document_response(CreatedIntegrationOut, 201)
async def create_integration() -> tuple[dict[str, Any], int]:
    """Connect S3 (`config`: accessKeyId, secretAccessKey, bucket, region, endpointUrl?, prefix?)
    or Google Drive (answered with the `authorizationUrl` the user opens to consent)."""
    raw = await request.get_json()
    if not isinstance(raw, dict) or raw.get("provider") not in tuple(Provider):
        parse(_CreateBase, raw)  # raises the 400 naming every problem
    integration_id = new_id()
    user_id = current_principal().user_id
    config = services().config
    if raw["provider"] == Provider.S3:
        body = parse(CreateS3Body, raw)
        s3 = body.config
        if s3.endpointUrl and not config.integrations.allow_private_networks and _refused_endpoint(s3.endpointUrl):
            raise BadRequest([f"config.endpointUrl must not point to a private, loopback or link-local address "
                              f"({PRIVATE_NETWORKS_SETTING} is off)"])
        shown = {"accessKeyIdLast4": mask_key_id(s3.accessKeyId), "bucket": s3.bucket, "region": s3.region,
                 "endpointUrl": s3.endpointUrl, "prefix": s3.prefix or ""}
        sealed = seal_secrets(config, integration_id,
                              {"accessKeyId": s3.accessKeyId, "secretAccessKey": s3.secretAccessKey})
        row = await services().db.run(
            repo.create_integration, integration_id=integration_id, user_id=user_id, provider=Provider.S3,
            name=body.name, status=IntegrationStatus.CONNECTED, config=shown, secrets_sealed=sealed,
            oauth_nonce=None, now=utcnow(),
        )
        log.info("integration created", extra={"action": "integration.created", "integration_id": integration_id,
                                               "provider": "s3"})
        return integration_json(row), 201
    drive = parse(CreateDriveBody, raw)
    _require_google()
    nonce = new_nonce()
    row = await services().db.run(
        repo.create_integration, integration_id=integration_id, user_id=user_id, provider=Provider.GOOGLE_DRIVE,
        name=drive.name, status=IntegrationStatus.PENDING_AUTHORIZATION, config={}, secrets_sealed=None,
        oauth_nonce=nonce, now=utcnow(),
    )
    log.info("integration created", extra={"action": "integration.created", "integration_id": integration_id,
                                           "provider": "google-drive"})
    return integration_json(row) | {"authorizationUrl": _authorization_url(integration_id, nonce)}, 201


@blueprint.get("")
@validate_querystring(PageQuery)
@document_response(IntegrationPage)
async def list_integrations(query_args: PageQuery) -> dict[str, Any]:
    """The caller's integrations, newest first."""
    rows = await services().db.read(repo.list_integrations, current_principal().user_id, query_args.limit,
                                    query_args.cursor)
    return page(rows, query_args.limit, integration_json)


@blueprint.get("/google-drive/callback")
@public
@document_querystring(CallbackQuery)
@document_response(HtmlPage, 200)
@document_response(HtmlPage, 400)
@document_response(HtmlPage, 502)
async def google_drive_callback() -> Response:
    """Where Google sends the user's browser after consent (`code`, `state`; or `error`).

    Public: the signed `state` says whose integration this is, and works once. Answers a
    small HTML page saying what happened (200 connected; 400 a refused, stale or forged
    authorization; 502 Google's token endpoint failed), never the tokens.
    """
    args = request.args
    if error := args.get("error"):
        # Only an error code is shown (RFC 6749 4.1.2.1): free text in the link would be a
        # message of the attacker's on this origin.
        reason = ("You declined access." if error == "access_denied" else
                  f"Google answered: {error}." if _ERROR_CODE.fullmatch(error) else "Google refused the authorization.")
        return _page(400, "Google Drive was not connected", reason)
    code, state = args.get("code", ""), args.get("state", "")
    if not code or not state:
        return _page(400, "Google Drive was not connected", "The link is missing its code or state.")
    config = services().config
    secret = config.auth.jwt_access_secret
    assert secret is not None
    key = state_key(secret.reveal())
    try:
        claim = verify_state(key, state, utcnow())
    except InvalidState as exc:
        return _page(400, "Google Drive was not connected",
                     f"This authorization link is not valid ({exc.reason}). Start again from docex.")
    row = await services().db.read(repo.get_integration, claim.user_id, claim.integration_id)
    if row is None or row.oauth_nonce is None or not hmac.compare_digest(row.oauth_nonce, claim.nonce):
        return _page(400, "Google Drive was not connected",
                     "This authorization link was already used or replaced by a newer one. Start again from docex.")
    if not config.google.configured:
        return _page(400, "Google Drive was not connected", "Google Drive is not configured on this server.")
    async with google_client(services()) as http:
        try:
            tokens = await OAuthClient(http, config.google).exchange_code(code, pkce_verifier(key, claim.nonce))
        except JobError as exc:
            log.warning("oauth code exchange failed", extra={"action": "integration.authorization_failed",
                                                             "integration_id": row.id, "error_code": exc.code})
            return _page(502 if exc.retryable else 400, "Google Drive was not connected",
                         "Google did not accept the authorization. Start again from docex.")
        email: str | None = None
        keeper = TokenKeeper(OAuthClient(http, config.google), tokens, _unsaved)
        # The address is only for display: without it the grant is stored all the same.
        with contextlib.suppress(JobError):
            email = await DriveSource(http, config.google.api_base_url, keeper).account_email()
        tokens = keeper.tokens  # refreshed if it was already about to expire
    sealed = seal_secrets(config, row.id, {"tokens": tokens.to_json()})
    done = await services().db.run(
        repo.complete_authorization, user_id=claim.user_id, integration_id=row.id, nonce=claim.nonce,
        secrets_sealed=sealed, config={"accountEmail": email}, status=IntegrationStatus.CONNECTED, now=utcnow(),
    )
    if done is None:
        return _page(400, "Google Drive was not connected",
                     "This authorization link was already used or replaced by a newer one. Start again from docex.")
    log.info("integration authorized", extra={"action": "integration.authorized", "integration_id": row.id})
    # Whoever opens a link completes it for the account that asked for it: the page says
    # which docex account now reads the Drive, so that a link sent by someone else shows.
    owner = await services().db.read(get_user, claim.user_id)
    lacking = missing_scopes(tokens.scope, SCOPES) if tokens.scope else []
    note = (" Read access to your files was not granted, so jobs will fail with INTEGRATION_PERMISSION_DENIED: "
            "reconnect and allow it.") if lacking else ""
    return _page(200, "Google Drive is connected",
                 f"The integration {row.name!r}{' (' + email + ')' if email else ''} of the docex account "
                 f"{owner.email if owner else 'that made this link'} can now read these files.{note} "
                 "If you did not ask for this, remove docex at myaccount.google.com/permissions. "
                 "You can close this window.")


async def _unsaved(tokens: Tokens) -> None:
    """The callback stores the keeper's latest grant itself, once, after the e-mail lookup."""


_ERROR_CODE = re.compile(r"[a-z_]{1,64}")


def _page(status: int, title: str, text: str) -> Response:
    t, x = html.escape(title), html.escape(text)
    body = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>docex: {t}</title>'
        '<meta name="viewport" content="width=device-width"></head>'
        '<body style="font-family: sans-serif; max-width: 40em; margin: 4em auto">'
        f"<h1>{t}</h1><p>{x}</p></body></html>\n"
    )
    response = Response(body, status=status, content_type="text/html; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return response


@blueprint.get("/<integration_id>")
@document_response(IntegrationOut)
async def get_integration(integration_id: str) -> dict[str, Any]:
    return integration_json(await _owned(integration_id))


@blueprint.delete("/<integration_id>")
@document_response(NoContent, 204)
async def delete_integration(integration_id: str) -> Response:
    """Delete the integration and its credentials; a Google Drive grant is revoked at Google.
    Jobs still waiting for a file from it fail."""
    row = await services().db.run(repo.delete_integration, current_principal().user_id, integration_id)
    log.info("integration deleted", extra={"action": "integration.deleted", "integration_id": integration_id})
    await revoke_grant(services(), row)
    return no_content()


@blueprint.post("/<integration_id>/test")
@document_response(TestOut)
@error_responses(400)
async def test_integration(integration_id: str) -> dict[str, Any]:
    """Try the credentials against the store: 200 ``{ok: true}``, or 400 with the SPEC §6
    errorCode in ``details`` (``{errorCode, retryable}``)."""
    row = await _owned(integration_id)
    try:
        async with open_source(services(), row) as source:
            await source.test()
    except JobError as exc:
        raise BadRequest(exc.message, details={"errorCode": exc.code, "retryable": exc.retryable}) from exc
    return {"ok": True}


@blueprint.post("/<integration_id>/reconnect")
@document_response(AuthorizingOut)
@error_responses(400)
async def reconnect_integration(integration_id: str) -> dict[str, Any]:
    """A new `authorizationUrl` for a Google Drive integration (after its grant expired or
    was revoked: status needs_reconnection). Earlier authorization links stop working."""
    row = await _owned(integration_id)
    if row.provider != Provider.GOOGLE_DRIVE:
        raise BadRequest(["Only google-drive integrations are authorized in the browser"])
    _require_google()
    nonce = new_nonce()
    row = await services().db.run(repo.begin_authorization, current_principal().user_id, integration_id, nonce,
                                  utcnow())
    return integration_json(row) | {"authorizationUrl": _authorization_url(integration_id, nonce)}
