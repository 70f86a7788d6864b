"""The event catalog and the outbox writer.

Every state change calls `record_event` inside the same transaction as the
change, so an event exists if and only if its change committed: a crash can
delay a webhook, never lose one (SPEC §9). The event's deliveries are created
in that same transaction (routing: `daemon.webhooks.routing`); callers set
`services.deliveries_wakeup` once they have committed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.engine import Connection

from daemon.storage.ids import new_id
from daemon.storage.repos import webhooks as webhook_repo
from daemon.storage.tables import events

CATALOG: dict[str, str] = {
    "job.queued": "A job was created (or restarted) and waits for a worker.",
    "job.started": "A worker began processing the job.",
    "job.completed": "Extraction finished; data.job.result holds the result.",
    "job.failed": "The job failed after its last attempt; see errorCode and errorMessage.",
    "job.cancelled": "The job was cancelled while pending or queued.",
    "job.updated": "The job's result was corrected by hand; data.job.result is the new result.",
    "job_run.created": "A batch run was created with its jobs.",
    "job_run.progress": "A job of the batch run ended; counts are updated (at most once a second per run).",
    "job_run.completed": "Every job of the batch run ended and none failed.",
    "job_run.failed": "Every job of the batch run ended and at least one failed.",
    "webhook.ping": "A test event sent by POST /api/webhooks/:id/test.",
    "webhook.send": "A manual event sent by POST /api/webhooks/:id/send (the default type).",
}


def record_event(conn: Connection, *, user_id: str, type: str, data: dict[str, Any], now: dt.datetime,
                 schema_id: str | None = None, job_id: str | None = None,
                 job_run_id: str | None = None, endpoint_id: str | None = None) -> str:
    """Write one event into the outbox with its deliveries; returns its id. Call inside the
    changing transaction.

    The event goes to the endpoints routing picks, or, given `endpoint_id` (webhook.ping,
    manual sends, whose type the caller has checked), to that endpoint only.
    """
    if endpoint_id is None and type not in CATALOG:
        raise ValueError(f"unknown event type {type!r}")
    event_id = new_id()
    conn.execute(events.insert().values(
        id=event_id, user_id=user_id, type=type, data=data, occurred_at=now,
        schema_id=schema_id, job_id=job_id, job_run_id=job_run_id,
    ))
    if endpoint_id is None:
        webhook_repo.enqueue_routed(conn, event_id=event_id, user_id=user_id, event_type=type,
                                    schema_id=schema_id, now=now)
    else:
        webhook_repo.insert_delivery(conn, endpoint_id=endpoint_id, event_id=event_id, event_type=type, now=now)
    return event_id
