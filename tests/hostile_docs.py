"""Hostile documents, generated (never committed as blobs): bombs of each format,
deep nesting, huge pages, many frames, encrypted and broken PDFs, and UTF-16
text. Shared by the hostile-file tests (small sizes, small limits) and
bench/hostile.py (the sizes of issue 12, the default limits).

Each generator writes `path` and returns it; its size arguments say how
hostile it is. `HOSTILE` lists them with the outcome expected under the test
limits of `TEST_LIMITS`. `ParserPeaks` samples the peak RSS of this process's
descendants (the trio-parallel parser workers and, with tesseract, its processes).
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

# --- text -------------------------------------------------------------------------


def csv_huge(path: Path, rows: int = 20_000) -> Path:
    """A CSV of `rows` ordinary rows (40 MB at 800,000)."""
    line = "2024-01-15,Widget {0},3,12.50,37.50,Total\n"
    with path.open("w", encoding="utf-8") as fh:
        for start in range(0, rows, 10_000):
            fh.write("".join(line.format(i) for i in range(start, min(rows, start + 10_000))))
    return path


def csv_one_line(path: Path, fields: int = 100_000) -> Path:
    """Twenty short rows (what type detection looks at), then one line of `fields`
    empty fields (20 million in the issue)."""
    path.write_bytes(b"Item,Total\n" + b"".join(b"A%d,1.00\n" % i for i in range(20)) + b"," * fields + b"\n")
    return path


def html_quadratic(path: Path, cells: int = 4000) -> Path:
    """One table row of `cells` "Total" cells: every label used to read the rest
    of its line (60 KB took 75 s before the rules engine had a reach)."""
    path.write_text("<html><body><table><tr>" + "<td>Total</td>" * cells + "</tr></table></body></html>")
    return path


def labels_over_amounts(path: Path, repeats: int = 4000) -> Path:
    """Two lines of `repeats` "Total 1.00" each: every label read the whole line below it
    (a 14 KB PDF of such lines held a parser for its whole timeout)."""
    line = "Total 1.00 " * repeats
    path.write_text(f"{line}\n{line}\n")
    return path


def html_deep(path: Path, depth: int = 20_000) -> Path:
    """Elements and tables nested `depth` deep, never closed, with text at every level."""
    path.write_text("<html><body>" + "<div><span>Total 1.00" * depth + "<table><tr><td>x" * depth)
    return path


def utf16_text(path: Path) -> Path:
    """A small invoice as UTF-16 with its byte order mark (Windows Notepad's "Unicode")."""
    path.write_bytes("Invoice number: INV-77\nTotal: 123.45 EUR\n".encode("utf-16"))
    return path



def text_quote_backtracking(path: Path, size: int = 8192) -> Path:
    """Text whose head (what type detection reads) is `, "x` over and over: each of its
    delimiter-quote pairs is the start of a quoted field that never closes, which
    csv.Sniffer's quote patterns scan to the end from every one of them."""
    path.write_bytes(b"Item, Total\n" + (b', "x' * size)[:size])
    return path


def png_gray16(path: Path) -> Path:
    """The invoice's two lines, dark grey on white (scanned ink is never quite black), as a
    16-bit grayscale PNG (a scanner's "16-bit gray"): Pillow opens it in mode I;16, whose
    values run to 65,535."""
    from PIL import Image, ImageDraw

    page = Image.new("L", (700, 200), 255)
    draw = ImageDraw.Draw(page)
    draw.text((30, 50), "Invoice Number: INV-42", fill=40, font_size=28)
    draw.text((30, 110), "Total: 12.50", fill=40, font_size=28)
    page.convert("I").point(lambda value: value * 257).convert("I;16").save(path, format="PNG")
    return path


def tiff_in_mode(path: Path, mode: str) -> Path:
    """The invoice's two lines as a TIFF in Pillow's `mode`: CMYK (a print shop's scan),
    LAB, F (32-bit float greys), I (32-bit integer greys)."""
    from PIL import Image, ImageDraw

    page = Image.new("L", (700, 200), 255)
    draw = ImageDraw.Draw(page)
    draw.text((30, 50), "Invoice Number: INV-42", fill=0, font_size=28)
    draw.text((30, 110), "Total: 12.50", fill=0, font_size=28)
    page.convert("RGB").convert(mode).save(path, format="TIFF")
    return path

# --- Office -------------------------------------------------------------------------

_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
    'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
    'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>{}</Types>'
)
_RELS = ('<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
         '2006/relationships">{}</Relationships>')
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _docx_parts(body: bytes) -> dict[str, bytes]:
    main = ('<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'wordprocessingml.document.main+xml"/>')
    rel = ('<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
           'officeDocument" Target="word/document.xml"/>')
    return {
        "[Content_Types].xml": _CONTENT_TYPES.format(main).encode(),
        "_rels/.rels": _RELS.format(rel).encode(),
        "word/document.xml": b'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="' + _W.encode()
        + b'"><w:body>' + body + b"</w:body></w:document>",
    }


def _write_zip(path: Path, parts: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return path


def docx_bomb(path: Path, inflated_bytes: int = 8 * 1024**2) -> Path:
    """A DOCX whose document.xml inflates to about `inflated_bytes` (~480 MB in the issue)."""
    paragraph = b"<w:p><w:r><w:t>Total 1.00</w:t></w:r></w:p>"
    return _write_zip(path, _docx_parts(paragraph * (inflated_bytes // len(paragraph))))


def docx_many_paragraphs(path: Path, paragraphs: int = 600_000) -> Path:
    """A DOCX of `paragraphs` short paragraphs: 1.5 MB, whose document.xml (37 MB) lxml
    builds a tree of past a few hundred MiB."""
    body = b"".join(b"<w:p><w:r><w:t>word %d lorem ipsum dolor</w:t></w:r></w:p>" % n for n in range(paragraphs))
    return _write_zip(path, _docx_parts(body))


def docx_lying_sizes(path: Path) -> Path:
    """A DOCX whose document.xml declares (in its local header and the central
    directory) a tenth of the bytes it inflates to."""
    paragraph = b"<w:p><w:r><w:t>Invoice number INV-1</w:t></w:r></w:p>"
    _write_zip(path, _docx_parts(paragraph * 2000))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("word/document.xml")
    lie = struct.pack("<I", info.file_size // 10)
    local = info.header_offset
    data[local + 22 : local + 26] = lie  # local file header: uncompressed size
    central = data.find(b"PK\x01\x02")
    while data[central + 46 : central + 46 + 17] != b"word/document.xml":  # this part's central entry
        central = data.find(b"PK\x01\x02", central + 4)
    data[central + 24 : central + 28] = lie  # central directory: uncompressed size
    path.write_bytes(bytes(data))
    return path


def xlsx_parts(shared_strings: bytes, worksheet: bytes) -> dict[str, bytes]:
    """An XLSX's parts: one sheet whose <worksheet> holds `worksheet`, and a shared-strings
    table whose <sst> holds `shared_strings`."""
    ns = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    office = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    kind = "application/vnd.openxmlformats-officedocument.spreadsheetml"
    overrides = (f'<Override PartName="/xl/workbook.xml" ContentType="{kind}.sheet.main+xml"/>'
                 f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{kind}.worksheet+xml"/>'
                 f'<Override PartName="/xl/sharedStrings.xml" ContentType="{kind}.sharedStrings+xml"/>')
    return {
        "[Content_Types].xml": _CONTENT_TYPES.format(overrides).encode(),
        "_rels/.rels": _RELS.format(f'<Relationship Id="rId1" Type="{office}/officeDocument" '
                                    'Target="xl/workbook.xml"/>').encode(),
        "xl/workbook.xml": (f'<workbook xmlns="{ns}" xmlns:r="{office}"><sheets><sheet name="S" sheetId="1" '
                            'r:id="rId1"/></sheets></workbook>').encode(),
        "xl/_rels/workbook.xml.rels": _RELS.format(
            f'<Relationship Id="rId1" Type="{office}/worksheet" Target="worksheets/sheet1.xml"/>'
            f'<Relationship Id="rId2" Type="{office}/sharedStrings" Target="sharedStrings.xml"/>').encode(),
        "xl/sharedStrings.xml": f'<sst xmlns="{ns}">'.encode() + shared_strings + b"</sst>",
        "xl/worksheets/sheet1.xml": f'<worksheet xmlns="{ns}">'.encode() + worksheet + b"</worksheet>",
    }


def xlsx_long_cells(path: Path, cells: int = 10, characters: int = 100_000) -> Path:
    """An XLSX of a few KB: `cells` cells of one shared string of `characters` characters
    (ten of a MiB each held a worker for 169 s of the rules)."""
    shared = b"<si><t>" + b"Total 12.50 " * (characters // 12) + b"</t></si>"
    row = b"".join(b'<c t="s"><v>0</v></c>' for _ in range(cells))
    return _write_zip(path, xlsx_parts(shared, b'<sheetData><row r="1">' + row + b"</row></sheetData>"))


def xlsx_bomb(path: Path, strings: int = 50_000, rows: int = 2_000) -> Path:
    """An XLSX of `strings` shared strings, a sheet whose every cell up to
    column XFD refers to them, and a dimension claiming a million rows."""
    shared = b"".join(b"<si><t>Total %d</t></si>" % i for i in range(strings))
    row_cells = b"".join(b'<c t="s"><v>%d</v></c>' % (i % strings) for i in range(200))
    sheet_rows = b"".join(b'<row r="%d">' % r + row_cells + b'<c r="XFD%d" t="s"><v>0</v></c></row>' % r
                          for r in range(1, rows + 1))
    return _write_zip(path, xlsx_parts(
        shared, b'<dimension ref="A1:XFD1048576"/><sheetData>' + sheet_rows + b"</sheetData>"))


# --- images -----------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_huge(path: Path, side: int = 20_000) -> Path:
    """A valid white 1-bit PNG of side × side pixels in a few KB (12,000 px in the issue)."""
    row = b"\x00" + b"\xff" * ((side + 7) // 8)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", idat)
                     + _png_chunk(b"IEND", b""))
    return path


def webp_huge(path: Path, side: int = 16_383) -> Path:
    """A lossless WEBP whose header says side × side pixels (the largest WEBP allows; a valid
    one of that size is a few MB), with the pixels of a small picture after it."""
    from PIL import Image

    Image.new("RGB", (64, 64), "white").save(path, "WEBP", lossless=True)
    data = bytearray(path.read_bytes())
    bits = int.from_bytes(data[21:25], "little")
    data[21:25] = ((side - 1) | (side - 1) << 14 | (bits & ~0xFFFFFFF)).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


def tiff_frames(path: Path, frames: int = 50) -> Path:
    """A TIFF of `frames` small blank frames."""
    from PIL import Image

    first, *others = [Image.new("L", (64, 64), 255) for _ in range(frames)]
    first.save(path, format="TIFF", save_all=True, append_images=others)
    return path


# --- PDF --------------------------------------------------------------------------------


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF of `objects` (1 is the catalog) with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def pdf_blank_pages(path: Path, pages: int = 1, width: float = 612, height: float = 792,
                    extra: bytes = b"") -> Path:
    """`pages` pages without text of `width` × `height` points (a page at OCR's mercy)."""
    kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(pages))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %s %s] %s>>" % (
        str(width).encode(), str(height).encode(), extra) for _ in range(pages)]
    path.write_bytes(_pdf(objects))
    return path


def pdf_huge_mediabox(path: Path) -> Path:
    """A page 2^31 points high."""
    return pdf_blank_pages(path, height=2**31)


def pdf_big_page(path: Path, side: float = 7200) -> Path:
    """A blank page `side` points square (100 inches: 30,000 px a side at 300 dpi)."""
    return pdf_blank_pages(path, width=side, height=side)


def pdf_many_pages(path: Path, pages: int = 3000) -> Path:
    return pdf_blank_pages(path, pages=pages)


def pdf_deep_nesting(path: Path, depth: int = 100_000) -> Path:
    """A page whose dictionary holds an array nested `depth` deep."""
    return pdf_blank_pages(path, extra=b"/Deep " + b"[" * depth + b"]" * depth + b" ")


def pdf_encrypted(path: Path) -> Path:
    """An invoice page encrypted with a user password nobody gave docex."""
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), encrypt="secret")
    pdf.drawString(72, 720, "Invoice number INV-1   Total 10.00")
    pdf.save()
    return path


def pdf_broken(path: Path) -> Path:
    """A PDF header and a trailer with garbage between."""
    path.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >>\n" + os.urandom(4096) + b"\n%%EOF\n")
    return path


# --- the corpus -----------------------------------------------------------------------------

# The limits the tests run under (config `extraction.*`): small, so that each
# file reaches its limit in a second or two. The address space is the exception: a
# parser process with RapidOCR's models loaded takes ~1 GiB of it before it reads a
# pixel, so under 1 GiB a blank page's OCR failed or not by what the process had read
# before (PARSE_OUT_OF_MEMORY, at random, in a loaded run).
TEST_LIMITS = {
    "parse_timeout_s": 20,
    "max_memory_bytes": 3 * 1024**3 // 2,
    "max_render_pixels": 2_000_000,
    "max_image_pixels": 20_000_000,
    "max_cells": 20_000,
    "max_text_chars": 500_000,
    "max_part_size_bytes": 4 * 1024**2,
}
TEST_MAX_PAGES = 20


@dataclass(frozen=True)
class Hostile:
    name: str
    build: Callable[[Path], Path]  # the test-sized file
    suffix: str
    expected: str  # under TEST_LIMITS: COMPLETED or the job's errorCode
    bench: Callable[[Path], Path] | None = None  # the issue-sized file, when it differs


HOSTILE: tuple[Hostile, ...] = (
    Hostile("csv-huge", lambda p: csv_huge(p, 20_000), "csv", "DOCUMENT_TOO_LARGE",
            lambda p: csv_huge(p, 800_000)),
    Hostile("csv-one-line", lambda p: csv_one_line(p, 100_000), "csv", "DOCUMENT_TOO_LARGE",
            lambda p: csv_one_line(p, 20_000_000)),
    Hostile("xlsx-shared-strings", lambda p: xlsx_bomb(p), "xlsx", "DOCUMENT_TOO_LARGE",
            lambda p: xlsx_bomb(p, 500_000, 5_000)),
    Hostile("xlsx-long-cells", lambda p: xlsx_long_cells(p), "xlsx", "DOCUMENT_TOO_LARGE",
            lambda p: xlsx_long_cells(p, 10, 1024**2)),
    Hostile("docx-xml-bomb", lambda p: docx_bomb(p), "docx", "DOCUMENT_TOO_LARGE",
            lambda p: docx_bomb(p, 480 * 1024**2)),
    Hostile("docx-lying-sizes", docx_lying_sizes, "docx", "CORRUPTED_FILE"),
    Hostile("png-huge", lambda p: png_huge(p, 20_000), "png", "DOCUMENT_TOO_LARGE",
            lambda p: png_huge(p, 12_000)),
    Hostile("webp-huge", webp_huge, "webp", "DOCUMENT_TOO_LARGE"),
    Hostile("tiff-frames", lambda p: tiff_frames(p, 50), "tiff", "TOO_MANY_PAGES",
            lambda p: tiff_frames(p, 5000)),
    Hostile("pdf-huge-mediabox", pdf_huge_mediabox, "pdf", "CORRUPTED_FILE"),
    Hostile("pdf-big-page", pdf_big_page, "pdf", "COMPLETED"),  # a page without text: OCR
    Hostile("pdf-many-pages", lambda p: pdf_many_pages(p, 3000), "pdf", "TOO_MANY_PAGES"),
    Hostile("pdf-deep-nesting", pdf_deep_nesting, "pdf", "COMPLETED"),  # a page without text: OCR
    Hostile("pdf-encrypted", pdf_encrypted, "pdf", "CORRUPTED_FILE"),
    Hostile("pdf-broken", pdf_broken, "pdf", "CORRUPTED_FILE"),
    Hostile("html-quadratic", lambda p: html_quadratic(p, 4000), "html", "COMPLETED",
            lambda p: html_quadratic(p, 20_000)),
    Hostile("labels-over-amounts", lambda p: labels_over_amounts(p, 4000), "txt", "COMPLETED",
            lambda p: labels_over_amounts(p, 20_000)),
    Hostile("html-deep", lambda p: html_deep(p, 5000), "html", "COMPLETED",
            lambda p: html_deep(p, 50_000)),
    Hostile("utf16-text", utf16_text, "txt", "COMPLETED"),
)


# --- peak memory of the parser processes -------------------------------------------------


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(child) for child in fh.read().split()]
    except OSError:
        pass
    return out


