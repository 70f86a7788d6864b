"""Throughput and accuracy of the extraction pipeline (`daemon.extraction`).

    .venv/bin/python bench/extract.py [--docs 6] [--pages 25] [--rounds 5] [--samples ../shared/samples]

Figures and targets:

  native    pages/s of extract() (rules provider) on multi-page native
            PDFs ÷ pages/s of a bare pypdfium2 loop (open, text page,
            get_text_range) over the same files in the same run      ≥ 0.70
            with the line items (four typed values with evidence per
            table row) and with the header fields only; one document at a
            time ("serial": the latency a job sees) and every document at
            once ("concurrent": what the worker pool gets from its
            trio-parallel processes)
  ocr       pages/s of extract() on scanned pages (PNG, 200 dpi)     (figure only)
  invoices  mean field accuracy on SAMPLES/invoices (PDF text layer,
            TXT), scored by SAMPLES/score.py                          ≥ 0.90
  receipts  mean field accuracy on SAMPLES/receipts and SAMPLES/receipts-extra (JPEG, OCR) ≥ 0.80
            by RapidOCR (the default engine, which the target is for); a
            table per set and engine (tesseract too where it is installed):
            each field's accuracy, the mean, the results with every field
            found ("complete"), CPU seconds per page of the worker processes
            (tesseract's included), and the highest RSS of a worker (with
            tesseract's process beside it) and of its address space (what
            extraction.max_memory limits); each set in fresh workers

The machine is shared and noisy: the bare loop and the pipeline run
alternately, round after round, and medians are compared. The documents are
generated here (reportlab) with a header, a 40-row line-item table and totals
on every page.

What the ratio compares: the bare loop runs in this process; extract() runs
each document in a trio-parallel worker process and brings its result back
(pickled), then builds resultMeta here. Two figures show what that process
model costs by itself, and where the time goes whatever the noise:

  bare loop in a worker   the same bare loop, one worker call per document
                          (the pipeline's process model), and its ratio
  bare loop + word boxes  the bare loop plus two pdfium calls per word (the
                          box of its first and last character), as cheaply as
                          the parser makes them: what any pipeline that gives
                          values a box pays before reading a line; its ratio
                          bounds the pipeline's
  CPU ms/page             of this process and of the worker processes
                          (utime + stime from /proc, Linux), per case; the
                          cpu_ratio is the bare loop's CPU ÷ the case's

Prints human-readable lines, then one JSON line with every figure. A missed
target is reported as MISS and does not fail the run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trio_parallel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit" / "extraction"))  # the test documents' generators
sys.path.insert(0, str(ROOT / "tests"))  # the parser processes' meter

from extraction_docs import write_table_pdf  # noqa: E402
from hostile_docs import ParserPeaks  # noqa: E402

from daemon.config import OCR_ENGINES, ExtractionConfig, load_config  # noqa: E402
from daemon.errors import JobError  # noqa: E402
from daemon.extraction.command import detect_type  # noqa: E402
from daemon.extraction.pipeline import extract, ocr_available  # noqa: E402
from daemon.jobs import filetypes  # noqa: E402

TARGET_RATIO = 0.70
TARGET_INVOICES = 0.90
TARGET_RECEIPTS = 0.80

HEADER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "description": "Invoice number"},
        "date": {"type": "string", "format": "date", "description": "Invoice date"},
        "total": {"type": "number", "description": "Total amount due"},
        "currency": {"type": "string", "description": "ISO 4217 currency code"},
    },
}
# The same with the line items: every row of every page becomes four typed values with evidence.
SCHEMA: dict[str, Any] = {
    **HEADER_SCHEMA,
    "properties": {
        **HEADER_SCHEMA["properties"],
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "quantity": {"type": "number"},
            "unit_price": {"type": "number"}, "amount": {"type": "number"}}}},
    },
}


def bare_loop(paths: list[Path]) -> int:
    import pypdfium2 as pdfium

    pages = 0
    for path in paths:
        pdf = pdfium.PdfDocument(str(path))
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            textpage.get_text_range()
            textpage.close()
            page.close()
            pages += 1
        pdf.close()
    return pages


def boxes_loop(paths: list[Path]) -> int:
    """The bare loop plus the least any pipeline with evidence must add: each
    word's box, from pdfium's box of its first and last character, through the
    parser's own cheapest ctypes call (no lines, no layout, no rules). Its ratio
    to the bare loop is the ceiling of the pipeline's ratio in Python."""
    import ctypes

    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    from daemon.extraction.parsers.pdf import _LOOSE_CHAR_BOX, _POINTER, _page_text

    rect = pdfium_c.FS_RECTF()
    into = _POINTER(ctypes.addressof(rect))
    pages = 0
    for path in paths:
        pdf = pdfium.PdfDocument(str(path))
        for index in range(len(pdf)):
            page = pdfium_c.FPDF_LoadPage(pdf.raw, index)
            textpage = pdfium_c.FPDFText_LoadPage(page)
            text = _page_text(textpage)
            handle = _POINTER(ctypes.cast(textpage, _POINTER).value)
            position = 0
            for word in text.split():
                start = text.find(word, position)
                position = start + len(word)
                _LOOSE_CHAR_BOX(handle, start, into)
                _LOOSE_CHAR_BOX(handle, position - 1, into)
            pdfium_c.FPDFText_ClosePage(textpage)
            pdfium_c.FPDF_ClosePage(page)
            pages += 1
        pdf.close()
    return pages


