"""What the bench scripts share: `docex serve` as a subprocess, /proc figures, wrk.

A plain module, not a bench. The scripts are run as files
(``.venv/bin/python bench/idle.py``), so each one puts its own directory first on
sys.path and then imports this module by name:

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import harness

(Python already puts a script's directory there, except under -P or
PYTHONSAFEPATH; the line makes the import hold however a script is started.)
Run on its own, as `make bench` does with every bench/*.py, it does nothing and
exits 0.

- `Daemon`: one server process on 127.0.0.1 with its log in a work directory,
  started until /api/health answers (`start`) or READY=1 arrives on
  NOTIFY_SOCKET (`start_notified`), stopped with SIGTERM (`stop`).
- `clean_env`, `daemon_env`: an environment nothing of the caller's docex (or
  systemd) settings leaks into.
- `cpu_s`, `tree_cpu_s`, `descendants`, `proc_status`, `tree_rss_kb`: figures
  read from /proc (Linux).
- `ensure_wrk`, `parse_wrk`: the load generator; `py_load` and
  `py_load_processes`: the httpx fallback, in processes of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
DOCEX = VENV_BIN / "docex"

CLK_TCK = os.sysconf("SC_CLK_TCK")

# Names that configure docex, or the service manager's handshake: none may change what is measured.
SCRUBBED_PREFIXES = ("DOCEX_", "WATCHDOG_", "NOTIFY_", "JWT_", "API_KEY_", "MAX_", "WEBHOOK_")

# Rate limits raised so that they never answer 429 during a bench.
RAISED_LIMITS = {
    "DOCEX_RATE_LIMITS_AUTHENTICATED": "100000000/min",
    "DOCEX_RATE_LIMITS_LOGIN": "1000000/min",
    "DOCEX_RATE_LIMITS_REGISTER": "1000000/min",
    "DOCEX_RATE_LIMITS_REFRESH": "1000000/min",
}


# --- the bench's own bookkeeping ----------------------------------------------------

def require_docex() -> bool:
    """True if the venv has the `docex` command; otherwise says how to get it."""
    if DOCEX.exists():
        return True
    print(f"{DOCEX} not found: run `make .venv/.installed-test` first", file=sys.stderr)
    return False


def machine_figures() -> dict[str, Any]:
    """The first keys of every bench's JSON line."""
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0]}


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def percentile(values: list[float], q: float) -> float:
    """The value at fraction `q` (0..1) of the sorted values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def expect(response: Any, status: int, what: str) -> Any:
    """`response`'s JSON body if it has `status`; otherwise a RuntimeError naming `what`."""
    if response.status_code != status:
        raise RuntimeError(f"{what}: {response.status_code} {response.text}")
    return response.json()


def register(client: Any, email: str, password: str) -> dict[str, Any]:
    """Register a user "Bench" through the httpx `client` (base_url set): the token pair's JSON."""
    r = client.post("/api/auth/register", json={"name": "Bench", "email": email, "password": password})
    result: dict[str, Any] = expect(r, 201, "register")
    return result


# --- processes ------------------------------------------------------------------------

def die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the bench dies, so nothing is left behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(prefixes: tuple[str, ...] = SCRUBBED_PREFIXES) -> dict[str, str]:
    """This process's environment without the names that start with `prefixes`."""
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def daemon_env(data_dir: Path, *, access_log: bool = False, **settings: str) -> dict[str, str]:
    """`docex serve`'s environment: nothing inherited that configures it, rate limits out of the
    way, its own data directory, the access log as asked, then `settings`."""
    env = clean_env()
    env.update(RAISED_LIMITS)
    env.update(DOCEX_DATA_DIR=str(data_dir), DOCEX_LOG_ACCESS="true" if access_log else "false")
    env.update(settings)
    return env


