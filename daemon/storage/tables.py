"""Every table of docex, in SQLAlchemy Core. Alembic migrations must match this module
(tests/integration/test_migrations.py compares them on both backends)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(sa.TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on both backends (SQLite stores them naive)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _id(name: str = "id", *args: Any, **kw: Any) -> sa.Column[str]:
    return sa.Column(name, sa.String(26), *args, **kw)


# --- accounts (SPEC §4) ---------------------------------------------------------

users = sa.Table(
    "users",
    metadata,
    _id(primary_key=True),
    sa.Column("email", sa.String(320), nullable=False),
    # daemon.auth.emails.email_key(email): one account for every spelling of an address.
    sa.Column("email_key", sa.String(320), nullable=False, unique=True),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("password_hash", sa.String(100), nullable=False),
    sa.Column("role", sa.String(10), nullable=False),
    sa.Column("disabled", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

# A refresh session. Rotation revokes a session and creates its successor in the same
# family (one login); presenting a rotated session's token again revokes the family.
sessions = sa.Table(
    "sessions",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    _id("family_id", nullable=False, index=True),
    sa.Column("refresh_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("last_used_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime),
    sa.Column("revoked_reason", sa.String(20)),  # logout | rotated | reuse | deleted | logout_all | disabled | password
    sa.Column("user_agent", sa.String(500)),
    sa.Column("ip", sa.String(64)),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("role", sa.String(10), nullable=False),
    sa.Column("prefix", sa.String(32), nullable=False),
    sa.Column("last4", sa.String(4), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime),
    sa.Column("last_used_at", UTCDateTime),
    sa.Column("revoked_at", UTCDateTime),
)

# Fixed-window counters shared by every process on one database (public auth routes).
rate_limit_hits = sa.Table(
    "rate_limit_hits",
    metadata,
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("window_start", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("count", sa.Integer, nullable=False),
)


# --- schemas, jobs, runs, events (SPEC §5, §6, §8) --------------------------------------

schemas = sa.Table(
    "schemas",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("description", sa.Text),
    sa.Column("definition", sa.JSON, nullable=False),
    # Ids of the owner's webhook endpoints bound to this schema (routing overrides patterns).
    sa.Column("webhook_endpoint_ids", sa.JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
)

job_runs = sa.Table(
    "job_runs",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    _id("schema_id", nullable=False),
    sa.Column("status", sa.String(12), nullable=False),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("finished_at", UTCDateTime),
    # job_run.progress is sent at most once a second per run.
    sa.Column("progress_sent_at", UTCDateTime),
    # A cancel was asked for: the run ends CANCELLED once none of its jobs runs.
    sa.Column("cancel_requested_at", UTCDateTime),
)

# Spelled as text, the same in the index and in the query, so that both planners see the
# query implies the partial index's condition (a bound parameter would hide the value).
UNREVIEWED = sa.text("status = 'COMPLETED' AND reviewed_at IS NULL")

jobs = sa.Table(
    "jobs",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    _id("schema_id", nullable=False),
    _id("job_run_id", sa.ForeignKey("job_runs.id", ondelete="SET NULL")),
    sa.Column("type", sa.String(20), nullable=False),
    sa.Column("status", sa.String(12), nullable=False),
    sa.Column("file_name", sa.String(500)),
    sa.Column("file_size", sa.BigInteger),
    sa.Column("mime_type", sa.String(100)),
    sa.Column("sha256", sa.String(64)),
    sa.Column("blob_key", sa.String(100)),
    sa.Column("source", sa.JSON),  # a remote file still to fetch (integrations)
    sa.Column("page_count", sa.Integer),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("result", sa.JSON),
    sa.Column("original_result", sa.JSON),
    sa.Column("result_meta", sa.JSON),
    # resultMeta.complete, where GET /api/jobs?complete= can filter on it (NULL until COMPLETED).
    sa.Column("result_complete", sa.Boolean),
    # The lowest confidence among the result's values (a person's own value counts as
    # certain), so that the review queue (GET /api/jobs?review=pending) is an indexed filter.
    sa.Column("min_confidence", sa.Float),
    # What learning keeps of the document (daemon.extraction.learning): {"keys": the issuer's
    # fingerprint, "lines": the first pages' lines with their boxes}, so that a correction
    # teaches without parsing (or OCR-reading) the file again. NULL when learning was off.
    sa.Column("reading", sa.JSON),
    sa.Column("error_message", sa.Text),
    sa.Column("error_code", sa.String(40)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("started_at", UTCDateTime),
    sa.Column("finished_at", UTCDateTime),
    # A person approved the result (POST /api/jobs/:id/approve): when, and which user.
    sa.Column("reviewed_at", UTCDateTime),
    sa.Column("reviewed_by", sa.String(26)),
    # The queue: a QUEUED job is claimable from run_after on (retries back off);
    # a RUNNING job belongs to lease_owner until lease_expires_at.
    sa.Column("run_after", UTCDateTime),
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("lease_expires_at", UTCDateTime),
    sa.Index("ix_jobs_queue", "status", "run_after"),
    # Whose turn it is (repos.jobs._next_user): a seek for a user with a waiting job in a range of users.
    sa.Index("ix_jobs_waiting_user", "status", "user_id", "run_after"),
    # Lists are keyset-paginated by id under a filter: one index per filter, ending in id,
    # walked in order and left after a page (bench/job_lists.py).
    sa.Index("ix_jobs_user", "user_id", "id"),
    sa.Index("ix_jobs_user_status", "user_id", "status", "id"),
    sa.Index("ix_jobs_schema", "schema_id", "id"),
    sa.Index("ix_jobs_run", "job_run_id", "id"),
    # The review queue walks only the COMPLETED jobs nobody approved (`UNREVIEWED` in its query).
    sa.Index("ix_jobs_unreviewed", "user_id", "status", "id", sqlite_where=UNREVIEWED,
             postgresql_where=UNREVIEWED),
)

# The outbox: every state change writes its event in the same transaction;
# the webhook dispatcher turns events into deliveries.
events = sa.Table(
    "events",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("type", sa.String(40), nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("occurred_at", UTCDateTime, nullable=False),
    _id("schema_id"),
    _id("job_id", index=True),
    _id("job_run_id"),
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("resource_type", sa.String(20), nullable=False),
    _id("resource_id", nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False, index=True),
)


# --- webhooks (SPEC §9) -----------------------------------------------------------------

webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("url", sa.String(2048), nullable=False),
    sa.Column("description", sa.String(500)),
    sa.Column("delivery_mode", sa.String(10), nullable=False),
    sa.Column("events", sa.JSON, nullable=False),
    sa.Column("body_format", sa.String(20), nullable=False),
    # AES-256-GCM under WEBHOOK_ENCRYPTION_KEY, bound to the row (daemon.webhooks.keys): the
    # custom headers as one JSON object (NULL for none), and the signing secret. During a
    # rotation's overlap the previous secret still signs, until previous_secret_expires_at.
    sa.Column("custom_headers_sealed", sa.LargeBinary),
    sa.Column("secret_sealed", sa.LargeBinary, nullable=False),
    sa.Column("previous_secret_sealed", sa.LargeBinary),
    sa.Column("previous_secret_expires_at", UTCDateTime),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("disabled_reason", sa.String(500)),
    sa.Column("consecutive_dead_deliveries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

# One event to one endpoint. PENDING/RETRYING deliveries are due from next_attempt_at;
# a dispatcher sending one holds it with lease_owner until lease_expires_at (a crashed
# process's delivery is due again once its lease has expired).
deliveries = sa.Table(
    "deliveries",
    metadata,
    _id(primary_key=True),
    _id("endpoint_id", sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False),
    _id("event_id", sa.ForeignKey("events.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("event_type", sa.String(40), nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", UTCDateTime),
    sa.Column("last_attempt_at", UTCDateTime),
    sa.Column("last_status_code", sa.Integer),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("lease_expires_at", UTCDateTime),
    sa.Index("ix_deliveries_due", "status", "next_attempt_at"),
    sa.Index("ix_deliveries_endpoint", "endpoint_id", "id"),
)

delivery_attempts = sa.Table(
    "delivery_attempts",
    metadata,
    _id(primary_key=True),
    _id("delivery_id", sa.ForeignKey("deliveries.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("attempted_at", UTCDateTime, nullable=False),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    sa.Column("status_code", sa.Integer),
    sa.Column("error", sa.Text),
    sa.Column("response_body", sa.Text),  # the first 1 KiB of the answer
)


# --- integrations (SPEC §10) ------------------------------------------------------------

# A user's connection to a remote file store. `config` holds only what may be shown (the
# S3 bucket, region, endpoint, prefix and the access key id's last four); credentials and
# OAuth tokens are one JSON document sealed with AES-256-GCM under WEBHOOK_ENCRYPTION_KEY,
# bound to the row (daemon.crypto). `oauth_nonce` is the nonce of the one signed OAuth
# state that may still complete an authorization (cleared when it does).
integrations = sa.Table(
    "integrations",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("provider", sa.String(20), nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("status", sa.String(30), nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("secrets_sealed", sa.LargeBinary),
    sa.Column("oauth_nonce", sa.String(64)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)


# --- learning from corrections (issue #16) ---------------------------------------------

# What a confirmed result taught about its issuer, per user and schema: `fields` holds one
# lesson per JSON pointer (daemon.extraction.learning.learn). One per job: a later
# correction of the job replaces it.
learned_examples = sa.Table(
    "learned_examples",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    _id("schema_id", nullable=False),
    _id("job_id", nullable=False),
    sa.Column("fields", sa.JSON, nullable=False),
    sa.Column("keys", sa.JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    # GET /api/schemas/:id/examples pages by id; a correction finds its job's example.
    sa.Index("ix_learned_examples_schema", "user_id", "schema_id", "id"),
    sa.Index("ix_learned_examples_job", "job_id"),
)

# The fingerprint keys of each example, indexed: a new document's keys find the examples
# of its issuer without scanning the others.
learned_keys = sa.Table(
    "learned_keys",
    metadata,
    _id("example_id", sa.ForeignKey("learned_examples.id", ondelete="CASCADE"), nullable=False),
    _id("user_id", nullable=False),
    _id("schema_id", nullable=False),
    sa.Column("key", sa.String(40), nullable=False),
    sa.PrimaryKeyConstraint("example_id", "key"),
    sa.Index("ix_learned_keys_lookup", "user_id", "schema_id", "key"),
)


# --- watched inboxes (issue #17) --------------------------------------------------------

# A folder whose new files become jobs: a local folder under inboxes.local_root (`path`
# relative to it), an S3 prefix or a Google Drive folder of an integration. Each sweep
# lists it and makes one batch run of what it had not taken yet.
inboxes = sa.Table(
    "inboxes",
    metadata,
    _id(primary_key=True),
    _id("user_id", sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    _id("schema_id", nullable=False),
    sa.Column("kind", sa.String(20), nullable=False),  # local | s3 | google-drive
    _id("integration_id", sa.ForeignKey("integrations.id", ondelete="CASCADE")),
    # local: a folder relative to inboxes.local_root; s3: a key prefix; google-drive: a folder path.
    sa.Column("path", sa.String(1024), nullable=False),
    sa.Column("after", sa.String(10), nullable=False),  # local files once taken: move | keep
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("last_swept_at", UTCDateTime),
    sa.Column("last_error", sa.Text),
    sa.Index("ix_inboxes_user", "user_id", "id"),
)

# What an inbox took, by the file's identity (local: path, size and mtime; S3: key and
# ETag; Drive: file id and version). The unique pair is what makes a file a job at most
# once across sweeps, restarts and processes: a sweep inserts the identities and makes jobs
# only of the rows it inserted, in one transaction. `job_id` is NULL for a file refused
# (unsupported type, too large); `settled_at` is when a local file was moved after its job ended.
inbox_items = sa.Table(
    "inbox_items",
    metadata,
    _id("inbox_id", sa.ForeignKey("inboxes.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("identity", sa.String(64), primary_key=True),  # sha256 of the identity's parts
    sa.Column("name", sa.String(1024), nullable=False),
    _id("job_id", sa.ForeignKey("jobs.id", ondelete="SET NULL")),
    sa.Column("error", sa.Text),
    sa.Column("taken_at", UTCDateTime, nullable=False),
    sa.Column("settled_at", UTCDateTime),
    sa.Index("ix_inbox_items_job_id", "job_id"),
)
