"""Generated documents of every type with a known content, for the extraction tests.

(A module of its own, not conftest, so test modules can import its constants.)

The same invoice is written as a native PDF (reportlab: a real text layer at
known positions), rendered to PNG/JPEG/TIFF by pdfium for OCR, and as DOCX,
XLSX, CSV, HTML and TXT.
"""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

INVOICE = {
    "invoice_number": "INV-2024-0042",
    "date": "2024-03-12",
    "due_date": "2024-04-11",
    "total": 1234.56,
    "currency": "EUR",
    "email": "billing@acme.example",
    "items": [
        {"description": "Widget large", "quantity": 2, "unit_price": 400.00, "amount": 800.00},
        {"description": "Gadget small", "quantity": 3, "unit_price": 100.00, "amount": 300.00},
        {"description": "Service fee", "quantity": 1, "unit_price": 134.56, "amount": 134.56},
    ],
}

SCHEMA = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "description": "Invoice number"},
        "date": {"type": "string", "format": "date", "description": "Invoice date"},
        "due_date": {"type": "string", "format": "date"},
        "total": {"type": "number", "description": "Total amount due"},
        "currency": {"type": "string", "description": "ISO 4217 currency code"},
        "email": {"type": "string", "format": "email"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "quantity": {"type": "integer"},
                    "unit_price": {"type": "number"},
                    "amount": {"type": "number"},
                },
            },
        },
    },
    "required": ["invoice_number", "date", "total"],
}

# Label/value lines as printed on every format.
HEADER_LINES = [
    ("ACME Supplies GmbH", ""),
    ("Invoice No.:", "INV-2024-0042"),
    ("Invoice Date:", "12 March 2024"),
    ("Due Date:", "11/04/2024"),
    ("Contact:", "billing@acme.example"),
]
TABLE = [
    ["Description", "Qty", "Unit Price", "Amount"],
    ["Widget large", "2", "400.00", "800.00"],
    ["Gadget small", "3", "100.00", "300.00"],
    ["Service fee", "1", "134.56", "134.56"],
]
FOOTER_LINES = [("Subtotal", "1,037.45"), ("VAT 19%", "197.11"), ("Total Due", "€ 1,234.56")]


def write_invoice_pdf(path: Path, *, pages: int = 1) -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    _, height = A4
    for page in range(pages):
        y = height - 60
        c.setFont("Helvetica-Bold", 14)
        c.drawString(50, y, HEADER_LINES[0][0])
        c.setFont("Helvetica", 10)
        for label, value in HEADER_LINES[1:]:
            y -= 18
            c.drawString(50, y, label)
            c.drawString(160, y, value)
        y -= 36
        for row in TABLE:
            c.drawString(50, y, row[0])
            c.drawRightString(330, y, row[1])
            c.drawRightString(430, y, row[2])
            c.drawRightString(530, y, row[3])
            y -= 16
        y -= 16
        for label, value in FOOTER_LINES:
            c.drawString(350, y, label)
            c.drawRightString(530, y, value)
            y -= 16
        c.drawString(50, 40, f"Page {page + 1} of {pages}")
        c.showPage()
    c.save()
    return path


def render_pdf(pdf: Path, path: Path, *, dpi: int = 200, fmt: str | None = None, frames: int = 1) -> Path:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(pdf))
    try:
        page = document[0]
        image = page.render(scale=dpi / 72).to_pil().convert("RGB")
        page.close()
    finally:
        document.close()
    if frames > 1:
        image.save(path, format=fmt, save_all=True, append_images=[image.copy() for _ in range(frames - 1)])
    else:
        image.save(path, format=fmt, dpi=(dpi, dpi))
    return path


def write_invoice_docx(path: Path, *, page_breaks: int = 0) -> Path:
    import docx

    document = docx.Document()
    document.add_heading(HEADER_LINES[0][0], level=1)
    for label, value in HEADER_LINES[1:]:
        document.add_paragraph(f"{label}\t{value}")
    table = document.add_table(rows=0, cols=4)
    for row in TABLE:
        cells = table.add_row().cells
        for cell, text in zip(cells, row, strict=True):
            cell.text = text
    for label, value in FOOTER_LINES:
        document.add_paragraph(f"{label}\t{value}")
    for _ in range(page_breaks):
        document.add_page_break()
        document.add_paragraph("Terms and conditions apply.")
    document.save(str(path))
    return path


