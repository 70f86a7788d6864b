"""Logs a machine can read: one JSON object a line on stdout, for journald.

Every record carries ``ts``, ``level``, ``logger``, ``msg`` and, when given, a
stable ``action`` plus the ids passed in ``extra``. Secrets never reach a log
record: settings are `Secret` objects whose repr is masked, and request logs
carry no headers or bodies.

When stdout is systemd's journal stream, each line starts with its syslog
priority (``<3>`` error, ``<4>`` warning, ``<6>`` info, ``<7>`` debug), which
journald takes off and files the line under (sd-daemon(3)), so
``journalctl -u docex -p err`` finds errors; anywhere else lines are bare JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import IO, Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


# syslog(3) priorities by logging level; CRITICAL is syslog's "crit".
_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
_DEBUG_PRIORITY = 7


def syslog_priority(levelno: int) -> int:
    return next((priority for level, priority in _PRIORITIES if levelno >= level), _DEBUG_PRIORITY)


def is_journal_stream(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether `stream` is the journal stream systemd connected: ``$JOURNAL_STREAM`` holds its
    ``device:inode`` (systemd.exec(5)). A variable inherited by a process whose stdout was
    redirected elsewhere names another file and does not count."""
    expected = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    if not expected:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):  # no file descriptor (closed, or an in-memory stream)
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


class JsonFormatter(logging.Formatter):
    def __init__(self, *, journal: bool = False) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        line = _ENCODER.encode(entry)  # one line: JSON escapes the newlines of a traceback
        return f"<{syslog_priority(record.levelno)}>{line}" if self.journal else line


def configure_logging(level: str) -> None:
    """Route every logger (ours, hypercorn's, alembic's) to JSON lines on stdout."""
    # The lines carry none of these, and gathering them costs time on every record
    # (the logging documentation's "Optimization" section).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(journal=is_journal_stream(sys.stdout)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    for name in ("hypercorn.error", "hypercorn.access", "alembic", "quart.app", "quart.serving"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Hypercorn's own access log would duplicate ours (daemon.http.access).
    logging.getLogger("hypercorn.access").disabled = True
    # httpx logs every request's whole URL at INFO: a webhook's URL may hold its secret
    # (?token=, Slack's path). Its warnings still come through.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    set_level(level)


def set_level(level: str) -> None:
    logging.getLogger().setLevel(_LEVELS[level])
    # Alembic narrates every step at INFO; keep it to warnings unless debugging.
    logging.getLogger("alembic").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
