"""Log lines carry their level to journald: a ``<N>`` syslog priority prefix when stdout is
the journal stream named by ``$JOURNAL_STREAM`` (device:inode), bare JSON otherwise.

Each case is a real child process whose stdout is a pipe, the way systemd hands a service
its journal stream (a socket there; the check is the same: the device and inode of fd 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# One record per level, and an exception logged as the 500 handler logs it.
CHILD = """
import logging
from daemon.logs import configure_logging
configure_logging("debug")
log = logging.getLogger("docex.test")
log.debug("d")
log.info("i")
log.warning("w")
log.error("e")
try:
    1 / 0
except ZeroDivisionError as exc:
    log.error("unhandled error", exc_info=exc, extra={"action": "http.unhandled"})
"""


def run_child(journal_stream: str | None, argv: tuple[str, ...] = ("-c", CHILD), exit_code: int = 0) -> list[str]:
    """The child's stdout and stderr lines; `journal_stream` is "pipe" for the pipe's own device:inode."""
    read_fd, write_fd = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    if journal_stream == "pipe":
        st = os.fstat(write_fd)
        env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    elif journal_stream is not None:
        env["JOURNAL_STREAM"] = journal_stream
    with os.fdopen(read_fd, encoding="utf-8") as out:
        try:
            proc = subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=write_fd, stderr=write_fd)
        finally:
            os.close(write_fd)
        lines = out.read().splitlines()
    assert proc.wait(timeout=30) == exit_code
    return lines


def test_on_the_journal_stream_each_line_starts_with_its_syslog_priority() -> None:
    lines = run_child("pipe")
    assert [line[:3] for line in lines] == ["<7>", "<6>", "<4>", "<3>", "<3>"]
    records = [json.loads(line[3:]) for line in lines]
    assert [r["level"] for r in records] == ["debug", "info", "warning", "error", "error"]
    # The traceback stays inside its one line, so `journalctl -p err` shows all of it.
    assert records[-1]["action"] == "http.unhandled"
    assert "ZeroDivisionError" in records[-1]["exc"]


@pytest.mark.parametrize("journal_stream", [None, "1:2"], ids=["unset", "another-file"])
def test_elsewhere_lines_are_bare_json(journal_stream: str | None) -> None:
    # "another-file": a process started from a service inherits JOURNAL_STREAM, but its
    # stdout was redirected (to a file, a pipe): a prefix there would corrupt the JSON.
    lines = run_child(journal_stream)
    assert [json.loads(line)["msg"] for line in lines] == ["d", "i", "w", "e", "unhandled error"]


@pytest.mark.parametrize(("journal_stream", "prefix"), [("pipe", "<3>"), (None, "")], ids=["journal", "elsewhere"])
def test_a_config_error_at_start_is_an_error_in_the_journal(journal_stream: str | None, prefix: str,
                                                              tmp_path: Path) -> None:
    # Exit 2 before logging is set up; systemd restarts the unit, `journalctl -p err` says why.
    lines = run_child(journal_stream, ("-m", "daemon.cli", "config", "check", "--config", str(tmp_path / "no.toml")),
                      exit_code=2)
    assert lines == [f"{prefix}docex: config: config file {tmp_path / 'no.toml'}: not found"]
