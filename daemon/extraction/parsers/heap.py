"""glibc's malloc in a parser process: what a parse freed goes back to the system.

glibc serves blocks of up to 32 MB from its heap and gives the heap back only
from its top, so the pages of an OCR reading's activations and of a decoded
page image stayed resident in the worker after it had moved on (0.3 to 1 GB
per worker that had read a scan) and its address space kept growing toward
``extraction.max_memory`` (RLIMIT_AS). `give_back` returns the heap's free
pages (``malloc_trim``); `one_arena` keeps every thread on the one heap.
Both do nothing where the C library is not glibc (musl, macOS).
"""

from __future__ import annotations

import ctypes
from typing import Any


def _glibc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _glibc()
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def give_back() -> None:
    """Return the free pages of every malloc arena to the system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def one_arena() -> None:
    """One malloc arena for the whole process: each thread that allocates
    would otherwise get its own, 64 MB of address space and a heap of its own
    to fragment. For a worker process, before its libraries start threads."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_ARENA_MAX, 1)
