"""Hostile files under the default limits: outcome, seconds and peak RSS of each.

    .venv/bin/python bench/hostile.py [--ocr-engine tesseract] [--only NAME ...]

Builds the files of tests/hostile_docs.py at the sizes of issue 12 (a 40 MB
CSV, 20 million fields on one line, a DOCX inflating to 480 MB, a
12,000-pixel PNG, a 100-inch blank PDF page, ...), reads each through
extract() (the path a job takes: its type told from its bytes, the parse in a
trio-parallel worker under the limits of ``extraction.*``) with the default
configuration, and prints one line per file:

  outcome   COMPLETED, or the errorCode the job would fail with
  seconds   wall time of extract()
  peak RSS  the highest RSS of a parser process with its children (each file
            gets fresh workers; tesseract's process beside its worker)
  peak VM   the highest address space of a parser process: what
            extraction.max_memory (RLIMIT_AS) limits

then one JSON line with every figure. The machine is shared: seconds vary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trio_parallel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the hostile files' generators
sys.path.insert(0, str(ROOT / "tests" / "unit" / "extraction"))  # the invoice schema

from extraction_docs import SCHEMA  # noqa: E402
from hostile_docs import HOSTILE, ParserPeaks  # noqa: E402

from daemon.config import Config, load_config  # noqa: E402
from daemon.errors import JobError  # noqa: E402
from daemon.extraction.command import detect_type  # noqa: E402
from daemon.extraction.pipeline import extract  # noqa: E402


async def measure(path: Path, mime: str | None, config: Config) -> dict[str, Any]:
    """Outcome, seconds and peak RSS of extract() on `path`, in fresh worker processes."""
    peaks = ParserPeaks()
    started = time.perf_counter()
    if mime is None:
        outcome, message = "refused at upload (400)", ""
    else:
        async with trio_parallel.cache_scope(), trio.open_nursery() as nursery:
            nursery.start_soon(peaks.sample)
            try:
                await extract(path, mime, SCHEMA, config)
                outcome, message = "COMPLETED", ""
            except JobError as exc:
                outcome, message = exc.code, exc.message
            nursery.cancel_scope.cancel()
    return {"outcome": outcome, "seconds": round(time.perf_counter() - started, 2),
            "peak_rss_mb": peaks.worker_peak_bytes >> 20, "peak_address_mb": peaks.address_bytes >> 20,
            "message": message}


def run(config: Config, only: list[str]) -> dict[str, dict[str, Any]]:
    figures: dict[str, dict[str, Any]] = {}
    print(f"{'file':22} {'MB':>7}  {'outcome':20} {'s':>7} {'peak RSS MB':>12} {'peak VM MB':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for hostile in HOSTILE:
            if only and hostile.name not in only:
                continue
            path = (hostile.bench or hostile.build)(Path(tmp) / f"{hostile.name}.{hostile.suffix}")
            size_mb = round(path.stat().st_size / 1e6, 2)
            row = figures[hostile.name] = {"file_mb": size_mb,
                                           **trio.run(measure, path, detect_type(path), config)}
            path.unlink()
            print(f"{hostile.name:22} {size_mb:7.2f}  {row['outcome']:20} {row['seconds']:7.2f} "
                  f"{row['peak_rss_mb']:12} {row['peak_address_mb']:11}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ocr-engine", default=None, help="rapidocr (the default) or tesseract")
    parser.add_argument("--only", nargs="*", default=[], help="names of the files to build and read")
    args = parser.parse_args()
    config = load_config(environ={})
    if args.ocr_engine:
        config = dataclasses.replace(config, extraction=dataclasses.replace(config.extraction,
                                                                            ocr_engine=args.ocr_engine))
    limits = config.extraction
    print(f"limits: parse_timeout {limits.parse_timeout_s}s, max_memory {limits.max_memory_bytes >> 20} MiB, "
          f"max_pages {config.jobs.max_pages}, OCR by {limits.ocr_engine}")
    figures = run(config, args.only)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
