"""Signals and restarts as an operator meets them, against a real `docex serve`: a second
daemon started on a port already taken, SIGKILL and SIGTERM while a large upload is
still arriving, SIGTERM while a webhook receiver is slow to answer, SIGHUP with limits
changed. Each time: a clear answer or error, no job without its file, no half-stored
file left behind, no event lost (SPEC §1, §2, §6, §9, §11)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import stripe
import trio
from e2e_helpers import QUICK_ENV, Api, query
from webhook_receiver import Received, Reply, open_receiver

MIB = 1024 * 1024


async def _signed_in(daemon: Any) -> Api:
    await daemon.wait_http_ready()
    api = Api(daemon.url(""))
    await api.sign_up()
    return api


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


async def _upload_without_end(port: int, auth: str, schema_id: str, mib: int) -> trio.SocketStream:
    """A multipart job upload whose file has sent `mib` MiB and is still arriving (the
    body's declared length is far larger): the open stream."""
    boundary = "bnd"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"type\"\r\n\r\nEXTRACTION\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"schemaId\"\r\n\r\n{schema_id}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.txt\"\r\n"
            f"Content-Type: text/plain\r\n\r\n").encode()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(
        f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {40 * MIB}\r\n\r\n".encode()
        + head)
    line = b"Total: 12.50 lorem ipsum dolor sit amet\n" * 1024
    for _ in range(mib * MIB // len(line)):
        await stream.send_all(line)
    return stream


async def _being_stored(blobs: Path, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """Once the daemon has started writing the upload under `blobs` (the bytes sent may still
    be in the sockets' buffers, unread, for as long as a loaded machine keeps it from them)."""
    with trio.fail_after(timeout):
        while True:
            if _files_under(blobs):
                return
            await trio.sleep(0.05)


async def _answer_or_close(stream: trio.SocketStream, timeout: float = 15.0) -> bytes:  # noqa: ASYNC109
    """Everything the daemon sends until it closes the connection."""
    out = bytearray()
    with trio.fail_after(timeout):
        try:
            while chunk := await stream.receive_some():
                out += chunk
        except trio.BrokenResourceError:
            pass
    await stream.aclose()
    return bytes(out)


# --- a second daemon on the same port ---------------------------------------------------


async def test_a_second_daemon_on_a_port_in_use_says_so_in_one_line_and_leaves_the_first_serving(
        start_daemon) -> None:
    """Was an ExceptionGroup traceback of 60 lines ending in "OSError: [Errno 98] Address
    already in use" (README: exit 1 for a runtime failure, never a traceback)."""
    first = start_daemon(env=QUICK_ENV)
    api = await _signed_in(first)
    second = start_daemon(env=QUICK_ENV, port=first.port)
    code = await second.wait_exit(timeout=30)
    assert code == 1, second.describe()
    assert not [line for line in second.stderr_lines if "Traceback" in line], second.describe()
    said = "\n".join(second.stderr_lines)
    assert "docex:" in said and str(first.port) in said and "in use" in said, second.describe()
    # The first one still serves its user.
    r = await api.client.get("/api/jobs", headers=api.headers)
    assert r.status_code == 200, r.text
    await api.aclose()
    await first.stop(timeout=15)


@pytest.mark.parametrize("command", [["serve"], ["migrate"]])
async def test_a_database_that_cannot_be_reached_is_one_line_and_exit_1(
        run_docex, unused_port, command: list[str]) -> None:
    """PostgreSQL down (or a wrong port) at start: was a 40-line sqlalchemy traceback."""
    url = f"postgresql+psycopg://docex:s3cret-pw@127.0.0.1:{unused_port()}/docex"
    run = await run_docex(*command, env={"DOCEX_DATABASE_URL": url, **QUICK_ENV})
    assert run.returncode == 1, (run.returncode, run.stderr)
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("docex: cannot reach the database:"), run.stderr
    assert "s3cret-pw" not in run.stderr


# --- an upload in flight -----------------------------------------------------------------


async def test_sigkill_during_a_large_upload_leaves_no_job_and_no_half_file_after_a_restart(
        start_daemon, data_dir: Path, database_url: str) -> None:
    """The client's connection breaks; no job row; and the `.partial` file the killed
    process was writing is gone once a new process has started on the data directory
    (it was left there for ever: every crash mid-upload leaked up to MAX_FILE_SIZE)."""
    first = start_daemon(env=QUICK_ENV)
    api = await _signed_in(first)
    schema_id = await api.create_schema()
    stream = await _upload_without_end(first.port, api.headers["Authorization"], schema_id, mib=8)
    blobs = data_dir / "blobs"
    await _being_stored(blobs)

    first.signal(signal.SIGKILL)
    assert await first.wait_exit(timeout=10) == -signal.SIGKILL
    assert await _answer_or_close(stream) == b""  # a connection error, never a half answer

    second = start_daemon(env=QUICK_ENV)
    await second.wait_http_ready()
    api2 = Api(second.url(""))
    api2.headers = api.headers
    assert await api2.jobs() == []
    assert await query(database_url, "SELECT id FROM jobs") == []
    assert _files_under(blobs) == [], "a half-stored upload survived the restart"
    await api.aclose()
    await api2.aclose()
    await second.stop(timeout=15)


async def test_sigterm_during_a_large_upload_past_the_grace_period_stores_nothing(
        start_daemon, data_dir: Path, database_url: str) -> None:
    """Draining waits for the upload `server.grace_period`, then cuts it: the client gets
    no 201 (an error answer or a closed connection), no job row, no file; exit 0."""
    env = {**QUICK_ENV, "DOCEX_SERVER_GRACE_PERIOD": "1s"}
    daemon = start_daemon(env=env)
    api = await _signed_in(daemon)
    schema_id = await api.create_schema()
    stream = await _upload_without_end(daemon.port, api.headers["Authorization"], schema_id, mib=4)
    await _being_stored(data_dir / "blobs")
    daemon.signal(signal.SIGTERM)
    answer = await _answer_or_close(stream)
    assert not answer.startswith(b"HTTP/1.1 201"), answer[:300]
    if answer:
        _, _, body = answer.partition(b"\r\n\r\n")
        assert json.loads(body)["statusCode"] >= 400, answer[:300]
    assert await daemon.wait_exit(timeout=15) == 0, daemon.describe()
    assert await query(database_url, "SELECT id FROM jobs") == []
    assert _files_under(data_dir / "blobs") == []
    await api.aclose()


# --- a slow webhook receiver ---------------------------------------------------------------


WEBHOOK_ENV = {
    **QUICK_ENV,
    "DOCEX_WEBHOOKS_ALLOW_HTTP": "true",
    "DOCEX_WEBHOOKS_ALLOW_PRIVATE_NETWORKS": "true",
    "WEBHOOK_BACKOFF_INITIAL_MS": "200",
    "WEBHOOK_TIMEOUT_MS": "10000",
    "DOCEX_SERVER_GRACE_PERIOD": "1s",
}


async def test_sigterm_while_a_receiver_is_slow_delivers_the_event_after_a_restart(start_daemon) -> None:
    """The receiver holds the first attempt 6 s (inside the 10 s timeout, past the 1 s grace
    period): the daemon exits 0 within a few seconds, and the restarted one sends the same
    delivery (same X-Webhook-Id), signed, and records it SUCCEEDED."""
    slow = trio.Event()

    async def handler(request: Received) -> Reply:
        if not slow.is_set():
            slow.set()
            await trio.sleep(6)
        return 200, {}, b"ok"

    async with open_receiver(handler) as receiver:
        first = start_daemon(env=WEBHOOK_ENV)
        api = await _signed_in(first)
        r = await api.client.post("/api/webhooks", headers=api.headers,
                                  json={"url": receiver.url(), "events": ["*"]})
        assert r.status_code == 201, r.text
        endpoint = r.json()
        r = await api.client.post(f"/api/webhooks/{endpoint['id']}/send", headers=api.headers,
                                  json={"data": {"n": 1}})
        assert r.status_code == 202, r.text
        delivery = r.json()
        with trio.fail_after(10):
            await slow.wait()
        started = time.monotonic()
        first.signal(signal.SIGTERM)
        assert await first.wait_exit(timeout=10) == 0, first.describe()
        assert time.monotonic() - started < 5

        second = start_daemon(env=WEBHOOK_ENV)
        await second.wait_http_ready()
        await receiver.wait_for(2, timeout=20)
        with trio.fail_after(15):
            while True:
                r = await api.client.get(second.url(f"/api/webhooks/deliveries/{delivery['id']}"),
                                         headers=api.headers)
                if r.json()["status"] == "SUCCEEDED":
                    break
                await trio.sleep(0.1)
    assert {q.headers["x-webhook-id"] for q in receiver.requests} == {delivery["id"]}
    for q in receiver.requests:
        stripe.WebhookSignature.verify_header(q.body, q.headers["x-webhook-signature"],
                                              endpoint["signingSecret"], tolerance=300)
    await api.aclose()
    await second.stop(timeout=15)


# --- SIGHUP with new limits ---------------------------------------------------------------


async def test_sighup_lowering_max_file_size_applies_to_the_next_upload(start_daemon, config_file) -> None:
    path = config_file("[jobs]\nmax_file_size = \"1MiB\"\n")
    daemon = start_daemon("--config", str(path), env=QUICK_ENV)
    api = await _signed_in(daemon)
    schema_id = await api.create_schema()
    body = b"Total: 12.50\n" + b"x" * (300 * 1024)
    await api.upload(schema_id, "a.txt", body, "text/plain", statuses=None)

    config_file("[jobs]\nmax_file_size = \"100KiB\"\n")
    mark = daemon.mark()
    daemon.signal(signal.SIGHUP)
    await daemon.wait_for("config.reloaded", since=mark)
    r = await api.client.post("/api/jobs", data={"type": "EXTRACTION", "schemaId": schema_id},
                              files={"file": ("a.txt", body, "text/plain")}, headers=api.headers)
    assert r.status_code == 413, r.text
    assert r.json()["statusCode"] == 413 and r.json()["error"] == "Payload Too Large", r.text
    await api.aclose()
    await daemon.stop(timeout=15)


async def test_a_sighup_while_the_daemon_starts_is_a_reload_not_its_end(start_daemon) -> None:
    """A SIGHUP before the signal handler ran ended the process without a word (SIGHUP's
    default action): a `kill -HUP` from a script racing a restart killed the daemon."""
    daemon = start_daemon()
    # Its first line (a fresh data directory's secrets) comes before the migrations and
    # everything else start-up does, and before the handler.
    await daemon.wait_for("config.secrets_generated")
    daemon.signal(signal.SIGHUP)
    await daemon.wait_for("config.reloaded")
    await daemon.wait_http_ready()
    await daemon.stop(timeout=15)
