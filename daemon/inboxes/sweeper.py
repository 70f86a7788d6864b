"""The inbox sweeper: lists each watched inbox when it is due and makes one batch run of
the files it had not taken (issue #17).

    run_inboxes
    ├── notifications   inotify on the local folders (daemon.inboxes.watch): due at once
    └── sweep loop      sleeps until the earliest due inbox, a notification, a job ending,
        │               a sweep ending, a change made through the API in this process, or
        │               the slow poll that sees the changes made through other processes
        └── passes      one per inbox at a time, side by side (MAX_CONCURRENT_SWEEPS): an
                        endpoint that never answers holds its own inbox only, and its
                        listing is given up after `inboxes.list_timeout`

An inbox is due `inboxes.interval` after its last sweep by any process (`last_swept_at`),
at once when a notification names its folder, and again when one of its files settles
(still being written when listed). A local folder is also swept when the process starts:
what landed while nothing watched sent no notification. Every process with workers sweeps; the database keeps
each file to one job (`daemon.storage.repos.inboxes.record_sweep`), and a process that
lost the race deletes the blobs it copied.

A local `move` inbox also moves each file whose job ended into done/ or failed/ beside
it, at the sweeps that follow.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable

import trio

from daemon.clock import utcnow
from daemon.errors import JobError, TransientJobError
from daemon.inboxes import local
from daemon.inboxes.models import (
    FAILED_DIR,
    After,
    Candidate,
    Inbox,
    InboxKind,
    identity,
    next_sweep_at,
    settled_folder,
    untaken,
)
from daemon.inboxes.watch import FolderWatch, open_watch
from daemon.integrations.base import FileRef, RemoteEntry
from daemon.integrations.google_drive import DriveSource
from daemon.integrations.s3 import S3Source
from daemon.integrations.sources import open_source
from daemon.jobs.models import ErrorCode
from daemon.leasing import poll_interval
from daemon.limiters import KeyedLimiter
from daemon.services import Services
from daemon.storage.blobs import BlobStoreError
from daemon.storage.repos import inboxes as repo
from daemon.storage.repos.integrations import get_integration
from daemon.storage.repos.jobs import NewJob
from daemon.wakeup import Wakeup, wait_any

log = logging.getLogger(__name__)

# At most this many files become one run; a sweep that found more sweeps again at once.
MAX_FILES_PER_SWEEP = 1000
# After a job ended, wait this long for more before moving files aside: workers ending jobs
# in a burst make one pass over the inboxes, not one each.
_JOB_ENDS_GATHER_S = 0.5
# Remote listings stop here (each sweep lists the whole prefix or folder again).
MAX_LISTED = 10_000
# Inboxes swept at once by one process. Sweeps run side by side so that one inbox's slow or
# silent endpoint holds only itself; the bound keeps a flood of due inboxes from taking every
# thread integrations' SDK calls may hold (16, daemon.integrations.s3) and the database's
# connections (database.pool_size, 10 by default) from the workers and requests.
MAX_CONCURRENT_SWEEPS = 8
# ... and of one user: a user with many inboxes on endpoints that never answer would otherwise
# take every one of those slots, each up to inboxes.list_timeout, and hold everyone else's.
MAX_CONCURRENT_SWEEPS_PER_USER = 2


async def run_inboxes(services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Sweep inboxes until the process drains; a sweep in progress is finished or cancelled
    by the drain's deadline (a cancelled sweep took nothing: its blobs are deleted)."""
    watch = open_watch()
    notified: set[str] = set()
    try:
        async with trio.open_nursery() as nursery:
            if watch is not None:
                nursery.start_soon(_read_notifications, watch, notified, services)
            services.running["inboxes"] = True
            task_status.started()
            try:
                await _sweep_loop(services, watch, notified)
            finally:
                services.running["inboxes"] = False
                nursery.cancel_scope.cancel()
    finally:
        if watch is not None:
            watch.close()


async def _read_notifications(watch: FolderWatch, notified: set[str], services: Services) -> None:
    while True:
        notified |= await watch.wait()
        services.inboxes_changed.set()


