"""What every route inherits: the SPEC §3 error shape, request ids, version header,
health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, field_validator
from quart_schema import validate_request

from daemon import __version__
from daemon.auth.guard import public
from daemon.errors import Conflict, TooManyRequests
from daemon.services import open_services

ERROR_KEYS = {"statusCode", "message", "error"}


async def test_health_is_public_and_versioned(client) -> None:
    r = await client.get("/api/health")
    assert r.status_code == 200
    assert await r.get_json() == {"status": "ok", "version": __version__}
    assert r.headers["X-Docex-Version"] == __version__
    assert len(r.headers["X-Request-Id"]) >= 16


async def test_a_sane_incoming_request_id_is_kept_and_a_hostile_one_replaced(client) -> None:
    r = await client.get("/api/health", headers={"X-Request-Id": "abc-123"})
    assert r.headers["X-Request-Id"] == "abc-123"
    r = await client.get("/api/health", headers={"X-Request-Id": "x\u2028<script>"})
    assert r.headers["X-Request-Id"] != "x\u2028<script>"


async def test_unknown_route_is_404_in_the_error_shape(client) -> None:
    r = await client.get("/api/nothing-here")
    body = await r.get_json()
    assert r.status_code == 404
    assert body == {"statusCode": 404, "message": "Cannot GET /api/nothing-here", "error": "Not Found"}
    assert "X-Request-Id" in r.headers


async def test_wrong_method_is_405_in_the_error_shape(client) -> None:
    r = await client.delete("/api/health")
    assert r.status_code == 405
    assert set(await r.get_json()) == ERROR_KEYS
    assert "GET" in r.headers["Allow"]


@pytest.fixture
def probe_app(app):
    """The real app plus routes that raise what later resources raise."""

    class Body(BaseModel):
        email: str
        password: str

        @field_validator("email")
        @classmethod
        def _email(cls, v: str) -> str:
            if "@" not in v:
                raise ValueError("email must be an email")
            return v

    @app.post("/api/_probe/validate")
    @public
    @validate_request(Body)
    async def _validate(data: Body) -> dict[str, str]:
        return {"ok": data.email}

    @app.get("/api/_probe/conflict")
    @public
    async def _conflict() -> None:
        raise Conflict("already exists", details={"id": "x"})

    @app.get("/api/_probe/limited")
    @public
    async def _limited() -> None:
        raise TooManyRequests(17)

    @app.get("/api/_probe/boom")
    @public
    async def _boom() -> None:
        raise RuntimeError("SELECT password FROM users -- secret internals")

    return app


async def test_malformed_json_is_400(probe_app) -> None:
    r = await probe_app.test_client().post(
        "/api/_probe/validate", data=b'{"email": ', headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    assert await r.get_json() == {
        "statusCode": 400, "message": ["request body is not valid JSON"], "error": "Bad Request"
    }


async def test_validation_gives_one_message_per_failed_rule(probe_app) -> None:
    r = await probe_app.test_client().post("/api/_probe/validate", json={"email": "nope", "password": 5})
    body = await r.get_json()
    assert r.status_code == 400 and body["error"] == "Bad Request"
    assert body["message"] == ["email must be an email", "password must be a string"]


async def test_a_json_array_body_is_400_not_500(probe_app) -> None:
    r = await probe_app.test_client().post("/api/_probe/validate", json=[1, 2])
    assert r.status_code == 400
    assert (await r.get_json())["message"] == ["request body must be a JSON object"]


async def test_api_errors_carry_details_and_headers(probe_app) -> None:
    client = probe_app.test_client()
    r = await client.get("/api/_probe/conflict")
    assert r.status_code == 409
    assert await r.get_json() == {
        "statusCode": 409, "message": "already exists", "error": "Conflict", "details": {"id": "x"}
    }
    r = await client.get("/api/_probe/limited")
    assert r.status_code == 429 and r.headers["Retry-After"] == "17"
    assert (await r.get_json())["error"] == "Too Many Requests"


async def test_unexpected_errors_are_500_without_internals_and_logged_with_the_request_id(
    probe_app, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        r = await probe_app.test_client().get("/api/_probe/boom", headers={"X-Request-Id": "req-42"})
    body = await r.get_json()
    assert r.status_code == 500
    assert body == {"statusCode": 500, "message": "Internal server error (request id req-42)",
                    "error": "Internal Server Error"}
    assert "SELECT" not in str(body)
    logged = [rec for rec in caplog.records if getattr(rec, "action", None) == "http.unhandled"]
    assert logged and logged[0].request_id == "req-42" and logged[0].exc_info


async def test_oversized_json_body_is_413(client) -> None:
    r = await client.post("/api/health", data=b"x" * (5 * 1024 * 1024), headers={"Content-Type": "application/json"})
    assert r.status_code in (405, 413)  # the route has no POST; the body limit may be checked first
    assert set(await r.get_json()) == ERROR_KEYS


async def test_ready_checks_database_migrations_and_running_parts(client, services) -> None:
    services.running.update(workers=True, dispatcher=True)
    r = await client.get("/api/ready")
    assert r.status_code == 200
    assert await r.get_json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "data": "ok", "workers": "ok", "dispatcher": "ok"},
    }
    services.running["dispatcher"] = False
    r = await client.get("/api/ready")
    assert r.status_code == 503
    assert (await r.get_json())["checks"]["dispatcher"] == "stopped"


async def test_ready_says_when_the_data_directory_is_deleted_under_it(client, services) -> None:
    """Before: ready said ok while every write went to an unlinked SQLite file and the
    secrets that decrypt stored credentials were gone, all lost at the next start; then,
    once an upload had made the directory again and a new connection the file, ok again."""
    import shutil

    import trio

    assert (await client.get("/api/ready")).status_code == 200
    data = services.config.data_path
    await trio.to_thread.run_sync(shutil.rmtree, data)
    r = await client.get("/api/ready")
    assert r.status_code == 503
    assert (await r.get_json())["checks"]["data"] == "missing"
    # Made again in its place (as an upload does): still not the directory the daemon holds.
    await trio.to_thread.run_sync(data.mkdir)
    r = await client.get("/api/ready")
    assert r.status_code == 503 and (await r.get_json())["checks"]["data"] == "missing"

    url = services.db.engine.url
    if url.get_backend_name() == "sqlite":  # its file alone deleted, then made again
        async with open_services(services.config) as fresh:  # a daemon started on the restored directory
            assert await trio.to_thread.run_sync(fresh.data_state) == "ok"
            await trio.to_thread.run_sync(Path(url.database).unlink)
            assert await trio.to_thread.run_sync(fresh.data_state) == "missing"
            await trio.to_thread.run_sync(Path(url.database).touch)
            assert await trio.to_thread.run_sync(fresh.data_state) == "missing"


async def test_ready_says_when_migrations_are_pending(client, services) -> None:
    import trio

    from daemon.storage.migrate import downgrade

    await trio.to_thread.run_sync(downgrade, services.db.engine, "base")
    r = await client.get("/api/ready")
    assert r.status_code == 503
    assert (await r.get_json())["checks"]["migrations"].startswith("pending")


async def test_metrics_expose_request_latency_by_route_template(client) -> None:
    await client.get("/api/health")
    await client.get("/api/does-not-exist/123")
    r = await client.get("/metrics")
    text = (await r.get_data()).decode()
    assert r.status_code == 200 and r.content_type.startswith("text/plain")
    assert 'docex_http_request_duration_seconds_count{method="GET",route="/api/health",status="200"} 1.0' in text
    # Unknown paths are folded into one label so they cannot blow up the series count.
    assert 'route="<unmatched>"' in text and "does-not-exist" not in text


async def test_openapi_document_lists_routes_and_carries_the_version(client) -> None:
    r = await client.get("/api/openapi.json")
    doc = await r.get_json()
    assert r.status_code == 200
    assert doc["info"]["version"] == __version__
    assert {"/api/health", "/api/ready", "/metrics"} <= set(doc["paths"])
    r = await client.get("/api/docs")
    assert r.status_code == 200 and "openapi.json" in (await r.get_data()).decode()


async def test_metrics_carry_process_figures_and_every_family_is_in_the_readme(client) -> None:
    await client.get("/api/health")
    text = (await (await client.get("/metrics")).get_data()).decode()
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} <= families
    rss = float(re.search(r"^process_resident_memory_bytes (\S+)$", text, re.MULTILINE)[1])  # type: ignore[index]
    assert rss > 10 * 2**20  # a Python process with our imports, read from /proc
    assert not any(family.endswith("_created") for family in families)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert sorted(f for f in families if f"`{f}`" not in readme) == []
