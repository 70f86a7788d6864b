"""Hostile uploads against a real `docex serve` (raw sockets, chunked bodies): multipart
framing a client stretches without end must be refused before the daemon has buffered
more than a part's worth of it, and every answer is in the SPEC §3 shape. And the
commands (`docex extract`, `docex submit`) given hostile arguments or a server that is
not docex: one line saying what is wrong and a non-zero exit, never a traceback."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from e2e_helpers import QUICK_ENV, Api

MIB = 1024 * 1024


async def _stream_until_answered(port: int, auth: str, path: str, head: bytes, filler: bytes,
                                 boundary: str, max_mib: int = 256) -> tuple[bytes, int]:
    """POST a chunked body: `head`, then `filler` MiB after MiB, never the last chunk.
    Returns the answer's bytes (empty if none came) and how many MiB were sent before it."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    answer = bytearray()
    answered = trio.Event()
    sent = 0

    async def read() -> None:
        while chunk := await stream.receive_some():
            answer.extend(chunk)
            if _whole(answer):
                answered.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        with trio.move_on_after(60):
            await stream.send_all(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nTransfer-Encoding: chunked\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n".encode())
            if head:
                await stream.send_all(b"%x\r\n%s\r\n" % (len(head), head))
            chunk = b"%x\r\n%s\r\n" % (len(filler), filler)
            while not answer and sent < max_mib:
                try:
                    await stream.send_all(chunk)
                except trio.BrokenResourceError:
                    break  # the daemon answered and closed
                sent += 1
        with trio.move_on_after(5):
            await answered.wait()
        nursery.cancel_scope.cancel()
    await stream.aclose()
    return bytes(answer), sent


def _whole(answer: bytearray) -> bool:
    head, found, body = bytes(answer).partition(b"\r\n\r\n")
    length = [int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
    return bool(found and length and len(body) >= length[0])


async def _signed_in(start_daemon: Callable[..., Any]) -> tuple[Any, Api, str]:
    daemon = start_daemon(env=QUICK_ENV)
    await daemon.wait_http_ready()
    api = Api(daemon.url(""))
    await api.sign_up()
    return daemon, api, api.headers["Authorization"]


def _status_and_error(answer: bytes) -> tuple[bytes, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], json.loads(body)


async def _refused_within_8_mib(start_daemon: Any, path: str, head: bytes, filler: bytes) -> None:
    """`head`, then MiB after MiB of `filler`, chunked, to `path`: a 400 before 8 MiB are sent."""
    daemon, api, auth = await _signed_in(start_daemon)
    answer, sent = await _stream_until_answered(daemon.port, auth, path, head, filler * MIB, "bnd")
    assert answer, f"no answer after {sent} MiB"
    line, error = _status_and_error(answer)
    assert line.startswith(b"HTTP/1.1 400") and error["statusCode"] == 400, (line, error)
    assert sent <= 8, sent
    await api.aclose()
    await daemon.stop()


async def test_a_chunked_preamble_without_a_boundary_is_refused_at_once(start_daemon) -> None:
    """werkzeug's decoder keeps every byte before the first boundary until one comes: a
    run's upload (no total size limit) of "x" after "x" grew the daemon by each MiB sent
    (256 MiB and no answer). A preamble is never data: past 64 KiB it is a 400."""
    await _refused_within_8_mib(start_daemon, "/api/job-runs", b"", b"x")


async def test_a_part_header_that_never_ends_is_refused_at_once(start_daemon) -> None:
    """The same for a part's header block: a header line without end was buffered whole."""
    head = b'--bnd\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nX-Junk: '
    await _refused_within_8_mib(start_daemon, "/api/jobs", head, b"j")


# --- the commands ------------------------------------------------------------------------


def _one_clear_line(run: Any) -> str:
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr and run.stderr.startswith("docex"), run.stderr
    return str(run.stderr)


@pytest.mark.parametrize(("text", "said"), [
    ("[" * 100_000 + "]" * 100_000, "cannot read the schema"),  # was a RecursionError traceback
    ('{"type": "object", "properties": [1, 2]}', "properties"),  # was INTERNAL_ERROR from the provider
    ('{"type": "object", "properties": {"a": {"type": "nonsense"}}}', "type"),  # was a result of nothing
    (None, "not a regular file"),  # a FIFO: was read until a writer closed it, forever
])
async def test_extract_with_a_hostile_schema_file_says_what_is_wrong(
        run_docex, tmp_path: Path, text: str | None, said: str) -> None:
    document = tmp_path / "doc.txt"
    document.write_text("Invoice Number: INV-1\nTotal: 5\n")
    schema = tmp_path / "schema.json"
    if text is None:
        os.mkfifo(schema)
    else:
        schema.write_text(text)
    run = await run_docex("extract", str(document), "--schema", str(schema), timeout=60)
    assert said in _one_clear_line(run)


class _NotDocex(http.server.BaseHTTPRequestHandler):
    """A server at DOCEX_URL: /api/schemas/ok answers as docex, /api/schemas/html with a web
    page, /api/schemas/boom with a 500; an upload is accepted as a QUEUED job."""

    def _send(self, code: int, body: str, content_type: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.endswith("/html"):
            self._send(200, "<html>a proxy's login page</html>", "text/html")
        elif self.path.endswith("/boom"):
            self._send(500, "oops", "text/plain")
        else:
            self._send(200, json.dumps({"id": "ok", "definition": {"type": "object", "properties": {}}}))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(201, json.dumps({"id": "j", "status": "QUEUED", "result": None}))

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def not_docex() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotDocex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("schema", "env", "said"), [
    ("html", {}, "did not answer as docex"),  # was a JSONDecodeError traceback
    ("boom", {}, "did not answer as docex (500)"),  # was an HTTPStatusError traceback
    ("ok", {"DOCEX_URL": "http://[::1"}, "is not a URL"),  # was an InvalidURL traceback
    ("ok", {"DOCEX_API_KEY": "kéy"}, "DOCEX_API_KEY"),  # was a UnicodeEncodeError traceback
])
async def test_submit_to_something_that_is_not_docex_says_so(
        run_docex, not_docex: str, tmp_path: Path, schema: str, env: dict[str, str], said: str) -> None:
    document = tmp_path / "doc.txt"
    document.write_text("Total: 5\n")
    run = await run_docex("submit", str(document), "--schema", schema,
                          env={"DOCEX_URL": not_docex, "DOCEX_API_KEY": "k", **env}, timeout=60)
    assert said in _one_clear_line(run)


async def test_submit_sends_and_prints_a_file_whose_name_is_not_utf8(
        run_docex, not_docex: str, tmp_path: Path) -> None:
    """A name's undecodable bytes are lone surrogates in Python: sending it as the part's
    file name and printing it were each a UnicodeEncodeError traceback."""
    document = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xffname.txt"))
    await trio.Path(document).write_text("Total: 5\n")
    for fmt in ("json", "csv"):
        run = await run_docex("submit", str(document), "--schema", "ok", "--format", fmt,
                              env={"DOCEX_URL": not_docex, "DOCEX_API_KEY": "k"}, timeout=60)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        assert "bad\ufffdname.txt" in run.stdout, run.stdout
