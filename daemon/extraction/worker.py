"""What runs inside a trio-parallel worker process: one call per document.

The functions here take and return plain picklable data. A `JobError`
raised by a parser does not cross the process boundary as an exception (its
constructor takes keyword arguments pickle does not replay); it comes back as
a `Failure`, and so does any unexpected error of a parser library on the
file's bytes (``PARSE_FAILED``, with the traceback for the daemon's log) and
memory refused under the process's limit (``PARSE_OUT_OF_MEMORY``).
"""

from __future__ import annotations

import gc
import resource
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from daemon.errors import JobError
from daemon.extraction.document import Document
from daemon.extraction.learning import reading_of
from daemon.extraction.parsers import ParseOptions, heap, parse

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Failure:
    code: str
    message: str
    detail: str = ""  # traceback of an unexpected error, for the log only


@dataclass(frozen=True, slots=True)
class RulesOutcome:
    page_count: int
    result: dict[str, Any]
    fields: dict[str, Any]
    # What learning keeps of the document (`daemon.extraction.learning.reading_of`); None
    # when the job does not learn (the reading of 400 lines is not made, nor sent back).
    reading: list[list[Any]] | None


def _collector_paused(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` with the cyclic garbage collector off.

    A page makes hundreds of small objects (words, lines, label matches) that
    reference counting frees; none of them form cycles, yet every 700
    allocations the collector would walk them all again, the growing
    document with them. Off for the call (a worker makes one call at a time)
    and back on once `fn` has returned, so that what it made and dropped is
    freed before the collector looks again: a tenth of the worker's time on
    native PDFs.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return fn(*args)
    finally:
        if enabled:
            gc.enable()
        heap.give_back()  # what the parse freed (its decoded pages, a reading's activations)


def parse_document(path: str, mime_type: str, options: ParseOptions) -> Document | Failure:
    """Parse a file (for the AI providers, which need the whole text)."""
    return _collector_paused(_parse, path, mime_type, options)


def limit_memory(max_bytes: int) -> None:
    """Cap this process's address space (RLIMIT_AS) at `max_bytes`, before each parse.

    An allocation past it fails: Python raises MemoryError (that parse fails,
    the process lives on) and a C library gets NULL (most report an error;
    one that aborts takes only this worker process down). Set per call, not
    once per process, so that a reloaded ``extraction.max_memory`` applies to
    workers already running. An address-space limit counts what libraries
    reserve but never touch (onnxruntime, thread stacks), not only what they
    use: README "Extraction" gives the figures measured for each OCR engine.
    """
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        max_bytes = min(max_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, hard))


def _out_of_memory(options: ParseOptions) -> Failure:
    return Failure("PARSE_OUT_OF_MEMORY",
                   f"reading the document needs more memory than extraction.max_memory "
                   f"({options.max_memory_bytes:,} bytes); raise it in the configuration to read this document")


def _parse(path: str, mime_type: str, options: ParseOptions) -> Document | Failure:
    limit_memory(options.max_memory_bytes)
    try:
        return parse(Path(path), mime_type, options)
    except JobError as exc:
        return Failure(exc.code, exc.message)
    except MemoryError:
        pass  # answered below: inside the handler its traceback still holds what the parse made
    except Exception as exc:
        return Failure("PARSE_FAILED", f"the document could not be parsed ({type(exc).__name__})",
                       traceback.format_exc())
    return _out_of_memory(options)


def extract_with_rules(path: str, mime_type: str, options: ParseOptions, definition: dict[str, Any],
                       keep_reading: bool) -> RulesOutcome | Failure:
    """Parse a file and run the rules provider on it, in the same process: only
    the result (and the reading learning keeps, if `keep_reading`) crosses back,
    not the document."""
    return _collector_paused(_extract_with_rules, path, mime_type, options, definition, keep_reading)


def _extract_with_rules(path: str, mime_type: str, options: ParseOptions, definition: dict[str, Any],
                        keep_reading: bool) -> RulesOutcome | Failure:
    from daemon.extraction.providers.rules.engine import extract_rules

    document = _parse(path, mime_type, options)
    if isinstance(document, Failure):
        return document
    try:
        result, fields = extract_rules(document, definition)
        return RulesOutcome(document.page_count, result, fields, reading_of(document) if keep_reading else None)
    except MemoryError:
        # Answered below, with the document let go: inside the handler its traceback holds
        # what the rules made, and the answer's own few bytes were refused again.
        del document
    except Exception as exc:
        return Failure("INTERNAL_ERROR", f"the rules provider failed ({type(exc).__name__})",
                       traceback.format_exc())
    return _out_of_memory(options)