def bare_document(path: str) -> int:
    """The bare loop over one file, for a worker process."""
    return bare_loop([Path(path)])


async def bare_in_workers(paths: list[Path]) -> int:
    """The bare loop with the pipeline's process model: a worker call per document."""
    pages = 0
    for path in paths:
        pages += await trio_parallel.run_sync(bare_document, str(path))
    return pages


async def pipeline_serial(paths: list[Path], mime: str, schema: dict[str, Any] = SCHEMA) -> int:
    config = load_config(environ={})
    pages = 0
    for path in paths:
        pages += (await extract(path, mime, schema, config)).page_count
    return pages


async def pipeline_concurrent(paths: list[Path], mime: str, schema: dict[str, Any] = SCHEMA) -> int:
    config = load_config(environ={})
    counts: list[int] = []

    async def one(path: Path) -> None:
        counts.append((await extract(path, mime, schema, config)).page_count)

    async with trio.open_nursery() as nursery:
        for path in paths:
            nursery.start_soon(one, path)
    return sum(counts)


def timed(fn: Any, *args: Any) -> tuple[int, float]:
    started = time.perf_counter()
    pages = fn(*args)
    return pages, time.perf_counter() - started


def workers_cpu_s() -> float | None:
    """CPU seconds (user + system) used so far by this process's live child
    processes (the trio-parallel workers); None where /proc does not tell."""
    try:
        tasks = os.listdir(f"/proc/{os.getpid()}/task")
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for task in tasks:
        try:
            children = Path(f"/proc/{os.getpid()}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def timed_cpu(fn: Any, *args: Any) -> tuple[int, float, float, float | None]:
    """(pages, wall seconds, CPU seconds of this process, of the worker processes)."""
    workers = workers_cpu_s()
    main = time.process_time()
    pages, seconds = timed(fn, *args)
    main = time.process_time() - main
    after = workers_cpu_s()
    return pages, seconds, main, (after - workers if after is not None and workers is not None else None)


def throughput(paths: list[Path], rounds: int) -> dict[str, float]:
    trio.run(pipeline_serial, paths[:1], filetypes.PDF)  # start the worker processes
    runs: dict[str, list[float]] = {}
    cpu: dict[str, list[tuple[float, float | None]]] = {}
    cases: list[tuple[str, Any, tuple[Any, ...]]] = [
        ("bare", bare_loop, (paths,)),
        ("bare_worker", trio.run, (bare_in_workers, paths)),
        ("boxes", boxes_loop, (paths,)),
        ("serial", trio.run, (pipeline_serial, paths, filetypes.PDF)),
        ("concurrent", trio.run, (pipeline_concurrent, paths, filetypes.PDF)),
        ("header_serial", trio.run, (pipeline_serial, paths, filetypes.PDF, HEADER_SCHEMA)),
        ("header_concurrent", trio.run, (pipeline_concurrent, paths, filetypes.PDF, HEADER_SCHEMA)),
    ]
    for _ in range(rounds):
        for name, fn, args in cases:
            pages, seconds, main, workers = timed_cpu(fn, *args)
            runs.setdefault(name, []).append(pages / seconds)
            cpu.setdefault(name, []).append((1000 * main / pages, None if workers is None else 1000 * workers / pages))
    out = {f"{name}_pages_s": statistics.median(values) for name, values in runs.items()}
    for name in runs:
        if name != "bare":
            out[f"{name}_ratio"] = out[f"{name}_pages_s"] / out["bare_pages_s"]
    for name, values in cpu.items():
        out[f"{name}_main_cpu_ms"] = statistics.median(main for main, _ in values)
        workers = [w for _, w in values if w is not None]
        if len(workers) == len(values):
            out[f"{name}_workers_cpu_ms"] = statistics.median(workers)
            out[f"{name}_cpu_ms"] = statistics.median(main + w for main, w in values if w is not None)
    if "bare_cpu_ms" in out:
        for name in runs:
            if name != "bare" and f"{name}_cpu_ms" in out:
                out[f"{name}_cpu_ratio"] = out["bare_cpu_ms"] / out[f"{name}_cpu_ms"]
    return out


def cpu_note(figures: dict[str, Any], name: str) -> str:
    if f"{name}_cpu_ms" not in figures:
        return f"  CPU {figures[f'{name}_main_cpu_ms']:.2f} ms/page here"
    note = (f"  CPU {figures[f'{name}_cpu_ms']:.2f} ms/page ({figures[f'{name}_main_cpu_ms']:.2f} here + "
            f"{figures[f'{name}_workers_cpu_ms']:.2f} workers)")
    if f"{name}_cpu_ratio" in figures:
        note += f"  cpu_ratio {figures[f'{name}_cpu_ratio']:.2f}"
    return note


def ocr_throughput(pdf: Path, work: Path, pages: int) -> dict[str, float]:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(pdf))
    images = []
    for index in range(min(pages, len(document))):
        page = document[index]
        path = work / f"scan-{index}.png"
        page.render(scale=200 / 72).to_pil().convert("L").save(path, dpi=(200, 200))
        page.close()
        images.append(path)
    document.close()
    pages_done, seconds = timed(trio.run, pipeline_serial, images, filetypes.PNG)
    serial = pages_done / seconds
    pages_done, seconds = timed(trio.run, pipeline_concurrent, images, filetypes.PNG)
    return {"ocr_serial_pages_s": serial, "ocr_concurrent_pages_s": pages_done / seconds}


