"""The webhook dispatcher: sleeps until the next due delivery or until woken, then sends.

    run_dispatcher
    └── sends nursery: one task per claimed delivery, at most `webhooks.concurrency`
        at once, `webhooks.per_endpoint_concurrency` per endpoint and
        `webhooks.per_user_concurrency` per user (per process)

The loop claims due deliveries in small batches, leasing each to this process
for ``WEBHOOK_TIMEOUT_MS`` plus a margin, and only as many as there is room
for: a claimed delivery starts sending at once and never waits for a slot
while its lease runs down. With nothing to claim it sleeps until the earliest
next attempt or lease expiry, until a commit in this process makes a
delivery due (`Database.deliveries_due`, set by the database layer), until a send frees a slot it was short of, or
for a slow poll that notices deliveries queued by other processes.

Each send resolves and checks its host (`ssrf`), signs the exact body and
records the attempt and the delivery's new status in one transaction
(`repos.webhooks.record_attempt`), a final write (shielded from cancellation,
time-bounded; `daemon.leasing`, shared with the worker pool). Settings are
read from `services.config` at each use, so SIGHUP applies at once.

Shutdown: once `services.stopping` is set no more is claimed and in-flight
sends finish (each is bounded by the timeout). A send cancelled past the
grace period gives its delivery back (a final write) without counting an
attempt; it is sent again later with the same X-Webhook-Id. A crashed
process's leased deliveries become due again when their leases expire.
Delivery is therefore at least once: receivers deduplicate on X-Webhook-Id.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx
import trio

from daemon.clock import iso, utcnow
from daemon.crypto import SealError
from daemon.leasing import final_write, given_back_if_cancelled, idle_delay, owner_id, poll_interval
from daemon.services import Services
from daemon.storage.repos import webhooks as repo
from daemon.wakeup import Wakeup, wait_any
from daemon.webhooks import bodies, schedule, sender
from daemon.webhooks.keys import open_headers, open_secret
from daemon.webhooks.models import DeliveryStatus
from daemon.webhooks.records import ClaimedDelivery
from daemon.webhooks.signing import signature_header

log = logging.getLogger(__name__)

# A lease covers the attempt (bounded by the timeout) and the write of its outcome.
LEASE_MARGIN_S = 5.0
# Deliveries claimed per transaction at most.
CLAIM_BATCH = 32
# After a database error the loop waits this long before trying again.
_ERROR_BACKOFF_S = 1.0
# Something is due but could not be claimed (another process holds its row lock): look again soon.
_CONTENDED_S = 0.02


class _Slots:
    """Sends in flight, in total, per endpoint and per endpoints' owner (one user's endpoints
    that hang hold only their share); `freed` is set whenever one ends."""

    def __init__(self) -> None:
        self.total = 0
        self.per_endpoint: Counter[str] = Counter()
        self.per_user: Counter[str] = Counter()
        self.freed = Wakeup()

    def take(self, delivery: ClaimedDelivery) -> None:
        self.total += 1
        self.per_endpoint[delivery.endpoint_id] += 1
        self.per_user[delivery.user_id] += 1

    def give_back(self, delivery: ClaimedDelivery) -> None:
        self.total -= 1
        for held, key in ((self.per_endpoint, delivery.endpoint_id), (self.per_user, delivery.user_id)):
            held[key] -= 1
            if held[key] <= 0:
                del held[key]
        self.freed.set()


async def run_dispatcher(services: Services, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Send due deliveries until the process drains; return once in-flight sends are done."""
    owner = owner_id("webhooks")
    slots = _Slots()
    async with sender.open_client() as client, trio.open_nursery() as sends:
        services.running["dispatcher"] = True
        task_status.started()
        try:
            await _claim_loop(services, client, owner, slots, sends)
        finally:
            services.running["dispatcher"] = False


async def _claim_loop(services: Services, client: httpx.AsyncClient, owner: str, slots: _Slots,
                      sends: trio.Nursery) -> None:
    poll_s = poll_interval(services.db.url.get_backend_name())
    while not services.stopping.is_set():
        config = services.config.webhooks
        room = config.concurrency - slots.total
        try:
            claimed: list[ClaimedDelivery] = []
            if room > 0:
                limit = min(room, CLAIM_BATCH)
                claimed = await services.db.run(
                    repo.claim_due,
                    owner=owner,
                    now=utcnow(),
                    lease_s=config.timeout_ms / 1000 + LEASE_MARGIN_S,
                    limit=limit,
                    room={ep: config.per_endpoint_concurrency - n for ep, n in slots.per_endpoint.items()},
                    default_room=config.per_endpoint_concurrency,
                    user_room={user: config.per_user_concurrency - n for user, n in slots.per_user.items()},
                    default_user_room=config.per_user_concurrency,
                )
                for delivery in claimed:
                    slots.take(delivery)
                    sends.start_soon(_deliver, services, client, owner, delivery, slots)
                if len(claimed) == limit:
                    continue  # more may be due right now
            waits: list[Callable[[], Awaitable[object]]] = [services.stopping.wait]
            if slots.total >= config.concurrency:
                waits.append(slots.freed.sleep)
            else:
                busy = [ep for ep, n in slots.per_endpoint.items() if n >= config.per_endpoint_concurrency]
                busy_users = [user for user, n in slots.per_user.items() if n >= config.per_user_concurrency]
                due = await services.db.read(repo.next_due, now=utcnow(), skip_endpoints=busy, skip_users=busy_users)
                delay = idle_delay(due, poll_s)
                if due is not None and delay == 0.0 and not claimed:
                    delay = _CONTENDED_S
                waits.append(functools.partial(services.db.deliveries_due.sleep, delay))
                if busy or busy_users:
                    waits.append(slots.freed.sleep)
        except Exception:
            log.exception("dispatcher: database error", extra={"action": "webhooks.claim_failed"})
            waits = [services.stopping.wait, functools.partial(trio.sleep, _ERROR_BACKOFF_S)]
        await wait_any(*waits)


