"""The daemon's life as an operator sees it (SPEC §1, §2, §11): start, SIGHUP reload
of hot and cold settings, refusal of bad configuration, sd_notify, readiness per
role, graceful stop. Every test runs `docex` as a real subprocess."""

from __future__ import annotations

import json
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import trio
from e2e_helpers import STARTUP
from webhooks_0013 import insert_plain_endpoints, sealed_headers

from daemon.storage.migrate import head_revision, upgrade
from daemon.webhooks.keys import open_headers_with

LOG_KEYS = {"ts", "level", "logger", "msg"}


def _access_lines(records: list[dict], route: str = "/api/health") -> list[dict]:
    return [r for r in records if r.get("action") == "http.request" and r.get("route") == route]


# --- SIGHUP: hot settings ------------------------------------------------------


async def test_sighup_applies_a_new_log_level_without_a_restart(start_daemon, config_file) -> None:
    path = config_file('[log]\nlevel = "warning"\n')
    d = start_daemon("--config", str(path))
    await d.wait_http_ready()
    assert (await d.get("/api/health")).status_code == 200

    config_file('[log]\nlevel = "info"\n')
    d.signal(signal.SIGHUP)
    reloaded_at, _ = await d.wait_for("config.reloaded")

    # Under "warning" nothing at info was written: not "ready", not the access lines.
    before = d.records_since(0, reloaded_at)
    assert [r for r in before if r.get("level") in ("debug", "info")] == [], d.describe()

    mark = d.mark()
    assert (await d.get("/api/health")).status_code == 200
    _, line = await d.wait_for(lambda r: r.get("action") == "http.request", since=mark)
    assert line["level"] == "info" and line["route"] == "/api/health" and line["status"] == 200
    assert d.proc.poll() is None  # the same process, never restarted


async def test_sighup_resizes_the_worker_pool_without_a_restart(start_daemon, config_file) -> None:
    path = config_file("[jobs]\nworkers = 2\n")
    d = start_daemon("--config", str(path))
    await d.wait_http_ready()
    for workers in (5, 1, 0):
        mark = d.mark()
        config_file(f"[jobs]\nworkers = {workers}\n")
        d.signal(signal.SIGHUP)
        _, line = await d.wait_for("workers.resized", since=mark)
        assert line["workers"] == workers, d.describe()
    # With no workers the pool is deliberately empty, and the daemon says it is still ready.
    r = await d.get("/api/ready")
    assert r.status_code == 200 and r.json()["checks"]["workers"] == "ok"
    assert d.proc.poll() is None


async def test_sighup_turning_access_logs_off_stops_them(start_daemon, config_file) -> None:
    path = config_file("[log]\naccess = true\n")
    d = start_daemon("--config", str(path))
    await d.wait_http_ready()
    mark = d.mark()
    await d.get("/api/health")
    await d.wait_for(lambda r: r.get("action") == "http.request", since=mark)

    config_file("[log]\naccess = false\n")
    d.signal(signal.SIGHUP)
    await d.wait_for("config.reloaded", since=mark)

    mark = d.mark()
    for _ in range(3):
        assert (await d.get("/api/health")).status_code == 200
    # A second reload is a marker: every line the requests caused comes before it.
    d.signal(signal.SIGHUP)
    marker, _ = await d.wait_for("config.reloaded", since=mark)
    assert _access_lines(d.records_since(mark, marker)) == [], d.describe()
    assert d.proc.poll() is None


# --- SIGHUP: invalid files and cold settings -------------------------------------


