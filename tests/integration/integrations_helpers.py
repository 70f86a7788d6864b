"""Helpers shared by the integration tests (SPEC §10): S3 integrations on the session's
moto server, jobs from sources, and the services' configuration for Google."""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from fake_google import DRIVE_SCOPE

from daemon.config import Config, Secret
from daemon.services import Services


async def create_s3(client: Any, auth: dict[str, str], s3_server: Any, bucket: str, *,
                    credentials: Any = None, prefix: str | None = None, region: str = "us-east-1",
                    endpoint_url: str | None = None, name: str = "Invoices bucket") -> dict[str, Any]:
    """An S3 integration of the caller on `bucket` of the moto server (admin keys by default)."""
    creds = credentials or s3_server.admin
    config: dict[str, Any] = {
        "accessKeyId": creds.access_key_id,
        "secretAccessKey": creds.secret_access_key,
        "bucket": bucket,
        "region": region,
        "endpointUrl": endpoint_url or s3_server.endpoint_url,
    }
    if prefix is not None:
        config["prefix"] = prefix
    r = await client.post("/api/integrations", json={"provider": "s3", "name": name, "config": config},
                          headers=auth)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body  # type: ignore[no-any-return]


async def post_source_job(client: Any, auth: dict[str, str], schema_id: str, source: dict[str, Any],
                          headers: dict[str, str] | None = None) -> Any:
    return await client.post("/api/jobs", json={"type": "EXTRACTION", "schemaId": schema_id, "source": source},
                             headers={**auth, **(headers or {})})


async def post_source_run(client: Any, auth: dict[str, str], schema_id: str, sources: list[dict[str, Any]],
                          headers: dict[str, str] | None = None) -> Any:
    return await client.post("/api/job-runs", json={"type": "EXTRACTION", "schemaId": schema_id,
                                                    "sources": sources}, headers={**auth, **(headers or {})})


def with_google(services: Services, base_url: str, *, client_id: str = "docex-client",
                client_secret: str = "docex-client-secret") -> None:
    """Point the [google] settings at a fake Google on `base_url`."""
    services.config = dataclasses.replace(services.config, google=dataclasses.replace(
        services.config.google,
        client_id=client_id,
        client_secret=Secret(client_secret),
        redirect_url="https://docex.example.com/api/integrations/google-drive/callback",
        auth_url=f"{base_url}/o/oauth2/v2/auth",
        token_url=f"{base_url}/token",
        revoke_url=f"{base_url}/revoke",
        api_base_url=f"{base_url}/drive/v3",
    ))


def with_retry_backoff(services: Services, ms: int = 10) -> None:
    services.config = dataclasses.replace(services.config, jobs=dataclasses.replace(
        services.config.jobs, retry_backoff_initial_ms=ms))


def with_private_networks(services: Services, allowed: bool = True) -> None:
    """Set ``integrations.allow_private_networks`` (the operator's setting; off by default)."""
    services.config = private_networks(services.config, allowed)


def private_networks(config: Config, allowed: bool = True) -> Config:
    """`config` with ``integrations.allow_private_networks`` set. The tests' S3 servers listen on
    loopback, so the modules that use them turn it on in their `config` fixture."""
    return dataclasses.replace(config, integrations=dataclasses.replace(
        config.integrations, allow_private_networks=allowed))


CALLBACK = "/api/integrations/google-drive/callback"


async def drive_callback(client: Any, **params: str) -> tuple[int, str]:
    """Google's redirect to the callback after consent: its status and HTML page."""
    r = await client.get(f"{CALLBACK}?{urllib.parse.urlencode(params)}")  # no Authorization: public
    assert r.headers["Content-Type"].startswith("text/html")
    assert r.headers["Cache-Control"] == "no-store"
    return r.status_code, (await r.get_data()).decode()


async def connect_drive(client: Any, auth: dict[str, str], google: Any, scope: str = DRIVE_SCOPE) -> dict[str, Any]:
    """A Google Drive integration of the caller on the fake `google`, through the whole consent flow."""
    r = await client.post("/api/integrations", json={"provider": "google-drive", "name": "Drive"}, headers=auth)
    created = await r.get_json()
    assert r.status_code == 201, created
    code, state = google.consent(created["authorizationUrl"], scope)
    status, page = await drive_callback(client, code=code, state=state)
    assert status == 200, page
    r = await client.get(f"/api/integrations/{created['id']}", headers=auth)
    return await r.get_json()  # type: ignore[no-any-return]
