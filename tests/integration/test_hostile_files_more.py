"""More hostile files and uploads (SPEC §3, §6, §7; issue 12), beyond test_hostile_files.py:
what a client sees of each, through the HTTP API and the worker pool under the limits
of ``extraction.*``.

- DOCX tables python-docx reads in time quadratic in their merged rows, or expands
  a cell per grid column it spans (gridSpan 2^31), and a paragraph of many runs
  (an XPath per run), read in time;
- DOCX tables of more cells than ``extraction.max_cells``: DOCUMENT_TOO_LARGE;
- a TIFF of 40,000 frames, whose count Pillow takes in quadratic time: TOO_MANY_PAGES
  at once, not after the parse timeout; an animated PNG, one picture, not a page per frame;
- an XLSX whose shared strings exhaust ``extraction.max_memory``: PARSE_OUT_OF_MEMORY,
  not a CORRUPTED_FILE that blames the file;
- a multipart file name holding a NUL or a line break (``filename*=UTF-8''a%00b``):
  a NUL PostgreSQL refuses (a 500 on upload), a line break no header carries (a 500
  on every download of the file).
"""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from typing import Any

from hostile_docs import TEST_LIMITS, _docx_parts, _write_zip, xlsx_parts
from jobs_helpers import INVOICE_RESULT, INVOICE_TXT, create_job, running_workers, wait_for_status


def with_limits(services: Any, **changes: Any) -> None:
    """`TEST_LIMITS` and `changes` for the pool (as a SIGHUP would apply them)."""
    config = services.config
    services.config = dataclasses.replace(
        config, extraction=dataclasses.replace(config.extraction, **{**TEST_LIMITS, **changes}))


_LABELS = b"<w:p><w:r><w:t>Invoice Number: INV-42</w:t></w:r></w:p><w:p><w:r><w:t>Total: 12.50</w:t></w:r></w:p>"


def docx_merged_rows(path: Path, rows: int = 2000, columns: int = 40) -> Path:
    """The invoice's labels, then a table whose every column is one cell merged
    down `rows` rows (28 KB): python-docx walks up the table from each merged cell."""
    first = b"<w:tr>" + b'<w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr><w:p/></w:tc>' * columns + b"</w:tr>"
    merged = (b"<w:tr>" + b"<w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc>" * columns + b"</w:tr>") * rows
    return _write_zip(path, _docx_parts(_LABELS + b"<w:tbl>" + first + merged + b"</w:tbl>"))


def docx_wide_span(path: Path) -> Path:
    """The invoice's labels, then a table of one cell spanning 2^31 - 1 grid columns (1 KB)."""
    cell = b'<w:tc><w:tcPr><w:gridSpan w:val="2147483647"/></w:tcPr><w:p><w:r><w:t>Note</w:t></w:r></w:p></w:tc>'
    return _write_zip(path, _docx_parts(_LABELS + b"<w:tbl><w:tr>" + cell + b"</w:tr></w:tbl>"))


def docx_many_runs(path: Path, runs: int = 80_000) -> Path:
    """The invoice's labels, then one paragraph of a hyperlink and `runs` one-letter runs
    (5 KB): python-docx evaluates an XPath per run whose cost grows with the document."""
    paragraph = b"<w:p><w:hyperlink><w:r><w:t>a</w:t></w:r></w:hyperlink>" + b"<w:r><w:t>x</w:t></w:r>" * runs
    return _write_zip(path, _docx_parts(_LABELS + paragraph + b"</w:p>"))


def xlsx_empty_strings(path: Path, strings: int = 13_000_000) -> Path:
    """A workbook of one cell whose shared-strings table lists `strings` empty
    strings (65 MB inflated, 100 KB on disk): openpyxl keeps each in a list."""
    return _write_zip(path, xlsx_parts(
        b"<si/>" * strings, b'<sheetData><row r="1"><c r="A1" t="s"><v>0</v></c></row></sheetData>'))


async def test_merged_and_wide_docx_tables_and_a_paragraph_of_many_runs_are_read_in_time(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    # Before: the merged rows met extraction.parse_timeout (PARSE_TIMEOUT after 10
    # minutes under the defaults), the wide span took 1.8 GB and failed CORRUPTED_FILE, the
    # paragraph of 80,000 runs took 77 s (200,000: over 8 minutes). The merged table's
    # 80,000 cells are within the default extraction.max_cells.
    with_limits(services, max_cells=200_000)
    jobs = {name: await create_job(client, alice, schema_id, build(tmp_path / name).read_bytes(), name)
            for name, build in (("merged.docx", docx_merged_rows), ("wide.docx", docx_wide_span),
                                 ("runs.docx", docx_many_runs))}
    async with running_workers(services, workers=2):
        done = {name: await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED", deadline_s=60)
                for name, job in jobs.items()}
    for job in done.values():
        assert (job["status"], job["errorCode"], job["result"]) == ("COMPLETED", None, INVOICE_RESULT), job


def tiff_many_frames(path: Path, frames: int = 40_000) -> Path:
    """A TIFF of `frames` one-pixel frames sharing one pixel (4 MB), written header by
    header (Pillow's own writer takes minutes for as many): Pillow's frame count walks
    them in time quadratic in their number."""
    import struct

    entries = [(256, 3, 1), (257, 3, 1), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, 8), (278, 3, 1),
               (279, 4, 1)]  # width, height, bits, no compression, black is zero, strip at 8, one row of one byte
    size = 2 + 12 * len(entries) + 4
    data = bytearray(b"II*\x00" + struct.pack("<I", 12) + b"\xff\x00\x00\x00")
    for index in range(frames):
        following = 12 + (index + 1) * size if index + 1 < frames else 0
        data += struct.pack("<H", len(entries))
        for tag, kind, value in entries:
            packed = struct.pack("<I", value) if kind == 4 else struct.pack("<HH", value, 0)
            data += struct.pack("<HHI", tag, kind, 1) + packed
        data += struct.pack("<I", following)
    path.write_bytes(bytes(data))
    return path


