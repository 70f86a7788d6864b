"""Signing secrets at rest: sealed under WEBHOOK_ENCRYPTION_KEY, bound to their endpoint.

The previous secret of a rotation keeps the ciphertext it had as the current one
(same associated data), so a rotation moves bytes and never re-encrypts.
"""

from __future__ import annotations

from daemon.config import WebhooksConfig
from daemon.crypto import key_from_hex, seal, unseal
from daemon.errors import ConfigError


def _associated_data(endpoint_id: str) -> bytes:
    return b"webhook-secret:" + endpoint_id.encode("ascii")


def encryption_key(config: WebhooksConfig) -> bytes:
    """The key of the configuration in force (read at use time, so SIGHUP applies).

    Raises:
        ConfigError: no key is configured (development fills one in at start).
    """
    if config.encryption_key is None:
        raise ConfigError(["WEBHOOK_ENCRYPTION_KEY: required to store webhook signing secrets"])
    return key_from_hex(config.encryption_key.reveal())


def seal_secret(config: WebhooksConfig, endpoint_id: str, secret: str) -> bytes:
    return seal(encryption_key(config), secret.encode("utf-8"), associated_data=_associated_data(endpoint_id))


def open_secret(config: WebhooksConfig, endpoint_id: str, sealed: bytes) -> str:
    """The secret string; raises `daemon.crypto.SealError` if it does not open under the key."""
    return unseal(encryption_key(config), sealed, associated_data=_associated_data(endpoint_id)).decode("utf-8")