async def _extract_set(files: list[Path], schema: dict[str, Any], limit: int, engine: str,
                       peaks: ParserPeaks) -> dict[str, Any]:
    """Every file through extract() with `engine`, `limit` at a time, in fresh worker processes
    that `peaks` measures."""
    config = load_config(environ={"DOCEX_EXTRACTION_OCR_ENGINE": engine})
    results: dict[str, Any] = {}
    limiter = trio.CapacityLimiter(limit)

    async def one(path: Path) -> None:
        async with limiter:
            mime = detect_type(path)
            try:
                if mime is None:
                    raise JobError("UNSUPPORTED_FILE", "unsupported")
                results[path.stem] = (await extract(path, mime, schema, config)).result
            except JobError as exc:
                print(f"  {path.name}: {exc.code} {exc.message}")

    async with trio_parallel.cache_scope(), trio.open_nursery() as sampling:
        sampling.start_soon(peaks.sample)
        async with trio.open_nursery() as nursery:
            for path in files:
                nursery.start_soon(one, path)
        peaks.sample_once()  # the workers' last CPU figures, before the scope ends them
        sampling.cancel_scope.cancel()
    return results


def accuracy(samples: Path, name: str, suffixes: tuple[str, ...], work: Path,
             engine: str = ExtractionConfig.ocr_engine) -> dict[str, Any]:
    """Each field's accuracy and the mean (scored by score.py), the results with every
    field present, and what the worker processes took: CPU seconds per document, the
    highest RSS of a worker (with tesseract's process beside it) and of its address space."""
    folder = samples / name
    # receipts-extra/ is more receipts of the same kind: the receipts' schema, scored the same way.
    kind = "receipts" if name.startswith("receipts") else name
    schema = json.loads((samples / f"{kind}.schema.json").read_text())
    files = []
    for answer in sorted(folder.glob("*.json")):
        for suffix in suffixes:  # one document per answer: the first format present, in this order
            candidate = answer.with_suffix(suffix)
            if candidate.exists():
                files.append(candidate)
                break
    peaks = ParserPeaks()
    started = time.perf_counter()
    results = trio.run(_extract_set, files, schema, 4, engine, peaks)
    seconds = time.perf_counter() - started
    out = work / f"{name}.{engine}.results.json"
    out.write_text(json.dumps(results, indent=1))
    report = subprocess.run([sys.executable, str(samples / "score.py"), str(folder), str(out)],
                            capture_output=True, text=True, check=False).stdout
    fields: dict[str, float] = {}
    mean = None
    for line in report.splitlines():
        label, _, value = line.partition(":")
        if label == "mean field accuracy":
            mean = float(value)
        elif value:
            fields[label] = float(value.split()[0])
    return {"fields": fields, "mean": mean, "documents": len(files), "seconds": seconds,
            "complete": sum(1 for result in results.values()
                            if all(result.get(field) is not None for field in schema["properties"])),
            "cpu_s_per_doc": peaks.cpu_s / max(1, len(files)),
            "peak_rss_mb": peaks.worker_peak_bytes >> 20, "peak_address_mb": peaks.address_bytes >> 20}


