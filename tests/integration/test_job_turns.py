"""Users take turns at the workers: one user's batch no longer holds every other user's
job behind it (both backends)."""

from __future__ import annotations

from typing import Any

import trio
from jobs_helpers import create_job, create_schema, register, running_workers, wait_for_status

from daemon.services import Services


async def _started_order(client: Any, auth_of: dict[str, dict[str, str]], jobs: list[tuple[str, str]]) -> list[str]:
    """The jobs' names in the order their (only) attempt started."""
    done = {name: await wait_for_status(client, auth_of[owner], job_id, "COMPLETED", "FAILED", deadline_s=30)
            for name, (owner, job_id) in _named(jobs).items()}
    assert {job["status"] for job in done.values()} == {"COMPLETED"}, done
    return sorted(done, key=lambda name: done[name]["startedAt"])


def _named(jobs: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    return {f"{owner}{n}": (owner, job_id) for n, (owner, job_id) in enumerate(jobs, 1)}


async def test_a_users_job_goes_before_another_users_batch(client: Any, services: Services, monkeypatch: Any) -> None:
    import daemon.jobs.pool as pool

    real_extract = pool.extract

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await trio.sleep(0.2)  # a page of OCR, say
        return await real_extract(*args, **kwargs)

    monkeypatch.setattr(pool, "extract", slow)
    auth_of = {owner[0]: await register(client, f"{owner}@example.com") for owner in ("ann", "bob", "cid")}
    schemas = {owner: await create_schema(client, auth) for owner, auth in auth_of.items()}
    jobs = [("a", (await create_job(client, auth_of["a"], schemas["a"]))["id"]) for _ in range(4)]
    jobs += [("b", (await create_job(client, auth_of["b"], schemas["b"]))["id"]) for _ in range(2)]
    jobs += [("c", (await create_job(client, auth_of["c"], schemas["c"]))["id"])]
    async with running_workers(services, workers=1):
        order = await _started_order(client, auth_of, jobs)
    # Names by owner and rank: a1..a4 were queued first, then b5, b6, then c7. Oldest first
    # gave a1 a2 a3 a4 b5 b6 c7; in turns each user's next job follows the previous user's.
    assert order == ["a1", "b5", "c7", "a2", "b6", "a3", "a4"], order