def _status_kb(pid: int) -> dict[str, int]:
    """VmHWM, VmRSS and VmPeak of `pid` in KiB (empty once it has ended)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS", "VmPeak"):
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of `pid` and of its children it has waited for."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _descendants() -> set[int]:
    found: set[int] = set()
    pending = _children(os.getpid())
    while pending:
        pid = pending.pop()
        found.add(pid)
        pending += _children(pid)
    return found


class ParserPeaks:
    """The memory and CPU of the processes started below this one after it was
    made (the parser workers, tesseract's processes) while `sample` runs: a task
    to start in a nursery (and cancel after). Run the parses in a fresh
    `trio_parallel.cache_scope()` so that their workers are new ones.

    peak_bytes         the highest RSS (VmHWM) of any one process
    worker_peak_bytes  the highest RSS of a worker with its children at one
                       moment (tesseract's process beside its worker; sampled)
    address_bytes      the highest address space (VmPeak) of any one process:
                       what ``extraction.max_memory`` (RLIMIT_AS) counts
    cpu_s              the CPU seconds the workers used, their children's included
    """

    def __init__(self) -> None:
        self.peak_bytes = 0
        self.worker_peak_bytes = 0
        self.address_bytes = 0
        self._cpu: dict[int, float] = {}
        self._before = _descendants()

    @property
    def cpu_s(self) -> float:
        return sum(self._cpu.values())

    async def sample(self, interval_s: float = 0.02) -> None:
        while True:
            self.sample_once()
            await trio.sleep(interval_s)

    def sample_once(self) -> None:
        for worker in set(_children(os.getpid())) - self._before:
            tree = [worker]
            pending = _children(worker)
            while pending:
                tree.append(pending.pop())
                pending += _children(tree[-1])
            together = 0
            for pid in tree:
                status = _status_kb(pid)
                self.peak_bytes = max(self.peak_bytes, 1024 * status.get("VmHWM", 0))
                self.address_bytes = max(self.address_bytes, 1024 * status.get("VmPeak", 0))
                together += 1024 * status.get("VmRSS", 0)
            own_peak = 1024 * _status_kb(worker).get("VmHWM", 0)
            self.worker_peak_bytes = max(self.worker_peak_bytes, together, own_peak)
            cpu = _cpu_s(worker)
            if cpu is not None:
                self._cpu[worker] = cpu
