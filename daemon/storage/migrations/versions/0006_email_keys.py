"""E-mail keys: every spelling of an address is one account (daemon.auth.emails.email_key).

Rewrites users.email_key, which was ``email.lower()``, as the normalised key (NFKC and
case folding of the local part, IDNA for the domain). No schema change.

Two accounts whose addresses were told apart before but are one address now (say
``ｋａｔｅ@example.com`` and ``kate@example.com``) cannot share the key. The migration
does not fail: the key goes to the account whose address is written in plain characters
(NFKC leaves it as it is), the oldest of those if several are; each other one gets a key no
address normalises to (``collided:<id>``, without an ``@``), so it can no longer sign in by
e-mail, while its data, API keys and sessions stay. Each such account is reported in a
warning (ids only: addresses are personal data) for an ADMIN to resolve, for instance by
deleting the look-alike account.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

import logging
import unicodedata
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

from daemon.auth.emails import MAX_KEY_LENGTH, email_key

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

log = logging.getLogger("docex.migrations")

_users = sa.table("users", sa.column("id", sa.String), sa.column("email", sa.String),
                  sa.column("email_key", sa.String), sa.column("created_at", sa.DateTime))


def _preference(row: Any) -> tuple[bool, Any, str]:
    plain = unicodedata.normalize("NFKC", row.email.strip()) == row.email.strip()
    return (not plain, row.created_at, row.id)


def new_keys(rows: list[Any]) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """The key of each row by id, and the collisions as (keeper id, [other ids])."""
    groups: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        key = email_key(row.email)
        groups[key if len(key) <= MAX_KEY_LENGTH else f"collided:{row.id}"].append(row)
    keys: dict[str, str] = {}
    collisions = []
    for key, group in groups.items():
        keeper, *others = sorted(group, key=_preference)
        keys[keeper.id] = key
        for other in others:
            keys[other.id] = f"collided:{other.id}"
        if others:
            collisions.append((keeper.id, [other.id for other in others]))
    return keys, collisions


def upgrade() -> None:
    conn = op.get_bind()
    rows = list(conn.execute(sa.select(_users.c.id, _users.c.email, _users.c.email_key, _users.c.created_at)))
    keys, collisions = new_keys(rows)
    changed = {row.id: keys[row.id] for row in rows if keys[row.id] != row.email_key}
    # Two steps, so that no row takes a key another row still holds (the key is unique).
    for user_id in changed:
        conn.execute(_users.update().where(_users.c.id == user_id).values(email_key=f"migrating:{user_id}"))
    for user_id, key in changed.items():
        conn.execute(_users.update().where(_users.c.id == user_id).values(email_key=key))
    for keeper, others in collisions:
        log.warning(f"users {', '.join(others)}: their e-mail address is now the same as user {keeper}'s; "
                    "they keep their data and API keys but cannot sign in with a password until an ADMIN "
                    "resolves it (docs: README, Accounts and authentication)")


def downgrade() -> None:
    conn = op.get_bind()
    for user_id in conn.execute(sa.select(_users.c.id)).scalars():
        conn.execute(_users.update().where(_users.c.id == user_id).values(email_key=f"migrating:{user_id}"))
    # Back to lower(); rows that collide under lower() too keep their placeholder key.
    seen: set[str] = set()
    for row in conn.execute(sa.select(_users.c.id, _users.c.email, _users.c.created_at)
                            .order_by(_users.c.created_at, _users.c.id)):
        key = row.email.lower()
        if key not in seen:
            seen.add(key)
            conn.execute(_users.update().where(_users.c.id == row.id).values(email_key=key))
