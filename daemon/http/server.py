"""Serve the app with hypercorn's trio worker inside our nursery."""

from __future__ import annotations

import logging
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.middleware import ProxyFixMiddleware
from hypercorn.trio import serve

from daemon.http.app import create_app
from daemon.services import Services


async def run_http(
    services: Services,
    shutdown: trio.Event,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Bind, report the bound addresses through `task_status`, serve until `shutdown`.

    On `shutdown` hypercorn stops accepting connections and lets in-flight
    requests finish for up to the grace period.
    """
    config = services.config
    hc = HypercornConfig()
    hc.bind = [f"[{config.host}]:{config.port}" if ":" in config.host else f"{config.host}:{config.port}"]
    hc.graceful_timeout = float(config.server.grace_period_s)
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")  # into our JSON lines
    hc.keep_alive_timeout = 75  # above common proxies' 60 s idle timeout
    hc.include_server_header = False
    app: Any = create_app(services)
    if config.server.trusted_proxy_hops:
        app = ProxyFixMiddleware(app, mode="legacy", trusted_hops=config.server.trusted_proxy_hops)
    await serve(app, hc, shutdown_trigger=shutdown.wait, task_status=task_status)
