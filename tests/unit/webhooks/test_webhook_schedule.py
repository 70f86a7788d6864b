"""Retry timing (daemon.webhooks.schedule)."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from daemon.config import WebhooksConfig
from daemon.webhooks.models import DeliveryStatus
from daemon.webhooks.schedule import RetryPolicy, after_attempt, backoff_s, next_attempt_at, parse_retry_after

NOW = dt.datetime(2026, 1, 15, 9, 30, tzinfo=dt.UTC)
POLICY = RetryPolicy(initial_ms=30_000, cap_ms=6 * 3600 * 1000, max_attempts=8)


class Fixed(random.Random):
    """A random source whose uniform() is always at one end (or the middle) of its range."""

    def __init__(self, where: float) -> None:
        super().__init__()
        self.where = where

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.where


def backoff(attempts: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """The one backoff function, with a delivery policy's settings."""
    return backoff_s(attempts, initial_s=policy.initial_ms / 1000, cap_s=policy.cap_ms / 1000, rng=rng)


def test_the_defaults_come_from_the_seed() -> None:
    assert RetryPolicy.of(WebhooksConfig()) == POLICY


@pytest.mark.parametrize(("attempts", "seconds"), [(1, 30), (2, 60), (3, 120), (4, 240), (7, 1920)])
def test_each_wait_doubles_from_the_initial_backoff(attempts: int, seconds: float) -> None:
    assert backoff(attempts, POLICY, Fixed(0.5)) == pytest.approx(seconds)
    at = next_attempt_at(attempts=attempts, now=NOW, policy=POLICY, rng=Fixed(0.5))
    assert at == NOW + dt.timedelta(seconds=seconds)


def test_jitter_is_plus_or_minus_ten_percent() -> None:
    assert backoff(2, POLICY, Fixed(0.0)) == pytest.approx(54)
    assert backoff(2, POLICY, Fixed(1.0)) == pytest.approx(66)
    rng = random.Random(7)
    waits = [backoff(1, POLICY, rng) for _ in range(2000)]
    assert 27 <= min(waits) < 27.5 and 32.5 < max(waits) <= 33


def test_the_wait_is_capped() -> None:
    policy = RetryPolicy(initial_ms=30_000, cap_ms=3_600_000, max_attempts=30)
    assert backoff(20, policy, Fixed(1.0)) == 3600
    assert backoff(8, POLICY, Fixed(1.0)) == pytest.approx(30 * 128 * 1.1)


def test_after_the_last_attempt_the_delivery_is_dead() -> None:
    assert next_attempt_at(attempts=8, now=NOW, policy=POLICY) is None
    assert after_attempt(succeeded=False, attempts=8, now=NOW, policy=POLICY) == (DeliveryStatus.DEAD, None)
    status, at = after_attempt(succeeded=False, attempts=7, now=NOW, policy=POLICY, rng=Fixed(0.5))
    assert status is DeliveryStatus.RETRYING and at == NOW + dt.timedelta(seconds=1920)
    assert after_attempt(succeeded=True, attempts=8, now=NOW, policy=POLICY) == (DeliveryStatus.SUCCEEDED, None)


def test_retry_after_is_a_floor_itself_capped() -> None:
    fast = RetryPolicy(initial_ms=100, cap_ms=60_000, max_attempts=5)
    assert next_attempt_at(attempts=1, now=NOW, policy=fast, retry_after_s=2, rng=Fixed(0.5)) == (
        NOW + dt.timedelta(seconds=2))
    # A Retry-After shorter than the backoff does not shorten it.
    assert next_attempt_at(attempts=1, now=NOW, policy=POLICY, retry_after_s=1, rng=Fixed(0.5)) == (
        NOW + dt.timedelta(seconds=30))
    assert next_attempt_at(attempts=1, now=NOW, policy=fast, retry_after_s=10**9, rng=Fixed(0.5)) == (
        NOW + dt.timedelta(seconds=60))


def test_retry_after_is_seconds_or_an_http_date() -> None:
    assert parse_retry_after("120", NOW) == 120
    assert parse_retry_after(" 3 ", NOW) == 3
    assert parse_retry_after("Thu, 15 Jan 2026 09:31:00 GMT", NOW) == 60
    assert parse_retry_after("Thu, 15 Jan 2026 09:00:00 GMT", NOW) == 0
    for bad in (None, "", "soon", "-5", "1.5"):
        assert parse_retry_after(bad, NOW) is None
