"""The extraction worker pool and the lease reaper."""

from __future__ import annotations

import trio

from daemon.services import Services


async def run_workers(services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run `jobs.workers` workers until the process drains.

    The job queue is not built yet: the pool stands ready and idle, so the
    process shape, readiness and drain are exercised end to end.
    """
    services.running["workers"] = True
    task_status.started()
    try:
        await services.stopping.wait()
    finally:
        services.running["workers"] = False


async def run_reaper(services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Re-queue jobs whose worker's lease expired (idle until jobs exist)."""
    services.running["reaper"] = True
    task_status.started()
    try:
        await trio.sleep_forever()
    finally:
        services.running["reaper"] = False
