"""Learned examples (issue #16): what a user's corrections taught about an issuer, per
schema, and the fingerprint keys that find them. Every function is scoped to its owner:
another user's examples do not exist for the caller, and never take part in their jobs.

The lessons and keys are made in `daemon.extraction.learning`; here they are only stored
and looked up.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from daemon.storage.ids import new_id
from daemon.storage.tables import jobs, learned_examples, learned_keys

# Examples of one issuer a lookup returns at most (the closest first); what a document
# reads is the best few of them (`daemon.extraction.learning.MAX_EXAMPLES`).
LOOKUP_LIMIT = 20


def job_reading(conn: Connection, job_id: str) -> dict[str, Any] | None:
    """What job `job_id` kept of its document for learning (None when it kept nothing)."""
    reading = conn.execute(sa.select(jobs.c.reading).where(jobs.c.id == job_id)).scalar()
    return reading if isinstance(reading, dict) else None


def forget_job(conn: Connection, user_id: str, job_id: str) -> None:
    """Delete what job `job_id`'s confirmed result taught (its keys go with it)."""
    conn.execute(learned_examples.delete().where(learned_examples.c.job_id == job_id,
                                                 learned_examples.c.user_id == user_id))


def record_example(conn: Connection, *, user_id: str, schema_id: str, job_id: str, fields: dict[str, Any],
                   keys: Sequence[str], now: dt.datetime) -> str | None:
    """Store what job `job_id`'s confirmed result taught, replacing what an earlier
    confirmation of the job taught; returns the example's id, or None when it taught
    nothing (no value, or no key to find it by): an empty example took one of the few
    places a lookup reads (`MAX_EXAMPLES`) from the issuer's useful ones. Called in the
    transaction that confirms the result."""
    forget_job(conn, user_id, job_id)
    if not fields or not keys:
        return None
    example_id = new_id()
    conn.execute(learned_examples.insert().values(id=example_id, user_id=user_id, schema_id=schema_id,
                                                  job_id=job_id, fields=fields, keys=list(keys), created_at=now))
    conn.execute(learned_keys.insert(), [{"example_id": example_id, "user_id": user_id, "schema_id": schema_id,
                                          "key": key} for key in sorted(set(keys))])
    return example_id


def _closest_query() -> sa.Select[Any]:
    """The query of `closest_examples`, built once: its parameters are bound per call."""
    numbers = sa.func.sum(sa.case((learned_keys.c.key.like("r:%"), 1), else_=0))
    shared = sa.func.count()
    ranked = (sa.select(learned_keys.c.example_id, shared.label("shared"), numbers.label("numbers"))
              .where(learned_keys.c.user_id == sa.bindparam("user_id"),
                     learned_keys.c.schema_id == sa.bindparam("schema_id"),
                     learned_keys.c.key.in_(sa.bindparam("keys", expanding=True)))
              .group_by(learned_keys.c.example_id)
              .order_by(shared.desc(), learned_keys.c.example_id.desc())
              .limit(LOOKUP_LIMIT)).subquery()
    return (sa.select(ranked.c.example_id, ranked.c.shared, ranked.c.numbers, learned_examples.c.fields)
            .join(learned_examples, learned_examples.c.id == ranked.c.example_id)
            .order_by(ranked.c.shared.desc(), ranked.c.example_id.desc()))


_CLOSEST = _closest_query()


def closest_examples(conn: Connection, user_id: str, schema_id: str,
                     keys: Sequence[str]) -> list[tuple[str, dict[str, Any], int, int]]:
    """(example id, lessons, keys shared, numbers shared) of `user_id`'s examples for
    `schema_id` that share a key with `keys`: most shared first, then newest. An indexed
    lookup of the keys (ix_learned_keys_lookup), whatever the number of examples."""
    if not keys:
        return []
    rows = conn.execute(_CLOSEST, {"user_id": user_id, "schema_id": schema_id, "keys": sorted(set(keys))}).all()
    return [(row.example_id, dict(row.fields), int(row.shared), int(row.numbers or 0)) for row in rows]


def list_examples(conn: Connection, user_id: str, schema_id: str, limit: int, cursor: str | None) -> list[Row[Any]]:
    """Up to ``limit + 1`` examples of `user_id` for `schema_id`, newest first, after `cursor`."""
    query = (sa.select(learned_examples)
             .where(learned_examples.c.user_id == user_id, learned_examples.c.schema_id == schema_id)
             .order_by(learned_examples.c.id.desc()).limit(limit + 1))
    if cursor:
        query = query.where(learned_examples.c.id < cursor)
    return list(conn.execute(query))


def delete_example(conn: Connection, user_id: str, schema_id: str, example_id: str) -> bool:
    """Forget one example of `user_id` (its keys go with it); False if there is none."""
    # The keys only of an example of this schema: named under another schema, the example
    # is not found (404) and must keep the keys that find it.
    conn.execute(learned_keys.delete().where(learned_keys.c.example_id == example_id,
                                             learned_keys.c.user_id == user_id,
                                             learned_keys.c.schema_id == schema_id))
    done = conn.execute(learned_examples.delete().where(learned_examples.c.id == example_id,
                                                        learned_examples.c.user_id == user_id,
                                                        learned_examples.c.schema_id == schema_id))
    return done.rowcount == 1
