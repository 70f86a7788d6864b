"""A user's exports at once, counted in a real server (README "Export": at most two a user,
the next a 429 with Retry-After).

Before: an export was counted from the moment its body began to be sent. Hypercorn sends
the headers first, a checkpoint after the handler has answered, so six requests arriving
together all passed the check, and all six ran.
"""

from __future__ import annotations

from typing import Any

import httpx
import trio
from e2e_helpers import QUICK_ENV, Api

LINE_ITEMS_SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "invoiceNumber": {"type": "string"},
    "items": {"type": "array", "items": {"type": "object", "properties": {
        "description": {"type": "string"}, "amount": {"type": "number"}}}},
}}
# Results of ~3 MiB each: four make a CSV far larger than the sockets between the
# daemon and a client that does not read it buffer, so an export stays running.
ITEMS = [{"description": f"{n:06d} " + "x" * 200, "amount": n} for n in range(12_000)]


async def completed_jobs(api: Api, schema_id: str, count: int) -> list[str]:
    ids = [(await api.upload(schema_id, f"{n}.txt", b"Invoice A-1\nTotal 3.00\n", "text/plain"))["id"]
           for n in range(count)]
    with trio.fail_after(60):
        while True:
            if len(await api.jobs("COMPLETED")) == count:
                break
            await trio.sleep(0.2)
    return [str(job_id) for job_id in ids]


async def test_exports_arriving_together_run_two_at_a_time_per_user(start_daemon: Any) -> None:
    d = start_daemon(env=QUICK_ENV)
    await d.wait_http_ready()
    async with Api(d.url("")) as api:
        await api.sign_up()
        schema_id = await api.create_schema(LINE_ITEMS_SCHEMA, "Lines")
        for job_id in await completed_jobs(api, schema_id, 4):
            r = await api.client.patch(f"/api/jobs/{job_id}/result", headers=api.headers,
                                       json={"result": {"invoiceNumber": "A-1", "items": ITEMS}})
            assert r.status_code == 200, r.text
        path = d.url(f"/api/jobs/export?format=csv&schemaId={schema_id}")
        statuses: list[int] = []
        answered = trio.Event()

        async def export() -> None:
            # A connection of its own each, its body left unread until all six have answered.
            async with httpx.AsyncClient(timeout=30) as client, \
                    client.stream("GET", path, headers=api.headers) as response:
                statuses.append(response.status_code)
                if len(statuses) == 6:
                    answered.set()
                await answered.wait()

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(export)
        assert sorted(statuses) == [200, 200, 429, 429, 429, 429]

        # The clients that went away gave their places back: a new export runs whole.
        with trio.fail_after(10):
            while True:
                r = await api.client.get(path, headers=api.headers)
                if r.status_code != 429:
                    break
                await trio.sleep(0.1)
        assert r.status_code == 200 and r.text.count("\n") == 1 + 4 * len(ITEMS)
    await d.stop()
