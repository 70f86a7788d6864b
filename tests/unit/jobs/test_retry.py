"""daemon.jobs.retry.job_retry_at: when a failed attempt runs again (SPEC §6: timeouts,
rate limits and provider 5xx are retried with backoff, honouring Retry-After, up to the
attempt limit; everything else fails at once)."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from daemon.jobs.retry import MAX_DELAY_S, job_retry_at

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def delay(attempts: int, *, max_attempts: int = 100, initial: float = 5.0, retry_after: float | None = None,
          seed: int | None = 1, retryable: bool = True) -> float | None:
    at = job_retry_at(attempts=attempts, max_attempts=max_attempts, retryable=retryable, now=NOW,
                         initial_delay_s=initial, retry_after_s=retry_after,
                         rng=None if seed is None else random.Random(seed))
    return None if at is None else (at - NOW).total_seconds()


def test_the_delay_doubles_with_each_attempt() -> None:
    for attempts in range(1, 6):
        base = 5.0 * 2 ** (attempts - 1)
        got = delay(attempts)
        assert got is not None and 0.9 * base <= got <= 1.1 * base, (attempts, got)
    # The same jitter draw: exactly doubling.
    first, second, third = (delay(n, seed=7) for n in (1, 2, 3))
    assert first is not None and second is not None and third is not None
    assert second == pytest.approx(2 * first) and third == pytest.approx(4 * first)


def test_jitter_is_ten_percent_either_way_and_seeded() -> None:
    draws = [delay(1, initial=10.0, seed=seed) for seed in range(300)]
    assert all(d is not None and 9.0 <= d <= 11.0 for d in draws)
    assert min(d for d in draws if d is not None) < 9.5 and max(d for d in draws if d is not None) > 10.5
    assert len(set(draws)) > 250  # spread, not a constant
    # A seeded generator makes it reproducible.
    assert delay(2, seed=42) == delay(2, seed=42)
    expected = 10.0 * (1 + random.Random(42).uniform(-0.1, 0.1))
    assert delay(2, seed=42) == pytest.approx(expected)


def test_the_default_generator_works() -> None:
    got = delay(1, initial=1.0, seed=None)
    assert got is not None and 0.9 <= got <= 1.1


def test_the_delay_is_capped() -> None:
    for attempts in (8, 9, 12, 30):
        for seed in range(50):
            got = delay(attempts, seed=seed)
            assert got is not None and 0.9 * MAX_DELAY_S <= got <= MAX_DELAY_S, (attempts, seed, got)


def test_the_cap_holds_for_any_number_of_attempts() -> None:
    """An operator may set a huge jobs.max_attempts ("retry for days"): no overflow, still capped."""
    for attempts in (1_000, 1_100, 5_000):
        got = delay(attempts, max_attempts=10_000)
        assert got is not None and got <= MAX_DELAY_S, attempts


def test_retry_after_is_honoured() -> None:
    # Later than the backoff: the provider's word wins.
    assert delay(1, initial=5.0, retry_after=60.0) == 60.0
    # Sooner than the backoff: the backoff stands.
    got = delay(3, initial=5.0, retry_after=1.0)
    assert got is not None and got >= 18.0
    # Beyond the cap too: the provider asked for it.
    got = delay(1, initial=5.0, retry_after=3600.0)
    assert got is not None and got >= 3600.0
    assert delay(1, initial=5.0, retry_after=0.0) is not None


def test_no_retry_after_the_last_attempt() -> None:
    assert delay(1, max_attempts=3) is not None
    assert delay(2, max_attempts=3) is not None
    assert delay(3, max_attempts=3) is None
    assert delay(4, max_attempts=3) is None
    assert delay(1, max_attempts=1) is None
    assert delay(3, max_attempts=3, retry_after=5.0) is None


def test_no_retry_for_a_permanent_error() -> None:
    for attempts in (1, 2):
        assert delay(attempts, max_attempts=3, retryable=False) is None
        assert delay(attempts, max_attempts=3, retryable=False, retry_after=1.0) is None


def test_the_time_is_aware_and_after_now() -> None:
    at = job_retry_at(attempts=1, max_attempts=3, retryable=True, now=NOW, initial_delay_s=0.05,
                         rng=random.Random(3))
    assert at is not None and at.tzinfo is not None and at > NOW
    assert at - NOW < dt.timedelta(seconds=0.06)
