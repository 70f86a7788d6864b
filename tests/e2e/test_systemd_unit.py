"""The README's "Deploying with systemd", run as written, and systemd/docex.service's own
`ExecStart` run the way systemd runs it.

The README's shell steps run under a temporary root (``/etc/docex``, ``/opt/docex``,
``/var/lib/docex`` and ``/etc/systemd/system`` moved under it; the ``pip``, ``venv`` and
``systemctl`` steps skipped: this venv's ``docex`` stands in for ``/opt/docex/.venv``). The
installed unit file is then read and its settings emulated: a uid and gid that own
nothing (the dynamic user), no supplementary groups, the unit's ``UMask``, ``Environment=``,
``StateDirectory=`` (created with its mode, owned by that uid), ``ConfigurationDirectory=``,
``LoadCredential=`` (copied into a ``$CREDENTIALS_DIRECTORY`` readable by that uid alone),
``Type=notify`` (a ``$NOTIFY_SOCKET``), ``WatchdogSec=``, stdout and stderr on a stream named
by ``$JOURNAL_STREAM``, ``ExecReload=`` (SIGHUP), ``KillSignal=`` and ``KillMode=``. A directive the
emulation does not know fails the test, so the unit cannot drift from what is tested. The
sandboxing directives (``ProtectSystem=``, ``SystemCallFilter=``, ...) only take away and
are not emulated; `systemd-analyze verify` checks them below.

The README's ``docex users create`` one-liner runs the same way: its ``systemd-run -p``
properties must be the unit's own identity, directories, credentials and environment.

Root is needed to change uid; as another user the test skips and says so.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from e2e_helpers import STARTUP
from system_requirements import needs_root, require_program

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
UNIT_FILE = REPO / "systemd" / "docex.service"
# The README installs docex here; the test maps it to the docex of the venv it runs in.
INSTALLED_DOCEX = "/opt/docex/.venv/bin/docex"
VENV_DOCEX = str(Path(sys.executable).parent / "docex")
# Paths the README and the unit use, moved under the temporary root.
ROOTED = ("/etc/docex", "/opt/docex", "/var/lib/docex", "/etc/systemd/system")
# systemd's own PATH for services; nothing else of the test's environment reaches them.
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# What the emulation below does for each directive of the unit.
EMULATED = {
    "Type", "NotifyAccess", "ExecStart", "ExecReload", "KillSignal", "KillMode", "TimeoutStopSec", "WatchdogSec",
    "DynamicUser", "User", "UMask", "StateDirectory", "StateDirectoryMode", "ConfigurationDirectory",
    "LoadCredential", "Environment",
}
# Restart=: a failure fails the test instead. The rest narrow what the process may do.
NOT_EMULATED = {
    "Restart", "RestartSec", "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
    "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
    "ProtectHostname", "RestrictAddressFamilies", "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID",
    "LockPersonality", "SystemCallArchitectures", "SystemCallFilter", "CapabilityBoundingSet",
}
# What `docex users create` under systemd-run must share with the service.
SHARED_WITH_ONE_LINER = {"DynamicUser", "User", "UMask", "StateDirectory", "StateDirectoryMode",
                         "ConfigurationDirectory", "LoadCredential", "Environment"}



# --- the README ---------------------------------------------------------------------------


def readme_blocks() -> list[tuple[str, str]]:
    """(language, text) of each code block of "Deploying with systemd"."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Deploying with systemd\n"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```(\w*)\n(.*?)```", section, re.DOTALL)


def readme_block(containing: str) -> str:
    found = [text for _, text in readme_blocks() if containing in text]
    assert len(found) == 1, f"one code block with {containing!r} in README's systemd section, found {len(found)}"
    return found[0]


def commands(block: str) -> list[str]:
    """Shell commands of a block, continuation lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def rooted(text: str, root: Path) -> str:
    return re.sub(r"(?<![\w./-])(" + "|".join(map(re.escape, ROOTED)) + ")", lambda m: f"{root}{m.group(1)}", text)


def run_readme_deploy(root: Path) -> None:
    """The README's install steps, as root, under `root`: their paths, their modes."""
    (root / "etc/systemd/system").mkdir(parents=True)  # there on every systemd machine
    for command in commands(readme_block("systemctl enable")):
        if re.search(r"\b(pip|venv|systemctl)\b", command):
            continue
        shell = rooted(command, root).replace("sudo ", "")  # the test is root already
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", shell], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, f"README step failed: {command}\n{done.stderr}"


