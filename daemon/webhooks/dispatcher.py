"""The webhook dispatcher: sleeps until the next due delivery or until woken."""

from __future__ import annotations

import trio

from daemon.services import Services


async def run_dispatcher(services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Send due deliveries until the process drains (idle until webhooks exist)."""
    services.running["dispatcher"] = True
    task_status.started()
    try:
        await services.stopping.wait()
    finally:
        services.running["dispatcher"] = False
