"""Wake the sweeper when a file lands in a local inbox folder: Linux inotify, read on the
trio thread.

No thread and no dependency: one inotify descriptor per process (non-blocking), a watch
per folder, and `trio.lowlevel.wait_readable` on the descriptor, so a notification costs
one read when it comes and nothing while none does. (watchfiles would run a Rust thread
per watcher and poll it from anyio; polling each folder's mtime on a short timer would
cost a stat per folder per tick and still lag by the tick.)

Where inotify is missing (not Linux, or the per-user watch limit is reached) `open_watch`
returns None and the inboxes are swept on their interval alone.

Events watched: a file finished writing (IN_CLOSE_WRITE), moved in (IN_MOVED_TO), or its
times set afterwards (IN_ATTRIB: ``cp -p``, ``touch``). IN_CREATE is not: a file just
created is still being written. Events about dot-files and sub-folders wake nothing:
a sweep takes neither.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct

import trio

log = logging.getLogger(__name__)

# <sys/inotify.h>
_IN_ATTRIB = 0x00000004
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_Q_OVERFLOW = 0x00004000  # events were lost (wd -1): every folder may have news
_IN_IGNORED = 0x00008000  # the watch is gone (its folder deleted or moved away)
_IN_ISDIR = 0x40000000  # the event is about a sub-folder
_IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_MASK = _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_ATTRIB | _IN_ONLYDIR
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


class FolderWatch:
    """An inotify descriptor with a watch per folder, each folder tagged with the inbox ids
    that watch it. Close it with `close`."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._inboxes: dict[int, set[str]] = {}  # watch descriptor → inbox ids
        self._watching: dict[str, tuple[int, str]] = {}  # inbox id → (wd, folder)

    def watch(self, inbox_id: str, folder: str) -> bool:
        """Watch `folder` for inbox `inbox_id` (again if its folder changed); False if it
        cannot be watched (gone, or out of watches), and the interval must do."""
        current = self._watching.get(inbox_id)
        if current is not None and current[1] == folder:
            return True
        self.unwatch(inbox_id)
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _MASK)
        if wd < 0:
            error = ctypes.get_errno()
            log.warning("cannot watch an inbox folder: %s", os.strerror(error),
                        extra={"action": "inbox.unwatched", "inbox_id": inbox_id,
                               "limit_reached": error == errno.ENOSPC})
            return False
        self._inboxes.setdefault(wd, set()).add(inbox_id)
        self._watching[inbox_id] = (wd, folder)
        return True

    def unwatch(self, inbox_id: str) -> None:
        current = self._watching.pop(inbox_id, None)
        if current is None:
            return
        wd = current[0]
        ids = self._inboxes.get(wd, set())
        ids.discard(inbox_id)
        if not ids:
            self._inboxes.pop(wd, None)
            self._libc.inotify_rm_watch(self._fd, wd)  # the kernel may have dropped it already: fine

    def watched(self) -> set[str]:
        return set(self._watching)

    async def wait(self) -> set[str]:
        """Wait for the next notifications; the inbox ids whose folder had one."""
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                continue
            woken: set[str] = set()
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length]
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    woken |= self.watched()
                    continue
                if mask & _IN_ISDIR or name.startswith(b"."):
                    # Nothing a sweep takes (sub-folders, dot-files: an editor's swap file,
                    # a copy in progress): a loop touching one kept the sweeper busy.
                    continue
                woken |= self._inboxes.get(wd, set())
                if mask & _IN_IGNORED:
                    # Forget the dead watch: the sweep reports the folder gone, and a folder
                    # made again at the path is watched anew when the list is next read.
                    for inbox_id in self._inboxes.pop(wd, set()):
                        self._watching.pop(inbox_id, None)
            if woken:
                return woken

    def close(self) -> None:
        trio.lowlevel.notify_closing(self._fd)
        os.close(self._fd)


def open_watch() -> FolderWatch | None:
    """An inotify watch, or None where the platform has none."""
    name = ctypes.util.find_library("c")
    if not name or not hasattr(os, "O_CLOEXEC"):
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        init = libc.inotify_init1
    except (OSError, AttributeError):
        return None
    fd = init(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:
        log.warning("inotify unavailable: inboxes are swept on their interval only",
                    extra={"action": "inbox.no_notifications", "error": os.strerror(ctypes.get_errno())})
        return None
    return FolderWatch(libc, fd)
