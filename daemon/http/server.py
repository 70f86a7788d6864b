"""Serve the app with hypercorn's trio worker inside our nursery.

On `shutdown` hypercorn stops accepting connections, closes idle keep-alive
connections and lets in-flight requests finish within the grace period.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.middleware import ProxyFixMiddleware
from hypercorn.trio import serve

from daemon.http.app import create_app
from daemon.services import Services

Send = Callable[[Any], Awaitable[None]]


class ShieldedSend:
    """Shield the ASGI `send` of HTTP requests from cancellation.

    quart-trio cancels a request's tasks when it sees the disconnect that
    hypercorn delivers inside the response's last `send`; hypercorn re-arms its
    keep-alive idle timer later in that same call, and the cancellation killed
    it. Without the timer an idle keep-alive connection was never closed: not
    after `keep_alive_timeout`, and not at shutdown, which then waited out the
    whole grace period. Hypercorn shields its socket writes already.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def shielded(message: Any) -> None:
            with trio.CancelScope(shield=True):
                await send(message)

        await self.app(scope, receive, shielded)


async def run_http(
    services: Services,
    shutdown: trio.Event,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Bind, report the bound addresses through `task_status`, serve until `shutdown`."""
    config = services.config
    hc = HypercornConfig()
    hc.bind = [f"[{config.host}]:{config.port}" if ":" in config.host else f"{config.host}:{config.port}"]
    hc.graceful_timeout = float(config.server.grace_period_s)
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")  # into our JSON lines
    hc.keep_alive_timeout = float(config.server.keep_alive_timeout_s)
    hc.include_server_header = False
    app: Any = create_app(services)
    if config.server.trusted_proxy_hops:
        app = ProxyFixMiddleware(app, mode="legacy", trusted_hops=config.server.trusted_proxy_hops)
    framework: Any = ShieldedSend(app)  # an ASGI callable; hypercorn's type wants its own scope types
    await serve(framework, hc, shutdown_trigger=shutdown.wait, task_status=task_status)
