"""Authenticated-request throughput and login cost of `docex serve`.

    .venv/bin/python bench/auth.py [--seconds 8] [--rounds 3] [--connections 32]

Figures and targets:

  health     req/s of GET /api/health (public: no credential, no database)
  me-token   req/s of GET /api/auth/me, Authorization: Bearer <access JWT>
  me-key     req/s of GET /api/auth/me, Authorization: Bearer <API key>
  ratios     me-token ÷ health and me-key ÷ health                    ≥ 0.60 each
  login      logins/s of POST /api/auth/login (right password) with a few
             concurrent clients, at the default bcrypt cost, and the latency
             of one login on an otherwise idle daemon                  (reported)
  exit       SIGTERM → the daemon exits 0

One daemon, started as a real subprocess on a free port with a fresh data dir,
its access log off (DOCEX_LOG_ACCESS=false; --access-log keeps the default on)
and every rate limit raised far out of the way. The bench registers a user,
creates an API key with the access token, then loads the three URLs with the
same generator and concurrency, interleaved (health, me-token, me-key) for
--rounds rounds; medians are reported. The machine is shared and noisy, hence
the interleaving and the ratios against /api/health measured alongside.

The load generator is wrk if installed (apt-get install wrk is tried once when
it is missing; the credential goes in with -H, the login POST with a small Lua
script), else N Python processes running httpx (see --pyload).

Prints human-readable lines, then one JSON line with every figure. Exits 0
unless the daemon failed to start, a set-up request failed or the daemon did
not exit 0 on SIGTERM; a missed target is reported as MISS and does not fail
the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from harness import DOCEX, Daemon, cpu_s, expect, verdict

TARGET_ME_RATIO = 0.60

PASSWORD = "bench-password-0123"
EMAIL = "bench@example.com"


# --- daemon figures -----------------------------------------------------------------

def measured(pid: int, run: Any) -> dict[str, Any]:
    """`run()` (a load run), plus the daemon's CPU time per request it answered.

    On a shared machine req/s moves with the neighbours; CPU per request much less so.
    """
    c0 = cpu_s(pid)
    result: dict[str, Any] = run()
    used = cpu_s(pid) - c0
    result["cpu_s"] = round(used, 2)
    result["cpu_ms_per_req"] = used * 1000 / result["requests"] if result["requests"] else None
    return result


def effective_config(env: dict[str, str]) -> dict[str, Any]:
    """`docex config check` with the daemon's environment: the configuration it runs with."""
    out = subprocess.run([str(DOCEX), "config", "check"], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return json.loads(out)


def stored_hash_cost(data_dir: Path, email: str) -> int | None:
    """The bcrypt cost in the stored hash ("$2b$12$..."), read from the SQLite file (read-only)."""
    with contextlib.suppress(Exception):
        db = sqlite3.connect(f"file:{data_dir / 'docex.db'}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT password_hash FROM users WHERE email_key = ?", (email.lower(),)).fetchone()
        finally:
            db.close()
        m = re.match(r"\$2[aby]?\$(\d+)\$", row[0]) if row else None
        return int(m.group(1)) if m else None
    return None


# --- load generation --------------------------------------------------------------

def _lua_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Load:
    """One load generator (wrk or the httpx fallback) with fixed threads and connections."""

    def __init__(self, wrk: str | None, threads: int, connections: int, workdir: Path) -> None:
        self.wrk = wrk
        self.threads = threads
        self.connections = connections
        self.workdir = workdir

    def describe(self, connections: int | None = None) -> str:
        c = connections or self.connections
        t = min(self.threads, c)
        if self.wrk:
            return f"wrk -t{t} -c{c}"
        return (f"python/httpx, {t} processes x {max(1, c // t)} connections "
                "(may itself be the bottleneck)")

    def run(self, url: str, seconds: float, *, headers: dict[str, str] | None = None,
            method: str = "GET", body: str | None = None, connections: int | None = None) -> dict[str, Any]:
        """Load `url` for `seconds`: req/s of 200 answers, errors (non-2xx, socket) and latency."""
        c = connections or self.connections
        t = min(self.threads, c)
        headers = headers or {}
        if self.wrk:
            argv = [self.wrk, f"-t{t}", f"-c{c}", f"-d{seconds:g}s", "--timeout", "30s", "--latency"]
            for k, v in headers.items():
                argv += ["-H", f"{k}: {v}"]
            if method != "GET" or body is not None:
                script = self.workdir / f"wrk-{method.lower()}.lua"
                script.write_text(
                    f"wrk.method = {_lua_string(method)}\n"
                    + (f"wrk.body = {_lua_string(body)}\n" if body is not None else "")
                    + "".join(f"wrk.headers[{_lua_string(k)}] = {_lua_string(v)}\n" for k, v in headers.items())
                )
                argv += ["-s", str(script)]
            for attempt in range(2):  # one retry: wrk now and then dies on a loaded machine
                proc = subprocess.run([*argv, url], capture_output=True, text=True, timeout=seconds + 90,
                                      preexec_fn=harness.die_with_parent)
                out = proc.stdout
                figures = harness.parse_wrk(out)
                if figures["rps"] is not None and figures["requests"] is not None:
                    break
                print(f"warning: wrk exited {proc.returncode} without figures (attempt {attempt + 1}): "
                      f"{(proc.stderr or out).strip()[:300]!r}", file=sys.stderr, flush=True)
            else:
                raise RuntimeError(f"cannot parse wrk output:\n{out}\n{proc.stderr}")
            elapsed_s = figures["elapsed_s"]
            ok = max(0, figures["requests"] - figures["non2xx"])
            return {
                # Only 200s count: a bench that measured fast 401s would be worse than none.
                "rps": ok / elapsed_s if elapsed_s > 0 else figures["rps"],
                "requests": figures["requests"],
                "errors": figures["non2xx"] + figures["socket_errors"],
                "latency_avg_ms": figures["latency_avg_ms"],
                "latency_p50_ms": figures["latency_p50_ms"],
                "latency_p99_ms": figures["latency_p99_ms"],
            }
        # Python fallback: `t` processes sharing `c` connections.
        spec = {"url": url, "seconds": seconds, "connections": max(1, c // t), "headers": headers,
                "method": method, "body": body, "timeout": 30, "latencies": True}
        results = harness.py_load_processes(
            [sys.executable, str(Path(__file__).resolve()), "--pyload", json.dumps(spec)], t, timeout_s=seconds + 90)
        lat = sorted(x for r in results for x in r["latencies"])

        def pct(q: float) -> float | None:
            return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else None

        return {
            "rps": sum(r["requests"] / r["elapsed"] for r in results),
            "requests": sum(r["requests"] + r["errors"] for r in results),
            "errors": sum(r["errors"] for r in results),
            "latency_avg_ms": statistics.fmean(lat) * 1000 if lat else None,
            "latency_p50_ms": pct(0.50),
            "latency_p99_ms": pct(0.99),
        }


# --- the bench ----------------------------------------------------------------------

def _fmt_ms(v: float | None) -> str:
    return f"{v:.2f} ms" if v is not None else "n/a"


def setup_accounts(base: str) -> dict[str, Any]:
    """Register the bench user, create an API key; check both credentials answer /me with 200."""
    import httpx

    with httpx.Client(base_url=base, timeout=60) as client:
        pair = harness.register(client, EMAIL, PASSWORD)
        access = pair["accessToken"]
        r = client.post("/api/auth/api-keys", json={"name": "bench"}, headers={"Authorization": f"Bearer {access}"})
        api_key = expect(r, 201, "create API key")["apiKey"]
        for label, cred in (("access token", access), ("API key", api_key)):
            r = client.get("/api/auth/me", headers={"Authorization": f"Bearer {cred}"})
            if r.status_code != 200 or r.json().get("email") != EMAIL:
                raise RuntimeError(f"/api/auth/me with the {label}: {r.status_code} {r.text}")
    return {"user_id": pair["user"]["id"], "access_token": access, "api_key": api_key,
            "expires_in": pair["expiresIn"]}


def fresh_access_token(base: str) -> str:
    import httpx

    with httpx.Client(base_url=base, timeout=60) as client:
        r = client.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD})
        return str(expect(r, 200, "login")["accessToken"])