async def _sweep_loop(services: Services, watch: FolderWatch | None, notified: set[str]) -> None:
    """Start each inbox's pass (`_pass`) when it is due, side by side in a nursery: one inbox's
    slow endpoint holds its own sweep, not everyone else's. An inbox whose pass is still in
    progress is not started again; its end wakes this loop to plan that inbox anew."""
    # Inbox id → the time.time() one of its files settles: sweep it again then.
    settling: dict[str, float] = {}
    # Inbox id → the time.monotonic() its last sweep here ended: a list read before that has
    # the inbox's last_swept_at from before it, which must not make it due again at once.
    ended: dict[str, float] = {}
    in_progress: set[str] = set()
    # Inboxes the loop skipped while their pass was in progress: that pass's end wakes it.
    skipped: set[str] = set()
    pass_ended = Wakeup()
    limiter = trio.CapacityLimiter(MAX_CONCURRENT_SWEEPS)
    per_user = KeyedLimiter(MAX_CONCURRENT_SWEEPS_PER_USER)
    # Files that landed while no process watched sent no notification: at the first listing,
    # every local folder is swept at once (a listing of a local folder is cheap; a remote one
    # waits for its interval).
    first_listing = True
    failures = 0  # listings failed in a row

    async def one_pass(inbox: Inbox, sweep: bool) -> None:
        try:
            # The user's slot first: a user's passes waiting their turn hold none of everyone's.
            async with per_user.hold(inbox.user_id), limiter:
                await _pass(services, inbox, sweep, settling)
        finally:
            in_progress.discard(inbox.id)
            if sweep:
                ended[inbox.id] = time.monotonic()
            # Only a sweep's end (or one the loop waits for) wakes the loop: a pass that only
            # moved files aside, ended, must not start the next at once, and so on for ever.
            if sweep or inbox.id in skipped:
                skipped.discard(inbox.id)
                pass_ended.set()

    # On drain, the passes in progress finish (a remote listing within inboxes.list_timeout)
    # or are cancelled by the drain's deadline.
    async with trio.open_nursery() as nursery:
        while not services.stopping.is_set():
            config = services.config.inboxes
            interval = float(config.interval_s)
            listed_at = time.monotonic()
            try:
                inboxes = await services.db.read(repo.active_inboxes)
                if first_listing:
                    notified |= {inbox.id for inbox in inboxes if inbox.kind == InboxKind.LOCAL}
                    first_listing = False
                if watch is not None:
                    # A folder watched only now may have had files before: no notification came for them.
                    notified |= await _update_watches(watch, inboxes, config.local_root)
            except Exception:
                # The database is unreachable or failing: try again, later each time. Raised, it
                # ended the process, and with it the API, the workers and the webhooks.
                failures += 1
                log.exception("inboxes: cannot list them", extra={"action": "inbox.list_failed"})
                await wait_any(services.stopping.wait, functools.partial(trio.sleep, min(30.0, 0.5 * 2**failures)))
                continue
            failures = 0
            now = utcnow()
            # Inboxes made, resumed or deleted through another process are seen when the list is
            # read again: within the slow poll of the other loops (2 s on PostgreSQL).
            wake_at = now + dt.timedelta(seconds=min(interval, poll_interval(services.db.url.get_backend_name())))
            moving = False
            for inbox in inboxes:
                moves = inbox.kind == InboxKind.LOCAL and inbox.after == After.MOVE
                moving = moving or moves
                if inbox.id in in_progress:
                    skipped.add(inbox.id)  # a notification stays in `notified` for when its pass ends
                    continue
                if ended.get(inbox.id, -math.inf) >= listed_at:
                    continue  # swept since the list was read: its end has woken the loop to read it again
                due = next_sweep_at(inbox.last_swept_at, interval, now)
                settles = settling.get(inbox.id)
                sweep = inbox.id in notified or due <= now or (settles is not None and settles <= time.time())
                if sweep or moves:
                    notified.discard(inbox.id)
                    in_progress.add(inbox.id)
                    nursery.start_soon(one_pass, inbox, sweep)
                    if sweep:
                        continue  # its end wakes the loop
                wake_at = min(wake_at, due)
                if settles is not None:  # at most an interval ahead: a file's time is whatever was set
                    wake_at = min(wake_at, dt.datetime.fromtimestamp(min(settles, time.time() + interval), dt.UTC))
            delay = max(0.0, (wake_at - utcnow()).total_seconds())
            waits: list[Callable[[], Awaitable[object]]] = [
                functools.partial(services.inboxes_changed.sleep, delay), services.stopping.wait,
                functools.partial(pass_ended.sleep, delay)]
            if moving:  # a job ending may let a file move aside
                waits.append(functools.partial(_job_ended, services, delay))
            await wait_any(*waits)


