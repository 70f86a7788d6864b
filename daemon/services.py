"""What the subsystems share: the current configuration, the database (with its
wake-up calls), metrics and the readiness of each running part.

There is one `Services` per process, created by `open_services` and handed to
`create_app` and to every task of the root nursery. `config` is replaced as a
whole on SIGHUP; code reads ``services.config`` at the moment it needs a value,
so hot settings take effect at once.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import httpx
import trio

from daemon.config import Config
from daemon.metrics import Metrics
from daemon.storage.blobs import BlobStore, LocalBlobStore
from daemon.storage.database import Database
from daemon.wakeup import Wakeup


class ProcessRole(StrEnum):
    API = "api"
    WORKER = "worker"
    ALL = "all"

    @property
    def serves_http(self) -> bool:
        return self in (ProcessRole.API, ProcessRole.ALL)

    @property
    def runs_workers(self) -> bool:
        return self in (ProcessRole.WORKER, ProcessRole.ALL)


ReloadHook = Callable[[Config, Config], None]


@dataclass
class Services:
    config: Config
    db: Database
    blobs: BlobStore
    role: ProcessRole = ProcessRole.ALL
    metrics: Metrics = field(default_factory=Metrics)
    # Name of each background part → whether it is running; /api/ready reads this.
    running: dict[str, bool] = field(default_factory=dict)
    reload_hooks: list[ReloadHook] = field(default_factory=list)
    # Set once on SIGTERM/SIGINT: stop taking new work, finish what is in hand.
    stopping: trio.Event = field(default_factory=trio.Event)
    # Set when an inbox is created, resumed or deleted here: the sweeper looks again at once.
    inboxes_changed: Wakeup = field(default_factory=Wakeup)
    # Exports being sent from this process, by user id (daemon.http.exports bounds them).
    exports_running: Counter[str] = field(default_factory=Counter)
    # The (device, inode) of the data directory and an SQLite file when first seen, and the
    # directory held open so that one made again in its place cannot take its inode (`data_state`).
    _data_identity: dict[Path, tuple[int, int]] = field(default_factory=dict, init=False, repr=False)
    _data_dir_fd: int | None = field(default=None, init=False, repr=False)
    _ai_client: httpx.AsyncClient | None = field(default=None, init=False, repr=False)

    def ai_client(self) -> httpx.AsyncClient:
        """The one HTTP client of the AI providers in this process, made at first use (an API-only
        process never makes it) and closed with the services: jobs reuse its connections
        instead of opening a connection pool, and a TLS handshake, each."""
        if self._ai_client is None:
            self._ai_client = httpx.AsyncClient(follow_redirects=False)
        return self._ai_client

    def data_state(self) -> str:
        """"ok" while the data directory and an SQLite database's file are the ones this
        process first saw (at start-up: `lifecycle`), else "missing" (blocking: stats them).
        Deleted under a running daemon, they take its writes (rows to an unlinked file,
        uploads to a directory made again) and lose them at the next start, with the secrets
        that decrypt what is stored; a directory or file made again in their place (by an
        upload, a new pooled connection, `docex migrate`) is not the one the daemon holds."""
        paths = [self.config.data_path]
        if self.db.is_sqlite and self.db.url.database not in (None, "", ":memory:"):
            paths.append(Path(self.db.url.database))
        try:
            if self._data_dir_fd is None:
                self._data_dir_fd = os.open(paths[0], os.O_RDONLY | os.O_DIRECTORY)
            for path in paths:
                found = path.stat()
                if self._data_identity.setdefault(path, (found.st_dev, found.st_ino)) != (found.st_dev, found.st_ino):
                    return "missing"
        except OSError:
            return "missing"
        return "ok"

    def close(self) -> None:
        """Let go of what `data_state` holds."""
        if self._data_dir_fd is not None:
            os.close(self._data_dir_fd)
            self._data_dir_fd = None

    def apply_config(self, new: Config) -> None:
        """Swap in a reloaded configuration and tell the parts that resize themselves."""
        old, self.config = self.config, new
        for hook in self.reload_hooks:
            hook(old, new)


async def open_blob_store(config: Config) -> BlobStore:
    """The blob store of storage.backend: a local directory, or an S3-compatible bucket
    shared by processes on several hosts (the caller closes it)."""
    if config.storage.backend != "s3":
        return await LocalBlobStore.open(config.data_path / "blobs")
    from daemon.storage.blobs import S3BlobStore
    from daemon.storage.s3 import S3Settings

    storage = config.storage
    settings = S3Settings(
        bucket=storage.s3_bucket,
        region=storage.s3_region,
        access_key_id=storage.s3_access_key_id,
        secret_access_key=storage.s3_secret_access_key,
        endpoint_url=storage.s3_endpoint_url or None,
        prefix=storage.s3_prefix,
    )
    return await S3BlobStore.open(settings, config.data_path)


@asynccontextmanager
async def open_services(config: Config, role: ProcessRole = ProcessRole.ALL) -> AsyncIterator[Services]:
    """Create the shared engine and blob store for `config`; release both on exit."""
    db = Database(
        config.database_url,
        pool_size=config.database.pool_size,
        busy_timeout_ms=config.database.busy_timeout_ms,
    )
    try:
        blobs = await open_blob_store(config)
        services = Services(config=config, db=db, blobs=blobs, role=role)
        try:
            yield services
        finally:
            services.close()
            with trio.CancelScope(shield=True):
                if services._ai_client is not None:
                    await services._ai_client.aclose()
            await blobs.aclose()
    finally:
        db.dispose()
