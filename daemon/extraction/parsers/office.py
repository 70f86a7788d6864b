"""DOCX (python-docx) and XLSX (openpyxl), laid out on the synthetic grid.

DOCX: paragraphs are lines, tables are table lines, an explicit page break
starts a new page; headers and footers of the first section frame the first
and last page. XLSX: each sheet is a page, each row a table line; dates come
out as ISO 8601 and numbers as written in the cell's value, so the providers
read them back exactly.

Both are ZIP archives: a broken archive, a missing part or malformed XML is
``CORRUPTED_FILE``; so is an archive that would inflate past `MAX_UNZIPPED`
(a zip bomb would exhaust the worker before the library noticed). A part
inflating past ``extraction.max_part_size`` (python-docx builds a tree of
the whole document.xml, ~10 bytes of memory per byte of XML), or a workbook or
a document's tables of more than ``extraction.max_cells`` cells, is
``DOCUMENT_TOO_LARGE``.
"""

from __future__ import annotations

import datetime as dt
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daemon.errors import PermanentJobError
from daemon.extraction.document import Document, Line, Page, grid_page, grid_table_lines, grid_text_line
from daemon.extraction.parsers.base import ParseOptions, check_pages, corrupted, refused_memory, too_large

# All parts together at most (python-docx holds every part, images too, in memory).
MAX_UNZIPPED = 512 * 1024 * 1024
# Rows read per sheet at most; a page of a spreadsheet is not a novel.
MAX_ROWS_PER_SHEET = 20_000
_CHUNK = 1024 * 1024


