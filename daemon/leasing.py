"""What the worker pool (`daemon.jobs.pool`) and the webhook dispatcher
(`daemon.webhooks.dispatcher`) share as leased loops: each claims rows by leasing
them to an owner id, works on them, records the outcome, and sleeps until the next
due time, a wake-up or a slow poll when there is nothing to claim.

Cancellation and shutdown: a loop stops claiming once asked to stop and lets work
in flight finish. Work cancelled before its outcome is known (shutdown past the
grace period) gives its row back inside `given_back_if_cancelled`, then the
cancellation propagates. The writes that must survive cancellation (that give-back,
and recording an outcome already known) run inside `final_write`: shielded from the
cancellation, yet bounded by `FINAL_WRITE_S` so that a database that does not
answer cannot hang the shutdown. A write that fails or times out is logged; its
row's lease then expires and the row is claimed again (at least once, never lost).

Layering: this module knows leases, not jobs or deliveries: it imports neither
`daemon.jobs` nor `daemon.webhooks`, nor storage.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import trio

from daemon.clock import utcnow

log = logging.getLogger(__name__)

# How often an idle loop looks for rows made due by *other* processes. A commit in
# this process wakes its loops at once (the database layer's wake-ups); this is only
# the cross-process fallback. PostgreSQL serves several processes; SQLite is usually one.
_POLL_S = {"postgresql": 2.0, "sqlite": 30.0}
# Final writes after cancellation must finish, but never hang a shutdown.
FINAL_WRITE_S = 10.0


def poll_interval(backend: str) -> float:
    """The slow poll of an idle loop on `backend` (``Database.url.get_backend_name()``)."""
    return _POLL_S[backend]


def owner_id(role: str) -> str:
    """A lease owner id unique to this loop: ``host:pid:role:ns`` (fits the 64-character
    lease columns; the pid tells an operator which process holds a row)."""
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{role}:{time.monotonic_ns() % 10**9}"


def idle_delay(due: dt.datetime | None, poll_s: float) -> float:
    """Seconds an idle loop sleeps (unless woken): until `due`, the next time something may be
    claimed (None: nothing waits), but never longer than the slow poll `poll_s`."""
    if due is None:
        return poll_s
    return min(poll_s, max(0.0, (due - utcnow()).total_seconds()))


@contextlib.contextmanager
def final_write() -> Iterator[None]:
    """Run the enclosed write even when the task is being cancelled, for at most
    `FINAL_WRITE_S` (after which it is abandoned: the row's lease expires instead)."""
    with trio.CancelScope(shield=True), trio.move_on_after(FINAL_WRITE_S):
        yield


@contextlib.asynccontextmanager
async def given_back_if_cancelled(give_back: Callable[[], Awaitable[object]],
                                  extra: dict[str, Any]) -> AsyncIterator[None]:
    """If the enclosed work is cancelled, `give_back()` its leased row (a `final_write`)
    and let the cancellation propagate. A give-back that fails is logged with `extra`:
    the row's lease expires instead and the row is claimed again."""
    try:
        yield
    except* trio.Cancelled:
        # except*: a cancelled nursery wraps the cancellation in an exception group.
        with final_write():
            try:
                await give_back()
            except Exception:
                log.exception("could not give back a leased row", extra=extra | {"action": "lease.give_back_failed"})
        raise
