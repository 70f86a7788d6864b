"""Operations routes: liveness, readiness, the settings a client needs, Prometheus metrics. All public."""

from __future__ import annotations

import logging
from typing import Any

import trio
from quart import Blueprint
from quart_schema import document_response, tag
from quart_trio.wrappers.response import TrioResponse as Response

from daemon import __version__
from daemon.auth.guard import public
from daemon.http.context import services
from daemon.http.models import ApiModel
from daemon.http.openapi import PlainText
from daemon.jobs.models import JobStatus
from daemon.services import Services
from daemon.storage.migrate import schema_state
from daemon.storage.repos import accounts as accounts_repo
from daemon.storage.repos import jobs as jobs_repo

log = logging.getLogger(__name__)
blueprint = Blueprint("ops", __name__)

# A readiness probe that hangs is worse than one that says no.
_READY_DB_TIMEOUT_S = 2.0


class Health(ApiModel):
    status: str
    version: str


class Readiness(ApiModel):
    status: str
    checks: dict[str, str]


@blueprint.get("/api/health")
@public
@tag(["operations"])
@document_response(Health)
async def health() -> dict[str, Any]:
    """The process is alive and serving HTTP."""
    return {"status": "ok", "version": __version__}


class ReviewSettings(ApiModel):
    confidenceThreshold: float


class Settings(ApiModel):
    registration: str
    maxFileSize: int
    review: ReviewSettings


@blueprint.get("/api/settings")
@public
@tag(["operations"])
@document_response(Settings)
async def settings() -> dict[str, Any]:
    """What a client shows or checks before it calls: whether a registration would be taken
    now (`open`: `auth.registration` is open, or no account exists yet, whose first becomes
    the admin; else `closed`), the largest upload in bytes, and the confidence under which a
    value needs a person (`GET /api/jobs?review=pending`)."""
    config = services().config
    taken = config.auth.registration == "open" or not await services().db.read(accounts_repo.has_users)
    return {
        "registration": "open" if taken else "closed",
        "maxFileSize": config.jobs.max_file_size_bytes,
        "review": {"confidenceThreshold": config.review.confidence_threshold},
    }


@blueprint.get("/api/ready")
@public
@tag(["operations"])
@document_response(Readiness, 200)
@document_response(Readiness, 503)
async def ready() -> tuple[dict[str, Any], int]:
    """Ready for traffic: database reachable, migrations current, data directory in place,
    background parts running.

    Answers 503 with the failing checks otherwise.
    """
    state = services()
    checks: dict[str, str] = {}
    try:
        with trio.fail_after(_READY_DB_TIMEOUT_S):
            migrations = await state.db.probe(schema_state)
        checks["database"] = "ok"
        checks["migrations"] = migrations
    except Exception as exc:  # any failure to reach the database means "not ready"
        log.warning("readiness: database unreachable", extra={"action": "ready.db_failed", "error": type(exc).__name__})
        checks["database"] = "unreachable"
        checks["migrations"] = "unknown"
    checks["data"] = await trio.to_thread.run_sync(state.data_state)
    for part, running in state.running.items():
        checks[part] = "ok" if running else "stopped"
    ok = all(v == "ok" for v in checks.values())
    return {"status": "ready" if ok else "unavailable", "checks": checks}, 200 if ok else 503


@blueprint.get("/metrics")
@public
@tag(["operations"])
@document_response(PlainText)
async def metrics() -> Response:
    """Prometheus text exposition."""
    body = await services().metrics.render()
    return Response(body, content_type="text/plain; version=0.0.4; charset=utf-8")


async def refresh_job_gauges(shared: Services) -> None:
    """Read jobs by status from the database for a /metrics scrape (all processes' jobs)."""
    counts = await shared.db.read(jobs_repo.status_counts)
    for status in JobStatus:
        shared.metrics.jobs_by_status.labels(status.value).set(counts.get(status.value, 0))
    shared.metrics.queue_depth.set(counts.get(JobStatus.QUEUED, 0) + counts.get(JobStatus.PENDING, 0))
