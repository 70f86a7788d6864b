"""daemon.jobs.transitions: the job and run state machine's decisions, without a database."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from daemon.errors import InvalidTransition
from daemon.jobs.models import JobStatus, RunStatus
from daemon.jobs.records import Job, JobRun
from daemon.jobs.transitions import (
    PROGRESS_INTERVAL,
    check_approve,
    check_cancel,
    check_cancel_run,
    check_delete,
    check_patch_result,
    restart_reopens,
    restarted_status,
    settle_run,
)

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
JOB = Job(
    id="j", user_id="u", schema_id="s", job_run_id=None, type="EXTRACTION", status=JobStatus.QUEUED,
    file_name="a.pdf", file_size=1, mime_type="application/pdf", sha256="0" * 64, blob_key="k", source=None,
    page_count=None, attempts=0, result=None, original_result=None, result_meta=None, error_message=None,
    error_code=None, created_at=NOW, updated_at=NOW, started_at=None, finished_at=None, reviewed_at=None,
    reviewed_by=None, run_after=NOW, lease_owner=None, lease_expires_at=None,
)
RUN = JobRun(id="r", user_id="u", schema_id="s", status=RunStatus.RUNNING, total=3, created_at=NOW,
             updated_at=NOW, finished_at=None, progress_sent_at=None, cancel_requested_at=None)


def job(status: JobStatus, **changes: object) -> Job:
    return dataclasses.replace(JOB, status=status, **changes)  # type: ignore[arg-type]


def run(**changes: object) -> JobRun:
    return dataclasses.replace(RUN, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("status", list(JobStatus))
def test_only_waiting_jobs_can_be_cancelled(status: JobStatus) -> None:
    if status in (JobStatus.PENDING, JobStatus.QUEUED):
        check_cancel(job(status))
    else:
        with pytest.raises(InvalidTransition, match=f"Only PENDING or QUEUED jobs can be cancelled "
                                                    f"\\(this one is {status}\\)"):
            check_cancel(job(status))


def test_a_failed_job_restarts_queued_or_pending_when_its_file_was_never_fetched() -> None:
    assert restarted_status(job(JobStatus.FAILED)) is JobStatus.QUEUED
    unfetched = job(JobStatus.FAILED, blob_key=None, source={"integrationId": "i"})
    assert restarted_status(unfetched) is JobStatus.PENDING
    for status in set(JobStatus) - {JobStatus.FAILED}:
        with pytest.raises(InvalidTransition, match="Only FAILED jobs can be restarted"):
            restarted_status(job(status))


def test_restarting_reopens_a_run_unless_it_was_cancelled() -> None:
    assert restart_reopens(run(status=RunStatus.FAILED, finished_at=NOW))
    assert not restart_reopens(run(status=RunStatus.CANCELLED, finished_at=NOW, cancel_requested_at=NOW))
    assert not restart_reopens(run(cancel_requested_at=NOW))


def test_results_are_corrected_on_completed_jobs_and_running_jobs_are_not_deleted() -> None:
    check_patch_result(job(JobStatus.COMPLETED))
    with pytest.raises(InvalidTransition, match="Only COMPLETED jobs"):
        check_patch_result(job(JobStatus.FAILED))
    check_delete(job(JobStatus.FAILED))
    with pytest.raises(InvalidTransition, match="A RUNNING job cannot be deleted"):
        check_delete(job(JobStatus.RUNNING))


def test_only_completed_and_complete_results_are_approved() -> None:
    check_approve(job(JobStatus.COMPLETED, result_meta={"complete": True, "missing": []}))
    check_approve(job(JobStatus.COMPLETED))  # completed before results had a completeness
    with pytest.raises(InvalidTransition, match="lacks required values"):
        check_approve(job(JobStatus.COMPLETED, result_meta={"complete": False, "missing": ["/iban"]}))
    for status in set(JobStatus) - {JobStatus.COMPLETED}:
        with pytest.raises(InvalidTransition, match="Only COMPLETED jobs have a result to approve"):
            check_approve(job(status))


def test_only_running_runs_can_be_cancelled() -> None:
    check_cancel_run(run())
    check_cancel_run(run(cancel_requested_at=NOW))  # again, while its last jobs run
    with pytest.raises(InvalidTransition, match="Only RUNNING job runs can be cancelled \\(this one is COMPLETED\\)"):
        check_cancel_run(run(status=RunStatus.COMPLETED, finished_at=NOW))


def test_a_run_ends_completed_or_failed_once_no_job_waits_or_runs() -> None:
    done = settle_run(run(), {"completed": 3}, NOW)
    assert (done.final, done.progress, done.final_event) == (RunStatus.COMPLETED, True, "job_run.completed")
    failed = settle_run(run(), {"completed": 2, "failed": 1}, NOW)
    assert (failed.final, failed.final_event) == (RunStatus.FAILED, "job_run.failed")
    assert settle_run(run(), {"completed": 2, "running": 1}, NOW).final is None
    assert settle_run(run(), {"completed": 2, "queued": 1}, NOW).final is None


def test_a_cancelled_run_ends_cancelled_only_when_none_of_its_jobs_runs() -> None:
    cancelled = run(cancel_requested_at=NOW)
    waiting = settle_run(cancelled, {"cancelled": 2, "running": 1}, NOW, force_progress=True)
    assert (waiting.final, waiting.progress) == (None, True)
    ended = settle_run(cancelled, {"cancelled": 2, "failed": 1}, NOW)
    assert (ended.final, ended.progress, ended.final_event) == (RunStatus.CANCELLED, True, None)


def test_progress_is_sent_at_most_once_per_interval() -> None:
    counts = {"completed": 1, "queued": 2}
    assert settle_run(run(), counts, NOW).progress
    assert not settle_run(run(progress_sent_at=NOW - PROGRESS_INTERVAL / 2), counts, NOW).progress
    assert settle_run(run(progress_sent_at=NOW - PROGRESS_INTERVAL), counts, NOW).progress
    assert settle_run(run(progress_sent_at=NOW), counts, NOW, force_progress=True).progress


def test_a_finished_run_is_not_settled_again() -> None:
    finished = run(status=RunStatus.COMPLETED, finished_at=NOW, progress_sent_at=NOW)
    assert settle_run(finished, {"completed": 3}, NOW).final is None
