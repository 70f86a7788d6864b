"""The job and batch-run state machine's decisions: pure, `now` passed in.

The storage layer (`daemon.storage.repos.jobs`) loads the records, asks here what
may happen, and writes the answer with its event in one transaction. Nothing here
reads a clock or a database, so every rule is tested without one
(tests/unit/jobs/test_transitions.py).

A transition the current state does not allow raises `InvalidTransition`, which
the HTTP layer answers with 409.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from daemon.errors import InvalidTransition
from daemon.jobs.models import JobStatus, RunStatus
from daemon.jobs.records import Job, JobRun

# job_run.progress is sent at most this often per run (the last one always).
PROGRESS_INTERVAL = dt.timedelta(seconds=1)
# Jobs a cancel may still stop: not yet running.
CANCELLABLE = (JobStatus.PENDING, JobStatus.QUEUED)


def check_cancel(job: Job) -> None:
    """PENDING | QUEUED → CANCELLED, else InvalidTransition."""
    if job.status not in CANCELLABLE:
        raise InvalidTransition(f"Only PENDING or QUEUED jobs can be cancelled (this one is {job.status})")


def restarted_status(job: Job) -> JobStatus:
    """FAILED → QUEUED, or PENDING when its file was never fetched; else InvalidTransition."""
    if job.status != JobStatus.FAILED:
        raise InvalidTransition(f"Only FAILED jobs can be restarted (this one is {job.status})")
    return JobStatus.PENDING if job.unfetched else JobStatus.QUEUED


def restart_reopens(run: JobRun) -> bool:
    """Whether restarting a failed job puts its run back to RUNNING: yes, unless the run
    was cancelled (it stays cancelled; the restarted job still runs)."""
    return run.cancel_requested_at is None and run.status != RunStatus.CANCELLED


def check_patch_result(job: Job) -> None:
    if job.status != JobStatus.COMPLETED:
        raise InvalidTransition(f"Only COMPLETED jobs have a result to correct (this one is {job.status})")


def check_approve(job: Job) -> None:
    if job.status != JobStatus.COMPLETED:
        raise InvalidTransition(f"Only COMPLETED jobs have a result to approve (this one is {job.status})")
    if (job.result_meta or {}).get("complete") is False:
        raise InvalidTransition("The result lacks required values (resultMeta.missing); complete it with "
                                "PATCH /api/jobs/:id/result before approving it")


def check_delete(job: Job) -> None:
    if job.status == JobStatus.RUNNING:
        raise InvalidTransition("A RUNNING job cannot be deleted; cancel is not possible either, wait for it to end")


def check_cancel_run(run: JobRun) -> None:
    """A run can be cancelled while RUNNING (again too: it cancels what waits since)."""
    if run.status != RunStatus.RUNNING:
        raise InvalidTransition(f"Only RUNNING job runs can be cancelled (this one is {run.status})")


@dataclass(frozen=True)
class Settlement:
    """What a run's state asks for after one of its jobs ended (or it was cancelled)."""

    # The run's final status, to write now with finished_at; None: some job still waits or runs.
    final: RunStatus | None
    # Send job_run.progress now (always with a final status).
    progress: bool

    @property
    def final_event(self) -> str | None:
        """job_run.completed or job_run.failed with those statuses; a cancelled run has none."""
        if self.final in (RunStatus.COMPLETED, RunStatus.FAILED):
            return f"job_run.{self.final.lower()}"
        return None


def settle_run(run: JobRun, counts: Mapping[str, int], now: dt.datetime, *,
               force_progress: bool = False) -> Settlement:
    """The run's end once no job of it waits or runs, else a (throttled) progress event.

    `counts` are the run's jobs by `count_key` (PENDING counts as queued). A run whose
    cancel was requested ends CANCELLED, but only once its running jobs have ended, so a
    final status always means every job has; one that was not ends FAILED if a job
    failed, else COMPLETED.
    """
    unfinished = counts.get("queued", 0) + counts.get("running", 0)
    if unfinished == 0 and run.finished_at is None:
        if run.cancel_requested_at is not None or run.status == RunStatus.CANCELLED:
            final = RunStatus.CANCELLED
        else:
            final = RunStatus.FAILED if counts.get("failed", 0) else RunStatus.COMPLETED
        return Settlement(final=final, progress=True)
    due = run.progress_sent_at is None or run.progress_sent_at <= now - PROGRESS_INTERVAL
    return Settlement(final=None, progress=due or force_progress)