def accuracy_table(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
    """One line per (set, engine): each field's accuracy, the mean, the complete results,
    CPU s/page and the peaks of a worker."""
    fields = list(rows[0][2]["fields"])
    head = (f"  {'set':15} {'engine':10}" + "".join(f" {field:>8}" for field in fields)
            + f" {'mean':>6} {'complete':>9} {'CPU s/page':>10} {'peak RSS':>9} {'peak VM':>8}")
    lines = [head]
    for name, engine, row in rows:
        mean = "-" if row["mean"] is None else f"{row['mean']:.3f}"
        lines.append(
            f"  {name:15} {engine:10}" + "".join(f" {row['fields'].get(field, 0):8.3f}" for field in fields)
            + f" {mean:>6} {row['complete']:>4}/{row['documents']:<4} {row['cpu_s_per_doc']:10.2f}"
            f" {row['peak_rss_mb']:>6} MB {row['peak_address_mb']:>5} MB")
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=6)
    parser.add_argument("--pages", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ocr-pages", type=int, default=4)
    parser.add_argument("--samples", type=Path, default=ROOT.parent / "shared" / "samples")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--only-accuracy", action="store_true", help="the sample sets only, no throughput")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="docex-bench-") as tmp:
        work = Path(tmp)
        if not args.only_accuracy:
            paths = []
            for seed in range(args.docs):
                path = work / f"native-{seed}.pdf"
                write_table_pdf(path, args.pages, seed)
                paths.append(path)
            print(f"native PDFs: {args.docs} documents x {args.pages} pages, {args.rounds} rounds")
            figures.update(throughput(paths, args.rounds))
            print(f"  bare pypdfium2 loop                   {figures['bare_pages_s']:8.1f} pages/s"
                  f"{cpu_note(figures, 'bare')}")
            print(f"  bare loop in a worker (per document)  {figures['bare_worker_pages_s']:8.1f} pages/s  "
                  f"ratio {figures['bare_worker_ratio']:.2f}{cpu_note(figures, 'bare_worker')}")
            print(f"  bare loop + word boxes (the ceiling)  {figures['boxes_pages_s']:8.1f} pages/s  "
                  f"ratio {figures['boxes_ratio']:.2f}{cpu_note(figures, 'boxes')}")
            for name, label in (("serial", "with line items, serial"), ("concurrent", "with line items, concurrent"),
                                ("header_serial", "header fields, serial"),
                                ("header_concurrent", "header fields, concurrent")):
                ratio = figures[f"{name}_ratio"]
                print(f"  pipeline, {label:28s}{figures[f'{name}_pages_s']:8.1f} pages/s  ratio {ratio:.2f}  "
                      f"{verdict(ratio >= TARGET_RATIO)}{cpu_note(figures, name)}")
            figures.update(ocr_throughput(paths[0], work, args.ocr_pages))
            print(f"OCR ({args.ocr_pages} scanned pages, 200 dpi)")
            print(f"  pipeline, serial        {figures['ocr_serial_pages_s']:8.2f} pages/s")
            print(f"  pipeline, concurrent    {figures['ocr_concurrent_pages_s']:8.2f} pages/s")
        if not args.skip_accuracy and (args.samples / "score.py").exists():
            invoices = accuracy(args.samples, "invoices", (".pdf", ".txt"), work)
            mean = invoices["mean"]
            figures["invoices_accuracy"] = mean
            print("invoices (rules provider, PDF text layer and TXT, scored by score.py)")
            print("  " + "  ".join(f"{field} {value:.3f}" for field, value in invoices["fields"].items())
                  + f"  mean {mean}  ({invoices['documents']} documents in {invoices['seconds']:.1f} s)")
            print(f"  target {TARGET_INVOICES:.2f}: {verdict(mean is not None and mean >= TARGET_INVOICES)}")
            # receipts-extra/ is the check against over-fitting: a rule kept for receipts/ must
            # hold there too, with both OCR engines.
            receipt_sets = [name for name in ("receipts", "receipts-extra") if (args.samples / name).is_dir()]
            engines = [engine for engine in OCR_ENGINES if ocr_available(engine)]
            rows = []
            for name in receipt_sets:
                for engine in engines:
                    row = accuracy(args.samples, name, (".jpg", ".png"), work, engine)
                    rows.append((name, engine, row))
                    key = f"{name}_{engine}"
                    figures[f"{key}_accuracy"] = row["mean"]
                    figures.update({f"{key}_{field}": value for field, value in row["fields"].items()})
                    figures.update({f"{key}_{what}": row[what] for what in
                                    ("complete", "cpu_s_per_doc", "peak_rss_mb", "peak_address_mb")})
                    if engine == ExtractionConfig.ocr_engine:
                        figures[f"{name}_accuracy"] = row["mean"]
            if rows:
                print("receipts (rules provider, OCR by each engine, scored by score.py; a worker's peaks)")
                print(accuracy_table(rows))
                for name, engine, row in rows:
                    if engine == ExtractionConfig.ocr_engine:
                        print(f"  {name} by {engine} (the default engine), target {TARGET_RECEIPTS:.2f}: "
                              f"{verdict(row['mean'] is not None and row['mean'] >= TARGET_RECEIPTS)}")
                missing = [engine for engine in OCR_ENGINES if engine not in engines]
                if missing:
                    print(f"  not measured (not installed): {', '.join(missing)}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
