"""At most ``extraction.ocr_concurrency`` OCR readings at once across the
daemon's parser processes: OCR takes the most memory of any parse (a
RapidOCR reading ~0.5-1 GB for its duration), other parses are not held back.

A reading holds a slot: an exclusive `flock` on one of N files in a folder the
daemon made for its workers (`ParseOptions.ocr_slots`). The kernel drops a
process's locks when it ends, so a worker killed mid-reading (PARSE_TIMEOUT,
a crash) frees its slot. A reading that finds every slot taken polls until
one frees; the wait counts toward its job's ``extraction.parse_timeout``. A
smaller N after SIGHUP applies to the readings that start after it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from daemon.extraction.parsers.base import ParseOptions

# A reading lasts seconds: a waiting worker looks 20 times a second.
_POLL_S = 0.05


@contextmanager
def ocr_slot(options: ParseOptions) -> Iterator[None]:
    """Hold one of the OCR slots of `options` for the `with` block (none to hold without a folder)."""
    if not options.ocr_slots:
        yield
        return
    held = _take(Path(options.ocr_slots), options.ocr_concurrency)
    try:
        yield
    finally:
        os.close(held)  # and with it the lock


def _take(folder: Path, count: int) -> int:
    while True:
        for index in range(count):
            fd = os.open(folder / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        time.sleep(_POLL_S)