async def test_sighup_with_an_invalid_file_keeps_the_old_configuration(start_daemon, config_file) -> None:
    path = config_file("[log]\naccess = false\n")
    d = start_daemon("--config", str(path))
    await d.wait_http_ready()

    # A valid hot change next to an invalid value: the file is rejected whole.
    config_file('[log]\naccess = true\nlevel = "loud"\n')
    mark = d.mark()
    d.signal(signal.SIGHUP)
    rejected_at, rejected = await d.wait_for("config.reload_rejected", since=mark)
    assert "log.level" in rejected["msg"] and rejected["level"] == "error"

    assert (await d.get("/api/health")).status_code == 200
    # Broken TOML: rejected too (and it doubles as a marker after the request above).
    config_file('[log\nlevel = "debug"\n')
    d.signal(signal.SIGHUP)
    second_at, second = await d.wait_for("config.reload_rejected", since=rejected_at + 1)
    assert "invalid TOML" in second["msg"]

    since_first = d.records_since(mark, second_at)
    assert "config.reloaded" not in d.actions(mark)
    assert _access_lines(since_first) == [], "access = true from the rejected file was applied"
    assert (await d.get("/api/ready")).status_code == 200
    assert d.proc.poll() is None


async def test_sighup_with_a_file_that_broke_the_parser_keeps_the_daemon(start_daemon, config_file) -> None:
    """`lease = inf` (OverflowError) and 10 KB of nested arrays (RecursionError) ended the
    daemon with a traceback in 0.2 s, even in production."""
    path = config_file("[log]\naccess = false\n")
    d = start_daemon("--config", str(path))
    await d.wait_http_ready()
    since = d.mark()
    for text, words in (("[jobs]\nlease = inf\n", "finite"), ("[server]\ngrace_period = 1e300\n", "at most"),
                        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
                        ('[rate_limits]\nlogin = "5/0min"\n', "period must be at least 1")):
        config_file(text)
        d.signal(signal.SIGHUP)
        at, rejected = await d.wait_for("config.reload_rejected", since=since)
        assert words in rejected["msg"], rejected
        since = at + 1
    assert (await d.get("/api/ready")).status_code == 200
    assert d.proc.poll() is None


async def test_sighup_changing_a_cold_setting_asks_for_a_restart_and_keeps_the_port(
    start_daemon, config_file, unused_port, refuses_connections
) -> None:
    old_port, new_port = unused_port(), unused_port()
    while new_port == old_port:  # each is a port the kernel had free: twice the same one, now and then
        new_port = unused_port()
    path = config_file(f"port = {old_port}\n")
    d = start_daemon("--config", str(path), port=False, http_port=old_port)
    await d.wait_http_ready()

    config_file(f"port = {new_port}\n[log]\naccess = false\n")
    mark = d.mark()
    d.signal(signal.SIGHUP)
    _, cold = await d.wait_for("config.restart_required", since=mark)
    assert cold["settings"] == ["port"] and "port" in cold["msg"]
    reloaded_at, _ = await d.wait_for("config.reloaded", since=mark)

    # Still on the old port, nothing on the new one ...
    assert (await d.get("/api/health")).status_code == 200
    assert refuses_connections(new_port)
    # ... while the hot setting of the same file took effect (no access line).
    d.signal(signal.SIGHUP)
    marker, _ = await d.wait_for("config.reloaded", since=reloaded_at + 1)
    assert _access_lines(d.records_since(reloaded_at, marker)) == []


# --- stopping ------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_signal_drains_and_exits_0(start_daemon, signum) -> None:
    d = start_daemon()
    await d.wait_http_ready()
    assert (await d.get("/api/ready")).status_code == 200

    started = time.monotonic()
    d.signal(signum)
    code = await d.wait_exit(timeout=5)
    assert code == 0, d.describe()
    assert time.monotonic() - started < 5

    records = d.records
    actions = [r.get("action") for r in records]
    stop = next(r for r in records if r.get("action") == "service.stop")
    assert stop["signal"] == signal.Signals(signum).name
    assert actions.index("service.ready") < actions.index("service.stop") < actions.index("service.stopped")
    assert actions[-1] == "service.stopped"
    # One JSON object a line on stdout, nothing on stderr.
    not_json = [r for r in records if not LOG_KEYS.issubset(r)]
    assert not_json == []
    assert d.stderr_lines == []


