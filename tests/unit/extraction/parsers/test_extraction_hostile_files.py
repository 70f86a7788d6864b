"""The hostile-file corpus (tests/hostile_docs.py) through extract(), the path
a job takes: the file's type told from its bytes as an upload's is, the parse
in a trio-parallel worker process under the limits of ``extraction.*``.

Each file ends COMPLETED or with its specific errorCode, no parser process
grows past ``extraction.max_memory``, and a normal document read at the same
time is read as usual. The limits are small (`TEST_LIMITS`) so that each file
meets its own in a second or two.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_parallel
from extraction_docs import INVOICE, SCHEMA
from hostile_docs import (
    HOSTILE,
    TEST_LIMITS,
    TEST_MAX_PAGES,
    Hostile,
    ParserPeaks,
    csv_huge,
    docx_many_paragraphs,
    png_huge,
)

from daemon.config import Config, load_config
from daemon.errors import JobError
from daemon.extraction.command import detect_type
from daemon.extraction.pipeline import Extraction, extract


def limited(**extraction: Any) -> Config:
    base = load_config(environ={})
    return dataclasses.replace(base, jobs=dataclasses.replace(base.jobs, max_pages=TEST_MAX_PAGES),
                               extraction=dataclasses.replace(base.extraction, **{**TEST_LIMITS, **extraction}))


async def outcome(path: Path, config: Config) -> tuple[str, str, Extraction | None]:
    """(COMPLETED or the errorCode, the error message, the extraction) of `path`."""
    mime = detect_type(path)
    assert mime is not None, f"{path.name} was refused at upload"
    try:
        extraction = await extract(path, mime, SCHEMA, config)
    except JobError as exc:
        return exc.code, exc.message, None
    return "COMPLETED", "", extraction


@pytest.fixture(params=HOSTILE, ids=[h.name for h in HOSTILE])
def hostile(request: pytest.FixtureRequest) -> Hostile:
    file: Hostile = request.param
    return file


async def test_a_hostile_file_ends_with_its_own_outcome_within_the_limits(tmp_path: Path, hostile: Hostile) -> None:
    path = hostile.build(tmp_path / f"{hostile.name}.{hostile.suffix}")
    config = limited()
    peaks = ParserPeaks()
    async with trio_parallel.cache_scope(), trio.open_nursery() as nursery:
        nursery.start_soon(peaks.sample)
        started = time.monotonic()
        code, message, _ = await outcome(path, config)
        elapsed = time.monotonic() - started
        nursery.cancel_scope.cancel()
    assert code == hostile.expected, message
    assert elapsed < config.extraction.parse_timeout_s
    if code == "DOCUMENT_TOO_LARGE":
        assert "over extraction.max_" in message and "raise it in the configuration" in message
    assert 0 < peaks.peak_bytes < config.extraction.max_memory_bytes


async def test_utf16_text_with_a_bom_is_read(tmp_path: Path) -> None:
    from hostile_docs import utf16_text

    code, message, extraction = await outcome(utf16_text(tmp_path / "notepad.txt"), limited())
    assert code == "COMPLETED", message
    assert extraction is not None
    assert extraction.result == {"invoice_number": "INV-77", "total": 123.45, "currency": "EUR"}


async def test_a_page_too_large_to_exist_is_a_corrupted_file(tmp_path: Path) -> None:
    from hostile_docs import pdf_huge_mediabox

    code, message, _ = await outcome(pdf_huge_mediabox(tmp_path / "tall.pdf"), limited())
    assert (code, message) == ("CORRUPTED_FILE", "the file is not a readable PDF: page 1 is 612×2.14748e+09 "
                               "points, outside the PDF page size limit of 14,400 points")


async def test_a_huge_blank_page_is_rendered_within_the_pixel_limit(tmp_path: Path) -> None:
    from daemon.extraction.parsers.base import ParseOptions
    from daemon.extraction.parsers.pdf import render_scale

    # 100 inches square: 30,000 px a side at 300 dpi, scaled down to the limit.
    scale = render_scale(1, 7200, 7200, ParseOptions(max_render_pixels=2_000_000))
    assert (7200 * scale) ** 2 == pytest.approx(2_000_000)
    assert render_scale(1, 612, 792, ParseOptions()) == 300 / 72  # a letter page keeps its 300 dpi


async def test_a_parse_past_its_time_is_killed_and_the_next_one_runs(
    tmp_path: Path, make_doc: Callable[..., Path]
) -> None:
    # 100,000 cells take the rules provider ~10 s: the limit kills the worker after 1 s.
    slow = csv_huge(tmp_path / "ledger.csv", 25_000)
    config = limited(parse_timeout_s=1, max_cells=10**7, max_text_chars=10**8)
    started = time.monotonic()
    code, message, _ = await outcome(slow, config)
    assert code == "PARSE_TIMEOUT", message
    assert "extraction.parse_timeout (1s)" in message
    assert time.monotonic() - started < 5
    code, message, extraction = await outcome(make_doc("pdf"), config)
    assert code == "COMPLETED", message
    assert extraction is not None and extraction.result["total"] == INVOICE["total"]


async def test_a_parse_past_its_memory_fails_and_the_worker_reads_the_next(
    tmp_path: Path, make_doc: Callable[..., Path]
) -> None:
    # 400 million pixels allowed, 400 MiB of address space not: decoding it needs more.
    config = limited(max_image_pixels=10**10, max_memory_bytes=400 * 1024**2)
    peaks = ParserPeaks()
    async with trio_parallel.cache_scope(), trio.open_nursery() as nursery:
        nursery.start_soon(peaks.sample)
        code, message, _ = await outcome(png_huge(tmp_path / "poster.png", 20_000), config)
        assert code == "PARSE_OUT_OF_MEMORY", message
        assert "extraction.max_memory (419,430,400 bytes)" in message
        code, message, extraction = await outcome(make_doc("pdf"), config)
        nursery.cancel_scope.cancel()
    assert code == "COMPLETED", message
    assert extraction is not None and extraction.result["total"] == INVOICE["total"]
    assert peaks.peak_bytes < 400 * 1024**2


@pytest.mark.parametrize("max_memory_mib", [260, 330, 400])
async def test_a_docx_whose_xml_tree_is_past_the_memory_limit_is_out_of_memory_not_corrupted(
    tmp_path: Path, max_memory_mib: int
) -> None:
    # Before: CORRUPTED_FILE, "unknown error": libxml2's ERR_NO_MEMORY, lxml's XMLSyntaxError.
    config = limited(max_memory_bytes=max_memory_mib * 1024**2, max_part_size_bytes=64 * 1024**2,
                     max_text_chars=10**8)
    code, message, _ = await outcome(docx_many_paragraphs(tmp_path / "paragraphs.docx"), config)
    assert code == "PARSE_OUT_OF_MEMORY", message
    assert f"extraction.max_memory ({max_memory_mib * 1024**2:,} bytes)" in message


async def test_a_normal_document_read_alongside_the_hostile_ones_completes(
    tmp_path: Path, make_doc: Callable[..., Path]
) -> None:
    config = limited()
    outcomes: dict[str, str] = {}

    async def read(name: str, path: Path) -> None:
        outcomes[name] = (await outcome(path, config))[0]

    normal = make_doc("pdf")
    async with trio.open_nursery() as nursery:
        for hostile in HOSTILE:
            nursery.start_soon(read, hostile.name, hostile.build(tmp_path / f"{hostile.name}.{hostile.suffix}"))
        nursery.start_soon(read, "normal", normal)
    assert outcomes == {"normal": "COMPLETED", **{h.name: h.expected for h in HOSTILE}}
