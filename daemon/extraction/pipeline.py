"""The extraction pipeline's entry point, the one call a worker makes.

    file ──parser (worker process)──▶ Document ──provider──▶ result + evidence

The parser runs in a trio-parallel worker process (pdfium is not
thread-safe, OCR is CPU-bound): one process call per document. The `rules`
provider runs in that same call, so only its result crosses back; the AI
providers get the parsed document and talk HTTP from the trio thread, and
their values are then located in the document for ``resultMeta.fields``.

The provider is the definition's ``x-docex-provider`` keyword if set, else
``extraction.provider``. Every result is then checked against the schema
(SPEC §7): a value of the wrong type or shape is RESULT_INVALID; a result that
only lacks required values is kept, with ``resultMeta.missing`` naming them and
``resultMeta.complete`` false, unless the definition says
``"x-docex-incomplete": "fail"``.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import trio
import trio_parallel

from daemon.config import PROVIDERS, Config, missing_key
from daemon.errors import PermanentJobError
from daemon.extraction import learning
from daemon.extraction.document import Document
from daemon.extraction.parsers.base import ParseOptions
from daemon.extraction.parsers.rapidocr import rapidocr_version
from daemon.extraction.providers.base import AIProvider, ProviderOutput
from daemon.extraction.worker import Failure, RulesOutcome, extract_with_rules, parse_document
from daemon.jobs.models import completeness
from daemon.jsonvalues import storable
from daemon.schemas.definition import PROVIDER_KEYWORD, check_result, incomplete_fails

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Extraction:
    result: dict[str, Any]
    # resultMeta: provider, model, durationMs, fields{pointer: evidence}, usage?, complete, missing
    meta: dict[str, Any]
    page_count: int
    # What the job keeps for learning ({"keys", "lines"}: `daemon.extraction.learning`);
    # None when learning is off for it.
    reading: dict[str, Any] | None = None


# `read_with(examples)` of the learned examples of a document's issuer, found by its
# fingerprint keys for the caller's user and schema (`learning.matches` of what the
# database holds). `read_with` runs in the lookup's own thread: a document read with its
# examples pays one hop off the trio thread, not two.
LearnedLookup = Callable[[list[str], Callable[[list[learning.Match]], Any]], Awaitable[Any]]


def provider_name(definition: dict[str, Any], config: Config) -> str:
    """The provider for a definition: its ``x-docex-provider``, else the configured default."""
    chosen = definition.get(PROVIDER_KEYWORD) or config.extraction.provider
    if chosen not in PROVIDERS:
        raise PermanentJobError(
            "AI_PROVIDER_ERROR", f"{PROVIDER_KEYWORD} must be one of {', '.join(PROVIDERS)} (got {chosen!r})"
        )
    return str(chosen)


def parse_options(config: Config) -> ParseOptions:
    limits = config.extraction
    return ParseOptions(max_pages=config.jobs.max_pages, ocr_engine=limits.ocr_engine,
                        ocr_languages=limits.ocr_languages, ocr_slots=_ocr_slots(),
                        ocr_concurrency=limits.ocr_concurrency, max_render_pixels=limits.max_render_pixels,
                        max_image_pixels=limits.max_image_pixels, max_cells=limits.max_cells,
                        max_text_chars=limits.max_text_chars, max_part_size_bytes=limits.max_part_size_bytes,
                        max_memory_bytes=limits.max_memory_bytes)


@functools.cache
def _ocr_slots() -> str:
    """The folder of this process's OCR slots (`parsers.slots`), made on first use, removed at exit."""
    folder = tempfile.mkdtemp(prefix="docex-ocr-slots-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def schema_of(definition: dict[str, Any]) -> dict[str, Any]:
    """The definition without docex's own ``x-docex-*`` keywords (providers get plain JSON Schema)."""
    return {k: v for k, v in definition.items() if not (isinstance(k, str) and k.startswith("x-docex-"))}


async def extract(
    path: Path,
    mime_type: str,
    definition: dict[str, Any],
    config: Config,
    *,
    client: httpx.AsyncClient | None = None,
    learned: LearnedLookup | None = None,
) -> Extraction:
    """Turn the file at `path` into a result for `definition`.

    Args:
        path: the document on local disk.
        mime_type: its type as told from its bytes (`daemon.jobs.filetypes`).
        definition: the schema's JSON Schema definition.
        config: the effective configuration (limits, provider settings).
        client: the HTTP client for AI providers; one is opened per call if None.
        learned: finds the learned examples of the document's issuer; None when
            learning is off for this job (nothing is then read with them, nor kept).

    Returns:
        the result, which matches the schema but may lack required values
        (``meta["complete"]`` false, ``meta["missing"]`` their JSON pointers).

    Raises:
        JobError: with a SPEC §6 errorCode: permanent (CORRUPTED_FILE,
            TOO_MANY_PAGES, OCR_FAILED, UNSUPPORTED_FILE, PARSE_FAILED,
            DOCUMENT_TOO_LARGE, PARSE_TIMEOUT, PARSE_OUT_OF_MEMORY,
            AI_PROVIDER_ERROR, RESULT_INVALID) or transient (AI_PROVIDER_TIMEOUT,
            AI_PROVIDER_RATE_LIMIT, AI_PROVIDER_ERROR on a 5xx).

    Cancellation: a parser worker process is killed; an HTTP call is abandoned.
    """
    started = time.perf_counter()
    name = provider_name(definition, config)
    schema = schema_of(definition)
    options = parse_options(config)
    if name == "rules":
        outcome = await in_worker(extract_with_rules, str(path), mime_type, options, schema, learned is not None,
                                  timeout_s=config.extraction.parse_timeout_s)
        assert isinstance(outcome, RulesOutcome)
        result, fields, reading = outcome.result, outcome.fields, None
        if learned is not None and outcome.reading is not None:
            reading = _reading(outcome.reading)
            result, fields = await learned(reading["keys"], functools.partial(
                learning.apply, outcome.reading, schema, result=result, fields=fields))
        meta: dict[str, Any] = {
            "provider": "rules",
            "model": None,
            "durationMs": _ms_since(started),
            "fields": fields,
        }
        return await _judged(definition, Extraction(result=result, meta=meta, page_count=outcome.page_count,
                                              reading=reading))

    document = await in_worker(parse_document, str(path), mime_type, options,
                               timeout_s=config.extraction.parse_timeout_s)
    assert isinstance(document, Document)
    provider = make_provider(name, config)
    reading = None
    examples = ""  # the issuer's learned examples, as worked examples for the prompt (bounded)
    if learned is not None:
        reading = _reading(learning.reading_of(document))
        examples = await learned(reading["keys"], learning.worked_examples)
    if client is None:
        async with httpx.AsyncClient(follow_redirects=False) as own:
            output = await provider.extract(document, schema, own, examples=examples)
    else:
        output = await provider.extract(document, schema, client, examples=examples)
    fields = await trio.to_thread.run_sync(_evidence, document, schema, output)
    meta = {
        "provider": name,
        "model": output.model,
        "durationMs": _ms_since(started),
        "fields": fields,
    }
    if output.usage is not None:
        meta["usage"] = output.usage
    return await _judged(definition, Extraction(result=output.result, meta=meta, page_count=document.page_count,
                                          reading=reading))


def _reading(lines: list[list[Any]]) -> dict[str, Any]:
    return {"keys": learning.fingerprint(lines), "lines": lines}


async def _judged(definition: dict[str, Any], extraction: Extraction) -> Extraction:
    """`extraction` with its completeness in resultMeta, if its result may complete a job.

    The result is checked in a thread: a document's line items can be thousands of rows
    (20,000 took a second to check), which on the event loop would stall every request.

    Raises:
        PermanentJobError: RESULT_INVALID for a value of the wrong type or shape, or for
            missing required values when the definition opted into failing.
    """
    result = await trio.to_thread.run_sync(storable, extraction.result)
    check = await trio.to_thread.run_sync(check_result, schema_of(definition), result)
    if check.problems or (check.missing and incomplete_fails(definition)):
        found = check.problems[:10]
        if check.missing:
            found.append("required values not found: " + ", ".join(check.missing[:20]))
        raise PermanentJobError("RESULT_INVALID", "Result does not match the schema: " + "; ".join(found))
    meta = await trio.to_thread.run_sync(storable, extraction.meta)  # its evidence quotes the values
    return Extraction(result=result, meta={**meta, **completeness(check.missing)},
                      page_count=extraction.page_count, reading=extraction.reading)


def make_provider(name: str, config: Config) -> AIProvider:
    """Raises: PermanentJobError AI_PROVIDER_ERROR for a provider docex does not know, or
    whose vendor's own service is asked without a key (`missing_key`)."""
    if (problem := missing_key(name, config)) is not None:
        raise PermanentJobError("AI_PROVIDER_ERROR", problem)
    if name == "openai":
        from daemon.extraction.providers.openai import OpenAIProvider

        return OpenAIProvider(config.openai)
    if name == "anthropic":
        from daemon.extraction.providers.anthropic import AnthropicProvider

        return AnthropicProvider(config.anthropic)
    raise PermanentJobError("AI_PROVIDER_ERROR", f"no provider named {name!r}")


def _evidence(document: Document, schema: dict[str, Any], output: ProviderOutput) -> dict[str, Any]:
    from daemon.extraction.providers.rules.locate import locate_values

    return {**locate_values(document, schema, output.result), **output.fields}


async def in_worker(fn: Callable[..., T | Failure], *args: Any, timeout_s: float = math.inf) -> T:
    """Run `fn(*args)` in a worker process; a `Failure` it returns is raised here.

    At most trio-parallel's default number of documents (one per CPU) are read at once, by
    jobs and page pictures alike; `timeout_s` counts from when a process is this call's:
    waiting for one behind slow documents is not reading this one (it failed with a
    PARSE_TIMEOUT that said "took longer", its document never read).

    Raises:
        PermanentJobError: the failure's code; PARSE_TIMEOUT after `timeout_s`
            (the worker process is killed, and trio-parallel starts another for
            the next call); PARSE_FAILED when the worker process died (a parser
            crash on hostile bytes, or a library that aborts on a failed
            allocation under ``extraction.max_memory``).
    """
    async with trio_parallel.current_default_worker_limiter():
        with trio.move_on_after(timeout_s) as deadline:
            try:
                # The slot is held already: this call must not wait for a second one.
                outcome: T | Failure = await trio_parallel.run_sync(fn, *args, kill_on_cancel=True,
                                                                    limiter=_SLOT_HELD)
            except trio_parallel.BrokenWorkerError as exc:
                log.error("parser worker died", extra={"action": "extraction.worker_died"})
                raise PermanentJobError(
                    "PARSE_FAILED", "the parser process died while reading the document (a crash of its "
                    "library, or memory refused under extraction.max_memory)") from exc
            except MemoryError as exc:  # refused where `fn` could not answer (sending its outcome back)
                raise PermanentJobError(
                    "PARSE_OUT_OF_MEMORY", "reading the document needs more memory than extraction.max_memory; "
                    "raise it in the configuration to read this document") from exc
    if deadline.cancelled_caught:
        log.warning("parser killed after %gs", timeout_s, extra={"action": "extraction.parse_timeout"})
        raise PermanentJobError(
            "PARSE_TIMEOUT", f"reading the document took longer than extraction.parse_timeout ({timeout_s:g}s); "
            "raise it in the configuration to read this document")
    if isinstance(outcome, Failure):
        if outcome.detail:
            log.error("parser failed unexpectedly: %s", outcome.message,
                      extra={"action": "extraction.parser_error", "traceback": outcome.detail})
        raise PermanentJobError(outcome.code, outcome.message)
    return outcome


# What `in_worker` gives trio-parallel once it holds one of its default slots.
_SLOT_HELD = trio.CapacityLimiter(math.inf)


_INSTALL = {"tesseract": "install the tesseract-ocr package",
            "rapidocr": "reinstall docex: rapidocr and onnxruntime are among its dependencies"}


def ocr_available(engine: str) -> bool:
    if engine == "rapidocr":
        return rapidocr_version() is not None
    return shutil.which("tesseract") is not None


def warn_if_ocr_missing(engine: str) -> bool:
    """Log a warning when the OCR engine is missing; True when it is present.

    The daemon checks at start and on each SIGHUP (an engine installed or configured since
    is seen then), `docex extract` once; never per job. OCR jobs without an engine fail
    with OCR_FAILED instead of crashing anything.
    """
    present = ocr_available(engine)
    if not present:
        log.warning(
            f"{engine} is not installed: images and scanned PDF pages will fail with OCR_FAILED "
            f"({_INSTALL.get(engine, '')})",
            extra={"action": "extraction.ocr_missing"},
        )
    return present


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)  # whole milliseconds, as every durationMs
