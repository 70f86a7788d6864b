"""The sd_notify protocol: READY, RELOADING, STOPPING and WATCHDOG datagrams.

A no-op unless systemd (or a test) set ``NOTIFY_SOCKET``. Messages are small
datagrams on a unix socket, sent without blocking; a full or vanished socket
loses the message, which is what sd_notify(3) does too.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import trio

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        # "@name" is the abstract namespace, spelled with a leading NUL on the wire.
        self.address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_interval_s = int(usec) / 2_000_000 if usec.isdigit() and mine else None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, *fields: str) -> None:
        if not self.address:
            return
        message = "\n".join(fields).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)
                sock.sendto(message, self.address)
        except OSError as exc:
            log.warning("sd_notify failed", extra={"action": "systemd.notify_failed", "error": str(exc)})

    def ready(self, status: str = "serving") -> None:
        self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def reloading(self) -> None:
        # MONOTONIC_USEC lets Type=notify-reload match this message to its SIGHUP.
        self.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> None:
        self.notify("STOPPING=1", "STATUS=draining")

    async def run_watchdog(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Ping WATCHDOG=1 at half the interval systemd asked for, until cancelled.

        A wedged trio loop stops the pings, and systemd restarts the service.
        """
        task_status.started()
        if not self.enabled or self.watchdog_interval_s is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await trio.sleep(self.watchdog_interval_s)
