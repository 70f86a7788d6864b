"""From a stored integration to a live `RemoteSource`: open its sealed secrets, build the
provider's client, and keep the integration's status true to what the provider said.

`open_source` is used by the workers (fetching a PENDING job's file) and by the API
(``POST /api/integrations/:id/test``, listing a folder into a batch run).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from daemon.clock import utcnow
from daemon.crypto import SealError
from daemon.errors import JobError, PermanentJobError
from daemon.integrations.base import IntegrationStatus, Provider, RemoteSource
from daemon.integrations.google_drive import DriveSource, OAuthClient, TokenKeeper
from daemon.integrations.oauth import Tokens
from daemon.integrations.s3 import open_s3_source
from daemon.integrations.sealing import open_secrets, seal_secrets
from daemon.jobs.models import ErrorCode
from daemon.services import Services
from daemon.storage.repos import integrations as repo
from daemon.storage.s3 import S3Settings

log = logging.getLogger(__name__)


def s3_settings(row: Any, secrets: dict[str, Any]) -> S3Settings:
    from daemon.config import Secret

    config = row.config or {}
    return S3Settings(
        bucket=str(config.get("bucket", "")),
        region=str(config.get("region", "")),
        access_key_id=str(secrets.get("accessKeyId", "")),
        secret_access_key=Secret(str(secrets.get("secretAccessKey", ""))),
        endpoint_url=config.get("endpointUrl") or None,
        prefix=str(config.get("prefix") or ""),
    )


def google_client(services: Services) -> httpx.AsyncClient:
    """An HTTP client for Google's endpoints (the caller closes it). Redirects are followed:
    Drive downloads may redirect to another Google host (httpx then drops Authorization)."""
    return httpx.AsyncClient(timeout=services.config.google.timeout_ms / 1000, follow_redirects=True)


@asynccontextmanager
async def open_source(services: Services, row: Any) -> AsyncIterator[RemoteSource]:
    """The live source of integration `row`, for the duration of the block.

    An INTEGRATION_AUTH_EXPIRED raised in the block (or here) marks the integration
    ``needs_reconnection`` before it propagates.

    Raises:
        JobError: the integration cannot be used (not authorized yet, secrets unreadable,
            provider not configured), or whatever the block raises.
    """
    try:
        async with _open(services, row) as source:
            yield source
    except JobError as error:
        if error.code == ErrorCode.INTEGRATION_AUTH_EXPIRED and row.status != IntegrationStatus.NEEDS_RECONNECTION:
            with trio.CancelScope(shield=True):
                await services.db.run(repo.set_status, row.id, IntegrationStatus.NEEDS_RECONNECTION, utcnow())
            log.warning("integration needs reconnection",
                        extra={"action": "integration.needs_reconnection", "integration_id": row.id})
        raise


@asynccontextmanager
async def _open(services: Services, row: Any) -> AsyncIterator[RemoteSource]:
    config = services.config
    if row.status == IntegrationStatus.PENDING_AUTHORIZATION:
        raise PermanentJobError(ErrorCode.INTEGRATION_AUTH_EXPIRED,
                                f"Integration {row.id} has not been authorized yet: complete the Google consent")
    try:
        secrets = open_secrets(config, row.id, row.secrets_sealed)
    except SealError as exc:
        code = ErrorCode.INTEGRATION_AUTH_EXPIRED if row.provider == Provider.GOOGLE_DRIVE \
            else ErrorCode.INTEGRATION_ACCESS_DENIED
        raise PermanentJobError(code, f"The credentials of integration {row.id} cannot be decrypted "
                                "(was WEBHOOK_ENCRYPTION_KEY changed?): connect it again") from exc
    if row.provider == Provider.S3:
        async with open_s3_source(s3_settings(row, secrets),
                                  allow_private_networks=config.integrations.allow_private_networks) as s3:
            yield s3
        return
    if not config.google.configured:
        raise PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED,
                                "Google Drive is not configured on this server (google.client_id, "
                                "google.client_secret, google.redirect_url)")

    async def save(tokens: Tokens) -> None:
        sealed = seal_secrets(services.config, row.id, {"tokens": tokens.to_json()})
        with trio.CancelScope(shield=True):
            await services.db.run(repo.store_secrets, row.id, sealed, utcnow())

    async with google_client(services) as http:
        keeper = TokenKeeper(OAuthClient(http, config.google), Tokens.from_json(secrets.get("tokens", {})), save)
        yield DriveSource(http, config.google.api_base_url, keeper)


# How long deleting a Google Drive integration waits for Google to revoke its grant.
REVOKE_WAIT_S = 10.0


async def revoke_grant(services: Services, row: Any) -> None:
    """Ask Google to revoke the grant of deleted integration `row`, so the refresh token
    docex held stops working everywhere. Best effort and never raises: the integration is
    already gone here; a grant Google could not be told about is logged (the user can
    still remove docex at https://myaccount.google.com/permissions)."""
    if row.provider != Provider.GOOGLE_DRIVE or not services.config.google.configured:
        return
    try:
        tokens = Tokens.from_json(open_secrets(services.config, row.id, row.secrets_sealed).get("tokens", {}))
    except SealError:
        return  # nothing readable to revoke
    token = tokens.refresh_token or tokens.access_token
    if not token:
        return  # never authorized
    revoked = False
    reason = "no answer"
    with trio.move_on_after(REVOKE_WAIT_S):
        try:
            async with google_client(services) as http:
                revoked = await OAuthClient(http, services.config.google).revoke(token)
        except JobError as exc:
            reason = exc.message
    if revoked:
        log.info("google grant revoked", extra={"action": "integration.grant_revoked", "integration_id": row.id})
    else:
        log.warning(f"could not revoke the Google grant of a deleted integration: {reason}",
                    extra={"action": "integration.grant_not_revoked", "integration_id": row.id})
