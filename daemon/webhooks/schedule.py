"""When a failed delivery is tried again, and when it is DEAD: pure, `now` passed in.

Attempt n+1 waits ``backoff_initial × 2^(n-1)`` with ±10 % jitter, capped at
``backoff_cap`` (SPEC §2, §9), and never sooner than the receiver's
Retry-After (itself capped, so a receiver cannot park a delivery for a year).
After ``max_attempts`` attempts the delivery is DEAD.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import random
from dataclasses import dataclass

from daemon.backoff import backoff_s
from daemon.config import WebhooksConfig
from daemon.webhooks.models import DeliveryStatus


@dataclass(frozen=True)
class RetryPolicy:
    initial_ms: int
    cap_ms: int
    max_attempts: int

    @classmethod
    def of(cls, config: WebhooksConfig) -> RetryPolicy:
        return cls(config.backoff_initial_ms, config.backoff_cap_ms, config.max_attempts)


def next_attempt_at(
    *,
    attempts: int,
    now: dt.datetime,
    policy: RetryPolicy,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> dt.datetime | None:
    """When to try again after `attempts` failed attempts; None when none is left (DEAD)."""
    if attempts >= policy.max_attempts:
        return None
    delay = backoff_s(attempts, initial_s=policy.initial_ms / 1000, cap_s=policy.cap_ms / 1000, rng=rng)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, policy.cap_ms / 1000))
    return now + dt.timedelta(seconds=delay)


def after_attempt(
    *,
    succeeded: bool,
    attempts: int,
    now: dt.datetime,
    policy: RetryPolicy,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> tuple[DeliveryStatus, dt.datetime | None]:
    """The delivery's status and next attempt time once its `attempts`-th attempt ended."""
    if succeeded:
        return DeliveryStatus.SUCCEEDED, None
    at = next_attempt_at(attempts=attempts, now=now, policy=policy, retry_after_s=retry_after_s, rng=rng)
    return (DeliveryStatus.DEAD, None) if at is None else (DeliveryStatus.RETRYING, at)


def parse_retry_after(value: str | None, now: dt.datetime) -> float | None:
    """Seconds from a Retry-After header: delay-seconds or an HTTP-date; None if absent or invalid."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²".isdigit() too, but float("²") raises
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now).total_seconds())
