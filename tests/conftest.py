"""Fixtures shared by every layer of tests.

The suite runs on SQLite by default and on PostgreSQL when
``DOCEX_TEST_DATABASE_URL`` names a server database; each test then gets a
schema of its own (``search_path`` in the URL), so tests never see each
other's rows and need no cleanup beyond dropping the schema.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from system_requirements import require_root, require_tesseract

from daemon.config import Config, Secret, load_config
from daemon.http.app import create_app
from daemon.services import Services, open_services
from daemon.storage.migrate import upgrade

PG_URL = os.environ.get("DOCEX_TEST_DATABASE_URL", "")


def pytest_report_header() -> str:
    return f"docex database: {'postgresql (' + PG_URL + ')' if PG_URL else 'sqlite'}"


@pytest.fixture
def tesseract_installed() -> None:
    """Skips (fails in CI) where the tesseract OCR engine is not installed: see tests/system_requirements.py."""
    require_tesseract()


@pytest.fixture
def running_as_root() -> None:
    """Skips (fails in CI) unless the tests run as root: see tests/system_requirements.py."""
    require_root("changes uid to run the daemon as an unprivileged user (CI runs as root)")


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for one test."""
    if not PG_URL:
        yield f"sqlite:///{tmp_path / 'docex.db'}"
        return
    schema = f"t_{secrets.token_hex(6)}"
    admin = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = sa.make_url(PG_URL)
    options = urllib.parse.quote(f"-csearch_path={schema}")
    yield url.render_as_string(hide_password=False) + ("&" if url.query else "?") + f"options={options}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture
def config(tmp_path: Path, database_url: str) -> Config:
    """Defaults, with test-friendly secrets and a fast bcrypt; no file, no environment."""
    base = load_config(environ={})
    return dataclasses.replace(
        base,
        data_dir=str(tmp_path / "data"),
        database=dataclasses.replace(base.database, url=database_url, pool_size=5),
        auth=dataclasses.replace(
            base.auth, jwt_access_secret=Secret(secrets.token_urlsafe(32)), bcrypt_rounds=4
        ),
        webhooks=dataclasses.replace(base.webhooks, encryption_key=Secret(secrets.token_hex(32))),
        log=dataclasses.replace(base.log, access=False),
    )


@pytest.fixture
async def services(config: Config) -> AsyncIterator[Services]:
    """Migrated database and shared services, without the background tasks."""
    await trio.to_thread.run_sync(lambda: Path(config.data_dir).mkdir(parents=True, exist_ok=True))
    async with open_services(config) as services:
        await trio.to_thread.run_sync(upgrade, services.db.engine)
        yield services


@pytest.fixture
def app(services: Services):  # type: ignore[no-untyped-def]
    return create_app(services)


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """moto's standalone S3 server on loopback, one for the session (tests/moto_s3.py)."""
    from moto_s3 import S3Server

    server = S3Server.start()
    try:
        yield server
    finally:
        server.stop()
