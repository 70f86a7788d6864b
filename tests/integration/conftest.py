"""Fixtures shared by the API tests: an account and a schema to post jobs against
(modules that need another kind of account define their own `alice`)."""

from __future__ import annotations

from typing import Any

import pytest
from jobs_helpers import create_schema, register


@pytest.fixture
async def alice(client: Any) -> dict[str, str]:
    """The Authorization header of a freshly registered account."""
    return await register(client)


@pytest.fixture
async def schema_id(client: Any, alice: dict[str, str]) -> str:
    return await create_schema(client, alice)
