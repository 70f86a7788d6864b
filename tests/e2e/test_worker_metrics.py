"""A `--role worker` process serves no API, yet its counters (jobs run, deliveries made)
exist only in it: with `server.metrics_port` it serves the operations routes alone there,
so Prometheus can scrape it and a probe can ask whether it is ready (README "Logs and
metrics"). An api process and a worker process share one data directory and database."""

from __future__ import annotations

import time

import httpx
import trio
from conftest import free_port
from e2e_helpers import QUICK_ENV, STARTUP, Api, stop_all


def counter(metrics: str, name: str, outcome: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'{name}{{outcome="{outcome}"}} '):
            return float(line.split()[-1])
    return 0.0


async def test_a_worker_process_is_scraped_and_probed_on_its_metrics_port(start_daemon) -> None:
    api_proc = start_daemon("--role", "api", env=QUICK_ENV)
    await api_proc.wait_http_ready(timeout=STARTUP)
    metrics_port = free_port()
    worker = start_daemon("--role", "worker", env={**QUICK_ENV, "DOCEX_SERVER_METRICS_PORT": str(metrics_port)},
                          port=False)
    _, ready = await worker.wait_for("service.ready", timeout=STARTUP)
    assert ready["binds"] == [f"http://127.0.0.1:{metrics_port}"], ready

    async with Api(api_proc.url("")) as api, httpx.AsyncClient(base_url=f"http://127.0.0.1:{metrics_port}") as ops:
        await api.sign_up()
        schema_id = await api.create_schema()
        job = await api.upload(schema_id, "inv.txt", b"Invoice Number: INV-7\nTotal: 12.50\n", "text/plain")
        deadline = time.monotonic() + 60  # SQLite: another process's job is seen within its 30 s poll
        while (await api.client.get(f"/api/jobs/{job['id']}", headers=api.headers)).json()["status"] != "COMPLETED":
            assert time.monotonic() < deadline, f"the worker process did not complete the job\n{worker.describe()}"
            await trio.sleep(0.1)

        scraped = (await ops.get("/metrics")).text
        assert counter(scraped, "docex_job_attempts_total", "completed") == 1.0
        assert "docex_queue_depth 0.0" in scraped  # the database's gauges, read at the scrape
        # The api process ran no job: the worker's port is the only place this count is.
        assert counter((await api.client.get("/metrics")).text, "docex_job_attempts_total", "completed") == 0.0

        readiness = await ops.get("/api/ready")
        assert readiness.status_code == 200, readiness.text
        assert readiness.json()["checks"]["database"] == "ok"
        assert (await ops.get("/api/health")).status_code == 200
        # Operations routes only: no API, no console on this port.
        for path in ("/api/jobs", "/api/auth/login", "/"):
            refused = await ops.get(path, headers=api.headers)
            assert refused.status_code == 404, (path, refused.text)
            assert refused.json()["statusCode"] == 404
    await stop_all(worker, api_proc)