async def _pass(services: Services, inbox: Inbox, sweep: bool, settling: dict[str, float]) -> None:
    """One inbox's turn: move aside the files whose job ended (local `move`), then sweep it
    if due. Failures are the inbox's alone: logged, never raised to the loop."""
    try:
        if inbox.kind == InboxKind.LOCAL and inbox.after == After.MOVE:
            await _settle_quietly(services, inbox)
        if sweep:
            settling.pop(inbox.id, None)
            again = await _sweep(services, inbox)
            if again is not None:
                settling[inbox.id] = again
    except Exception:  # the database failed: log it, keep the other inboxes going
        log.exception("inbox sweep failed", extra={"action": "inbox.sweep_error", "inbox_id": inbox.id})


async def _job_ended(services: Services, delay: float) -> None:
    """Return when a job ended (or after `delay`); a burst of job ends is one pass, not one each."""
    if await services.db.jobs_ended.sleep(delay):
        await trio.sleep(_JOB_ENDS_GATHER_S)


async def _update_watches(watch: FolderWatch, inboxes: list[Inbox], root: str) -> set[str]:
    """Watch the folders of the local inboxes, and only those; the inboxes watched anew."""
    wanted: dict[str, str] = {}
    for inbox in inboxes:
        if inbox.kind != InboxKind.LOCAL:
            continue
        try:
            wanted[inbox.id] = str(await trio.to_thread.run_sync(local.resolve_folder, root, inbox.path))
        except local.PathRefused:
            continue
    before = watch.watched()
    for inbox_id in before - set(wanted):
        watch.unwatch(inbox_id)
    return {inbox_id for inbox_id, folder in wanted.items() if watch.watch(inbox_id, folder)} - before


async def _sweep(services: Services, inbox: Inbox) -> float | None:
    """Sweep one inbox; returns when to sweep it again early (a file settling, or more
    files than one run takes), else None. Failures are recorded on the inbox, never raised."""
    started = time.monotonic()
    try:
        # What the inbox's lastError must say though the sweep went on: why a file whose job
        # ended could not be moved aside (local), or that a listing was cut (remote).
        unmoved = None
        if inbox.kind == InboxKind.LOCAL:
            found, again, unmoved = await _local_found(services, inbox)
        else:
            found, again, unmoved = await _remote_found(services, inbox)
    except (local.PathRefused, JobError, BlobStoreError, OSError) as exc:
        message = exc.message if isinstance(exc, JobError) else str(exc)
        if message != inbox.last_error:
            log.warning("inbox sweep failed: %s", message, extra={"action": "inbox.sweep_failed",
                                                                  "inbox_id": inbox.id})
        await services.db.run(repo.mark_swept, inbox.id, utcnow(), error=message)
        return None
    if unmoved is not None and unmoved != inbox.last_error:
        action = "inbox.settle_failed" if inbox.kind == InboxKind.LOCAL else "inbox.listing_cut"
        log.warning("inbox: %s", unmoved, extra={"action": action, "inbox_id": inbox.id})
    outcome = await _record(services, inbox, found, unmoved)
    if outcome.taken:
        log.info("inbox swept", extra={
            "action": "inbox.swept", "inbox_id": inbox.id, "job_run_id": outcome.job_run_id,
            "taken": len(outcome.taken), "lost": len(outcome.lost),
            "duration_ms": round((time.monotonic() - started) * 1000)})
    if inbox.kind == InboxKind.LOCAL and inbox.after == After.MOVE and outcome.taken:
        await _settle(services, inbox)  # refused files go to failed/ at once
    return again