def write_invoice_xlsx(path: Path, *, sheets: int = 1) -> Path:
    import datetime as dt

    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append([HEADER_LINES[0][0]])
    sheet.append(["Invoice No.", "INV-2024-0042"])
    sheet.append(["Invoice Date", dt.datetime(2024, 3, 12)])
    sheet.append(["Due Date", dt.datetime(2024, 4, 11)])
    sheet.append(["Contact", "billing@acme.example"])
    sheet.append([])
    sheet.append(TABLE[0])
    for row in TABLE[1:]:
        sheet.append([row[0], int(row[1]), float(row[2]), float(row[3])])
    sheet.append([])
    sheet.append(["", "", "Total Due", 1234.56])
    sheet.append(["", "", "Currency", "EUR"])
    for index in range(1, sheets):
        workbook.create_sheet(f"Notes {index}").append(["Notes", "nothing"])
    workbook.save(str(path))
    return path


def invoice_csv() -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["Invoice No.", "Invoice Date", "Due Date", "Currency", "Total Due"])
    writer.writerow(["INV-2024-0042", "12.03.2024", "11.04.2024", "EUR", "1234.56"])
    writer.writerow([])
    writer.writerow(TABLE[0])
    writer.writerows(TABLE[1:])
    return out.getvalue()


def invoice_html() -> str:
    rows = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in TABLE)
    head = "".join(f"<p><b>{label}</b> {value}</p>" for label, value in HEADER_LINES[1:])
    foot = "".join(f"<tr><td>{label}</td><td>{value}</td></tr>" for label, value in FOOTER_LINES)
    return (
        "<!DOCTYPE html><html><head><title>Invoice</title><style>p {margin: 0}</style>"
        "<script>var x = 'Total Due 99.99';</script></head><body>"
        f"<h1>{HEADER_LINES[0][0]}</h1>{head}<table>{rows}</table><table>{foot}</table>"
        "</body></html>"
    )


def invoice_txt() -> str:
    lines = [HEADER_LINES[0][0], ""]
    lines += [f"{label:<16}{value}" for label, value in HEADER_LINES[1:]]
    lines.append("")
    lines += [f"{row[0]:<20}{row[1]:>6}{row[2]:>14}{row[3]:>14}" for row in TABLE]
    lines.append("")
    lines += [f"{'':<26}{label:<14}{value:>14}" for label, value in FOOTER_LINES]
    return "\n".join(lines) + "\n"


def write_table_pdf(path: Path, pages: int, seed: int = 3) -> Path:
    """Pages as bench/extract.py reads them: a header, a 40-row item table and a total
    on every page (random items, reproducible from `seed`)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    rng = random.Random(seed)
    c = canvas.Canvas(str(path), pagesize=A4)
    _, height = A4
    for page in range(pages):
        c.setFont("Helvetica-Bold", 14)
        c.drawString(50, height - 50, f"ACME Supplies Ltd — Invoice (page {page + 1} of {pages})")
        c.setFont("Helvetica", 9)
        c.drawString(50, height - 70, f"Invoice No.: INV-{seed:04d}-{page:03d}")
        c.drawString(350, height - 70, "Invoice Date: 12/03/2024")
        y = height - 100
        for x, title in ((50, "Description"), (330, "Qty"), (400, "Unit Price"), (480, "Amount")):
            c.drawString(x, y, title)
        total = 0.0
        for row in range(40):
            y -= 15
            qty, price = rng.randint(1, 9), rng.randint(100, 99_999) / 100
            total += qty * price
            c.drawString(50, y, f"Item {row + 1}: {rng.choice(['Widget', 'Gadget', 'Service', 'Part'])} "
                                f"model {rng.randint(100, 999)}")
            c.drawRightString(345, y, str(qty))
            c.drawRightString(450, y, f"{price:,.2f}")
            c.drawRightString(530, y, f"{qty * price:,.2f}")
        c.drawString(400, y - 25, "Total Due")
        c.drawRightString(530, y - 25, f"€ {total:,.2f}")
        c.showPage()
    c.save()
    return path


def write_turned_pdf(path: Path, angle: int) -> Path:
    """Two labelled values on a page whose text is turned by `angle` degrees."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    c.translate(300, 400)
    c.rotate(angle)
    c.drawString(0, 0, "Invoice No.:")
    c.drawString(110, 0, "T-42")
    c.drawString(0, -20, "Total Due")
    c.drawString(110, -20, "12.50")
    c.showPage()
    c.save()
    return path
