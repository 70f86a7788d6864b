"""daemon.leasing: the cancellation behaviour the worker pool and the dispatcher rely on."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
import trio
import trio.lowlevel
import trio.testing

from daemon import leasing
from daemon.clock import utcnow


def test_idle_delay_sleeps_until_due_but_never_past_the_poll() -> None:
    assert leasing.idle_delay(None, 30.0) == 30.0
    assert leasing.idle_delay(utcnow() - dt.timedelta(seconds=5), 30.0) == 0.0
    assert leasing.idle_delay(utcnow() + dt.timedelta(hours=1), 2.0) == 2.0
    assert 9.0 < leasing.idle_delay(utcnow() + dt.timedelta(seconds=10), 30.0) <= 10.0


def test_owner_ids_fit_the_lease_columns_and_name_the_process() -> None:
    first, second = leasing.owner_id("webhooks"), leasing.owner_id("webhooks")
    assert len(first) <= 64 and first.split(":")[2] == "webhooks"
    assert first.split(":")[1].isdigit()
    assert first != second


async def test_a_final_write_finishes_although_its_task_is_cancelled() -> None:
    written = []
    with trio.CancelScope() as scope:
        scope.cancel()
        with leasing.final_write():
            await trio.sleep(0.01)
            written.append("outcome")
        await trio.lowlevel.checkpoint()  # the cancellation is still delivered afterwards
        written.append("not reached")
    assert written == ["outcome"] and scope.cancelled_caught


async def test_a_final_write_is_abandoned_after_its_bound(autojump_clock: trio.testing.MockClock) -> None:
    with leasing.final_write():
        await trio.sleep(leasing.FINAL_WRITE_S * 10)  # a database that does not answer
    assert trio.current_time() == pytest.approx(leasing.FINAL_WRITE_S)


async def test_cancelled_work_gives_its_row_back_then_stays_cancelled() -> None:
    given: list[str] = []

    async def give_back() -> None:
        await trio.sleep(0.01)  # a real write checkpoints: the shield must hold
        given.append("row")

    with trio.move_on_after(0.01) as scope:
        async with leasing.given_back_if_cancelled(give_back, {}), trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()
    assert scope.cancelled_caught and given == ["row"]


async def test_finished_or_failing_work_keeps_its_row() -> None:
    given: list[str] = []

    async def give_back() -> None:
        given.append("row")

    async with leasing.given_back_if_cancelled(give_back, {}):
        await trio.lowlevel.checkpoint()
    with pytest.raises(ValueError):
        async with leasing.given_back_if_cancelled(give_back, {}):
            raise ValueError("a bug in the work")
    assert given == []


async def test_a_failing_give_back_is_logged_and_the_cancellation_still_propagates(
        caplog: pytest.LogCaptureFixture) -> None:
    async def give_back() -> None:
        raise OSError("database down")

    with caplog.at_level(logging.ERROR, "daemon.leasing"), trio.move_on_after(0.01) as scope:
        async with leasing.given_back_if_cancelled(give_back, {"job_id": "j1"}):
            await trio.sleep_forever()
    assert scope.cancelled_caught
    [record] = caplog.records
    assert record.action == "lease.give_back_failed" and record.job_id == "j1"  # type: ignore[attr-defined]