async def test_a_second_sigterm_stops_at_once_even_with_a_request_in_flight(start_daemon) -> None:
    d = start_daemon()
    await d.wait_http_ready()
    # A request whose body never finishes arriving: the drain would wait the whole grace period.
    stream = await trio.open_tcp_stream("127.0.0.1", d.port)
    await stream.send_all(b"POST /api/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{\"email\": ")
    await trio.sleep(0.3)
    mark = d.mark()
    d.signal(signal.SIGTERM)
    await d.wait_for("service.draining", since=mark)
    await trio.sleep(0.5)
    assert d.proc.poll() is None, "the drain must wait for the request in flight"
    d.signal(signal.SIGTERM)
    code = await d.wait_exit(timeout=5)
    await stream.aclose()
    assert code == 0, d.describe()
    assert "service.stop_now" in d.actions(mark)


async def test_sigterm_does_not_wait_for_idle_keep_alive_connections(start_daemon) -> None:
    d = start_daemon()
    await d.wait_http_ready()
    async with httpx.AsyncClient(timeout=5.0) as client:
        # A reverse proxy or a metrics scraper keeps its connection open between requests.
        assert (await client.get(d.url("/api/health"))).status_code == 200
        d.signal(signal.SIGTERM)
        code = await d.wait_exit(timeout=3)  # nothing is in flight: well under a second
    assert code == 0, d.describe()


# --- development secrets ----------------------------------------------------------


async def test_development_secrets_are_generated_once_and_reused(start_daemon, data_dir) -> None:
    secrets_file = data_dir / "secrets.json"
    assert not secrets_file.exists()

    first = start_daemon()
    await first.wait_http_ready()
    await first.stop()
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    content = secrets_file.read_bytes()
    stored = json.loads(content)
    assert set(stored) == {"jwt_access_secret", "webhook_encryption_key"}

    second = start_daemon()
    await second.wait_http_ready()
    await second.stop()
    assert secrets_file.read_bytes() == content
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    for d in (first, second):
        logged = "\n".join(d.stdout_lines + d.stderr_lines)
        assert all(v not in logged for v in stored.values()), "a generated secret was logged"
    # The first start says what it made, so that an operator knows to keep the file; the data
    # directory it made (the database, every document) is its user's alone.
    assert first.actions().count("config.secrets_generated") == 1 and "config.secrets_generated" not in second.actions()
    assert "db.migrated" in first.actions() and "db.migrated" not in second.actions()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700


# --- invalid configuration at start ----------------------------------------------------


async def test_production_without_secrets_exits_2_naming_each_missing_one(start_daemon, data_dir) -> None:
    d = start_daemon(env={"DOCEX_ENV": "production"})
    assert await d.wait_exit(timeout=STARTUP) == 2, d.describe()
    jwt = [line for line in d.stderr_lines if "JWT_ACCESS_SECRET" in line]
    key = [line for line in d.stderr_lines if "WEBHOOK_ENCRYPTION_KEY" in line]
    assert len(jwt) == 1 and len(key) == 1 and jwt != key, d.stderr_lines
    assert d.stdout_lines == []
    assert not (data_dir / "secrets.json").exists(), "production generated development secrets"


async def test_an_invalid_setting_exits_2_naming_it(start_daemon) -> None:
    d = start_daemon(env={"DOCEX_PORT": "abc"}, port=False)
    assert await d.wait_exit(timeout=STARTUP) == 2, d.describe()
    named = [line for line in d.stderr_lines if "DOCEX_PORT" in line]
    assert len(named) == 1 and "abc" in named[0], d.stderr_lines
    assert d.stdout_lines == []


