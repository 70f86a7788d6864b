"""Routing of events to endpoints (daemon.webhooks.routing)."""

from __future__ import annotations

import pytest

from daemon.events import CATALOG
from daemon.webhooks.routing import Subscriber, matches, route, valid_pattern


@pytest.mark.parametrize(("pattern", "event_type", "expected"), [
    ("job.completed", "job.completed", True),
    ("job.completed", "job.failed", False),
    ("*", "job.queued", True),
    ("*", "job_run.progress", True),
    ("job.*", "job.queued", True),
    ("job.*", "job_run.created", False),
    ("job_run.*", "job_run.failed", True),
    ("job_run.*", "job.failed", False),
    ("job", "job.queued", False),
])
def test_patterns(pattern: str, event_type: str, expected: bool) -> None:
    assert matches(pattern, event_type) is expected


@pytest.mark.parametrize(("pattern", "valid"), [
    ("job.completed", True), ("*", True), ("job.*", True), ("job_run.*", True), ("webhook.*", True),
    ("job.done", False), ("jobs.*", False), (".*", False), ("job.**", False), ("", False), ("job*", False),
])
def test_valid_patterns_are_known_types_star_and_known_prefixes(pattern: str, valid: bool) -> None:
    assert valid_pattern(pattern, CATALOG) is valid


def _ep(id: str, *patterns: str, mode: str = "AUTOMATIC", enabled: bool = True) -> Subscriber:
    return Subscriber(id=id, enabled=enabled, mode=mode, patterns=patterns)


def test_automatic_endpoints_get_matching_events_only() -> None:
    endpoints = [_ep("a", "job.completed"), _ep("b", "*"), _ep("c", "job_run.*"), _ep("d", "job.*", "job_run.*")]
    assert route("job.completed", endpoints) == ["a", "b", "d"]
    assert route("job_run.created", endpoints) == ["b", "c", "d"]
    assert route("job.queued", endpoints) == ["b", "d"]


def test_manual_and_disabled_endpoints_never_get_events_automatically() -> None:
    endpoints = [_ep("m", "*", mode="MANUAL"), _ep("off", "*", enabled=False), _ep("on", "*")]
    assert route("job.failed", endpoints) == ["on"]


def test_a_schema_binding_overrides_patterns_and_mode() -> None:
    endpoints = [_ep("a", "job.completed"), _ep("m", mode="MANUAL"), _ep("x", "job_run.*"),
                 _ep("off", "*", enabled=False)]
    assert route("job.failed", endpoints, bound_ids={"m", "x", "off"}) == ["m", "x"]
    assert route("job.failed", endpoints, bound_ids={"unknown"}) == []
    assert route("job.completed", endpoints, bound_ids=()) == ["a"]