def _check_archive(path: Path, kind: str, required: str, options: ParseOptions) -> None:
    """Refuse an archive before a library inflates it: every part within
    ``extraction.max_part_size`` by its declared size and by the bytes it
    actually inflates to (read here once, in chunks; zipfile stops at the
    declared size and checks the CRC, so a part that lies about its size is
    damaged), all parts within `MAX_UNZIPPED`.
    """
    limit = options.max_part_size_bytes
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if sum(info.file_size for info in infos) > MAX_UNZIPPED:
                raise corrupted(kind, "it inflates to more than 512 MiB")
            if required not in {info.filename for info in infos}:
                raise corrupted(kind, f"the archive has no {required}")
            for info in infos:
                if info.file_size > limit:
                    raise _part_too_large(kind, info.filename, f"{info.file_size:,} bytes", limit)
                inflated = 0
                with archive.open(info) as member:
                    while chunk := member.read(_CHUNK):
                        inflated += len(chunk)
                        if inflated > limit:
                            raise _part_too_large(kind, info.filename, f"more than {limit:,} bytes", limit)
    except zipfile.BadZipFile as exc:
        raise corrupted(kind, f"the archive is damaged ({exc})") from exc
    except (zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise corrupted(kind, exc) from exc


def _unread(kind: str, exc: Exception, where: str = "") -> Exception:
    """What a library's failure to read a part means: extraction.max_memory refused it
    (MemoryError: PARSE_OUT_OF_MEMORY, the setting to raise), or CORRUPTED_FILE."""
    if refused_memory(exc):
        return MemoryError()
    return corrupted(kind, f"{where}{exc}" if where else exc)


def _part_too_large(kind: str, name: str, size: str, limit: int) -> PermanentJobError:
    return too_large(f"the {kind}'s part {name} inflates to {size}", "max_part_size", limit)


def parse_docx(path: Path, options: ParseOptions) -> Document:
    _check_archive(path, "DOCX document", "word/document.xml", options)
    try:
        import docx

        document = docx.Document(str(path))
        blocks = list(_docx_blocks(document))
    except PermanentJobError:
        raise
    except Exception as exc:  # python-docx and lxml raise many types on malformed parts
        raise _unread("DOCX document", exc) from exc
    pages: list[list[Line]] = [[]]
    row = 0
    cells = 0
    for block in blocks:
        if block is None:  # page break
            pages.append([])
            row = 0
            check_pages(len(pages), options)
            continue
        if isinstance(block, str):
            for text in block.split("\n"):
                line = grid_text_line(row, text)
                if line is not None:
                    pages[-1].append(line)
                row += 1
        else:
            cells += sum(len(cells_of_row) for cells_of_row in block)
            if cells > options.max_cells:
                raise too_large(f"the DOCX document's tables have more than {options.max_cells:,} cells",
                                "max_cells", options.max_cells)
            pages[-1].extend(grid_table_lines(row, block))
            row += len(block) + 1
    if len(pages) > 1 and not pages[-1]:
        pages.pop()
    check_pages(len(pages), options)
    return Document(tuple(grid_page(n, lines) for n, lines in enumerate(pages, start=1)))


def _docx_blocks(document: Any) -> Iterator[str | list[list[str]] | None]:
    """Text of paragraphs, rows of tables and None for page breaks, in order."""
    from docx.table import Table

    section = document.sections[0] if document.sections else None
    if section is not None and not section.header.is_linked_to_previous:
        for paragraph in section.header.paragraphs:
            yield _paragraph_text(paragraph._p)[0]
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            yield _docx_table(block)
            continue
        text, breaks = _paragraph_text(block._p)
        if block._p.pPr is not None and block._p.pPr.find(_W + "pageBreakBefore") is not None:
            yield None
        yield text
        for _ in range(breaks):
            yield None
    if section is not None and not section.footer.is_linked_to_previous:
        for paragraph in section.footer.paragraphs:
            yield _paragraph_text(paragraph._p)[0]


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
# What a run's inner elements read as (python-docx's Run.text); a w:br by its type.
_RUN_TEXT = {_W + "tab": "\t", _W + "ptab": "\t", _W + "cr": "\n", _W + "noBreakHyphen": "-"}


def _paragraph_text(p: Any) -> tuple[str, int]:
    """A paragraph's text as python-docx's `Paragraph.text` reads it (its runs', those of
    its hyperlinks too), and how many page breaks it holds, in one walk of its children:
    python-docx evaluates an XPath per run, whose cost grows with the document (a 5 KB
    paragraph of 80,000 runs took 77 s)."""
    parts: list[str] = []
    breaks = 0
    for child in p:
        if child.tag == _W + "r":
            runs: Any = (child,)
        elif child.tag == _W + "hyperlink":
            runs = child.iterchildren(_W + "r")
        else:
            continue
        for run in runs:
            for element in run:
                tag = element.tag
                if tag == _W + "t":
                    parts.append(element.text or "")
                elif tag == _W + "br":
                    kind = element.get(_W + "type", "textWrapping")
                    if kind == "textWrapping":
                        parts.append("\n")
                    elif kind == "page":
                        breaks += 1
                elif tag in _RUN_TEXT:
                    parts.append(_RUN_TEXT[tag])
    return "".join(parts), breaks


def _docx_table(table: Any) -> list[list[str]]:
    """Each row's cell texts, a merged cell once where it spans grid columns.

    Not python-docx's `_Row.cells`, which yields a cell once per grid column it
    spans (a 900-byte file with gridSpan 2147483647 allocated gigabytes) and
    finds the cell a vertically merged one continues by walking up the table
    from each continuing cell, row after row (a 30 KB table of 3,000 merged rows
    outlasted the 10-minute parse timeout). Here the cell each grid column of
    the row above holds is kept, so each row costs its own cells. A continuing
    cell with nothing above it (which python-docx refuses) stands for itself.
    """
    rows: list[list[str]] = []
    texts: dict[Any, str] = {}
    above: dict[int, Any] = {}  # grid column -> the cell (w:tc) that holds it, in the row above
    for row in table.rows:
        tr = row._tr
        holds: dict[int, Any] = {}
        cells: list[str] = []
        previous = None
        column = tr.grid_before
        for tc in tr.tc_lst:
            cell = above.get(column, tc) if tc.vMerge == "continue" else tc
            holds[column] = cell
            # A merged cell appears once, however many grid columns it spans.
            if cell is not previous:
                if cell not in texts:
                    texts[cell] = "\n".join(_paragraph_text(p)[0] for p in cell.iterchildren(_W + "p"))
                cells.append(texts[cell])
            previous = cell
            column += tc.grid_span
        above = holds
        rows.append(cells)
    return rows


def parse_xlsx(path: Path, options: ParseOptions) -> Document:
    _check_archive(path, "XLSX workbook", "xl/workbook.xml", options)
    # A handle, not a path: openpyxl refuses paths without an .xlsx extension, and
    # blobs have none. Read-only workbooks read lazily, so it stays open until the end.
    handle = path.open("rb")
    try:
        import openpyxl

        workbook = openpyxl.load_workbook(handle, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl and lxml raise many types on malformed parts
        handle.close()
        raise _unread("XLSX workbook", exc) from exc
    try:
        sheets = workbook.worksheets
        check_pages(len(sheets), options)
        pages: list[Page] = []
        cells = 0
        for number, sheet in enumerate(sheets, start=1):
            rows: list[list[str]] = []
            try:
                for values, _ in zip(sheet.iter_rows(values_only=True), range(MAX_ROWS_PER_SHEET), strict=False):
                    # Counted as read: a sheet that claims the last column pads every row to 16,384 cells.
                    cells += len(values)
                    if cells > options.max_cells:
                        raise too_large(f"the XLSX workbook has more than {options.max_cells:,} cells",
                                        "max_cells", options.max_cells)
                    rows.append([_cell_text(value) for value in values])
            except PermanentJobError:
                raise
            except Exception as exc:
                raise _unread("XLSX workbook", exc, f"sheet {sheet.title!r}: ") from exc
            while rows and not any(rows[-1]):
                rows.pop()
            pages.append(grid_page(number, grid_table_lines(0, _trim_columns(rows))))
        return Document(tuple(pages))
    finally:
        workbook.close()
        handle.close()


def _trim_columns(rows: list[list[str]]) -> list[list[str]]:
    # Leading empty columns would only push every cell to the right.
    used = [i for row in rows for i, cell in enumerate(row) if cell]
    if not used:
        return rows
    first, last = min(used), max(used)
    return [row[first : last + 1] for row in rows]


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(timespec="seconds")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(value).strip()
