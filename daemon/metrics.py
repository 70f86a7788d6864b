"""Prometheus metrics, declared in one place, in a registry of the process's own.

Counters and histograms are updated where things happen; gauges that describe
database state (jobs by status, queue depth) are read from the database when
`/metrics` is scraped, by the refresher the app sets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# Buckets for request latency: sub-millisecond health checks up to slow uploads.
_HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self) -> None:
        # A `*_created` series beside every counter and histogram doubles what is scraped, and
        # Prometheus ignores them unless told otherwise.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus-client
        self.registry = CollectorRegistry(auto_describe=True)
        # What every Prometheus user expects of a service: process_* (CPU seconds, resident memory,
        # open fds, start time), python_gc_*, python_info. The collectors read /proc and the gc
        # module at scrape time; they are stateless, so every Metrics may share them.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.http_request_duration = Histogram(
            "docex_http_request_duration_seconds",
            "HTTP request latency by route template, method and status.",
            ["method", "route", "status"],
            buckets=_HTTP_BUCKETS,
            registry=self.registry,
        )
        self.jobs_by_status = Gauge(
            "docex_jobs", "Jobs by status (all users).", ["status"], registry=self.registry
        )
        self.queue_depth = Gauge(
            "docex_queue_depth", "Jobs waiting for a worker (QUEUED and PENDING).", registry=self.registry
        )
        self.job_duration = Histogram(
            "docex_job_duration_seconds",
            "Time a worker spent on one attempt of a job, by outcome.",
            ["outcome"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.job_attempts = Counter(
            "docex_job_attempts",
            "Job attempts by outcome (completed, incomplete: completed but lacking required values, retried, "
            "failed, lost).",
            ["outcome"], registry=self.registry,
        )
        self.webhook_deliveries = Counter(
            "docex_webhook_deliveries",
            "Webhook delivery attempts by outcome (succeeded, retrying, dead, lost).",
            ["outcome"], registry=self.registry,
        )
        self.webhook_delivery_latency = Histogram(
            "docex_webhook_delivery_latency_seconds",
            "Time from an event (or a replay) to the first attempt of its delivery.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self._refresh: Callable[[], Awaitable[None]] | None = None

    def set_refresher(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """The coroutine that updates the database-backed gauges before each scrape (one per
        process, whichever of its listeners is scraped)."""
        self._refresh = refresh

    async def render(self) -> bytes:
        if self._refresh is not None:
            await self._refresh()
        return generate_latest(self.registry)