class Daemon:
    """A server on 127.0.0.1:`port` (a free one by default), logging to `workdir/<name>.log`.

    `argv` defaults to `docex serve` on that port.
    """

    def __init__(self, name: str, workdir: Path, env: dict[str, str], *, port: int | None = None,
                 argv: list[str] | None = None, tail_lines: int = 30) -> None:
        self.name = name
        self.workdir = workdir
        self.env = env
        self.port = port or free_port()
        self.argv = argv or [str(DOCEX), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self.tail_lines = tail_lines
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_s = 0.0
        self.start_cpu_s = 0.0
        self.ready_message: dict[str, str] = {}
        self.stop_s = 0.0
        self.exit_code: int | None = None
        self.killed = False

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def tail(self, lines: int | None = None) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-(lines or self.tail_lines):])
        return ""

    def _spawn(self, env: dict[str, str]) -> float:
        """Popen, stdout and stderr to the log; the monotonic time just before the exec."""
        with open(self.log_path, "wb") as log:
            t0 = time.monotonic()
            self.proc = subprocess.Popen(
                self.argv, env=env, cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
            )
        return t0

    def start(self, timeout_s: float = 60.0) -> float:
        """Exec; return once GET /api/health answers 200: the seconds that took (also `start_s`)."""
        import httpx

        t0 = self._spawn(self.env)
        assert self.proc is not None
        with httpx.Client(timeout=2) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited {self.proc.returncode} before /api/health answered:\n"
                                       f"{self.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.base}/api/health").status_code == 200:
                        break
                if time.monotonic() - t0 > timeout_s:
                    raise RuntimeError(f"{self.name}: /api/health not 200 within {timeout_s:.0f} s:\n{self.tail()}")
                time.sleep(0.05)
        self.start_s = time.monotonic() - t0
        return self.start_s

    def start_notified(self, timeout_s: float = 30.0) -> float:
        """Exec with NOTIFY_SOCKET set; return once READY=1 arrives: the seconds that took (`start_s`).

        `start_cpu_s` is the CPU time of the process tree by then, `ready_message` the READY datagram.
        """
        sock_path = self.workdir / f"{self.name}.notify"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
            notify.bind(str(sock_path))
            notify.settimeout(0.1)
            t0 = self._spawn({**self.env, "NOTIFY_SOCKET": str(sock_path)})
            assert self.proc is not None
            deadline = t0 + timeout_s
            while True:
                try:
                    data = notify.recv(4096)
                except TimeoutError:
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"{self.name} exited {self.proc.returncode} before READY=1:\n"
                                           f"{self.tail()}") from None
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{self.name}: no READY=1 within {timeout_s:.0f} s:\n"
                                           f"{self.tail()}") from None
                    continue
                fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
                if fields.get("READY") == "1":
                    self.start_s = time.monotonic() - t0
                    self.start_cpu_s = tree_cpu_s(self.proc.pid)
                    self.ready_message = fields
                    break
        sock_path.unlink(missing_ok=True)
        return self.start_s

    def stop(self, timeout_s: float = 45.0) -> int | None:
        """SIGTERM, wait; SIGKILL if it will not go. The exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            t0 = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.killed = True
                self.exit_code = None
                return None
            self.stop_s = time.monotonic() - t0
        self.exit_code = self.proc.returncode
        return self.exit_code


# --- /proc ------------------------------------------------------------------------------

def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: [0] is field 3 (state), [11] utime, [12] stime,
    [13] cutime, [14] cstime. OSError if the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_s(pid: int) -> float:
    """utime+stime of `pid`, all its threads (NaN if it is gone)."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid`, found through /proc/*/stat's ppid."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat_fields(int(entry))
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        out += children
        todo += children
    return out


def tree_cpu_s(pid: int) -> float:
    """utime+stime (all threads) of `pid` and its live descendants, plus their reaped children."""
    ticks = 0
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError):
            ticks += sum(int(x) for x in _stat_fields(p)[11:15])
    return ticks / CLK_TCK


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, in bytes (empty if it is gone)."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def tree_rss_kb(pid: int) -> int:
    """VmRSS of `pid` and its live descendants, in KiB."""
    return sum(proc_status(p).get("VmRSS", 0) for p in [pid, *descendants(pid)]) // 1024


# --- load generation ----------------------------------------------------------------------