def edit(path: Path, *replacements: tuple[str, str]) -> None:
    """Change settings in config.toml as an operator would (each line must be there once)."""
    text = path.read_text(encoding="utf-8")
    for old, new in replacements:
        assert text.count(old) == 1, f"{old!r} in {path}"
        text = text.replace(old, new)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, path.stat().st_mode)
    os.replace(tmp, path)


# --- the unit -------------------------------------------------------------------------------


def parse_unit(*texts: str) -> list[tuple[str, str]]:
    """The [Service] settings of a unit file and its drop-ins, in order."""
    settings: list[tuple[str, str]] = []
    for text in texts:
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
            elif section == "Service":
                key, _, value = line.partition("=")
                settings.append((key.strip(), value.strip()))
    return settings


class Properties:
    def __init__(self, settings: list[tuple[str, str]]) -> None:
        self.settings = settings

    def all(self, key: str) -> list[str]:
        return [v for k, v in self.settings if k == key]

    def one(self, key: str, default: str | None = None) -> str:
        values = self.all(key)
        if not values and default is not None:
            return default
        assert len(values) == 1, f"{key}= {values}"
        return values[0]


def seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+)(s|min)?", value)
    assert m, value
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


def unused_id(above: int = 0) -> int:
    """A uid and gid in systemd's dynamic range (above `above`) that no user or group has."""
    import grp
    import pwd

    for candidate in range(max(61184 + os.getpid() % 1000, above + 1), 65519):
        with contextlib.suppress(KeyError):
            pwd.getpwuid(candidate)
            continue
        with contextlib.suppress(KeyError):
            grp.getgrgid(candidate)
            continue
        return candidate
    raise AssertionError("no free uid in systemd's dynamic range")


class Notifications:
    """The $NOTIFY_SOCKET of a Type=notify service, and what it received."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o777)  # any uid may send to it, as to systemd's
        self.sock.settimeout(0.1)
        self.messages: list[set[str]] = []
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while self.sock.fileno() != -1:
            try:
                self.messages.append(set(self.sock.recv(4096).decode().split("\n")))
            except TimeoutError:
                continue
            except OSError:
                return

    def mark(self) -> int:
        return len(self.messages)

    def find(self, field: str, since: int) -> int | None:
        """The position after the first message from `since` on that carries `field`."""
        return next((i + 1 for i, message in enumerate(self.messages[since:], since) if field in message), None)

    def fields(self) -> set[str]:
        return set().union(*self.messages)

    def close(self) -> None:
        self.sock.close()


class Emulation:
    """What systemd sets up for one unit run under `root`, as root (the service manager)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.users: dict[str, int] = {}

    def service_uid(self, props: Properties) -> int:
        assert props.one("DynamicUser") == "yes", "the emulation knows dynamic users only"
        # One uid per dynamic user name, shared by every unit that names it while they run.
        name = props.one("User")
        if name not in self.users:
            self.users[name] = unused_id(above=max(self.users.values(), default=0))
        return self.users[name]

    def environment(self, props: Properties, unit_name: str) -> dict[str, str]:
        uid = self.service_uid(props)
        env = {"PATH": SERVICE_PATH}
        for value in props.all("Environment"):
            for assignment in shlex.split(value):
                key, _, setting = assignment.partition("=")
                env[key] = setting
        # StateDirectory=: created with its mode and owned by the service's uid, at every start.
        state = self.root / "var/lib" / props.one("StateDirectory")
        state.mkdir(parents=True, exist_ok=True)
        os.chown(state, uid, uid)
        os.chmod(state, int(props.one("StateDirectoryMode", "0755"), 8))
        env["STATE_DIRECTORY"] = str(state)
        # ConfigurationDirectory=: created 0755 if missing; an existing one is left as it is.
        config = self.root / "etc" / props.one("ConfigurationDirectory")
        if not config.exists():
            config.mkdir(mode=0o755, parents=True)
        env["CONFIGURATION_DIRECTORY"] = str(config)
        # LoadCredential=ID:PATH: read by the manager (root), copied into a directory only the
        # service's uid may read; a missing source fails the start.
        loads = props.all("LoadCredential")
        if loads:
            credentials = self.root / "run/credentials" / unit_name
            credentials.mkdir(parents=True)
            for load in loads:
                name, _, source = load.partition(":")
                target = credentials / name
                target.write_bytes(Path(rooted(source, self.root)).read_bytes())
                os.chown(target, uid, uid)
                os.chmod(target, 0o400)
            os.chown(credentials, uid, uid)
            os.chmod(credentials, 0o500)
            env["CREDENTIALS_DIRECTORY"] = str(credentials)
        return env

    def process(self, props: Properties, argv: list[str]) -> tuple[list[str], dict[str, Any]]:
        """argv and subprocess arguments that run `argv` as the unit's uid: its gid, no
        supplementary groups, its umask, in "/", in a session of its own."""
        uid = self.service_uid(props)
        common = {"umask": int(props.one("UMask", "0022"), 8), "cwd": "/", "start_new_session": True}
        hidden = unreachable_ancestor(Path(sys.base_prefix))
        if hidden is None:
            return argv, {**common, "user": uid, "group": uid, "extra_groups": []}
        # This Python lives where no other uid may enter (pyenv under /root): in a private
        # mount namespace, cover that directory with an empty one and show the Python
        # installation alone at its own path, then drop to the uid as above.
        keep = self.root / "run/python-install"
        keep.mkdir(parents=True, exist_ok=True)
        script = ('mount --bind "$2" "$3"; mount -t tmpfs -o mode=0755 tmpfs "$1"; mkdir -p "$2"; '
                  'mount --move "$3" "$2"; shift 3; exec setpriv --reuid="$U" --regid="$U" --clear-groups -- "$@"')
        wrapped = ["unshare", "--mount", "--propagation", "private", "--", "env", f"U={uid}", "sh", "-euc", script,
                   "sh", str(hidden), sys.base_prefix, str(keep), *argv]
        return wrapped, common

    def argv(self, command: str) -> list[str]:
        argv = shlex.split(command)
        assert argv[0] == INSTALLED_DOCEX, f"the unit runs {argv[0]}, the README installs {INSTALLED_DOCEX}"
        return [VENV_DOCEX, *argv[1:]]


