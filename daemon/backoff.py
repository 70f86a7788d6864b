"""Exponential backoff with jitter: the one delay function of every retry policy (jobs in
`daemon.jobs.retry`, webhook deliveries in `daemon.webhooks.schedule`)."""

from __future__ import annotations

import random

# ±10 % around each delay, so retries of many failures at once spread out.
JITTER = 0.1
FACTOR = 2
# Doubling stops here: FACTOR**attempts for a huge attempt count would overflow a float.
_MAX_DOUBLINGS = 32


def backoff_s(attempts: int, *, initial_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Seconds to wait after the `attempts`-th failed attempt (attempts ≥ 1):
    ``initial × 2^(attempts-1)`` with ±10 % jitter, at most `cap_s`."""
    doublings = min(max(0, attempts - 1), _MAX_DOUBLINGS)
    jittered = initial_s * float(FACTOR**doublings) * (1 + (rng or random).uniform(-JITTER, JITTER))
    return min(cap_s, jittered)