def ensure_wrk() -> str | None:
    """wrk's path; when it is missing and we are root, `apt-get install -y wrk` is tried once."""
    found = shutil.which("wrk")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    print("wrk not found: trying apt-get install -y wrk", flush=True)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "timeout": 300}
    with contextlib.suppress(Exception):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run(["apt-get", "install", "-y", "wrk"], env=env, **quiet).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, **quiet)
            subprocess.run(["apt-get", "install", "-y", "wrk"], env=env, **quiet)
    return shutil.which("wrk")


_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def wrk_ms(text: str, unparsed: float | None = None) -> float | None:
    """A wrk duration ("812.50us", "1.20s") in ms; `unparsed` if it is in no unit known here."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * _WRK_UNITS[m.group(2)] if m else unparsed


def parse_wrk(out: str, unparsed: float | None = None) -> dict[str, Any]:
    """The figures of a wrk run with --latency; None for those missing from `out`.

    rps is wrk's Requests/sec (every answer), requests and elapsed_s its "N requests in T"
    line; non2xx and socket_errors are 0 when wrk prints no such line; latencies in ms
    (`unparsed` where wrk used a unit not known here).
    """
    rps = re.search(r"Requests/sec:\s*([\d.]+)", out)
    total = re.search(r"(\d+) requests in ([\d.]+(?:us|ms|s|m)),", out)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out)
    sock_err = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    latency = re.search(r"Latency\s+(\S+)\s+(\S+)\s+(\S+)", out)
    p50 = re.search(r"^\s*50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s*99%\s+(\S+)", out, re.M)
    return {
        "rps": float(rps.group(1)) if rps else None,
        "requests": int(total.group(1)) if total else None,
        "elapsed_s": (wrk_ms(total.group(2)) or 0.0) / 1000 if total else None,
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in sock_err.groups()) if sock_err else 0,
        "latency_avg_ms": wrk_ms(latency.group(1), unparsed) if latency else None,
        "latency_p50_ms": wrk_ms(p50.group(1), unparsed) if p50 else None,
        "latency_p99_ms": wrk_ms(p99.group(1), unparsed) if p99 else None,
    }


def py_load(spec: dict[str, Any]) -> None:
    """The httpx load generator, in a process of its own (a script's hidden --pyload).

    Keeps spec["connections"] keep-alive connections busy for spec["seconds"] with
    spec["method"] (GET) of spec["url"], spec["headers"] and spec["body"] (none), a
    spec["timeout"] (s) each; prints one JSON line: requests answered 200, errors,
    elapsed seconds and, with spec["latencies"], the seconds of each 200.
    """
    import httpx

    async def main() -> dict[str, Any]:
        done = errors = 0
        latencies: list[float] | None = [] if spec.get("latencies") else None
        connections = spec["connections"]
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        headers = spec.get("headers") or {}
        async with httpx.AsyncClient(limits=limits, timeout=spec["timeout"], headers=headers) as client:
            start = time.monotonic()
            end = start + spec["seconds"]

            async def worker() -> None:
                nonlocal done, errors
                while time.monotonic() < end:
                    t0 = time.monotonic()
                    try:
                        r = await client.request(spec.get("method", "GET"), spec["url"], content=spec.get("body"))
                        if r.status_code == 200:
                            done += 1
                            if latencies is not None:
                                latencies.append(time.monotonic() - t0)
                        else:
                            errors += 1
                    except httpx.HTTPError:
                        errors += 1

            await asyncio.gather(*(worker() for _ in range(connections)))
            elapsed = time.monotonic() - start
        out: dict[str, Any] = {"requests": done, "errors": errors, "elapsed": elapsed}
        if latencies is not None:
            out["latencies"] = latencies
        return out

    print(json.dumps(asyncio.run(main())), flush=True)


def py_load_processes(argv: list[str], processes: int, timeout_s: float) -> list[dict[str, Any]]:
    """`processes` copies of `argv` (a script with its hidden --pyload) at once: each one's
    last stdout line, parsed; whatever is still running at the end is killed."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
             for _ in range(processes)]
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout_s)
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def load_scorer(samples: Path) -> Any:
    """The samples' own scorer (`score.py` beside them), loaded as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("score", samples / "score.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