async def _record(services: Services, inbox: Inbox, found: list[repo.Found],
                  error: str | None) -> repo.SweepOutcome:
    """`record_sweep`, with the blobs of what it did not take deleted (also if it fails)."""
    try:
        outcome = await services.db.run(repo.record_sweep, inbox_id=inbox.id, found=found, now=utcnow(),
                                        error=error)
    except BaseException:
        with trio.CancelScope(shield=True):
            await _forget(services, found)
        raise
    await _forget(services, outcome.lost)
    return outcome


async def _forget(services: Services, found: list[repo.Found]) -> None:
    for item in found:
        if item.job is not None and item.job.blob_key:
            await services.blobs.delete(item.job.blob_key)


async def _local_found(services: Services, inbox: Inbox) -> tuple[list[repo.Found], float | None, str | None]:
    config = services.config
    with await trio.to_thread.run_sync(local.open_folder, config.inboxes.local_root, inbox.path) as folder:
        # One inbox a folder is checked at creation; a symlink changed since may have made this
        # folder another's (or its done/): the older inbox keeps it, this one takes nothing.
        older = [path for other, path in (await services.db.read(repo.local_inbox_paths)).items() if other < inbox.id]
        if await trio.to_thread.run_sync(local.watched_elsewhere, config.inboxes.local_root, folder.path, older):
            raise local.PathRefused("an older inbox watches this folder, or moves its files into it: this one "
                                    "takes nothing (a symlink under inboxes.local_root changed since it was made)")
        return await _found_in(services, inbox, folder)


async def _found_in(services: Services, inbox: Inbox,
                    folder: local.Folder) -> tuple[list[repo.Found], float | None, str | None]:
    config = services.config
    unmoved = await _settle_in(services, inbox, folder) if inbox.after == After.MOVE else None
    scan = await trio.to_thread.run_sync(
        lambda: local.scan(folder, settle_s=config.inboxes.settle_ms / 1000, now=time.time()))
    fresh = await _fresh(services, inbox, scan.candidates)
    again = scan.settles_at
    if len(fresh) > MAX_FILES_PER_SWEEP:
        fresh, again = fresh[:MAX_FILES_PER_SWEEP], time.time()
    found: list[repo.Found] = []
    try:
        for candidate in fresh:
            try:
                job = await local.copy_in(services.blobs, folder, candidate, config.jobs.max_file_size_bytes)
            except local.Refused as exc:
                found.append(repo.Found(candidate, error=str(exc)))
            except local.Changed:
                again = time.time() + config.inboxes.settle_ms / 1000  # look at it again once settled
            else:
                found.append(repo.Found(candidate, job=job))
    except BaseException:
        with trio.CancelScope(shield=True):
            await _forget(services, found)
        raise
    return found, again, unmoved


async def _settle(services: Services, inbox: Inbox) -> str | None:
    """Move the files whose job ended into done/ or failed/ beside them; returns why one
    could not be moved, if one could not (the inbox's lastError says it)."""
    with await trio.to_thread.run_sync(local.open_folder, services.config.inboxes.local_root, inbox.path) as folder:
        return await _settle_in(services, inbox, folder)


async def _settle_in(services: Services, inbox: Inbox, folder: local.Folder) -> str | None:
    unmoved = None
    for item in await services.db.read(repo.unsettled_items, inbox.id):
        subfolder = settled_folder(item.job_status) or FAILED_DIR
        try:
            await trio.to_thread.run_sync(local.move_beside, folder, item.name, subfolder, item.identity[:8],
                                          item.identity)
        except OSError as exc:
            # A file that cannot move (done/ is a file or a symlink, permissions) stays where it is
            # and is tried again at the next pass; it must not stop the others, nor the sweep that
            # lists the folder after this (a file called "done" stopped the inbox for good).
            unmoved = unmoved or f"{item.name} cannot be moved into {subfolder}/: {exc.strerror or exc}"
            continue
        await services.db.run(repo.settle_item, inbox.id, item.identity, utcnow())
    return unmoved


