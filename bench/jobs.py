"""Upload throughput, memory under a refused huge upload, and end-to-end job throughput.

    .venv/bin/python bench/jobs.py [--seconds 8] [--clients 4] [--jobs 300] [--workers 4]
                                   [--database-url URL]

Figures and targets:

  upload     uploads/s of a 1 MiB TXT file to POST /api/jobs, --clients concurrent
             keep-alive clients for --seconds, against `docex serve` with
             DOCEX_JOBS_WORKERS=0 (only the upload path: stream to the blob store,
             sniff, hash, insert the job and its event)                    (reported)
  rss        peak RSS growth of the daemon while a 200 MiB multipart upload is
             refused with 413 (MAX_FILE_SIZE is 50 MiB), the body sent with chunked
             transfer encoding and no Content-Length, so the early Content-Length
             check cannot refuse it and the streaming limit is what is measured;
             VmRSS and VmHWM of /proc/<pid>/status sampled every ~2 ms      < 32 MiB
  rss-cl     the same with a Content-Length header (refused before the body)  (reported)
  e2e        jobs/s of --jobs small TXT invoices through --workers workers, from
             the first upload until every job is COMPLETED, and p50/p99 of
             finishedAt - createdAt                                        (reported)
  exit       SIGTERM → each daemon exits 0

Two daemons, real subprocesses on free ports with fresh data directories, access
log off and rate limits raised out of the way: one with no workers for the
upload and memory figures (the memory runs go first, so VmHWM is not already
raised by the throughput run), one with workers for e2e. SQLite unless
--database-url names a PostgreSQL database (each daemon then gets a scratch
schema of its own, dropped at the end).

Prints human-readable lines, then one JSON line with every figure. Exits 0 unless
a daemon failed to start, a set-up request failed, a job did not complete, or a
daemon did not exit 0 on SIGTERM; a missed target is reported as MISS and does
not fail the run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from harness import Daemon, cpu_s, expect, percentile, proc_status, verdict

MiB = 1024 * 1024
TARGET_RSS_GROWTH = 32 * MiB
HUGE_BODY = 200 * MiB
SEND_CHUNK = 64 * 1024

SCHEMA = {"type": "object", "properties": {"invoice_number": {"type": "string"}, "total": {"type": "number"}}}
SMALL_DOC = "Invoice Number: INV-{n}\nTotal: 12.50\n"


def daemon_env(data_dir: Path, workers: int, database_url: str | None) -> dict[str, str]:
    return harness.daemon_env(data_dir, DOCEX_AUTH_BCRYPT_ROUNDS="4", DOCEX_JOBS_WORKERS=str(workers),
                              **({"DOCEX_DATABASE_URL": database_url} if database_url else {}))


# --- PostgreSQL -------------------------------------------------------------------------------

def _execute(url: str, sql: str) -> None:
    """One statement on its own connection, outside a transaction."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


def scratch_schema(url: str) -> tuple[str, str]:
    """A new, empty PostgreSQL schema for one daemon: (its name, the URL that uses it)."""
    import urllib.parse

    import sqlalchemy as sa

    name = f"docex_bench_{secrets.token_hex(4)}"
    _execute(url, f"CREATE SCHEMA {name}")
    parsed = sa.make_url(url)
    options = urllib.parse.quote(f"-csearch_path={name}")
    return name, parsed.render_as_string(hide_password=False) + ("&" if parsed.query else "?") + f"options={options}"


def drop_schema(url: str, name: str) -> None:
    _execute(url, f"DROP SCHEMA IF EXISTS {name} CASCADE")


