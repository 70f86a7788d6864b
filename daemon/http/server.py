"""Serve the app with hypercorn's trio worker inside our nursery.

On `shutdown` hypercorn stops accepting connections, closes idle keep-alive
connections and lets in-flight requests finish within the grace period.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

import h11
import hypercorn.protocol
import hypercorn.trio.run
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, Updated
from hypercorn.middleware import ProxyFixMiddleware
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.run import worker_serve
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.utils import wrap_app

from daemon.config import Config
from daemon.errors import ApiError, StartupError
from daemon.http.app import create_app
from daemon.services import Services

log = logging.getLogger(__name__)


class KeepAliveTCPServer(TCPServer):
    """hypercorn's trio connection, with its keep-alive idle timer fixed.

    Two bugs of hypercorn 0.18.0's trio worker (hypercorn/trio/tcp_server.py);
    delete this class (see `install_hypercorn_fixes`) once hypercorn fixes them:

    - The timer outlives the client. When the client closes an idle keep-alive
      connection, the read loop ends, but the connection's task group still
      waits for the timer task, so the socket sits in CLOSE_WAIT, holding its
      file descriptor, for `keep_alive_timeout`.
    - The timer is re-armed inside the app's last `send` (the end of the
      response closes the stream, which hands the app `http.disconnect`, then
      marks the connection idle). quart-trio 0.12 cancels the request's tasks as
      soon as it receives that `http.disconnect`, and the cancellation lands in
      the re-arming: an idle connection was then never closed, neither after
      `keep_alive_timeout` nor at shutdown, which waited out the grace period.
      The connection's own bookkeeping must not be cancelled by the app: it is
      shielded here, as hypercorn already shields its socket writes.
    """

    async def protocol_send(self, event: Event) -> None:
        # Starting or stopping the idle timer (Updated) and closing the connection (Closed,
        # after an answer with "Connection: close", such as a refused upload's 413): a
        # cancellation that lands in the close leaves the socket open, and hypercorn then
        # reads, and drops, every byte of the body the client still sends.
        if isinstance(event, Updated | Closed):
            with trio.CancelScope(shield=True):
                await super().protocol_send(event)
        else:
            await super().protocol_send(event)

    async def _read_data(self) -> None:
        await super()._read_data()
        await self.idle_task.stop()  # the client is gone: nothing left to time out

    async def run(self) -> None:
        # An error hypercorn does not expect in one connection ends that connection, not
        # the daemon: it rose out of the server's nursery into the root one, and one
        # client's malformed stream stopped the API, the workers and the dispatcher.
        try:
            await super().run()
        except Exception:
            log.exception("HTTP connection closed after an error in the server", extra={"action": "http.error"})


class _RefusedRequest(Exception):
    """A request answered with an error by the protocol itself, and its connection closed."""


class ErrorBodyH11Protocol(H11Protocol):
    """hypercorn's HTTP/1.1 protocol, answering a request it cannot parse in the SPEC §3
    error shape: a header block over ``h11_max_incomplete_size`` (431) or a malformed
    request line or header (400) got a bare status with an empty body, which a client
    reading every error as JSON could not parse. The app never sees such a request.

    It speaks HTTP/1.1 only. hypercorn switches to HTTP/2 on an ``Upgrade: h2c`` or on
    HTTP/2's preface, and its HTTP/2 stream handling raised on a client's body arriving
    for a request it had already answered (a 401 or 413 before the upload ended), which
    stopped the daemon. docex serves small teams directly and larger ones behind a proxy
    that speaks HTTP/1.1 to it, so an upgrade is ignored (RFC 9110 §7.8 lets a server
    answer in the protocol it was asked in) and the preface is answered 505.
    """

    async def handle(self, event: Event) -> None:
        with contextlib.suppress(_RefusedRequest):
            await super().handle(event)

    async def _check_protocol(self, event: h11.Request) -> None:
        if event.method == b"PRI" and event.http_version == b"2.0":
            await self._refuse(505)
        # h11 limits only a header block still incomplete after a read: one that arrived
        # whole in a single read (64 KiB) passed the documented limit.
        size = len(event.target) + sum(len(name) + len(value) + 4 for name, value in event.headers)
        if size > self.config.h11_max_incomplete_size:
            await self._refuse(431)

    async def _refuse(self, status_code: int) -> None:
        await self._send_error_response(status_code)
        await self.send(Closed())
        raise _RefusedRequest

    async def _send_error_response(self, status_code: int) -> None:
        message = {431: f"Request header fields too large: at most {self.config.h11_max_incomplete_size // 1024} "
                        "KiB in all",
                   505: "HTTP/2 is not served here: send HTTP/1.1"}.get(status_code, "Malformed HTTP request")
        body = json.dumps(ApiError(message, status=status_code).body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close"), *self.config.response_headers("h11")]
        await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())


def install_hypercorn_fixes() -> None:
    """Make hypercorn's trio worker build its connections as `KeepAliveTCPServer` and speak
    HTTP/1.1 as `ErrorBodyH11Protocol`: each takes its class from its module's namespace
    and has no other hook."""
    hypercorn.trio.run.TCPServer = KeepAliveTCPServer  # type: ignore[attr-defined]
    hypercorn.protocol.H11Protocol = ErrorBodyH11Protocol  # type: ignore[attr-defined]


LISTEN_BACKLOG = 4096


async def run_http(
    services: Services,
    shutdown: trio.Event,
    *,
    ops_only: bool = False,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Bind, report the bound addresses through `task_status`, serve until `shutdown`: the
    API on `port`, or with `ops_only` the operations routes on `server.metrics_port`."""
    config = services.config
    port = config.server.metrics_port if ops_only else config.port
    hc = HypercornConfig()
    hc.bind = [f"[{config.host}]:{port}" if ":" in config.host else f"{config.host}:{port}"]
    hc.graceful_timeout = float(config.server.grace_period_s)
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")  # into our JSON lines
    hc.keep_alive_timeout = float(config.server.keep_alive_timeout_s)
    hc.include_server_header = False
    hc.alpn_protocols = ["http/1.1"]  # HTTP/1.1 only (`ErrorBodyH11Protocol`)
    app: Any = create_app(services, ops_only=ops_only)
    if config.server.trusted_proxy_hops:
        app = ProxyFixMiddleware(app, mode="legacy", trusted_hops=config.server.trusted_proxy_hops)
    install_hypercorn_fixes()
    # Bound here, not inside hypercorn's serve: there a taken port was an OSError wrapped in
    # three exception groups, a 60-line traceback for "port in use" (a second `docex serve`).
    try:
        sockets = hc.create_sockets()
    except OSError as exc:
        raise StartupError(f"cannot listen on {hc.bind[0]}: {exc.strerror or exc}") from exc
    for sock in sockets.insecure_sockets:
        # Hypercorn's backlog is 100: a burst of 500 uploads at once left 8-15 % of them
        # reset unanswered and unlogged; the kernel caps it at net.core.somaxconn anyway.
        sock.listen(LISTEN_BACKLOG)

    def on_reload(old: Config, new: Config) -> None:
        hc.graceful_timeout = float(new.server.grace_period_s)  # read by hypercorn when it drains

    services.reload_hooks.append(on_reload)
    await worker_serve(wrap_app(app, hc.wsgi_max_body_size, None), hc, sockets=sockets,
                       shutdown_trigger=shutdown.wait, task_status=task_status)
