"""The sockets a process still holds, read from /proc (Linux): the keep-alive test and bench/connections.py."""

from __future__ import annotations

import os
from pathlib import Path

LISTEN = "0A"
CLOSE_WAIT = "08"


def connections_held(pid: int, port: int) -> list[str]:
    """The TCP states ("01" ESTABLISHED, "08" CLOSE_WAIT, ...) of the connections on
    `port` that process `pid` still has a file descriptor for; its listening socket left out."""
    states: dict[str, str] = {}  # socket inode → state
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] != LISTEN:
                states[fields[9]] = fields[3]
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed while we looked
            continue
        if target.startswith("socket:[") and target[8:-1] in states:
            held.append(states[target[8:-1]])
    return held
