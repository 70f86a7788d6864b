"""Credentials and tokens at rest: one JSON document per integration, sealed with
AES-256-GCM under WEBHOOK_ENCRYPTION_KEY (`daemon.crypto`) and bound to its row, so a
sealed value copied to another integration does not open there.
"""

from __future__ import annotations

from typing import Any

from daemon.config import Config
from daemon.crypto import seal_json, unseal_json
from daemon.webhooks.keys import encryption_key


def _associated_data(integration_id: str) -> bytes:
    return b"integration-secrets:" + integration_id.encode("ascii")


def _key(config: Config) -> bytes:
    return encryption_key(config.webhooks, "integration credentials")


def seal_secrets(config: Config, integration_id: str, secrets: dict[str, Any]) -> bytes:
    return seal_json(_key(config), secrets, associated_data=_associated_data(integration_id))


def open_secrets(config: Config, integration_id: str, sealed: bytes | None) -> dict[str, Any]:
    """The secrets document ({} if none was stored).

    Raises:
        daemon.crypto.SealError: it does not open under the key in force.
    """
    if not sealed:
        return {}
    value: dict[str, Any] = unseal_json(_key(config), sealed, associated_data=_associated_data(integration_id))
    return value
