"""The integration object of the API (SPEC §10): settings that may be shown, never a secret.

    {id, provider, name, status, config, createdAt, updatedAt}

`config` for S3 is ``{accessKeyId: "****WXYZ", bucket, region, endpointUrl, prefix}``
(the key id masked to its last four characters); for Google Drive
``{accountEmail}`` once connected.
"""

from __future__ import annotations

from typing import Any

from daemon.clock import iso
from daemon.integrations.base import Provider


def mask_key_id(access_key_id: str) -> str:
    """What is kept of an access key id for display: its last four characters."""
    return access_key_id[-4:]


def integration_json(row: Any) -> dict[str, Any]:
    stored: dict[str, Any] = dict(row.config or {})
    if row.provider == Provider.S3:
        config: dict[str, Any] = {
            "accessKeyId": "****" + stored.get("accessKeyIdLast4", ""),
            "bucket": stored.get("bucket"),
            "region": stored.get("region"),
            "endpointUrl": stored.get("endpointUrl"),
            "prefix": stored.get("prefix") or "",
        }
    else:
        config = {"accountEmail": stored.get("accountEmail")}
    return {
        "id": row.id,
        "provider": row.provider,
        "name": row.name,
        "status": row.status,
        "config": config,
        "createdAt": iso(row.created_at),
        "updatedAt": iso(row.updated_at),
    }
