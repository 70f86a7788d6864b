"""Logs a machine can read: one JSON object a line on stdout, for journald.

Every record carries ``ts``, ``level``, ``logger``, ``msg`` and, when given, a
stable ``action`` plus the ids passed in ``extra``. Secrets never reach a log
record: settings are `Secret` objects whose repr is masked, and request logs
carry no headers or bodies.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
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
        return _ENCODER.encode(entry)


def configure_logging(level: str) -> None:
    """Route every logger (ours, hypercorn's, alembic's) to JSON lines on stdout."""
    # The lines carry none of these, and gathering them costs time on every record
    # (the logging documentation's "Optimization" section).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    for name in ("hypercorn.error", "hypercorn.access", "alembic", "quart.app", "quart.serving"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Hypercorn's own access log would duplicate ours (daemon.http.access).
    logging.getLogger("hypercorn.access").disabled = True
    set_level(level)


def set_level(level: str) -> None:
    logging.getLogger().setLevel(_LEVELS[level])
    # Alembic narrates every step at INFO; keep it to warnings unless debugging.
    logging.getLogger("alembic").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
