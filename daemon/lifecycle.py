"""`docex serve`: the root nursery, signals and the shutdown policy.

    root nursery
    ├── signal handler        SIGHUP → reload; SIGTERM/SIGINT → drain (twice → stop now)
    ├── systemd watchdog      WATCHDOG=1 at half of WATCHDOG_USEC
    ├── lease reaper          (worker roles)
    └── work nursery          drained on shutdown, with a deadline
        ├── hypercorn         (api roles) stops accepting, finishes in-flight requests
        ├── extraction workers(worker roles) stop claiming, finish or release their jobs
        ├── webhook dispatcher(worker roles) stops claiming, finishes in-flight sends
        └── inbox sweeper     (worker roles) stops sweeping; a sweep cut short takes nothing

Shutdown policy: a signal sets `services.stopping`; every drainable part stops
taking work; the work nursery gets `server.grace_period` to empty, after which
what is left is cancelled (workers release their leases, shielded); then the
root is cancelled and the process exits 0.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import signal
from collections.abc import Mapping
from typing import Any

import trio

from daemon.config import Config, hot_reload, load_config, with_dev_secrets
from daemon.errors import ConfigError
from daemon.extraction.pipeline import warn_if_ocr_missing
from daemon.http.server import run_http
from daemon.inboxes.sweeper import run_inboxes
from daemon.jobs.pool import run_reaper, run_workers
from daemon.logs import set_level
from daemon.services import ProcessRole, Services, open_services
from daemon.storage.migrate import upgrade
from daemon.systemd import Notifier
from daemon.webhooks.dispatcher import run_dispatcher
from daemon.webhooks.keys import configured_key

log = logging.getLogger(__name__)


class ConfigSource:
    """Where the configuration came from, so SIGHUP re-reads the same file and flags.

    `early_hangups` collects the SIGHUPs that arrive while the daemon starts, before its
    signal handler runs (`docex serve` notes them from its first line: by default a SIGHUP
    ends the process); the handler answers them with one reload."""

    def __init__(self, path: str | None, overrides: Mapping[str, Any], early_hangups: list[int] | None = None) -> None:
        self.path = path
        self.overrides = dict(overrides)
        self.early_hangups = early_hangups if early_hangups is not None else []

    def load(self, running: Config | None = None) -> Config:
        """The configuration as the file and environment say now. Reloaded beside a `running`
        one, development secrets still come from the running data directory: the directory
        changes only with a restart, and so must what signs the tokens already issued."""
        config = load_config(self.path, overrides=self.overrides)
        if running is None:
            return with_dev_secrets(config)
        filled = with_dev_secrets(dataclasses.replace(config, data_dir=running.data_dir))
        return dataclasses.replace(filled, data_dir=config.data_dir)


async def serve(
    config: Config,
    source: ConfigSource,
    *,
    role: ProcessRole = ProcessRole.ALL,
    migrate: bool = True,
    notifier: Notifier | None = None,
) -> None:
    """Run the daemon until SIGTERM/SIGINT, then drain and return."""
    notifier = notifier or Notifier()
    config.make_data_dir()
    if role.runs_workers:
        # Scanned documents would fail with OCR_FAILED: say so at start.
        warn_if_ocr_missing(config.extraction.ocr_engine)
    async with open_services(config, role) as services:
        if migrate:
            await trio.to_thread.run_sync(functools.partial(
                upgrade, services.db.engine, encryption_key=configured_key(services.config.webhooks)))
        async with trio.open_nursery() as root:
            await root.start(_handle_signals, services, source, notifier, root.cancel_scope)
            await root.start(notifier.run_watchdog)
            if role.runs_workers:
                await root.start(run_reaper, services)
            await _run_work(services, notifier)
            root.cancel_scope.cancel()
    log.info("stopped", extra={"action": "service.stopped"})


async def _run_work(services: Services, notifier: Notifier) -> None:
    http_shutdown = trio.Event()
    await trio.to_thread.run_sync(services.data_state)  # the data directory and file /api/ready holds to
    async with trio.open_nursery() as work:
        binds: list[str] = []
        if services.role.serves_http:
            binds = await work.start(run_http, services, http_shutdown)
        if services.config.server.metrics_port:
            # A worker process's own counters (jobs, deliveries) are scraped here, and only here.
            binds += await work.start(functools.partial(run_http, ops_only=True), services, http_shutdown)
        if services.role.runs_workers:
            await work.start(run_workers, services)
            await work.start(run_dispatcher, services)
            await work.start(run_inboxes, services)
        # What start-up allocated lives as long as the process: take it out of the
        # collector's sight, so full collections stay short while serving. (No collection
        # first: it took ~45 ms of a ~1 s start to find the little start-up garbage there is.)
        gc.freeze()
        notifier.ready()
        log.info(
            "ready",
            extra={"action": "service.ready", "role": str(services.role), "binds": binds,
                   "database": services.db.url.get_backend_name()},
        )
        await services.stopping.wait()
        notifier.stopping()
        grace = services.config.server.grace_period_s
        log.info("draining", extra={"action": "service.draining", "grace_period_s": grace})
        http_shutdown.set()
        work.cancel_scope.deadline = trio.current_time() + grace


async def _handle_signals(
    services: Services,
    source: ConfigSource,
    notifier: Notifier,
    root_scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    # trio restores, on leaving the receiver, the handlers found when entering it: make those
    # ignore stop signals, so one arriving during the last moments of teardown cannot turn a
    # clean exit 0 into death by signal.
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, signal.SIG_IGN)
    with trio.open_signal_receiver(signal.SIGHUP, signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        if source.early_hangups:
            source.early_hangups.clear()
            await reload(services, source)
        async for signum in signals:
            if signum == signal.SIGHUP:
                notifier.reloading()
                await reload(services, source)
                notifier.ready()
            elif not services.stopping.is_set():
                log.info("stop requested", extra={"action": "service.stop", "signal": signal.Signals(signum).name})
                services.stopping.set()
            else:
                # A second SIGTERM/SIGINT: the operator does not want to wait for the drain.
                log.warning("stopping now", extra={"action": "service.stop_now"})
                root_scope.cancel()


async def reload(services: Services, source: ConfigSource) -> bool:
    """Re-read file and environment; apply hot settings, keep the old config if invalid."""
    try:
        new = await trio.to_thread.run_sync(source.load, services.config)
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("reload rejected: %s", problem, extra={"action": "config.reload_rejected"})
        return False
    except Exception as exc:  # an unreadable secrets file, ...: a reload must never end the daemon
        log.error("reload rejected: %s", exc, extra={"action": "config.reload_rejected"})
        return False
    merged, cold = hot_reload(services.config, new)
    set_level(merged.log.level)
    services.apply_config(merged)
    if services.role.runs_workers:
        # Looked for here and at start, never per job: an engine installed since is seen now.
        warn_if_ocr_missing(merged.extraction.ocr_engine)
    if cold:
        log.warning(
            "restart required for: %s", ", ".join(cold),
            extra={"action": "config.restart_required", "settings": cold},
        )
    log.info("configuration reloaded", extra={"action": "config.reloaded"})
    return True