def unreachable_ancestor(path: Path) -> Path | None:
    """The topmost directory above `path` that other users cannot enter, if any."""
    return next((p for p in reversed(path.parents) if not p.stat().st_mode & stat.S_IXOTH), None)


class Service:
    """The unit's ExecStart running, with its notifications and journal lines."""

    def __init__(self, props: Properties, emulation: Emulation) -> None:
        self.props = props
        assert props.one("Type") == "notify" and props.one("NotifyAccess") == "main"
        env = emulation.environment(props, "docex.service")
        self.state_dir = Path(env["STATE_DIRECTORY"])
        (emulation.root / "run/systemd").mkdir(parents=True, exist_ok=True)
        self.notifications = Notifications(emulation.root / "run/systemd/notify")
        env["NOTIFY_SOCKET"] = str(self.notifications.path)
        env["WATCHDOG_USEC"] = str(int(seconds(props.one("WatchdogSec")) * 1_000_000))
        # stdout and stderr go to the journal: a stream named by its device:inode.
        read_fd, write_fd = os.pipe()
        st = os.fstat(write_fd)
        env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        argv, kwargs = emulation.process(props, emulation.argv(props.one("ExecStart")))
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
                                         **kwargs)
        finally:
            os.close(write_fd)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                self.lines.append(line.rstrip("\n"))

    def journal(self, since: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """(syslog priority, record) of each line; a line without a prefix fails the test."""
        out = []
        for line in self.lines[since:]:
            m = re.fullmatch(r"<([0-7])>(\{.*\})", line)
            assert m, f"journal line without a priority prefix: {line!r}"
            out.append((int(m.group(1)), json.loads(m.group(2))))
        return out

    def actions(self, since: int = 0) -> list[str]:
        return [r.get("action", "") for _, r in self.journal(since)]

    def describe(self) -> str:
        return f"exit {self.proc.poll()}\n" + "\n".join(self.lines[-40:])

    async def notified(self, field: str, since: int = 0) -> int:
        """Wait for a message carrying `field` on the notify socket (position after it);
        fail at once, with the journal, if the service exits first."""
        deadline = time.monotonic() + STARTUP
        while (found := self.notifications.find(field, since)) is None:
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                pytest.fail(f"docex exited before {field}\n{self.describe()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {field} within {STARTUP}s: {self.notifications.messages}\n{self.describe()}")
            await trio.sleep(0.05)
        return found

    async def reload(self) -> int:
        """ExecReload=/bin/kill -HUP $MAINPID, then wait for RELOADING=1 and READY=1; a log mark."""
        assert self.props.one("ExecReload") == "/bin/kill -HUP $MAINPID"
        mark, lines = self.notifications.mark(), len(self.lines)
        self.proc.send_signal(signal.SIGHUP)
        await self.notified("READY=1", since=await self.notified("RELOADING=1", since=mark))
        return lines

    async def stop(self) -> int | None:
        """KillSignal= to the main process alone (KillMode=mixed: its parser processes are its
        own to stop), then wait as long as TimeoutStopSec= for the exit code."""
        assert self.props.one("KillMode") == "mixed"
        self.proc.send_signal(getattr(signal, self.props.one("KillSignal")))
        timeout = seconds(self.props.one("TimeoutStopSec"))
        with contextlib.suppress(subprocess.TimeoutExpired):
            await trio.to_thread.run_sync(functools.partial(self.proc.wait, timeout=timeout))
        self._reader.join(timeout=5)
        return self.proc.poll()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.notifications.close()


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture
def root() -> Iterator[Path]:
    """A temporary root the service's uid can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="docex-systemd-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def login(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    return await client.post("/api/auth/login", json={"email": email, "password": password})


def users_create_one_liner(extra_properties: list[tuple[str, str]]) -> tuple[Properties, str]:
    """The README's `systemd-run ... docex users create ...`: its -p properties (plus those
    the README says to add for a drop-in's credentials) and the command it runs."""
    (line,) = commands(readme_block("users create"))
    tokens = shlex.split(line)
    assert tokens[:2] == ["sudo", "systemd-run"], tokens
    properties: list[tuple[str, str]] = []
    flags: set[str] = set()
    i = 2
    while tokens[i].startswith("-"):
        if tokens[i] == "-p":
            key, _, value = tokens[i + 1].partition("=")
            properties.append((key, value))
            i += 2
        else:
            flags.add(tokens[i])
            i += 1
    # --wait: its exit code is docex's; --collect: a failed run leaves no unit behind;
    # --pty (or --pipe): the password reaches docex's stdin.
    assert {"--wait", "--collect"} <= flags and flags & {"--pty", "--pipe"}, flags
    return Properties(properties + extra_properties), shlex.join(tokens[i:])


@needs_root
async def test_the_readme_deployment_runs_as_systemd_runs_it(root: Path, database_url: str) -> None:
    run_readme_deploy(root)
    etc = root / "etc/docex"
    assert (etc.stat().st_mode & 0o7777, (etc / "config.toml").stat().st_mode & 0o7777) == (0o755, 0o644)
    port = free_port()
    edit(etc / "config.toml", ("port = 8080", f"port = {port}"),
         ('registration = "open"', 'registration = "closed"'), ("bcrypt_rounds = 12", "bcrypt_rounds = 4"))

    unit_texts = [(root / "etc/systemd/system/docex.service").read_text(encoding="utf-8")]
    extra_for_one_liner: list[tuple[str, str]] = []
    if database_url.startswith("postgresql"):
        # The README's way to another secret: a credential file and a drop-in line.
        dropin = readme_block("LoadCredential=DOCEX_DATABASE_URL")
        (load,) = [v for k, v in parse_unit(dropin) if k == "LoadCredential"]
        source = rooted(load.partition(":")[2], root)
        await trio.run_process(["install", "-m", "0600", "/dev/stdin", source], stdin=database_url.encode())
        unit_texts.append(dropin)
        extra_for_one_liner.append(("LoadCredential", load))
    props = Properties(parse_unit(*unit_texts))
    unknown = {k for k, _ in props.settings} - EMULATED - NOT_EMULATED
    assert not unknown, f"teach this test what systemd does with {unknown}"

    emulation = Emulation(root)
    uid = emulation.service_uid(props)
    # The secrets' source files are root's alone: the service's uid cannot read them itself.
    argv, kwargs = emulation.process(props, ["cat", str(etc / "credentials/JWT_ACCESS_SECRET")])
    denied = await trio.run_process(argv, check=False, capture_stdout=True, capture_stderr=True, **kwargs)
    assert denied.returncode != 0 and not denied.stdout

    service = Service(props, emulation)
    try:
        # Generous: two suites at once on two cores made one request of this test wait over 10 s.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            await service.notified("READY=1")
            assert "WATCHDOG=1" in service.notifications.fields()
            health = await client.get("/api/health")
            assert health.status_code == 200, health.text
            # SQLite in $STATE_DIRECTORY, or PostgreSQL by the URL given as a credential.
            (ready,) = [r for _, r in service.journal() if r.get("action") == "service.ready"]
            assert ready["database"] == database_url.partition("+")[0].partition(":")[0], ready
            assert (service.state_dir / "docex.db").exists() == database_url.startswith("sqlite")

            # Closed registration: the README's one-liner creates the account, as the service's uid,
            # in the service's database, with its config and secrets, while the service runs.
            one_liner, command = users_create_one_liner(extra_for_one_liner)
            shared = sorted((k, v) for k, v in props.settings if k in SHARED_WITH_ONE_LINER)
            assert sorted(one_liner.settings) == shared, "the one-liner runs as the service, with its data and secrets"
            argv, kwargs = emulation.process(one_liner, emulation.argv(command))
            env = emulation.environment(one_liner, "run-u1.service")
            with trio.fail_after(STARTUP):
                created = await trio.run_process(argv, stdin=b"correct-horse-battery\n", check=False,
                                                 capture_stdout=True, capture_stderr=True, env=env, **kwargs)
            assert created.returncode == 0, created.stderr.decode()
            assert json.loads(created.stdout)["role"] == "ADMIN"
            signed_in = await login(client, "ops@example.com", "correct-horse-battery")
            assert signed_in.status_code == 200, signed_in.text
            refused = await client.post("/api/auth/register", json={"name": "Eve", "email": "eve@example.com",
                                                                    "password": "correct-horse-battery"})
            assert refused.status_code == 403, refused.text
            owners = {p.stat().st_uid for p in [service.state_dir, *service.state_dir.rglob("*")]}
            assert owners == {uid}, "every file in the data directory is the service's"
            assert not (service.state_dir / "secrets.json").exists(), "production secrets came as credentials"

            # A broken config.toml: the reload is refused at error priority (journalctl -p err).
            edit(etc / "config.toml", ('level = "info"', 'level = "loud"'))
            mark = await service.reload()
            assert any(priority == 3 and record["action"] == "config.reload_rejected"
                       for priority, record in service.journal(mark)), service.describe()

            # A hot setting changed: applies at once.
            wrong = [(await login(client, "nobody@example.com", "wrong-password-1")).status_code for _ in range(3)]
            assert wrong == [401, 401, 401]
            edit(etc / "config.toml", ('level = "loud"', 'level = "info"'), ('login = "10/min"', 'login = "1/min"'))
            mark = await service.reload()
            assert "config.reloaded" in service.actions(mark)
            wrong = [(await login(client, "nobody@example.com", "wrong-password-1")).status_code for _ in range(3)]
            assert 429 in wrong, wrong

        # systemctl stop: drains and exits 0.
        assert await service.stop() == 0, service.describe()
        assert "STOPPING=1" in service.notifications.fields()
        journal = service.journal()
        assert journal[-1][1]["action"] == "service.stopped"
        levels = {"debug": 7, "info": 6, "warning": 4, "error": 3}
        assert all(priority == levels[record["level"]] for priority, record in journal), service.describe()
    finally:
        service.kill()


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    require_program("systemd-analyze", debian_package="systemd")
    # verify checks that ExecStart's binary exists: the same unit, pointed at this venv's docex.
    text = UNIT_FILE.read_text(encoding="utf-8")
    assert text.count(f"ExecStart={INSTALLED_DOCEX} ") == 1
    unit = tmp_path / "docex.service"
    unit.write_text(text.replace(INSTALLED_DOCEX, VENV_DOCEX), encoding="utf-8")
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
