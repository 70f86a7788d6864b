"""Sockets a server still holds after its keep-alive clients have gone, or gone idle.

    .venv/bin/python bench/connections.py [--clients 2000] [--batch 100] [--idle 50] [--keep-alive-timeout 3]

Three servers, in the same run, one after the other, each with the same
keep_alive_timeout (--keep-alive-timeout):

  docex        `docex serve` (DOCEX_SERVER_KEEP_ALIVE_TIMEOUT)
  bare         plain hypercorn (trio worker) serving a bare quart-trio app (bench/idle.py's)
  bare_fixed   the same bare app on docex's KeepAliveTCPServer (daemon/http/server.py)

Figures and targets (docex; the bare servers are information):

  closed   --clients clients in batches of --batch: each batch opens its
           connections, sends GET /api/health on each, reads every response,
           then closes them all. After the last batch, the connections on the
           port that the server still has a file descriptor for (those in
           CLOSE_WAIT counted apart), 0.2 s and 1 s after the last close     0 at 1 s
  idle     --idle connections make one request each and stay open; how many
           the server still holds keep_alive_timeout + 2 s later             0
  fds      the server's open file descriptors before phase 1 and at the end  information
  exit     SIGTERM → the server exits 0                                       docex: 0

Plain hypercorn leaves nothing after `closed` only because quart-trio's disconnect
cancellation kills its idle timer, which `idle` shows: its idle connections stay
open. Sockets are read from /proc (Linux), loopback only.

Prints human-readable lines, then one JSON line with every figure. Exits 0 unless
a server failed to start or docex failed to exit 0 on SIGTERM; a missed target
is reported as MISS and does not fail the run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the /proc reader the keep-alive test uses
import harness
import idle
from harness import Daemon, verdict
from proc_sockets import connections_held

REQUEST = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
CLOSE_WAIT = "08"


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_response(sock: socket.socket) -> None:
    """Read one whole HTTP/1.1 response (Content-Length framed) or raise."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"connection closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected response: {head!r}")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)


def connect_and_request(port: int, n: int) -> list[socket.socket]:
    """`n` connections, each after one request and its whole response: idle keep-alive connections."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(REQUEST)
        socks.append(sock)
    for sock in socks:
        read_response(sock)
    return socks


def held_figure(server: Daemon) -> dict[str, int]:
    held = connections_held(server.pid, server.port)
    return {"held": len(held), "close_wait": held.count(CLOSE_WAIT)}


def measure(server: Daemon, clients: int, batch: int, idle_n: int, keep_alive_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"fds_before": open_fds(server.pid)}
    t0 = time.monotonic()
    for done in range(0, clients, batch):
        for sock in connect_and_request(server.port, min(batch, clients - done)):
            sock.close()
    closed_at = time.monotonic()
    out["closed_phase_s"] = round(closed_at - t0, 2)
    for after in (0.2, 1.0):
        time.sleep(max(0.0, closed_at + after - time.monotonic()))
        out[f"closed_after_{after:g}s"] = held_figure(server)

    socks = connect_and_request(server.port, idle_n)
    time.sleep(keep_alive_s + 2)
    out["idle_after_timeout"] = held_figure(server)
    for sock in socks:
        sock.close()
    time.sleep(0.5)
    out["fds_end"] = open_fds(server.pid)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100, help="connections open at once in phase 1")
    parser.add_argument("--idle", type=int, default=50, help="idle connections in phase 2")
    parser.add_argument("--keep-alive-timeout", type=float, default=3.0, help="seconds, for every server")
    args = parser.parse_args()
    if not harness.require_docex():
        return 1

    figures: dict[str, Any] = {**harness.machine_figures(), "clients": args.clients, "batch": args.batch,
                               "idle": args.idle, "keep_alive_timeout_s": args.keep_alive_timeout}
    print(f"machine  {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    print(f"clients  {args.clients} in batches of {args.batch}, then {args.idle} idle; "
          f"keep_alive_timeout {args.keep_alive_timeout:g} s", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="docex-bench-"))
    failed = False
    try:
        docex = Daemon("docex", workdir, harness.daemon_env(
            workdir / "docex-data", DOCEX_SERVER_KEEP_ALIVE_TIMEOUT=f"{args.keep_alive_timeout:g}s"))
        servers = {
            "docex": docex,
            "bare": idle.bare(workdir, keep_alive_timeout=args.keep_alive_timeout),
            "bare_fixed": idle.bare(workdir, keep_alive_fix=True, keep_alive_timeout=args.keep_alive_timeout),
        }
        for name, server in servers.items():
            try:
                server.start()
                result = measure(server, args.clients, args.batch, args.idle, args.keep_alive_timeout)
            except (RuntimeError, OSError) as exc:
                print(f"error: {name}: {exc}", file=sys.stderr)
                failed = True
                continue
            finally:
                server.stop()
            result["exit_code"] = server.exit_code
            result["stop_s"] = round(server.stop_s, 2)
            figures[name] = result
            at1, at02, idle_ = result["closed_after_1s"], result["closed_after_0.2s"], result["idle_after_timeout"]
            target = name == "docex"
            print(f"{name:11s} closed: held {at02['held']:5d} ({at02['close_wait']} CLOSE_WAIT) at 0.2 s, "
                  f"{at1['held']:5d} ({at1['close_wait']} CLOSE_WAIT) at 1 s"
                  + (f"   target 0   {verdict(at1['held'] == 0)}" if target else ""), flush=True)
            print(f"{name:11s} idle:   held {idle_['held']:5d} of {args.idle} after {args.keep_alive_timeout + 2:g} s"
                  + (f"   target 0   {verdict(idle_['held'] == 0)}" if target else ""), flush=True)
            print(f"{name:11s} fds {result['fds_before']} before, {result['fds_end']} at the end; "
                  f"{args.clients} requests in {result['closed_phase_s']:.1f} s; "
                  f"SIGTERM → {server.exit_code} in {server.stop_s:.2f} s", flush=True)
            if target and server.exit_code != 0:
                failed = True
                print(server.tail(), file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    docex_figures = figures.get("docex", {})
    figures["verdicts"] = {
        "closed": verdict(docex_figures.get("closed_after_1s", {}).get("held") == 0),
        "idle": verdict(docex_figures.get("idle_after_timeout", {}).get("held") == 0),
        "exit": verdict(docex_figures.get("exit_code") == 0),
    }
    figures["failed"] = failed
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
