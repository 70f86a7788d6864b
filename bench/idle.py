"""Start-up, idle footprint and /api/health throughput of `docex serve`.

    .venv/bin/python bench/idle.py [--idle-seconds 30] [--load-seconds 10] [--rounds 3]

Figures and targets:

  start    exec (just before Popen) → READY=1 on NOTIFY_SOCKET      < 2 s
  restart  the same, on the database the first start migrated           < 1 s
  rss      VmRSS of the daemon (and any children) after READY      < 120 MB
  idle     (utime+stime) / wall over --idle-seconds, % of one core  < 1 %
  health   req/s of GET /api/health, docex ÷ a bare quart-trio app  ≥ 0.80
  exit     SIGTERM → the daemon exits 0

The machine is shared and noisy, so throughput is a ratio against a bare
quart-trio + hypercorn app (`--bare-server PORT`, the same file) loaded the
same way in the same run; bare and docex are loaded alternately, round after
round, and the median of each is compared. docex is loaded twice per round:
with its access log on (the default, log.access = true) and off
(DOCEX_LOG_ACCESS=false); the target applies to the default.

A second baseline, "bare_fixed", is the bare app served with docex's fix of
hypercorn's keep-alive timer (daemon/http/server.py, KeepAliveTCPServer). The
plain bare app has the bug that fix removes: quart-trio's disconnect
cancellation kills hypercorn's keep-alive idle timer, so idle connections are
never closed, and it skips re-arming that timer (a new trio task) on every
request, which makes it cheaper. The ratio against bare_fixed is printed as
information (no verdict), so the cost of that fix is not charged to the app.

Alongside req/s, the server's CPU time per request (utime+stime ÷ requests)
is printed: the load generator cannot skew it, though a busy machine still can.

The load generator is wrk if installed (apt-get install wrk is tried once
when it is missing), else N Python processes running httpx (see --pyload).

Prints human-readable lines, then one JSON line with every figure. Exits 0
unless a daemon failed to start or to exit 0 on SIGTERM; a missed target is
reported as MISS and does not fail the run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from harness import CLK_TCK, Daemon, descendants, tree_cpu_s, tree_rss_kb, verdict

TARGET_START_S = 2.0
TARGET_RESTART_S = 1.0  # issue 13: a start on a migrated database does only what serving needs
TARGET_RSS_MB = 120.0
TARGET_IDLE_PCT = 1.0
TARGET_RATIO = 0.80


# --- bare baseline server (runs in its own process) -----------------------------

def bare_server(port: int, keep_alive_fix: bool = False, keep_alive_timeout: float | None = None) -> None:
    """A minimal quart-trio app with one route, served by hypercorn's trio worker.

    Sends READY=1 to $NOTIFY_SOCKET once bound (so its start-up is measured the
    same way); stops gracefully on SIGTERM/SIGINT. With `keep_alive_fix`,
    hypercorn's connections are docex's KeepAliveTCPServer, whose keep-alive idle
    timer survives quart-trio's disconnect cancellation (re-arming that timer
    costs per request). `keep_alive_timeout` is hypercorn's (5 s by default).
    """
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve
    from quart_trio import QuartTrio

    app = QuartTrio("bare")

    @app.get("/api/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    if keep_alive_fix:
        from daemon.http.server import install_keep_alive_fix

        install_keep_alive_fix()

    async def main() -> None:
        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = None
        if keep_alive_timeout is not None:
            config.keep_alive_timeout = keep_alive_timeout
        stop = trio.Event()
        async with trio.open_nursery() as nursery:

            async def signals() -> None:
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
                    async for _ in received:
                        stop.set()
                        return

            nursery.start_soon(signals)
            await nursery.start(lambda task_status: serve(app, config, shutdown_trigger=stop.wait,
                                                          task_status=task_status))
            address = os.environ.get("NOTIFY_SOCKET", "")
            if address:
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                    s.sendto(f"READY=1\nMAINPID={os.getpid()}".encode(), address)
            await stop.wait()

    trio.run(main)


# --- servers ------------------------------------------------------------------------

def docex_server(name: str, workdir: Path, access_log: bool) -> Daemon:
    env = harness.clean_env(("DOCEX_", "WATCHDOG_", "NOTIFY_"))
    env.update(DOCEX_DATA_DIR=str(workdir / f"{name}-data"), DOCEX_LOG_ACCESS="true" if access_log else "false")
    return Daemon(name, workdir, env, tail_lines=20)


def bare(workdir: Path, keep_alive_fix: bool = False, keep_alive_timeout: float | None = None) -> Daemon:
    """The bare app (see `bare_server`) as a `Daemon`, not started yet."""
    port = harness.free_port()
    env = harness.clean_env(("WATCHDOG_", "NOTIFY_"))
    argv = [sys.executable, str(Path(__file__).resolve()), "--bare-server", str(port)]
    argv += ["--keep-alive-fix"] * keep_alive_fix
    if keep_alive_timeout is not None:
        argv += ["--keep-alive-timeout", str(keep_alive_timeout)]
    return Daemon("bare-fixed" if keep_alive_fix else "bare", workdir, env, port=port, argv=argv, tail_lines=20)


# --- load generation --------------------------------------------------------------

def load(url: str, seconds: float, threads: int, connections: int, wrk: str | None) -> dict[str, Any]:
    """One load run against `url`: req/s, errors and (wrk) latency."""
    if wrk:
        out = subprocess.run(
            [wrk, f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--latency", url],
            capture_output=True, text=True, timeout=seconds + 60, preexec_fn=harness.die_with_parent,
        ).stdout
        figures = harness.parse_wrk(out, unparsed=float("nan"))
        if figures["rps"] is None:
            raise RuntimeError(f"cannot parse wrk output:\n{out}")
        return {
            "rps": figures["rps"],
            "requests": figures["requests"] or 0,
            "errors": figures["non2xx"] + figures["socket_errors"],
            "latency_avg_ms": figures["latency_avg_ms"],
            "latency_p99_ms": figures["latency_p99_ms"],
        }
    # Python fallback: `threads` processes sharing `connections` connections.
    per = max(1, connections // threads)
    results = harness.py_load_processes(
        [sys.executable, str(Path(__file__).resolve()), "--pyload", url, str(seconds), str(per)],
        threads, timeout_s=seconds + 60)
    return {
        "rps": sum(r["requests"] / r["elapsed"] for r in results),
        "requests": sum(r["requests"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "latency_avg_ms": None,
        "latency_p99_ms": None,
    }


# --- the bench ----------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="alternating load rounds (median reported)")
    parser.add_argument("--threads", type=int, default=2, help="load generator threads (or processes)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--settle-seconds", type=float, default=1.0, help="pause after READY before RSS/idle")
    parser.add_argument("--python-load", action="store_true", help="use the httpx load generator even if wrk exists")
    parser.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--keep-alive-fix", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep-alive-timeout", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--pyload", nargs=3, metavar=("URL", "SECONDS", "CONNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server is not None:
        bare_server(args.bare_server, keep_alive_fix=args.keep_alive_fix, keep_alive_timeout=args.keep_alive_timeout)
        return 0
    if args.pyload is not None:
        harness.py_load({"url": args.pyload[0], "seconds": float(args.pyload[1]),
                         "connections": int(args.pyload[2]), "timeout": 10})
        return 0

    if not harness.require_docex():
        return 1

    figures: dict[str, Any] = {**harness.machine_figures(), "loadavg_at_start": round(os.getloadavg()[0], 2)}
    print(f"machine  {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    failed = False
    servers: list[Daemon] = []
    workdir = Path(tempfile.mkdtemp(prefix="docex-bench-"))
    try:
        # 1-3: the daemon as the brief runs it (access log off), alone on the machine.
        main_server = docex_server("docex", workdir, access_log=False)
        servers.append(main_server)
        main_server.start_notified()
        if main_server.ready_message.get("MAINPID") not in (None, str(main_server.pid)):
            print(f"note: READY carried MAINPID={main_server.ready_message['MAINPID']}, "
                  f"Popen pid {main_server.pid}")
        figures["start_s"] = round(main_server.start_s, 3)
        figures["start_cpu_s"] = round(main_server.start_cpu_s, 3)
        print(f"start    exec → READY=1     {main_server.start_s:7.3f} s      "
              f"target < {TARGET_START_S:g} s     {verdict(main_server.start_s < TARGET_START_S)}   "
              f"({main_server.start_cpu_s:.2f} s of cpu: wall ≫ cpu means a busy machine)", flush=True)

        time.sleep(args.settle_seconds)
        rss_mb = tree_rss_kb(main_server.pid) / 1024
        figures["rss_mb"] = round(rss_mb, 1)
        figures["children"] = len(descendants(main_server.pid))
        threads = len(os.listdir(f"/proc/{main_server.pid}/task"))
        figures["threads_after_start"] = threads
        print(f"rss      after start       {rss_mb:7.1f} MB     target < {TARGET_RSS_MB:g} MB   "
              f"{verdict(rss_mb < TARGET_RSS_MB)}   ({figures['children']} children, {threads} threads)",
              flush=True)

        c0, w0 = tree_cpu_s(main_server.pid), time.monotonic()
        time.sleep(args.idle_seconds)
        c1, w1 = tree_cpu_s(main_server.pid), time.monotonic()
        idle_pct = 100 * (c1 - c0) / (w1 - w0)
        figures["idle_cpu_pct"] = round(idle_pct, 3)
        figures["idle_seconds"] = round(w1 - w0, 1)
        print(f"idle     cpu over {w1 - w0:4.0f} s   {idle_pct:7.3f} %      target < {TARGET_IDLE_PCT:g} %      "
              f"{verdict(idle_pct < TARGET_IDLE_PCT)}   ({c1 - c0:.2f} s cpu, 1/{CLK_TCK} s ticks)", flush=True)

        # 3b: a restart, as systemd makes it: the same data directory, its database already migrated.
        again = docex_server("docex", workdir, access_log=False)
        again.start_notified()
        again.stop()
        figures["restart_s"] = round(again.start_s, 3)
        figures["restart_cpu_s"] = round(again.start_cpu_s, 3)
        print(f"restart  exec → READY=1     {again.start_s:7.3f} s      "
              f"target < {TARGET_RESTART_S:g} s     {verdict(again.start_s < TARGET_RESTART_S)}   "
              f"({again.start_cpu_s:.2f} s of cpu; the first start above also migrated an empty database)",
              flush=True)

        # 4: throughput, docex (log off, log on) against the bare app, alternately.
        wrk = None if args.python_load else harness.ensure_wrk()
        generator = (f"wrk -t{args.threads} -c{args.connections}" if wrk
                     else f"python/httpx, {args.threads} processes × {max(1, args.connections // args.threads)} "
                          "connections (may itself be the bottleneck)")
        figures["load_generator"] = generator
        bare_server_ = bare(workdir)
        fixed = bare(workdir, keep_alive_fix=True)
        logged = docex_server("docex-accesslog", workdir, access_log=True)
        servers += [bare_server_, fixed, logged]
        for server in (bare_server_, fixed, logged):
            server.start_notified()
        figures["bare_start_s"] = round(bare_server_.start_s, 3)
        figures["bare_start_cpu_s"] = round(bare_server_.start_cpu_s, 3)
        figures["bare_rss_mb"] = round(tree_rss_kb(bare_server_.pid) / 1024, 1)
        print(f"baseline bare app: start {bare_server_.start_s:.3f} s ({bare_server_.start_cpu_s:.2f} s cpu), "
              f"rss {figures['bare_rss_mb']:.1f} MB")
        print(f"load     GET /api/health, {generator}, {args.load_seconds:g} s × {args.rounds} rounds", flush=True)

        targets = {"bare": bare_server_, "bare_fixed": fixed, "docex_log_off": main_server,
                   "docex_log_on": logged}
        for server in targets.values():  # warm-up: imports, caches, first connections
            load(f"http://127.0.0.1:{server.port}/api/health", min(2.0, args.load_seconds),
                 args.threads, args.connections, wrk)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
        for r in range(args.rounds):
            for name, server in targets.items():
                c0 = tree_cpu_s(server.pid)
                result = load(f"http://127.0.0.1:{server.port}/api/health", args.load_seconds,
                              args.threads, args.connections, wrk)
                # Server CPU per request: not skewed by the load generator, still by a busy machine.
                result["cpu_us_per_req"] = 1e6 * (tree_cpu_s(server.pid) - c0) / max(1, result["requests"])
                runs[name].append(result)
                lat = (f", avg {result['latency_avg_ms']:.2f} ms, p99 {result['latency_p99_ms']:.2f} ms"
                       if result["latency_avg_ms"] is not None else "")
                print(f"  round {r + 1} {name:14s} {result['rps']:9.0f} req/s  "
                      f"{result['cpu_us_per_req']:6.0f} µs cpu/req  errors {result['errors']}{lat}", flush=True)
        med = {name: statistics.median(x["rps"] for x in rs) for name, rs in runs.items()}
        cpu = {name: statistics.median(x["cpu_us_per_req"] for x in rs) for name, rs in runs.items()}
        errors = {name: sum(x["errors"] for x in rs) for name, rs in runs.items()}

        def paired(name: str, base: str) -> float:
            return statistics.median(
                d["rps"] / b["rps"] for d, b in zip(runs[name], runs[base], strict=True))

        ratio_on = med["docex_log_on"] / med["bare"]
        ratio_off = med["docex_log_off"] / med["bare"]
        figures["health_rps"] = {name: round(v, 1) for name, v in med.items()}
        figures["health_rps_runs"] = {name: [round(x["rps"], 1) for x in rs] for name, rs in runs.items()}
        figures["health_errors"] = errors
        figures["health_latency_p99_ms"] = {
            name: statistics.median(x["latency_p99_ms"] for x in rs) if wrk else None for name, rs in runs.items()
        }
        figures["health_cpu_us_per_req"] = {name: round(v, 1) for name, v in cpu.items()}
        figures["ratio_default_log_on"] = round(ratio_on, 3)
        figures["ratio_log_off"] = round(ratio_off, 3)
        figures["ratio_paired_median"] = {"log_on": round(paired("docex_log_on", "bare"), 3),
                                          "log_off": round(paired("docex_log_off", "bare"), 3)}
        figures["ratio_vs_bare_fixed"] = {
            "log_on": round(med["docex_log_on"] / med["bare_fixed"], 3),
            "log_off": round(med["docex_log_off"] / med["bare_fixed"], 3),
            "bare_fixed_vs_bare": round(med["bare_fixed"] / med["bare"], 3),
        }
        figures["cpu_ratio"] = {"log_on": round(cpu["bare"] / cpu["docex_log_on"], 3),
                                "log_off": round(cpu["bare"] / cpu["docex_log_off"], 3),
                                "bare_fixed": round(cpu["bare"] / cpu["bare_fixed"], 3)}
        print(f"health   bare                 {med['bare']:9.0f} req/s (median)   {cpu['bare']:5.0f} µs cpu/req")
        print(f"health   docex, log on        {med['docex_log_on']:9.0f} req/s   ratio {ratio_on:.3f}  "
              f"target ≥ {TARGET_RATIO:g}   {verdict(ratio_on >= TARGET_RATIO)}   "
              f"(DEFAULT: log.access = true; paired median {paired('docex_log_on', 'bare'):.3f}; "
              f"{cpu['docex_log_on']:.0f} µs cpu/req)")
        print(f"health   docex, log off       {med['docex_log_off']:9.0f} req/s   ratio {ratio_off:.3f}  "
              f"target ≥ {TARGET_RATIO:g}   {verdict(ratio_off >= TARGET_RATIO)}   "
              f"(DOCEX_LOG_ACCESS=false; paired median {paired('docex_log_off', 'bare'):.3f}; "
              f"{cpu['docex_log_off']:.0f} µs cpu/req)")
        vs = figures["ratio_vs_bare_fixed"]
        print(f"info     bare + docex's keep-alive fix (hypercorn's idle timer kept alive, as in "
              f"daemon/http/server.py): {med['bare_fixed']:.0f} req/s = {vs['bare_fixed_vs_bare']:.3f} × bare; "
              f"docex against it: {vs['log_on']:.3f} (log on), {vs['log_off']:.3f} (log off)")
        if any(errors.values()):
            print(f"warning: load errors {errors}")
        figures["rss_after_load_mb"] = round(tree_rss_kb(main_server.pid) / 1024, 1)
        print(f"rss      docex after load  {figures['rss_after_load_mb']:7.1f} MB (log off), "
              f"{tree_rss_kb(logged.pid) / 1024:.1f} MB (log on)", flush=True)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        failed = True
    finally:
        # 5: SIGTERM everything; the daemons must exit 0.
        for server in servers:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    exits = {s.name: s.exit_code for s in servers}
    figures["exit_codes"] = exits
    figures["stop_s"] = {s.name: round(s.stop_s, 3) for s in servers}
    for s in servers:
        if s.name.startswith("docex"):
            ok = s.exit_code == 0
            failed |= not ok
            print(f"exit     {s.name:16s}  SIGTERM → {s.exit_code} in {s.stop_s:.2f} s   target 0   {verdict(ok)}")
            if not ok:
                print(s.tail(), file=sys.stderr)
        else:
            print(f"exit     {s.name:16s}  SIGTERM → {s.exit_code} in {s.stop_s:.2f} s")

    figures["verdicts"] = {
        "start": verdict(figures.get("start_s", 1e9) < TARGET_START_S),
        "restart": verdict(figures.get("restart_s", 1e9) < TARGET_RESTART_S),
        "rss": verdict(figures.get("rss_mb", 1e9) < TARGET_RSS_MB),
        "idle_cpu": verdict(figures.get("idle_cpu_pct", 1e9) < TARGET_IDLE_PCT),
        "health_ratio_default": verdict(figures.get("ratio_default_log_on", 0) >= TARGET_RATIO),
        "health_ratio_log_off": verdict(figures.get("ratio_log_off", 0) >= TARGET_RATIO),
        "exit": verdict(all(exits.get(n) == 0 for n in exits if n.startswith("docex")) and bool(exits)),
    }
    figures["loadavg_at_end"] = round(os.getloadavg()[0], 2)
    print(f"machine  load average {os.getloadavg()[0]:.2f} at end")
    figures["failed"] = failed
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
