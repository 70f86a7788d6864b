"""docs/api.md stays true to the served OpenAPI document.

Each operation of the document has exactly one heading ``### `METHOD /path` ``
in docs/api.md, and no heading or inline ``METHOD /path`` in docs/api.md or the
README names an operation that does not exist. Only the set of operations is
compared: what the document says about bodies and answers may grow freely.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
API_MD = REPO / "docs" / "api.md"
README = REPO / "README.md"

HEADING = re.compile(r"^### `([A-Z]+) (/\S*)`$", re.MULTILINE)
# `GET /api/jobs/{job_id}` in prose (README also writes `:id`); a query string is not part of the path.
# Shorthands such as `PATCH /result` (after naming the job routes) are not full paths and not checked.
MENTION = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/api/[^`\s?]*|/metrics)")
# Served, but quart-schema keeps them out of the document they serve.
OUTSIDE_THE_DOCUMENT = {("GET", "/api/openapi.json"), ("GET", "/api/docs")}


def normalised(method: str, path: str) -> tuple[str, str]:
    """Path parameters compared by position only: `{job_id}`, `{id}` and `:id` are one."""
    return method, re.sub(r"\{[^}/]+\}|:[A-Za-z_]+", "{}", path)


async def served_operations(client: Any) -> set[tuple[str, str]]:
    r = await client.get("/api/openapi.json")
    assert r.status_code == 200
    paths = (await r.get_json())["paths"]
    return {(method.upper(), path) for path, item in paths.items() for method in item}


async def test_every_operation_has_one_heading_and_every_heading_is_an_operation(client: Any) -> None:
    headings = HEADING.findall(API_MD.read_text(encoding="utf-8"))
    assert [h for h, n in Counter(headings).items() if n > 1] == []
    documented = set(headings)
    served = await served_operations(client)
    assert sorted(served - documented) == [], "operations missing from docs/api.md"
    assert sorted(documented - served) == [], "docs/api.md has headings for operations that do not exist"
    assert len(served) > 50  # the parse found the document's operations, not an empty set


async def test_no_page_mentions_an_operation_that_does_not_exist(client: Any) -> None:
    known = {normalised(m, p) for m, p in await served_operations(client) | OUTSIDE_THE_DOCUMENT}
    for page in (API_MD, README):
        mentioned = {normalised(m, p) for m, p in MENTION.findall(page.read_text(encoding="utf-8"))}
        assert sorted(mentioned - known) == [], f"{page.name} names operations that do not exist"


async def test_the_routes_outside_the_document_are_served(client: Any) -> None:
    for method, path in OUTSIDE_THE_DOCUMENT:
        assert (await client.open(path, method=method)).status_code == 200, path