# --- sd_notify ---------------------------------------------------------------------------


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound unix datagram socket, as systemd gives in NOTIFY_SOCKET (path < 108 bytes)."""
    directory = tmp_path if len(str(tmp_path / "notify.sock")) < 100 else Path(tempfile.mkdtemp(dir="/tmp"))
    path = directory / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    try:
        yield sock, str(path)
    finally:
        sock.close()
        path.unlink(missing_ok=True)
        if directory != tmp_path:
            directory.rmdir()


class Notifications:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = trio.socket.from_stdlib_socket(sock)
        self.seen: list[dict[str, str]] = []

    async def next(self, *, skip_watchdog: bool = True, timeout: float = 5.0) -> dict[str, str]:  # noqa: ASYNC109
        with trio.fail_after(timeout):
            while True:
                data = await self.sock.recv(4096)
                fields = dict(line.split("=", 1) for line in data.decode().splitlines())
                self.seen.append(fields)
                if not (skip_watchdog and fields.keys() == {"WATCHDOG"}):
                    return fields


async def test_sd_notify_ready_watchdog_reloading_stopping(start_daemon, notify_socket) -> None:
    sock, path = notify_socket
    notes = Notifications(sock)
    d = start_daemon(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})

    ready = await notes.next(timeout=STARTUP)
    assert ready["READY"] == "1" and ready["MAINPID"] == str(d.pid)
    # READY means serving: the very next request is answered, no retry.
    assert (await d.get("/api/health")).status_code == 200

    # WATCHDOG=1 at half of WATCHDOG_USEC, i.e. every 0.1 s: several within 0.6 s.
    count = len([n for n in notes.seen if n == {"WATCHDOG": "1"}])
    with trio.move_on_after(0.6):
        while True:
            if await notes.next(skip_watchdog=False) == {"WATCHDOG": "1"}:
                count += 1
    assert count >= 3

    before_usec = time.monotonic_ns() // 1000
    d.signal(signal.SIGHUP)
    reloading = await notes.next()
    assert reloading["RELOADING"] == "1"
    # systemd's Type=notify-reload wants a timestamp no older than its SIGHUP (CLOCK_MONOTONIC).
    assert before_usec <= int(reloading["MONOTONIC_USEC"]) <= time.monotonic_ns() // 1000
    assert (await notes.next())["READY"] == "1"

    d.signal(signal.SIGTERM)
    assert (await notes.next())["STOPPING"] == "1"
    assert await d.wait_exit(timeout=5) == 0, d.describe()


# --- one-shot commands ----------------------------------------------------------------------


async def test_migrate_prints_the_revision_and_exits_0(run_docex, database_url) -> None:
    result = await run_docex("migrate")
    assert result.returncode == 0, result.stderr
    assert head_revision() and head_revision() in result.stdout

    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
    finally:
        engine.dispose()
    assert version == head_revision()

    again = await run_docex("migrate")  # idempotent
    assert again.returncode == 0 and head_revision() in again.stdout


async def test_migrate_seals_webhook_headers_stored_in_plain_text(run_docex, database_url) -> None:
    """Upgrading from a docex that stored custom headers in plain JSON (revision 0013)."""
    key = "ab" * 32
    engine = sa.create_engine(database_url)
    try:
        upgrade(engine, "0013")
        insert_plain_endpoints(engine, {"e1": {"Authorization": "Bearer plain-t0ken"}})
        result = await run_docex("migrate", env={"WEBHOOK_ENCRYPTION_KEY": key})
        assert result.returncode == 0, result.stderr
        sealed = sealed_headers(engine)["e1"]
        assert sealed is not None and b"plain-t0ken" not in sealed
        assert open_headers_with(bytes.fromhex(key), "e1", sealed) == {"Authorization": "Bearer plain-t0ken"}
    finally:
        engine.dispose()


async def test_config_check_masks_secrets(run_docex) -> None:
    jwt_secret = "s3cret-" + "j" * 40
    db_password = "hunter2-db-password"
    result = await run_docex("config", "check", env={
        "JWT_ACCESS_SECRET": jwt_secret,
        "DOCEX_DATABASE_URL": f"postgresql://docex:{db_password}@db.example:5432/docex",
    })
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["auth"]["jwt_access_secret"] == "********"
    assert shown["database"]["url"] == "postgresql://docex:********@db.example:5432/docex"
    for secret in (jwt_secret, db_password):
        assert secret not in result.stdout and secret not in result.stderr


def test_a_reader_that_stops_early_gets_no_traceback(docex_env) -> None:
    """`docex openapi | head -c 1` printed a BrokenPipeError traceback (README: "never a
    traceback")."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "openapi"], env=docex_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(1) == b"{"
    proc.stdout.close()  # as `head` does once it has its lines
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 1
    assert stderr == ""


