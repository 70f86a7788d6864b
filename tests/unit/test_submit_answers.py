"""`docex submit` against a server that does not answer as docex does, or whose job goes
away: a one-line reason and an exit status, never a traceback or a poll without end.
The server is a real HTTP server (tests/webhook_receiver.py) playing docex's part."""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
from webhook_receiver import Received, Reply, open_receiver

from daemon.submit import EXIT_FAILED, UsageError, submit

SCHEMA = {"id": "01aaaaaaaaaaaaaaaaaaaaaaaa", "name": "S",
          "definition": {"type": "object", "properties": {"n": {"type": "string"}}}}
JOB = {"id": "01bbbbbbbbbbbbbbbbbbbbbbbb", "status": "QUEUED", "result": None}


JOB_ANSWER: Reply = (200, {}, json.dumps(JOB).encode())
SCHEMA_ANSWER: Reply = (200, {}, json.dumps(SCHEMA).encode())


def playing(jobs_answer: Reply, job_answer: Reply = JOB_ANSWER,
            schema_answer: Reply = SCHEMA_ANSWER) -> Callable[[Received], Awaitable[Reply]]:
    """docex's part: the schema, the upload's answer, the job's answer."""
    async def handler(request: Received) -> Reply:
        if request.path.startswith("/api/schemas/"):
            return schema_answer
        if request.method == "POST" and request.path == "/api/jobs":
            return jobs_answer
        return job_answer
    return handler


async def _submit(url: str, tmp_path: Path, wait: bool = False) -> tuple[int, list[dict[str, object]]]:
    document = tmp_path / "a.txt"
    document.write_text("Invoice Number: 1\n")
    out = io.StringIO()
    with trio.fail_after(20):
        code = await submit([str(document)], SCHEMA["id"], url=url, api_key="dx_live_x", wait=wait, fmt="json",
                            out=out, progress_to=None)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


async def test_waiting_stops_when_the_job_is_deleted(tmp_path: Path) -> None:
    """It polled for ever on a 404 (and on a 401 once the key was revoked)."""
    for status in (404, 401):
        body = json.dumps({"statusCode": status, "message": "Job not found", "error": "x"}).encode()
        async with open_receiver(playing((201, {}, json.dumps(JOB).encode()), (status, {}, body))) as server:
            code, [line] = await _submit(server.url(""), tmp_path, wait=True)
        assert code == EXIT_FAILED
        assert str(line["errorMessage"]).startswith("stopped waiting: "), line
        assert ("the job was deleted" in str(line["errorMessage"])) == (status == 404)


@pytest.mark.parametrize("answer", [b"<html>Bad gateway</html>", b'{"id": "01b', b"[1, 2, 3]", b'{"ok": true}'])
async def test_an_upload_answered_not_as_docex_is_refused_in_words(tmp_path: Path, answer: bytes) -> None:
    """A proxy's page or cut-off JSON after an upload was a JSONDecodeError traceback."""
    async with open_receiver(playing((200, {}, answer))) as server:
        code, [line] = await _submit(server.url(""), tmp_path)
    assert code == EXIT_FAILED and line["status"] == "REFUSED"
    assert "did not answer as docex" in str(line["errorMessage"]), line


async def test_a_schema_answered_as_a_list_is_a_usage_error(tmp_path: Path) -> None:
    """`[1, 2, 3]` where an error object was expected was an AttributeError traceback."""
    async with open_receiver(playing((201, {}, b"{}"), schema_answer=(500, {}, b"[1, 2, 3]"))) as server:
        with pytest.raises(UsageError, match=r"did not answer as docex \(500\): \[1, 2, 3\]"):
            await _submit(server.url(""), tmp_path)


async def test_two_files_of_the_same_bytes_under_two_names_send_two_keys(tmp_path: Path) -> None:
    """The daemon counts the file name as part of the request: one key for both made the
    second a 409 ("Idempotency-Key was already used with a different request")."""
    (tmp_path / "a.pdf").write_bytes(b"%PDF-1.4 same")
    (tmp_path / "b.pdf").write_bytes(b"%PDF-1.4 same")
    async with open_receiver(playing((201, {}, json.dumps(JOB).encode()))) as server:
        with trio.fail_after(20):
            await submit([str(tmp_path / "a.pdf"), str(tmp_path / "b.pdf")], SCHEMA["id"], url=server.url(""),
                         api_key="dx_live_x", wait=False, fmt="json", out=io.StringIO(), progress_to=None)
        keys = [r.headers["idempotency-key"] for r in server.requests if r.method == "POST"]
    assert len(keys) == 2 and len(set(keys)) == 2
