"""One tenant's inbox cannot hold everyone else's: the sweeper sweeps due inboxes side by
side, and a remote listing that does not end in `inboxes.list_timeout` is given up and
recorded on its inbox. Runs on SQLite and PostgreSQL.

The remote endpoint here is a loopback TCP server that accepts and never answers (or
trickles): boto3 waits up to its read timeout, 60 s, per attempt, and a trickle of one byte
under it never times out at all.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from integrations_helpers import create_s3, private_networks
from jobs_helpers import create_schema, register, running
from test_inboxes import create_inbox, drop, eventually, job_rows, wait_for_jobs

from daemon.config import Config
from daemon.inboxes.sweeper import run_inboxes
from daemon.services import Services

LIST_TIMEOUT_S = 2


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "inboxes"
    (path / "scans").mkdir(parents=True)
    return path


@pytest.fixture
def config(config: Config, root: Path) -> Config:
    """An interval long enough that only the first sweep or a notification explains a
    pickup; remote listings given up after 2 s; S3 on loopback allowed."""
    inboxes = dataclasses.replace(config.inboxes, local_root=str(root), interval_s=600, settle_ms=50,
                                  list_timeout_s=LIST_TIMEOUT_S)
    return private_networks(dataclasses.replace(config, inboxes=inboxes))


class Endpoint:
    """A TCP server on loopback that accepts, counts and never answers (or trickles a byte)."""

    def __init__(self, trickle_s: float | None = None) -> None:
        self.trickle_s = trickle_s
        self.connections = 0
        self.open = 0
        self.most_open = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            if self.trickle_s is None:
                while await stream.receive_some():  # reads the request, answers nothing, until the client hangs up
                    pass
                return
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: 100000\r\n\r\n")
            while True:
                await stream.send_all(b" ")
                await trio.sleep(self.trickle_s)
        except trio.BrokenResourceError:
            pass  # the client shut the connection down
        finally:
            self.open -= 1


@pytest.mark.parametrize("trickle_s", [None, 0.5], ids=["silent", "trickling"])
async def test_a_hanging_s3_inbox_holds_neither_other_users_inboxes_nor_itself_for_ever(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, root: Path, s3_server: Any,
        monkeypatch: pytest.MonkeyPatch, trickle_s: float | None) -> None:
    import daemon.storage.s3

    # Shorter than production's 60 s, still far beyond what the test waits for.
    monkeypatch.setattr(daemon.storage.s3, "_READ_TIMEOUT_S", 20)
    bob = await register(client, "bob@example.com")
    endpoint = Endpoint(trickle_s)
    async with trio.open_nursery() as servers:
        listeners = await servers.start(functools.partial(trio.serve_tcp, endpoint.serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        hanging = await create_s3(client, bob, s3_server, "bobs-bucket", endpoint_url=f"http://127.0.0.1:{port}")
        bobs = await create_inbox(client, bob, kind="s3", schemaId=await create_schema(client, bob), prefix="in/",
                                  integrationId=hanging["id"])
        await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans", after="keep")

        async def bobs_inbox() -> dict[str, Any]:
            r = await client.get(f"/api/inboxes/{bobs['id']}", headers=bob)
            return await r.get_json()  # type: ignore[no-any-return]

        async def failed() -> Any:
            body = await bobs_inbox()
            return body if body["lastError"] else None

        async with running(services, run_inboxes):
            await eventually(lambda: _true(endpoint.connections >= 1))  # bob's listing waits on the endpoint
            started = time.monotonic()
            drop(root / "scans", 1)
            rows = await wait_for_jobs(services, 1, deadline_s=LIST_TIMEOUT_S * 0.9)
            took = time.monotonic() - started
            assert endpoint.connections == 1, "bob's inbox was swept again while its sweep was in progress"
            # Given up at the deadline, recorded on the inbox; due again at its interval, not at once.
            body = await eventually(failed, deadline_s=LIST_TIMEOUT_S + 5)
            failed_after = time.monotonic() - started
            await trio.sleep(1.0)
            assert endpoint.connections == 1, "bob's inbox was swept again before its interval"
            stopping = time.monotonic()
        stopped_in = time.monotonic() - stopping
        # The abandoned call's socket is closed with its client, not left for the read timeout.
        await eventually(lambda: _true(endpoint.open == 0), deadline_s=5)
        servers.cancel_scope.cancel()
    assert [row.file_name for row in rows] == ["invoice-000.txt"]
    assert took < 1.5, f"alice's file waited {took:.1f} s for bob's inbox"
    assert failed_after < LIST_TIMEOUT_S + 2, f"bob's sweep was given up after {failed_after:.1f} s"
    assert "did not finish within 2 s" in body["lastError"], body
    assert body["lastSweptAt"] is not None
    assert stopped_in < 1.0, f"the sweeper took {stopped_in:.1f} s to stop"
    assert [row.file_name for row in await job_rows(services)] == ["invoice-000.txt"]


async def _true(value: bool) -> bool:
    return value


async def test_many_hanging_inboxes_of_one_user_hold_neither_other_users_inboxes(
        client: Any, alice: dict[str, str], schema_id: str, services: Services, root: Path, s3_server: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """More hanging inboxes than the sweeper sweeps at once: one user's take only their own slots."""
    import daemon.storage.s3
    from daemon.inboxes.sweeper import MAX_CONCURRENT_SWEEPS, MAX_CONCURRENT_SWEEPS_PER_USER

    monkeypatch.setattr(daemon.storage.s3, "_READ_TIMEOUT_S", 20)
    bob = await register(client, "bob@example.com")
    bobs_schema = await create_schema(client, bob)
    endpoint = Endpoint()
    async with trio.open_nursery() as servers:
        listeners = await servers.start(functools.partial(trio.serve_tcp, endpoint.serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        for i in range(MAX_CONCURRENT_SWEEPS + 1):
            hanging = await create_s3(client, bob, s3_server, f"bucket-{i}", endpoint_url=f"http://127.0.0.1:{port}",
                                      name=f"Bucket {i}")
            await create_inbox(client, bob, kind="s3", schemaId=bobs_schema, prefix="in/", integrationId=hanging["id"])
        await create_inbox(client, alice, kind="local", schemaId=schema_id, path="scans", after="keep")
        async with running(services, run_inboxes):
            await eventually(lambda: _true(endpoint.connections >= 1))
            await trio.sleep(0.3)
            started = time.monotonic()
            drop(root / "scans", 1)
            await wait_for_jobs(services, 1, deadline_s=LIST_TIMEOUT_S * 0.9)
            took = time.monotonic() - started
            await eventually(lambda: _true(endpoint.connections > MAX_CONCURRENT_SWEEPS_PER_USER))  # the next ones
        servers.cancel_scope.cancel()
    assert took < 1.5, f"alice's file waited {took:.1f} s for bob's inboxes"
    assert endpoint.most_open == MAX_CONCURRENT_SWEEPS_PER_USER, \
        f"{endpoint.most_open} of bob's inboxes were swept at once"