def test_a_full_output_is_one_line_not_a_traceback(docex_env, tmp_path) -> None:
    """`docex extract ... > /dev/full` ended in a traceback (OSError: No space left on device)."""
    import subprocess
    import sys

    document, schema = tmp_path / "a.txt", tmp_path / "s.json"
    document.write_text("Total: 12.50\n")
    schema.write_text('{"type": "object", "properties": {"total": {"type": "number"}}}')
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "daemon.cli", "extract", str(document), "--schema", str(schema)],
                              env=docex_env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert done.returncode == 1 and done.stderr == "docex: No space left on device: the output\n", done.stderr


async def test_users_create_with_nothing_on_stdin_says_so(run_docex) -> None:
    """It said "password must be longer than or equal to 6 characters"."""
    result = await run_docex("users", "create", "--email", "ops@example.com", "--name", "Ops")  # stdin: /dev/null
    assert result.returncode == 1
    assert result.stderr.strip() == "docex: no password on stdin (pipe it in, or run in a terminal to be asked)"


# --- readiness per role -----------------------------------------------------------------------


async def test_ready_with_every_part_running(start_daemon) -> None:
    d = start_daemon()
    await d.wait_http_ready()
    r = await d.get("/api/ready")
    body = r.json()
    assert r.status_code == 200 and body["status"] == "ready", body
    for check in ("database", "migrations", "workers", "dispatcher", "inboxes"):
        assert body["checks"][check] == "ok", body
    assert set(body["checks"].values()) == {"ok"}
    await d.stop()


async def test_api_role_is_ready_without_workers(start_daemon) -> None:
    d = start_daemon("--role", "api")
    await d.wait_http_ready()
    r = await d.get("/api/ready")
    body = r.json()
    assert r.status_code == 200 and body["status"] == "ready", body
    assert body["checks"]["database"] == "ok" and body["checks"]["migrations"] == "ok"
    assert "workers" not in body["checks"] and "dispatcher" not in body["checks"]
    await d.stop()


async def test_worker_role_opens_no_port_and_stops_cleanly(start_daemon, refuses_connections) -> None:
    d = start_daemon("--role", "worker")
    _, ready = await d.wait_for("service.ready", timeout=STARTUP)
    assert ready["role"] == "worker" and ready["binds"] == []
    assert d.port is not None and refuses_connections(d.port)
    assert d.proc.poll() is None
    await d.stop()
    assert d.actions()[-1] == "service.stopped"



async def test_a_damaged_or_newer_database_is_one_line_not_a_traceback(run_docex, database_url) -> None:
    """A file that is not SQLite gave a 107-124 line traceback; a database migrated by a newer
    docex (then rolled back) 71 lines of Alembic's, and `/api/ready` advised `docex migrate`."""
    import sqlalchemy as sa

    url = sa.make_url(database_url)
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "")
        _write(path, b"this is not a database at all" * 200)
        damaged = await run_docex("migrate")
        assert damaged.returncode == 1 and "Traceback" not in damaged.stderr, damaged.stderr
        assert "cannot read the database" in damaged.stderr and "restore a backup" in damaged.stderr
        _write(path, None)
    assert (await run_docex("migrate")).returncode == 0
    engine = sa.create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    newer = await run_docex("migrate")
    assert newer.returncode == 1 and "Traceback" not in newer.stderr, newer.stderr
    assert "revision 9999, newer than this docex" in newer.stderr


def _write(path: Path, data: bytes | None) -> None:
    """`data` into `path` (its folder made), or the file removed for None."""
    if data is None:
        path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
