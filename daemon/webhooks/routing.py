"""Which endpoints an event goes to: pure, decided from the event and the owner's endpoints.

Rules (seed §6, SPEC §9):

- An event of a schema with bound endpoints goes to those endpoints only, if
  enabled, whatever their delivery mode.
- Otherwise it goes to every enabled AUTOMATIC endpoint of the event's owner
  with a matching pattern: the exact type, ``*``, or ``prefix.*``.
- MANUAL endpoints never receive events automatically; webhook.ping and
  webhook.send are addressed to one endpoint and never routed here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from daemon.webhooks.models import DeliveryMode


@dataclass(frozen=True)
class Subscriber:
    """What routing needs to know of an endpoint."""

    id: str
    enabled: bool
    mode: str
    patterns: Sequence[str]


def matches(pattern: str, event_type: str) -> bool:
    """Whether one subscription pattern selects `event_type`.

    >>> matches("job.*", "job.completed"), matches("job.*", "job_run.created"), matches("*", "job.failed")
    (True, False, True)
    """
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return event_type.startswith(pattern[:-1])
    return pattern == event_type


def valid_pattern(pattern: str, known_types: Collection[str]) -> bool:
    """A known type, ``*``, or ``prefix.*`` where some known type starts with ``prefix.``."""
    if pattern == "*" or pattern in known_types:
        return True
    return pattern.endswith(".*") and len(pattern) > 2 and any(t.startswith(pattern[:-1]) for t in known_types)


def route(event_type: str, subscribers: Iterable[Subscriber], bound_ids: Collection[str] = ()) -> list[str]:
    """Ids of the endpoints that get a delivery of the event, in the order given.

    Args:
        event_type: the event's type.
        subscribers: the endpoints of the event's owner.
        bound_ids: endpoints bound to the event's schema; non-empty means only those.
    """
    if bound_ids:
        return [s.id for s in subscribers if s.enabled and s.id in bound_ids]
    return [
        s.id
        for s in subscribers
        if s.enabled and s.mode == DeliveryMode.AUTOMATIC and any(matches(p, event_type) for p in s.patterns)
    ]
