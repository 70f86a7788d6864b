"""The event catalog: every event type docex emits, with what it means.

Pure data, no storage: the outbox that records events is `daemon.storage.outbox`;
an example of each event's data is `daemon.webhooks.models.EXAMPLES`.
"""

from __future__ import annotations

CATALOG: dict[str, str] = {
    "job.queued": "A job was created (or restarted) and waits for a worker.",
    "job.started": "A worker began processing the job.",
    "job.completed": "Extraction finished; data.job.result holds the result. data.job.resultMeta.complete is "
                     "false when required values were not found (resultMeta.missing lists their JSON pointers): "
                     "the job needs a person to finish it with PATCH /api/jobs/:id/result.",
    "job.failed": "The job failed after its last attempt; see errorCode and errorMessage.",
    "job.cancelled": "The job was cancelled while pending or queued.",
    "job.updated": "The job's result was corrected by hand (data.job.result is the new result, "
                   "data.job.resultMeta.complete and missing say whether it still lacks required values; "
                   "a correction clears an approval: reviewedAt null), or a person approved it "
                   "(data.job.reviewedAt and reviewedBy set).",
    "job_run.created": "A batch run was created with its jobs.",
    "job_run.progress": "A job of the batch run ended; counts are updated (at most once a second per run).",
    "job_run.completed": "Every job of the batch run ended and none failed.",
    "job_run.failed": "Every job of the batch run ended and at least one failed.",
    "inbox.swept": "A watched inbox took new files: data.taken lists each file's name and jobId (the jobs of "
                   "one batch run, data.jobRunId), data.refused the files it will not take and why (too large, "
                   "unsupported type); data.inbox is the inbox.",
    "webhook.ping": "A test event sent by POST /api/webhooks/:id/test.",
    "webhook.send": "A manual event sent by POST /api/webhooks/:id/send (the default type).",
}
