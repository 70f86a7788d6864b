"""Keyset pagination, the same for every list: ``{"data": [...], "nextCursor"}``.

Lists are newest first by id (ids sort by creation time). The cursor is the
last id of a page, base64url-encoded so clients treat it as opaque.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import trio
from pydantic import Field, field_validator
from quart import current_app
from quart_trio.wrappers.response import TrioResponse as Response

from daemon.http.models import ApiModel, QueryInt
from daemon.storage.ids import looks_like_id


class PageQuery(ApiModel):
    limit: QueryInt = Field(default=20, ge=1, le=100)
    cursor: str | None = None

    @field_validator("cursor")
    @classmethod
    def _cursor(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        try:
            decoded = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise ValueError("cursor must be a cursor returned by this list") from None
        if not looks_like_id(decoded):
            raise ValueError("cursor must be a cursor returned by this list")
        return decoded


def encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def page(rows: Sequence[Any], limit: int, render: Callable[[Any], Any], key: str = "id") -> dict[str, Any]:
    """Render `rows` (fetched with ``LIMIT limit + 1``) as one page."""
    shown = rows[:limit]
    return page_of(shown, getattr(shown[-1], key) if len(rows) > limit and shown else None, render)


def page_of(shown: Sequence[Any], after: str | None, render: Callable[[Any], Any]) -> dict[str, Any]:
    """Render `shown` as one page, with a cursor to the rows after the key `after` (None: no more)."""
    return {"data": [render(r) for r in shown], "nextCursor": encode_cursor(after) if after else None}


async def encoded(body: dict[str, Any]) -> Response:
    """`body` as Quart's JSON response, encoded in a worker thread: a page of jobs carries each
    job's result (a correction may be 4 MiB of JSON), and encoding 100 of them on the event loop
    stalled every other request (20 jobs of 60,000 line items: 2.7 s)."""
    response = await trio.to_thread.run_sync(functools.partial(current_app.json.response, body))
    return cast(Response, response)
