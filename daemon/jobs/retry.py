"""When a failed attempt runs again: a pure policy, `now` passed in."""

from __future__ import annotations

import datetime as dt
import math
import random

from daemon.backoff import backoff_s

# A job is retried within minutes, not hours: the cap keeps a flapping provider
# from parking work for long.
MAX_DELAY_S = 300.0
# A provider's Retry-After is honoured up to a day. It is the store's or the model's word,
# any number: "1e12" or "inf" made the next attempt's time overflow a datetime, which
# crashed the worker (OverflowError) and left the job leased, again at every retry.
MAX_RETRY_AFTER_S = 24 * 3600.0


def job_retry_at(*, attempts: int, max_attempts: int, retryable: bool, now: dt.datetime,
                    initial_delay_s: float, retry_after_s: float | None = None,
                    rng: random.Random | None = None) -> dt.datetime | None:
    """The time of the next attempt after `attempts` failed ones, or None to fail the job.

    Exponential backoff (initial × 2^(attempts-1) with ±10 % jitter, then capped), never
    sooner than the provider's Retry-After (which may exceed the cap, up to MAX_RETRY_AFTER_S).
    """
    if not retryable or attempts >= max_attempts:
        return None
    delay = backoff_s(attempts, initial_s=initial_delay_s, cap_s=MAX_DELAY_S, rng=rng)
    if retry_after_s is not None and not math.isnan(retry_after_s):
        delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
    return now + dt.timedelta(seconds=delay)
