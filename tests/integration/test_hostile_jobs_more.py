"""Hostile uploads and job lifecycles (another pass): each answered in the SPEC §3 shape
saying what was wrong, never a 500 or a message about something the request did not do."""

from __future__ import annotations

from typing import Any

from jobs_helpers import ERROR_KEYS, multipart


async def test_too_many_parts_says_so(client: Any, alice: dict[str, str], schema_id: str) -> None:
    """1,101 one-letter fields were a 413 saying "File exceeds the maximum size of
    52428800 bytes", for a 100 KB request with no file in it."""
    body, content_type = multipart([("type", "EXTRACTION"), ("schemaId", schema_id)]
                                   + [(f"f{n}", "v") for n in range(1100)])
    for path in ("/api/jobs", "/api/job-runs"):
        r = await client.post(path, data=body, headers={**alice, **content_type})
        error = await r.get_json()
        assert r.status_code == 413 and set(error) >= ERROR_KEYS, error
        assert "parts" in error["message"] and "File exceeds" not in error["message"], error