async def _settle_quietly(services: Services, inbox: Inbox) -> None:
    """`_settle` between sweeps (a job ended); a folder gone is for the next sweep to report."""
    try:
        await _settle(services, inbox)
    except (local.PathRefused, OSError) as exc:
        log.debug("cannot move files aside: %s", exc, extra={"action": "inbox.settle_failed", "inbox_id": inbox.id})


async def _fresh(services: Services, inbox: Inbox, candidates: list[Candidate]) -> list[Candidate]:
    known = [c.identity for c in candidates] + [c.formerly for c in candidates if c.formerly]
    taken = await services.db.read(repo.taken_identities, inbox.id, known)
    # A file an earlier release took under its former identity is taken, and keeps its new
    # identity from now on: a later change of its former one (a Drive file renamed) is none.
    adopted = [(c.formerly, c.identity) for c in candidates
               if c.formerly in taken and c.identity not in taken and c.formerly is not None]
    if adopted:
        await services.db.run(repo.adopt_identities, inbox.id, adopted)
    return untaken(candidates, taken | {new for _, new in adopted})


async def _remote_found(services: Services, inbox: Inbox) -> tuple[list[repo.Found], float | None, str | None]:
    """What a remote folder holds that the inbox has not taken, when to look again early, and
    what the inbox's lastError must say (a listing cut at `MAX_LISTED`)."""
    row = await services.db.read(get_integration, inbox.user_id, inbox.integration_id or "")
    if row is None:
        raise local.PathRefused(f"Integration {inbox.integration_id} no longer exists")
    timeout_s = services.config.inboxes.list_timeout_s
    # An endpoint that accepts and never answers, or trickles a byte under the SDK's read timeout,
    # would hold this sweep for ever (and keep the inbox from being swept again): given up here,
    # it is the inbox's lastError, tried again at the next interval. Only the listing is bounded:
    # what it found is recorded whole or not at all.
    entries: list[RemoteEntry] = []
    with trio.move_on_after(timeout_s) as listing:
        async with open_source(services, row) as remote:
            if isinstance(remote, S3Source):
                entries = await remote.list_prefix(inbox.path, limit=MAX_LISTED)
            elif isinstance(remote, DriveSource):
                entries = await remote.list_in(inbox.path, f"folder {inbox.path}", limit=MAX_LISTED)
            else:  # pragma: no cover - every provider is one of the two
                raise TypeError(type(remote).__name__)
    if listing.cancelled_caught:
        raise TransientJobError(ErrorCode.INTERNAL_ERROR, f"The listing did not finish within {timeout_s} s "
                                f"(inboxes.list_timeout): the endpoint answers too slowly or not at all")
    candidates = [
        Candidate(identity=identity(inbox.kind, _ref_key(entry.ref), entry.version or ""), name=entry.name,
                  size=entry.size, source=entry.ref.source(row.id),
                  formerly=None if entry.former_version is None else identity(inbox.kind, _ref_key(entry.ref),
                                                                              entry.former_version))
        for entry in entries[:MAX_LISTED]
    ]
    fresh = await _fresh(services, inbox, candidates)
    again = None
    if len(fresh) > MAX_FILES_PER_SWEEP:
        fresh, again = fresh[:MAX_FILES_PER_SWEEP], time.time()
    # Listed in key order and cut: an object past the first MAX_LISTED is never seen. Said,
    # not silent (new objects sorting late were never taken, with lastError null).
    cut = (f"The folder holds more than {MAX_LISTED:,} entries: only the first {MAX_LISTED:,} (in name order) "
           "are looked at; move the ones done out of it") if len(entries) > MAX_LISTED else None
    return [repo.Found(c, job=NewJob(file_name=c.name or None, source=c.source)) for c in fresh], again, cut


def _ref_key(ref: FileRef) -> str:
    return ref.file_id or ref.key or ""
