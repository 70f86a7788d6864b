"""Wall-clock time in one place, timezone-aware UTC, so tests and policies agree."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(value: dt.datetime | None) -> str | None:
    """ISO 8601 with milliseconds and a Z, as the API shows every timestamp."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
