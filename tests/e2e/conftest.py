"""Run `docex` as a real subprocess, the way systemd or an operator does.

`start_daemon(...)` launches ``python -m daemon.cli serve`` with its own data
directory and the test's database (the `database_url` fixture, so the same
tests run on SQLite and on PostgreSQL), reads its stdout (JSON lines) and
stderr in background threads, and kills whatever is still running when the
test ends. `run_docex(...)` runs a one-shot command (`migrate`, `config check`).
The steps the tests share beyond that are in e2e_helpers.py.

Every environment variable that configures docex is removed from the child's
environment first, so a developer's shell never leaks into a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

pytest.register_assert_rewrite("e2e_helpers")
from e2e_helpers import STARTUP  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# Names the daemon reads from its environment (config.py, systemd.py): none may leak in.
_CONFIG_PREFIXES = ("DOCEX_", "JWT_", "WEBHOOK_", "WATCHDOG_")
# What systemd hands a service: a test's daemon must not pick up the session's own.
_CONFIG_NAMES = {"API_KEY_PREFIX", "MAX_API_KEYS_PER_USER", "MAX_FILE_SIZE", "NOTIFY_SOCKET",
                 "STATE_DIRECTORY", "CONFIGURATION_DIRECTORY", "CREDENTIALS_DIRECTORY", "JOURNAL_STREAM",
                 "LISTEN_FDS", "LISTEN_PID"}

WAIT_TIMEOUT_S = 5.0


def clean_environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_CONFIG_PREFIXES) and k not in _CONFIG_NAMES}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_is_closed(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


class Daemon:
    """One `docex serve` process and everything it has written so far."""

    def __init__(self, args: list[str], env: dict[str, str], port: int | None) -> None:
        self.args = args
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", *args],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
        )
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout_lines), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr_lines), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump(self, stream: Any, into: list[str]) -> None:
        with contextlib.suppress(ValueError, OSError):  # pipe closed under us at teardown
            for line in stream:
                with self._lock:
                    into.append(line.rstrip("\n"))

    # --- what it wrote -------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def records(self) -> list[dict[str, Any]]:
        """Stdout lines parsed as JSON (a line that is not JSON becomes {"unparsed": line})."""
        with self._lock:
            lines = list(self.stdout_lines)
        out = []
        for line in lines:
            try:
                value = json.loads(line)
            except ValueError:
                value = None
            out.append(value if isinstance(value, dict) else {"unparsed": line})
        return out

    def mark(self) -> int:
        """A position in the log: pass it to `wait_for`/`records_since` to look only after it."""
        with self._lock:
            return len(self.stdout_lines)

    def records_since(self, mark: int, until: int | None = None) -> list[dict[str, Any]]:
        return self.records[mark:until]

    def actions(self, mark: int = 0, until: int | None = None) -> list[str]:
        return [r.get("action", "") for r in self.records_since(mark, until)]

    def describe(self) -> str:
        with self._lock:
            out, err = self.stdout_lines[-40:], self.stderr_lines[-40:]
        return (f"docex {' '.join(self.args)} (pid {self.pid}, exit {self.proc.poll()})\n"
                "--- stdout (tail) ---\n" + "\n".join(out) + "\n--- stderr (tail) ---\n" + "\n".join(err))

    # --- waiting ---------------------------------------------------------------

    async def wait_for(
        self,
        match: str | Callable[[dict[str, Any]], bool],
        *,
        since: int = 0,
        timeout: float = WAIT_TIMEOUT_S,  # noqa: ASYNC109 (a timeout that fails with the log attached)
    ) -> tuple[int, dict[str, Any]]:
        """The first record after `since` with that action (or matching the predicate),
        and its index in the log; fails the test if none comes within `timeout`."""
        pred = (lambda r: r.get("action") == match) if isinstance(match, str) else match
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc.poll() is not None
            if exited:
                self._join_readers()  # everything it wrote is in the lists now
            records = self.records
            for i in range(since, len(records)):
                if pred(records[i]):
                    return i, records[i]
            if exited:
                pytest.fail(f"docex exited before logging {match!r}\n{self.describe()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no log record {match!r} within {timeout}s\n{self.describe()}")
            await trio.sleep(0.02)

    async def wait_http_ready(self, timeout: float = STARTUP) -> None:  # noqa: ASYNC109
        """Poll GET /api/health until it answers 200."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"docex exited during start-up\n{self.describe()}")
            try:
                if (await self.get("/api/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"docex did not answer /api/health within {timeout}s\n{self.describe()}")
            await trio.sleep(0.05)

    async def wait_exit(self, timeout: float = WAIT_TIMEOUT_S) -> int | None:  # noqa: ASYNC109
        """The exit code, or None if it is still running after `timeout`."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                return None
            await trio.sleep(0.02)
        self._join_readers()
        return self.proc.returncode

    async def stop(self, signum: int = signal.SIGTERM, timeout: float = WAIT_TIMEOUT_S) -> None:  # noqa: ASYNC109
        """Send `signum`; fail the test unless the process exits 0 within `timeout`."""
        self.signal(signum)
        code = await self.wait_exit(timeout=timeout)
        assert code == 0, f"exit {code}\n{self.describe()}"

    def _join_readers(self) -> None:
        for t in self._threads:
            t.join(timeout=2)

    # --- talking to it ---------------------------------------------------------

    def url(self, path: str) -> str:
        assert self.port is not None, "this daemon has no HTTP port"
        return f"http://127.0.0.1:{self.port}{path}"

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """One request on a fresh connection, closed afterwards (so no idle keep-alive
        connection is left to hold up a later drain)."""
        async with httpx.AsyncClient(timeout=5.0) as client:
            return await client.get(self.url(path), **kwargs)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._join_readers()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def docex_env(data_dir: Path, database_url: str) -> dict[str, str]:
    """The child's environment: this test's data directory and database, nothing else of docex."""
    return clean_environ(DOCEX_DATA_DIR=str(data_dir), DOCEX_DATABASE_URL=database_url)


@pytest.fixture
def start_daemon(docex_env: dict[str, str]) -> Iterator[Callable[..., Daemon]]:
    """``start_daemon(*extra_args, env={...}, port=...)`` → a running `Daemon`.

    Adds ``serve --port <free port>`` unless `port` is given as False (the port then
    comes from the config file: pass ``http_port`` to say which one to talk to).
    Every process started is killed at teardown if it is still running.
    """
    started: list[Daemon] = []

    def start(*args: str, env: dict[str, str] | None = None, port: int | bool = True,
              http_port: int | None = None) -> Daemon:
        argv = ["serve", *args]
        if port is True:
            port = free_port()
        if port:
            argv += ["--port", str(port)]
        daemon = Daemon(argv, {**docex_env, **(env or {})}, http_port or (port or None))
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


@pytest.fixture
def run_docex(docex_env: dict[str, str]) -> Callable[..., Any]:
    """``await run_docex("migrate", env={...}, input="stdin text")`` → CompletedProcess (text,
    captured; stdin empty unless `input` is given)."""

    async def run(*args: str, env: dict[str, str] | None = None, input: str | None = None,
                  timeout: float = STARTUP) -> subprocess.CompletedProcess[str]:  # noqa: ASYNC109
        def blocking() -> subprocess.CompletedProcess[str]:
            stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
            return subprocess.run(
                [sys.executable, "-m", "daemon.cli", *args],
                cwd=REPO, env={**docex_env, **(env or {})}, **stdin,
                capture_output=True, text=True, timeout=timeout, check=False,
            )

        return await trio.to_thread.run_sync(blocking)

    return run


def write_config(path: Path, text: str) -> None:
    """Replace a config file atomically, as an editor or a deploy tool would."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@pytest.fixture
def config_file(tmp_path: Path) -> Callable[[str], Path]:
    """``config_file(text)`` writes (or rewrites) ``<tmp>/config.toml`` and returns its path."""
    path = tmp_path / "config.toml"

    def write(text: str) -> Path:
        write_config(path, text)
        return path

    return write


@pytest.fixture
def unused_port() -> Callable[[], int]:
    """``unused_port()`` → a TCP port nothing listens on right now."""
    return free_port


@pytest.fixture
def refuses_connections() -> Callable[[int], bool]:
    """``refuses_connections(port)`` → True if nothing accepts on 127.0.0.1:port."""
    return port_is_closed