def single_login_latency(base: str, n: int) -> list[float]:
    """`n` sequential logins on one keep-alive connection; seconds each."""
    import httpx

    out = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            r = client.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD})
            out.append(time.perf_counter() - t0)
            expect(r, 200, "login")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median reported)")
    parser.add_argument("--threads", type=int, default=2, help="load generator threads (or processes)")
    parser.add_argument("--connections", type=int, default=32, help="concurrency for health and /me")
    parser.add_argument("--login-connections", type=int, default=4, help="concurrent clients for logins")
    parser.add_argument("--login-seconds", type=float, default=None, help="default: --seconds")
    parser.add_argument("--single-logins", type=int, default=5, help="sequential logins for the latency")
    parser.add_argument("--bcrypt-rounds", type=int, default=None,
                        help="set DOCEX_AUTH_BCRYPT_ROUNDS (default: unset, so the daemon's default, 12)")
    parser.add_argument("--access-log", action="store_true", help="keep the access log on (the default)")
    parser.add_argument("--python-load", action="store_true", help="use the httpx load generator even if wrk exists")
    parser.add_argument("--pyload", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pyload is not None:
        harness.py_load(json.loads(args.pyload))
        return 0
    login_seconds = args.login_seconds or args.seconds

    if not harness.require_docex():
        return 1

    figures: dict[str, Any] = {**harness.machine_figures(), "seconds": args.seconds, "rounds": args.rounds,
                               "access_log": args.access_log}
    failed = False
    daemon: Daemon | None = None
    workdir = Path(tempfile.mkdtemp(prefix="docex-bench-auth-"))
    try:
        data_dir = workdir / "data"
        env = harness.daemon_env(data_dir, access_log=args.access_log, **(
            {"DOCEX_AUTH_BCRYPT_ROUNDS": str(args.bcrypt_rounds)} if args.bcrypt_rounds is not None else {}))
        config = effective_config(env)
        cost = int(config["auth"]["bcrypt_rounds"])
        figures["bcrypt_rounds"] = cost
        figures["bcrypt_rounds_source"] = ("DOCEX_AUTH_BCRYPT_ROUNDS" if args.bcrypt_rounds is not None
                                           else "default (DOCEX_AUTH_BCRYPT_ROUNDS unset)")
        figures["rate_limits"] = config["rate_limits"]
        print(f"config   `docex config check`: auth.bcrypt_rounds = {cost} ({figures['bcrypt_rounds_source']}), "
              f"log.access = {config['log']['access']}, rate_limits.authenticated = "
              f"{config['rate_limits']['authenticated']}, login = {config['rate_limits']['login']}", flush=True)

        daemon = Daemon("docex", workdir, env)
        daemon.start()
        figures["start_to_health_s"] = round(daemon.start_s, 3)
        print(f"start    docex serve pid {daemon.pid} on :{daemon.port}, /api/health 200 after "
              f"{daemon.start_s:.2f} s", flush=True)

        creds = setup_accounts(daemon.base)
        figures["stored_hash_cost"] = stored_hash_cost(data_dir, EMAIL)
        print(f"setup    registered {EMAIL}, API key created; /me answers 200 with both "
              f"(stored hash cost {figures['stored_hash_cost']})", flush=True)

        wrk = None if args.python_load else harness.ensure_wrk()
        gen = Load(wrk, args.threads, args.connections, workdir)
        figures["load_generator"] = gen.describe()
        print(f"load     {gen.describe()}, {args.seconds:g} s x {args.rounds} rounds, interleaved", flush=True)

        health_url = f"{daemon.base}/api/health"
        me_url = f"{daemon.base}/api/auth/me"
        key_headers = {"Authorization": f"Bearer {creds['api_key']}"}
        token = creds["access_token"]
        token_born = time.monotonic()

        def token_headers() -> dict[str, str]:
            nonlocal token, token_born
            # Access tokens live access_ttl (15 min by default): renew well before a run could outlive one.
            if time.monotonic() - token_born > max(1.0, creds["expires_in"] / 2 - args.seconds - 5):
                token, token_born = fresh_access_token(daemon.base), time.monotonic()
            return {"Authorization": f"Bearer {token}"}

        kinds = {
            "health": lambda: (health_url, {}),
            "me_token": lambda: (me_url, token_headers()),
            "me_key": lambda: (me_url, key_headers),
        }
        for _name, target in kinds.items():  # warm-up: imports, caches, first connections, thread pool
            url, headers = target()
            gen.run(url, min(2.0, args.seconds), headers=headers)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in kinds}
        for r in range(args.rounds):
            for name, target in kinds.items():
                url, headers = target()
                result = measured(daemon.pid, lambda url=url, headers=headers: gen.run(url, args.seconds,
                                                                                       headers=headers))
                runs[name].append(result)
                print(f"  round {r + 1} {name:9s} {result['rps']:9.0f} req/s  errors {result['errors']}, "
                      f"avg {_fmt_ms(result['latency_avg_ms'])}, p99 {_fmt_ms(result['latency_p99_ms'])}, "
                      f"daemon cpu {result['cpu_ms_per_req']:.3f} ms/req", flush=True)
        med = {name: statistics.median(x["rps"] for x in rs) for name, rs in runs.items()}
        errors = {name: sum(x["errors"] for x in rs) for name, rs in runs.items()}
        ratio_token = med["me_token"] / med["health"]
        ratio_key = med["me_key"] / med["health"]
        paired_token, paired_key = (
            statistics.median(m["rps"] / h["rps"] for m, h in zip(runs[kind], runs["health"], strict=True))
            for kind in ("me_token", "me_key")
        )
        figures["rps"] = {name: round(v, 1) for name, v in med.items()}
        figures["rps_runs"] = {name: [round(x["rps"], 1) for x in rs] for name, rs in runs.items()}
        figures["errors"] = errors
        figures["latency_p50_ms"] = {name: statistics.median(x["latency_p50_ms"] or 0 for x in rs)
                                     for name, rs in runs.items()}
        figures["latency_p99_ms"] = {name: statistics.median(x["latency_p99_ms"] or 0 for x in rs)
                                     for name, rs in runs.items()}
        cpu = {name: statistics.median(x["cpu_ms_per_req"] for x in rs) for name, rs in runs.items()}
        figures["cpu_ms_per_req"] = {name: round(v, 4) for name, v in cpu.items()}
        figures["cpu_ratio_health_over_me"] = {"me_token": round(cpu["health"] / cpu["me_token"], 3),
                                               "me_key": round(cpu["health"] / cpu["me_key"], 3)}
        figures["ratio_me_token_health"] = round(ratio_token, 3)
        figures["ratio_me_key_health"] = round(ratio_key, 3)
        figures["ratio_paired_median"] = {"me_token": round(paired_token, 3), "me_key": round(paired_key, 3)}
        print(f"health   GET /api/health            {med['health']:9.0f} req/s (median)")
        print(f"me       GET /api/auth/me, token    {med['me_token']:9.0f} req/s   ratio {ratio_token:.3f}  "
              f"target ≥ {TARGET_ME_RATIO:g}   {verdict(ratio_token >= TARGET_ME_RATIO)}   "
              f"(paired median {paired_token:.3f})")
        print(f"me       GET /api/auth/me, API key  {med['me_key']:9.0f} req/s   ratio {ratio_key:.3f}  "
              f"target ≥ {TARGET_ME_RATIO:g}   {verdict(ratio_key >= TARGET_ME_RATIO)}   "
              f"(paired median {paired_key:.3f})", flush=True)
        print(f"cpu      daemon CPU per request (median): health {cpu['health']:.3f} ms, me-token "
              f"{cpu['me_token']:.3f} ms, me-key {cpu['me_key']:.3f} ms; health/me = "
              f"{cpu['health'] / cpu['me_token']:.3f} (token), {cpu['health'] / cpu['me_key']:.3f} (key) "
              "(noise-resistant cross-check, not the target)")
        if any(errors.values()):
            print(f"warning: load errors {errors} (non-200 answers are not counted in req/s)")

        # Logins: the idle single-login latency first, then a few concurrent clients.
        single = single_login_latency(daemon.base, args.single_logins)
        figures["login_single_s"] = {"median": round(statistics.median(single), 4),
                                     "min": round(min(single), 4), "max": round(max(single), 4),
                                     "n": len(single)}
        print(f"login    single login (idle daemon, cost {cost}): median {statistics.median(single) * 1000:.0f} ms, "
              f"min {min(single) * 1000:.0f} ms, max {max(single) * 1000:.0f} ms over {len(single)}", flush=True)
        login_body = json.dumps({"email": EMAIL, "password": PASSWORD})
        login = measured(daemon.pid, lambda: gen.run(
            f"{daemon.base}/api/auth/login", login_seconds, method="POST", body=login_body,
            headers={"Content-Type": "application/json"}, connections=args.login_connections))
        figures["login_cpu_ms_per_login"] = (round(login["cpu_ms_per_req"], 1)
                                             if login["cpu_ms_per_req"] is not None else None)
        figures["login_generator"] = gen.describe(args.login_connections)
        figures["logins_per_s"] = round(login["rps"], 2)
        figures["login_errors"] = login["errors"]
        figures["login_latency_p50_ms"] = login["latency_p50_ms"]
        figures["login_latency_p99_ms"] = login["latency_p99_ms"]
        print(f"login    POST /api/auth/login, {gen.describe(args.login_connections)}, {login_seconds:g} s, "
              f"cost {cost}: {login['rps']:.2f} logins/s  errors {login['errors']}, "
              f"p50 {_fmt_ms(login['latency_p50_ms'])}, p99 {_fmt_ms(login['latency_p99_ms'])}, "
              f"daemon cpu {figures['login_cpu_ms_per_login']} ms/login", flush=True)
    except (RuntimeError, subprocess.SubprocessError, OSError, KeyError, ValueError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        failed = True
    finally:
        # SIGTERM; the daemon must exit 0.
        if daemon is not None:
            daemon.stop()
            if daemon.proc is not None and daemon.exit_code != 0:
                print(daemon.tail(), file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)

    if daemon is not None and daemon.proc is not None:
        ok = daemon.exit_code == 0
        failed |= not ok
        figures["exit_code"] = daemon.exit_code
        figures["stop_s"] = round(daemon.stop_s, 3)
        print(f"exit     SIGTERM → {daemon.exit_code}{' (killed after 45 s)' if daemon.killed else ''} "
              f"in {daemon.stop_s:.2f} s   target 0   {verdict(ok)}")
    figures["verdicts"] = {
        "me_token_ratio": verdict(figures.get("ratio_me_token_health", 0) >= TARGET_ME_RATIO),
        "me_key_ratio": verdict(figures.get("ratio_me_key_health", 0) >= TARGET_ME_RATIO),
        "exit": verdict(figures.get("exit_code") == 0),
    }
    figures["failed"] = failed
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