async def test_a_tiff_of_many_frames_fails_as_too_many_pages_at_once(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    # Before: counting the frames took 10 s (an hour for a few hundred thousand), past this timeout.
    with_limits(services, parse_timeout_s=5)
    job = await create_job(client, alice, schema_id, tiff_many_frames(tmp_path / "frames.tiff").read_bytes(),
                           "frames.tiff")
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED", deadline_s=60)
    assert (done["status"], done["errorCode"]) == ("FAILED", "TOO_MANY_PAGES"), done


def docx_many_cells(path: Path, rows: int = 2_000, columns: int = 12) -> Path:
    """The invoice's labels, then a table of `rows` × `columns` one-letter cells (24,000, 30 KB)."""
    row = b"<w:tr>" + b"<w:tc><w:p><w:r><w:t>x</w:t></w:r></w:p></w:tc>" * columns + b"</w:tr>"
    return _write_zip(path, _docx_parts(_LABELS + b"<w:tbl>" + row * rows + b"</w:tbl>"))


async def test_docx_tables_past_max_cells_are_too_large(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    # Before: a DOCX table's cells were not counted (180,000 cost the rules 54 s).
    with_limits(services)  # max_cells 20,000
    job = await create_job(client, alice, schema_id, docx_many_cells(tmp_path / "cells.docx").read_bytes(),
                           "cells.docx")
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED", deadline_s=60)
    assert (done["status"], done["errorCode"]) == ("FAILED", "DOCUMENT_TOO_LARGE"), done
    assert "extraction.max_cells (20,000)" in done["errorMessage"], done


async def test_shared_strings_past_the_memory_limit_fail_as_out_of_memory_not_as_corrupted(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    with_limits(services, max_memory_bytes=400 * 1024**2, max_part_size_bytes=64 * 1024**2, parse_timeout_s=90)
    data = xlsx_empty_strings(tmp_path / "strings.xlsx").read_bytes()
    job = await create_job(client, alice, schema_id, data, "strings.xlsx")
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED", deadline_s=120)
    assert (done["status"], done["errorCode"]) == ("FAILED", "PARSE_OUT_OF_MEMORY"), done
    assert "extraction.max_memory (419,430,400 bytes)" in done["errorMessage"]


def _upload(disposition: bytes, schema_id: str) -> tuple[bytes, dict[str, str]]:
    """A job upload whose file part has the raw Content-Disposition parameters `disposition`."""
    boundary = "docex" + secrets.token_hex(12)
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="type"\r\n\r\nEXTRACTION\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="schemaId"\r\n\r\n{schema_id}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; ').encode()
    body += disposition + b"\r\nContent-Type: text/plain\r\n\r\n" + INVOICE_TXT + f"\r\n--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


async def test_control_characters_in_a_file_name_are_dropped_and_the_file_downloads(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    names = {
        b'filename="inv\x00oice.txt"': "invoice.txt",
        b"filename*=UTF-8''inv%00oice.txt": "invoice.txt",
        b"filename*=UTF-8''invoice%0D%0ASet-Cookie%3A%20a%3Db.txt": "invoiceSet-Cookie: a=b.txt",
        b"filename*=UTF-8''%0A%1B": "upload",
    }
    for disposition, stored in names.items():
        body, content_type = _upload(disposition, schema_id)
        r = await client.post("/api/jobs", data=body, headers={**alice, **content_type})
        job = await r.get_json()
        assert r.status_code == 201, job
        assert job["fileName"] == stored
        r = await client.get(f"/api/jobs/{job['id']}/file", headers=alice)
        assert r.status_code == 200, disposition
        assert await r.get_data() == INVOICE_TXT
        assert "\n" not in r.headers["Content-Disposition"] and "\r" not in r.headers["Content-Disposition"]


def animated_png(path: Path, frames: int = 300) -> Path:
    """An animated PNG of `frames` frames of a line of text each (a few KB)."""
    from PIL import Image, ImageDraw

    pictures = []
    for index in range(frames):
        picture = Image.new("L", (240, 40), 255)
        ImageDraw.Draw(picture).text((8, 12), f"Total: {index}.50", fill=0)
        pictures.append(picture)
    pictures[0].save(path, format="PNG", save_all=True, append_images=pictures[1:])
    return path


async def test_an_animated_png_is_one_picture_not_a_page_per_frame(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    # Before: each of its frames was read by OCR as a page (300 frames: minutes for one picture).
    with_limits(services, parse_timeout_s=10)
    job = await create_job(client, alice, schema_id, animated_png(tmp_path / "frames.png").read_bytes(), "frames.png")
    async with running_workers(services, workers=1):
        done = await wait_for_status(client, alice, job["id"], "COMPLETED", "FAILED", deadline_s=60)
    assert (done["status"], done["pageCount"]) == ("COMPLETED", 1), (done["errorCode"], done["errorMessage"])
    r = await client.get(f"/api/jobs/{job['id']}/pages/2", headers=alice)
    assert r.status_code == 404 and "no page 2" in (await r.get_json())["message"]