@contextlib.contextmanager
def api_daemon(prefix: str, database_url: str | None) -> Iterator[tuple[Daemon, str]]:
    """A started `docex serve` with no workers, on a new SQLite file or on a scratch schema
    of the PostgreSQL `database_url`: (the daemon, the database URL it uses, for filling it
    directly). Stopped, and its schema dropped, on leaving."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    schema_name, url = (None, f"sqlite:///{workdir / 'data' / 'docex.db'}") if database_url is None \
        else scratch_schema(database_url)
    env = harness.daemon_env(workdir / "data", DOCEX_AUTH_BCRYPT_ROUNDS="4", DOCEX_JOBS_WORKERS="0",
                             DOCEX_DATABASE_URL=url)
    daemon = Daemon("api", workdir, env)
    try:
        daemon.start()
        yield daemon, url
    finally:
        daemon.stop()
        if schema_name is not None and database_url is not None:
            drop_schema(database_url, schema_name)


# --- API set-up --------------------------------------------------------------------------

def sign_up(base: str) -> tuple[dict[str, str], str]:
    """Register a user and create the invoice schema: (auth headers, schema id)."""
    with httpx.Client(base_url=base, timeout=30) as client:
        pair = harness.register(client, f"bench-{secrets.token_hex(4)}@example.com", "bench-password-0123")
        headers = {"Authorization": f"Bearer {pair['accessToken']}"}
        r = client.post("/api/schemas", json={"name": "Invoice", "definition": SCHEMA}, headers=headers)
        return headers, str(expect(r, 201, "create schema")["id"])


def multipart(schema_id: str, file_name: str, content: bytes, boundary: str) -> bytes:
    return b"".join([
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"type\"\r\n\r\nEXTRACTION\r\n".encode(),
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"schemaId\"\r\n\r\n{schema_id}\r\n".encode(),
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\n"
        "Content-Type: text/plain\r\n\r\n".encode(),
        content,
        f"\r\n--{boundary}--\r\n".encode(),
    ])


def one_mib_text() -> bytes:
    head = SMALL_DOC.format(n=42).encode()
    line = b"Line of an invoice: delivery of goods and services as agreed in the order.\n"
    body = head + line * ((MiB - len(head)) // len(line) + 1)
    return body[:MiB - 1] + b"\n"


# --- (a) upload throughput ---------------------------------------------------------------------

def bench_uploads(daemon: Daemon, headers: dict[str, str], schema_id: str, seconds: float,
                  clients: int) -> dict[str, Any]:
    boundary = "docexbench" + secrets.token_hex(8)
    body = multipart(schema_id, "invoice-1mib.txt", one_mib_text(), boundary)
    req_headers = {**headers, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start_gate = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client_loop() -> None:
        with httpx.Client(base_url=daemon.base, timeout=60) as client:
            start_gate.wait()
            while time.monotonic() < stop_at[0]:
                t0 = time.perf_counter()
                try:
                    r = client.post("/api/jobs", content=body, headers=req_headers)
                except httpx.HTTPError as exc:
                    with lock:
                        errors.append(type(exc).__name__)
                    continue
                elapsed = time.perf_counter() - t0
                with lock:
                    if r.status_code == 201:
                        latencies.append(elapsed)
                    else:
                        errors.append(f"{r.status_code}")

    # Warm-up: first connections, imports on the daemon's first upload.
    with httpx.Client(base_url=daemon.base, timeout=60) as client:
        for _ in range(3):
            job = expect(client.post("/api/jobs", content=body, headers=req_headers), 201, "upload")
            if job["mimeType"] != "text/plain" or job["fileSize"] != MiB:
                raise RuntimeError(f"upload stored as {job['mimeType']}, {job['fileSize']} bytes")

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    rss_before = proc_status(daemon.pid).get("VmRSS", 0)
    cpu_before = cpu_s(daemon.pid)
    own_before = time.process_time()
    stop_at[0] = time.monotonic() + seconds
    t0 = time.monotonic()
    start_gate.wait()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    cpu = cpu_s(daemon.pid) - cpu_before
    own = time.process_time() - own_before
    n = len(latencies)
    return {
        "clients": clients,
        "seconds": round(wall, 2),
        "uploads": n,
        "uploads_per_s": round(n / wall, 1),
        "mib_per_s": round(n * len(body) / MiB / wall, 1),
        "latency_p50_ms": round(percentile(latencies, 0.5) * 1000, 1) if latencies else None,
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 1) if latencies else None,
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "daemon_cpu_ms_per_upload": round(cpu * 1000 / n, 1) if n else None,
        "daemon_cpu_share": round(cpu / wall, 2),
        "client_cpu_share": round(own / wall, 2),  # the load generator shares the machine's CPUs
        "rss_before_mib": round(rss_before / MiB, 1),
        "rss_after_mib": round(proc_status(daemon.pid).get("VmRSS", 0) / MiB, 1),
    }


# --- (b) memory while a huge upload is refused -----------------------------------------------------

def bench_refused_upload(daemon: Daemon, headers: dict[str, str], schema_id: str, *,
                         content_length: bool) -> dict[str, Any]:
    """Send a 200 MiB multipart body (chunked, or with Content-Length) and sample the daemon's RSS."""
    boundary = "docexbench" + secrets.token_hex(8)
    head = multipart(schema_id, "huge.txt", b"", boundary)
    tail_marker = f"\r\n--{boundary}--\r\n".encode()
    head = head[: -len(tail_marker)]  # everything up to the file's bytes
    file_bytes = HUGE_BODY - len(head) - len(tail_marker)
    line = b"Line of a very large text document that no daemon should hold in memory at once.\n"
    chunk = (line * (SEND_CHUNK // len(line) + 1))[:SEND_CHUNK]

    request_head = (
        f"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
        f"Authorization: {headers['Authorization']}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        + (f"Content-Length: {HUGE_BODY}\r\n" if content_length else "Transfer-Encoding: chunked\r\n")
        + "\r\n"
    ).encode()

    def framed(data: bytes) -> bytes:
        return data if content_length else f"{len(data):x}\r\n".encode() + data + b"\r\n"

    samples: list[tuple[float, int, int]] = []
    sampling = threading.Event()
    sampling.set()

    def sampler() -> None:
        while sampling.is_set():
            s = proc_status(daemon.pid)
            samples.append((time.monotonic(), s.get("VmRSS", 0), s.get("VmHWM", 0)))
            time.sleep(0.002)

    response = bytearray()
    got_response = threading.Event()
    sock = socket.create_connection(("127.0.0.1", daemon.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def reader() -> None:
        with contextlib.suppress(OSError):
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                response.extend(data)
                if b"\r\n\r\n" in response:
                    got_response.set()
        got_response.set()

    time.sleep(0.3)  # settle
    before = proc_status(daemon.pid)
    sampler_t = threading.Thread(target=sampler, daemon=True)
    sampler_t.start()
    time.sleep(0.05)
    reader_t = threading.Thread(target=reader, daemon=True)
    reader_t.start()
    t0 = time.monotonic()
    sent = 0
    send_error = None
    answered_after_bytes = None
    try:
        sock.sendall(request_head)
        sock.sendall(framed(head))
        sent += len(head)
        remaining = file_bytes
        while remaining > 0:
            piece = chunk if remaining >= len(chunk) else chunk[:remaining]
            sock.sendall(framed(piece))
            sent += len(piece)
            remaining -= len(piece)
            if got_response.is_set() and answered_after_bytes is None:
                answered_after_bytes = sent
        sock.sendall(framed(tail_marker))
        sent += len(tail_marker)
        if not content_length:
            sock.sendall(b"0\r\n\r\n")
    except OSError as exc:  # the daemon answered 413 and closed the connection under us
        send_error = type(exc).__name__
    sent_s = time.monotonic() - t0
    got_response.wait(30)
    answered_s = time.monotonic() - t0
    time.sleep(0.3)  # a last look after the refusal
    sampling.clear()
    sampler_t.join()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    reader_t.join(5)
    after = proc_status(daemon.pid)

    status_line = bytes(response).split(b"\r\n", 1)[0].decode(errors="replace")
    status = int(status_line.split()[1]) if len(status_line.split()) > 1 else None
    baseline = before.get("VmRSS", 0)
    peak_sampled = max((rss for _, rss, _ in samples), default=baseline)
    # VmHWM catches a spike between two samples, but only if it rose above the earlier high-water mark.
    hwm_rose = after.get("VmHWM", 0) > before.get("VmHWM", 0)
    peak = max(peak_sampled, after.get("VmHWM", 0) if hwm_rose else 0)
    return {
        "transfer": "content-length" if content_length else "chunked",
        "status": status,
        "body_mib": HUGE_BODY / MiB,
        "sent_mib": round(sent / MiB, 1),
        "answered_after_mib": round(answered_after_bytes / MiB, 1) if answered_after_bytes else None,
        "send_error": send_error,
        "send_s": round(sent_s, 2),
        "answer_s": round(answered_s, 2),
        "samples": len(samples),
        "baseline_rss_mib": round(baseline / MiB, 1),
        "peak_rss_mib": round(peak / MiB, 1),
        "growth_mib": round((peak - baseline) / MiB, 1),
        "hwm_before_mib": round(before.get("VmHWM", 0) / MiB, 1),
        "hwm_after_mib": round(after.get("VmHWM", 0) / MiB, 1),
        "rss_after_mib": round(after.get("VmRSS", 0) / MiB, 1),
    }


def blob_files(data_dir: Path) -> int:
    return sum(1 for p in (data_dir / "blobs").rglob("*") if p.is_file()) if (data_dir / "blobs").exists() else 0


# --- (c) end-to-end job throughput ------------------------------------------------------------------

def bench_e2e(daemon: Daemon, headers: dict[str, str], schema_id: str, jobs: int, clients: int) -> dict[str, Any]:
    boundary = "docexbench" + secrets.token_hex(8)
    req_headers = {**headers, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    bodies = [multipart(schema_id, f"invoice-{i}.txt", SMALL_DOC.format(n=10000 + i).encode(), boundary)
              for i in range(jobs)]
    created: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def uploader(indexes: range) -> None:
        with httpx.Client(base_url=daemon.base, timeout=60) as client:
            for i in indexes:
                try:
                    r = client.post("/api/jobs", content=bodies[i], headers=req_headers)
                except httpx.HTTPError as exc:
                    with lock:
                        errors.append(type(exc).__name__)
                    continue
                with lock:
                    if r.status_code == 201:
                        created[r.json()["id"]] = i
                    else:
                        errors.append(f"{r.status_code} {r.text[:200]}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=uploader, args=(range(k, jobs, clients),), daemon=True)
               for k in range(clients)]
    for t in threads:
        t.start()
    with httpx.Client(base_url=daemon.base, timeout=60, headers=headers) as client:

        def waiting() -> int:
            n = 0
            for status in ("QUEUED", "RUNNING"):
                r = client.get("/api/jobs", params={"status": status, "limit": 1})
                r.raise_for_status()
                n += len(r.json()["data"])
            return n

        for t in threads:
            t.join()
        uploaded_s = time.monotonic() - t0
        if errors:
            raise RuntimeError(f"{len(errors)} uploads failed: {errors[:3]}")
        deadline = time.monotonic() + 600
        while waiting():
            if time.monotonic() > deadline:
                raise RuntimeError("jobs still queued or running after 600 s")
            time.sleep(0.05)
        done_s = time.monotonic() - t0

        rows: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 100}
        while True:
            r = client.get("/api/jobs", params=params)
            r.raise_for_status()
            rows += r.json()["data"]
            if not r.json()["nextCursor"]:
                break
            params["cursor"] = r.json()["nextCursor"]

    mine = [row for row in rows if row["id"] in created]
    statuses = {s: sum(1 for row in mine if row["status"] == s) for s in {row["status"] for row in mine}}
    if len(mine) != jobs or statuses != {"COMPLETED": jobs}:
        raise RuntimeError(f"expected {jobs} COMPLETED jobs, found {statuses} of {len(mine)}")
    wrong = [row for row in mine if row["result"] != {"invoice_number": f"INV-{10000 + created[row['id']]}",
                                                         "total": 12.5}]
    if wrong:
        raise RuntimeError(f"{len(wrong)} jobs with a wrong result, e.g. {wrong[0]}")

    def ts(value: str) -> dt.datetime:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))

    latency = [(ts(row["finishedAt"]) - ts(row["createdAt"])).total_seconds() for row in mine]
    span = (max(ts(row["finishedAt"]) for row in mine) - min(ts(row["createdAt"]) for row in mine)).total_seconds()
    return {
        "jobs": jobs,
        "upload_clients": clients,
        "upload_s": round(uploaded_s, 2),
        "uploads_per_s": round(jobs / uploaded_s, 1),
        "wall_s": round(done_s, 2),
        "jobs_per_s_wall": round(jobs / done_s, 1),
        "server_span_s": round(span, 2),
        "jobs_per_s": round(jobs / span, 1) if span else None,
        "latency_p50_s": round(percentile(latency, 0.5), 3),
        "latency_p99_s": round(percentile(latency, 0.99), 3),
        "latency_max_s": round(max(latency), 3),
        "attempts_max": max(row["attempts"] for row in mine),
    }


# --- main ----------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of the upload throughput run")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients for the 1 MiB uploads")
    parser.add_argument("--jobs", type=int, default=300, help="small TXT jobs for the end-to-end run")
    parser.add_argument("--workers", type=int, default=4, help="DOCEX_JOBS_WORKERS for the end-to-end run")
    parser.add_argument("--upload-clients", type=int, default=8, help="concurrent clients uploading the jobs")
    parser.add_argument("--database-url", default=None,
                        help="PostgreSQL URL; each daemon gets a scratch schema, dropped at the end (default SQLite)")
    args = parser.parse_args()
    if not harness.require_docex():
        return 1

    figures: dict[str, Any] = {**harness.machine_figures(),
                               "database": "postgresql" if args.database_url else "sqlite"}
    failed = False
    daemons: list[Daemon] = []
    schemas: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="docex-bench-jobs-"))

    def start(name: str, data_dir: Path, workers: int) -> Daemon:
        """`docex serve` with `workers` (on a scratch schema of its own with --database-url), answering."""
        url = None
        if args.database_url:
            schema, url = scratch_schema(args.database_url)
            schemas.append(schema)
        daemon = Daemon(name, workdir, daemon_env(data_dir, workers, url))
        daemons.append(daemon)
        started = daemon.start()
        print(f"start    docex serve (workers={workers}) pid {daemon.pid} on :{daemon.port}, ready in {started:.2f} s",
              flush=True)
        return daemon

    def stop(daemon: Daemon) -> None:
        code = daemon.stop()
        figures[f"exit_{daemon.name}"] = code
        print(f"exit     SIGTERM → {code} in {daemon.stop_s:.2f} s   {verdict(code == 0)}", flush=True)

    try:
        # --- daemon 1: no workers; the memory runs first, then upload throughput.
        data1 = workdir / "data-upload"
        up = start("upload", data1, 0)
        headers, schema_id = sign_up(up.base)

        for content_length in (False, True):
            blobs_before = blob_files(data1)
            result = bench_refused_upload(up, headers, schema_id, content_length=content_length)
            result["blob_files_left"] = blob_files(data1) - blobs_before
            key = "rss_content_length" if content_length else "rss_chunked"
            figures[key] = result
            with httpx.Client(timeout=5) as client:
                result["healthy_after"] = client.get(f"{up.base}/api/health").status_code == 200
            line = (f"{result['transfer']:>14s}: {result['status']} after {result['answer_s']:.2f} s "
                    f"(client sent {result['sent_mib']} MiB of {result['body_mib']:.0f}"
                    f"{', then ' + result['send_error'] if result['send_error'] else ''}); "
                    f"RSS baseline {result['baseline_rss_mib']} MiB, peak {result['peak_rss_mib']} MiB, "
                    f"growth {result['growth_mib']} MiB (VmHWM {result['hwm_before_mib']} → "
                    f"{result['hwm_after_mib']} MiB, {result['samples']} samples); "
                    f"blobs left {result['blob_files_left']}, healthy after: {result['healthy_after']}")
            if content_length:
                print(f"rss-cl   {line}", flush=True)
            else:
                ok = result["status"] == 413 and result["growth_mib"] * MiB < TARGET_RSS_GROWTH
                figures["rss_verdict"] = verdict(ok)
                print(f"rss      {line}   target < {TARGET_RSS_GROWTH // MiB} MiB and 413   {verdict(ok)}",
                      flush=True)

        result = bench_uploads(up, headers, schema_id, args.seconds, args.clients)
        figures["upload"] = result
        print(f"upload   1 MiB TXT, {result['clients']} clients, {result['seconds']:.1f} s: "
              f"{result['uploads_per_s']} uploads/s ({result['mib_per_s']} MiB/s), p50 {result['latency_p50_ms']} ms, "
              f"p99 {result['latency_p99_ms']} ms, errors {result['errors']} {result['error_kinds'] or ''}; "
              f"daemon CPU {result['daemon_cpu_ms_per_upload']} ms/upload "
              f"({result['daemon_cpu_share']:.0%} of a core; the clients used {result['client_cpu_share']:.0%}), "
              f"RSS {result['rss_before_mib']} → {result['rss_after_mib']} MiB", flush=True)
        stop(up)

        # --- daemon 2: workers, end to end.
        e2e = start("e2e", workdir / "data-e2e", args.workers)
        headers, schema_id = sign_up(e2e.base)
        result = bench_e2e(e2e, headers, schema_id, args.jobs, args.upload_clients)
        figures["e2e"] = {"workers": args.workers, **result}
        print(f"e2e      {result['jobs']} TXT jobs, {args.workers} workers: all COMPLETED {result['wall_s']:.2f} s "
              f"after the first upload ({result['jobs_per_s_wall']} jobs/s wall; uploads took {result['upload_s']} s "
              f"= {result['uploads_per_s']}/s); {result['jobs_per_s']} jobs/s from first createdAt to last "
              f"finishedAt; createdAt→finishedAt p50 {result['latency_p50_s']} s, p99 {result['latency_p99_s']} s, "
              f"max {result['latency_max_s']} s", flush=True)
        stop(e2e)
    except (RuntimeError, OSError, KeyError, ValueError, httpx.HTTPError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        failed = True
    finally:
        for d in daemons:
            if d.proc is not None and d.proc.poll() is None:
                d.stop()
            if d.exit_code != 0:
                failed = True
                print(f"{d.name}: exit {d.exit_code}{' (killed)' if d.killed else ''}\n{d.tail()}", file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)
        for name in schemas:
            with contextlib.suppress(Exception):
                drop_schema(args.database_url, name)

    figures["failed"] = failed
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