def _request(services: Services, delivery: ClaimedDelivery, now_s: int) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one attempt (raises SealError if the secret or the custom
    headers do not open)."""
    config = services.config.webhooks
    envelope: bodies.Envelope = {"id": delivery.event_id, "type": delivery.event_type, "data": delivery.data,
                                 "occurredAt": iso(delivery.occurred_at) or ""}
    body = bodies.encode(envelope, delivery.body_format)
    keys = [open_secret(config, delivery.endpoint_id, delivery.secret_sealed)]
    if delivery.previous_secret_sealed is not None and delivery.previous_secret_signs(now_s):
        keys.append(open_secret(config, delivery.endpoint_id, delivery.previous_secret_sealed))
    headers = sender.request_headers(
        content_type=delivery.body_format.content_type,
        delivery_id=delivery.id,
        event_type=delivery.event_type,
        timestamp=now_s,
        signature=signature_header(keys, now_s, body),
        custom=open_headers(config, delivery.endpoint_id, delivery.custom_headers_sealed),
    )
    return body, headers


async def _deliver(services: Services, client: httpx.AsyncClient, owner: str, delivery: ClaimedDelivery,
                   slots: _Slots) -> None:
    """One attempt of a claimed delivery, recorded; or, if cancelled before the outcome is
    known, the delivery given back."""
    config = services.config.webhooks

    async def release() -> None:
        await services.db.run(repo.release, delivery_ids=[delivery.id], owner=owner)
        log.info("delivery released", extra={"action": "webhooks.released", "delivery_id": delivery.id})

    try:
        started = utcnow()
        if delivery.attempts == 0:
            services.metrics.webhook_delivery_latency.observe(
                max(0.0, (started - delivery.created_at).total_seconds()))
        async with given_back_if_cancelled(release, {"delivery_id": delivery.id}):
            outcome = await _attempt(services, client, delivery, started)
        status, next_at = schedule.after_attempt(
            succeeded=outcome.succeeded, attempts=delivery.attempts + 1, now=utcnow(),
            policy=schedule.RetryPolicy.of(config), retry_after_s=outcome.retry_after_s,
        )
        attempt = repo.Attempt(at=started, duration_ms=outcome.duration_ms, status_code=outcome.status_code,
                               error=outcome.error, response_body=outcome.response_body)
        recorded = None
        with final_write():
            try:
                recorded = await services.db.run(
                    repo.record_attempt, delivery_id=delivery.id, endpoint_id=delivery.endpoint_id, owner=owner,
                    attempt=attempt, status=status, next_attempt_at=next_at,
                    auto_disable_threshold=config.auto_disable_threshold,
                )
            except Exception:
                # The lease expires and the delivery is sent again: at least once.
                log.exception("could not record a delivery attempt",
                              extra={"action": "webhooks.record_failed", "delivery_id": delivery.id})
        _report(services, delivery, outcome, status, recorded)
    finally:
        slots.give_back(delivery)


async def _attempt(services: Services, client: httpx.AsyncClient, delivery: ClaimedDelivery,
                   started: dt.datetime) -> sender.Outcome:
    """Build, sign and send one attempt; whatever goes wrong is an outcome, not an exception."""
    config = services.config.webhooks
    try:
        body, headers = _request(services, delivery, int(started.timestamp()))
        return await sender.send(client, url=delivery.url, body=body, headers=headers,
                                 timeout_s=config.timeout_ms / 1000, allow_private=config.allow_private_networks)
    except SealError:
        return sender.Outcome(duration_ms=0, error="the signing secret or custom headers do not open with "
                                                   "WEBHOOK_ENCRYPTION_KEY (was the key changed?)")
    except Exception as exc:  # a bug, not the receiver: keep the dispatcher, retry the delivery
        log.exception("delivery attempt crashed", extra={"action": "webhooks.crashed", "delivery_id": delivery.id})
        return sender.Outcome(duration_ms=0, error=f"internal error ({type(exc).__name__}); see the daemon log")


def _report(services: Services, delivery: ClaimedDelivery, outcome: sender.Outcome, status: DeliveryStatus,
            recorded: repo.Recorded | None) -> None:
    label = "lost" if recorded is None else {
        DeliveryStatus.SUCCEEDED: "succeeded", DeliveryStatus.RETRYING: "retrying", DeliveryStatus.DEAD: "dead",
    }[status]
    services.metrics.webhook_deliveries.labels(label).inc()
    extra = {
        "action": f"webhooks.{label}", "delivery_id": delivery.id, "endpoint_id": delivery.endpoint_id,
        "event_type": delivery.event_type, "attempt": delivery.attempts + 1, "status_code": outcome.status_code,
        "duration_ms": outcome.duration_ms, "error": outcome.error,
    }
    if label == "succeeded":
        log.debug("delivered", extra=extra)
    elif label == "lost":
        log.warning("delivery no longer ours (endpoint deleted or lease expired)", extra=extra)
    else:
        log.info("delivery attempt failed", extra=extra)
    if recorded is not None and recorded.endpoint_disabled:
        log.warning("webhook endpoint disabled after consecutive dead deliveries",
                    extra={"action": "webhooks.endpoint_disabled", "endpoint_id": delivery.endpoint_id})
