"""Endpoint secrets at rest: sealed under WEBHOOK_ENCRYPTION_KEY, bound to their endpoint.

Two are sealed: the signing secret, and the custom headers, which commonly carry
the receiver's own credentials (`Authorization: Bearer ...`).

The previous secret of a rotation keeps the ciphertext it had as the current one
(same associated data), so a rotation moves bytes and never re-encrypts.
"""

from __future__ import annotations

from daemon.config import WebhooksConfig
from daemon.crypto import key_from_hex, seal, seal_json, unseal, unseal_json
from daemon.errors import ConfigError


def _associated_data(endpoint_id: str) -> bytes:
    return b"webhook-secret:" + endpoint_id.encode("ascii")


def _headers_associated_data(endpoint_id: str) -> bytes:
    return b"webhook-headers:" + endpoint_id.encode("ascii")


def encryption_key(config: WebhooksConfig, needed_for: str = "webhook signing secrets") -> bytes:
    """The key of the configuration in force (read at use time, so SIGHUP applies), which
    seals every secret docex stores: webhooks' and integrations'.

    Raises:
        ConfigError: no key is configured (development fills one in at start).
    """
    key = configured_key(config)
    if key is None:
        raise ConfigError([f"WEBHOOK_ENCRYPTION_KEY: required to store {needed_for}"])
    return key


def configured_key(config: WebhooksConfig) -> bytes | None:
    return None if config.encryption_key is None else key_from_hex(config.encryption_key.reveal())


def seal_secret(config: WebhooksConfig, endpoint_id: str, secret: str) -> bytes:
    return seal(encryption_key(config), secret.encode("utf-8"), associated_data=_associated_data(endpoint_id))


def open_secret(config: WebhooksConfig, endpoint_id: str, sealed: bytes) -> str:
    """The secret string; raises `daemon.crypto.SealError` if it does not open under the key."""
    return unseal(encryption_key(config), sealed, associated_data=_associated_data(endpoint_id)).decode("utf-8")


def seal_headers_with(key: bytes, endpoint_id: str, headers: dict[str, str]) -> bytes | None:
    """The custom headers sealed for `endpoint_id`, or None for none (migration 0014, which
    sealed the headers stored before, is given the key rather than a configuration)."""
    return seal_json(key, headers, associated_data=_headers_associated_data(endpoint_id)) if headers else None


def open_headers_with(key: bytes, endpoint_id: str, sealed: bytes | None) -> dict[str, str]:
    if sealed is None:
        return {}
    headers: dict[str, str] = unseal_json(key, sealed, associated_data=_headers_associated_data(endpoint_id))
    return headers


def seal_headers(config: WebhooksConfig, endpoint_id: str, headers: dict[str, str]) -> bytes | None:
    return seal_headers_with(encryption_key(config), endpoint_id, headers)


def open_headers(config: WebhooksConfig, endpoint_id: str, sealed: bytes | None) -> dict[str, str]:
    """The custom headers; raises `daemon.crypto.SealError` if they do not open under the key."""
    return open_headers_with(encryption_key(config), endpoint_id, sealed)
