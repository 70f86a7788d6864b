"""The rules provider on generated documents of every type, and on small
hand-made layouts for each rule (labels, synonyms, qualifiers, tables)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from extraction_docs import INVOICE, SCHEMA

from daemon.extraction.document import Document, Line, Page, Word, grid_page, grid_text_line, group_lines
from daemon.extraction.parsers import ParseOptions, parse
from daemon.extraction.providers.rules.engine import extract_rules
from daemon.extraction.providers.rules.labels import concepts_for
from daemon.jobs import filetypes
from daemon.schemas.definition import check_result

MIME = {
    "pdf": filetypes.PDF, "png": filetypes.PNG, "jpeg": filetypes.JPEG, "docx": filetypes.DOCX,
    "xlsx": filetypes.XLSX, "csv": filetypes.CSV, "txt": filetypes.TXT, "html": filetypes.HTML,
}


@pytest.mark.parametrize("kind", ["pdf", "docx", "xlsx", "html", "txt", "png", "jpeg"])
def test_the_invoice_in_every_format(make_doc: Callable[..., Path], kind: str) -> None:
    document = parse(make_doc(kind), MIME[kind], ParseOptions())
    result, fields = extract_rules(document, SCHEMA)
    assert result == INVOICE
    evidence = fields["/total"]
    assert evidence["page"] == 1
    assert 0.5 <= evidence["confidence"] <= 0.99
    assert "1,234.56" in evidence["text"] or "1234.56" in evidence["text"]
    x0, y0, x1, y1 = evidence["bbox"]
    assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
    assert fields["/items/2/amount"]["text"] == "134.56"
    assert set(fields) >= {"/invoice_number", "/date", "/items/0/description", "/items/1/quantity"}


def test_the_csv_invoice_reads_values_below_their_header(make_doc: Callable[..., Path]) -> None:
    result, _ = extract_rules(parse(make_doc("csv"), filetypes.CSV, ParseOptions()), SCHEMA)
    expected = {k: v for k, v in INVOICE.items() if k != "email"}  # the CSV has no contact line
    assert result == expected


def text_document(*lines: str) -> Document:
    rows = [grid_text_line(row, text) for row, text in enumerate(lines)]
    return Document((grid_page(1, [line for line in rows if line is not None]),))


def one(document: Document, name: str, spec: dict[str, Any]) -> Any:
    result, _ = extract_rules(document, {"type": "object", "properties": {name: spec}})
    return result.get(name)


TOTAL = {"type": "number", "description": "Total amount due, tax included"}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["Subtotal      100.00", "VAT 20%        20.00", "Total         120.00"], 120.0),
        (["Total HT : 46,68 €", "TVA 20% : 9,34 €", "Total TTC : 56,02 €"], 56.02),
        (["Amount Due: $1,234.56"], 1234.56),
        (["Grand Total   Rs 1939"], 1939.0),
        (["TOTAL          RM 33.92", "ROUNDING ADJ  -RM 0.02", "TOTAL ROUNDED  RM 33.90", "CASH  RM 50.00",
          "CHANGE  RM 16.10"], 33.90),
        (["Total Qty: 4", "Total Incl. GST   33.90", "Total Savings  2.00"], 33.90),
        (["Totaal € 4.904,94"], 4904.94),
        (["Total facture   24.99   5.00   29.99"], 29.99),
        (["Należność ogółem: 316,83 PLN"], 316.83),
    ],
)
def test_total_synonyms_and_qualifiers(lines: list[str], expected: float) -> None:
    assert one(text_document(*lines), "total", TOTAL) == expected


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["Invoice No.: A-100"], "A-100"),
        (["Invoice #  5521"], "5521"),
        (["Facture n°562044387 du 02 Juillet 2015"], "562044387"),
        (["Rechnungsnr.   30064443"], "30064443"),
        (["Customer No: 77", "Invoice Number: 88"], "88"),
        (["Invoice No : # BLR_123"], "#BLR_123"),
        (["VAT No: DE123", "Booking ID", "IBZY2087"], "IBZY2087"),
    ],
)
def test_invoice_number_labels(lines: list[str], expected: str) -> None:
    spec = {"type": "string", "description": "Invoice number or reference"}
    assert one(text_document(*lines), "invoice_number", spec) == expected


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["Due Date: 01/05/2024", "Invoice Date: 03/04/2024"], "2024-04-03"),
        (["Date limite de paiement le 05 Juillet 2015", "Facture du 02 Juillet 2015"], "2015-07-02"),
        (["Order Date: 2024-01-01", "Date: 2024-01-05"], "2024-01-05"),
        (["Invoice Date: 03/20/2023", "Due: 04/04/2023"], "2023-03-20"),
        (["Guest Name: Sanjay   Date: 31/12/2017"], "2017-12-31"),
    ],
)
def test_date_labels_skip_other_dates(lines: list[str], expected: str) -> None:
    spec = {"type": "string", "format": "date", "description": "Invoice date"}
    assert one(text_document(*lines), "date", spec) == expected


def test_month_first_documents_are_recognised_from_their_unambiguous_dates() -> None:
    doc = text_document("Invoice Date: 03/04/2024", "Delivered 12/25/2023")
    assert one(doc, "date", {"type": "string", "format": "date"}) == "2024-03-04"


def test_value_below_the_label_in_the_same_column() -> None:
    words = [
        Word("Invoice Date:", 50, 100, 110, 110), Word("Reference:", 300, 100, 350, 110),
        Word("03/20/2023", 50, 114, 100, 124), Word("CUSTREF123", 300, 114, 355, 124),
    ]
    doc = Document((Page(1, 600, 800, group_lines(words)),))
    result, fields = extract_rules(doc, {"type": "object", "properties": {
        "date": {"type": "string", "format": "date"},
        "reference": {"type": "string"},
    }})
    assert result == {"date": "2023-03-20", "reference": "CUSTREF123"}
    assert fields["/reference"]["bbox"] == [0.5, 0.1425, 0.5917, 0.155]


def test_typed_values_booleans_integers_emails_enums_and_datetimes() -> None:
    doc = text_document(
        "Paid:        yes",
        "Pages:       12",
        "Contact:     Jane <jane@example.org>",
        "Payment method: Credit card",
        "Issued: 25/12/2018 8:13:39 PM",
    )
    schema = {"type": "object", "properties": {
        "paid": {"type": "boolean"},
        "pages": {"type": "integer"},
        "contact_email": {"type": "string", "format": "email"},
        "payment_method": {"type": "string", "enum": ["cash", "credit card", "transfer"]},
        "issued": {"type": "string", "format": "date-time"},
    }}
    result, _ = extract_rules(doc, schema)
    # A clock time printed without a zone is given in UTC: JSON Schema's date-time needs an offset.
    assert result == {"paid": True, "pages": 12, "contact_email": "jane@example.org",
                      "payment_method": "credit card", "issued": "2018-12-25T20:13:39Z"}
    assert check_result(schema, result).problems == []


def test_currency_comes_from_the_total_or_the_document() -> None:
    spec = {"type": "string", "description": "ISO 4217 currency code"}
    assert one(text_document("Total   £ 12.00"), "currency", spec) == "GBP"
    assert one(text_document("All prices in CHF", "Total 12.00"), "currency", spec) == "CHF"
    assert one(text_document("Currency: SEK", "Total 12.00 EUR"), "currency", spec) == "SEK"


def test_nested_objects_and_arrays_of_scalars() -> None:
    doc = text_document(
        "Vendor:          ACME Ltd",
        "Vendor Address:  1 Main Street, Springfield",
        "Contacts: a@example.org, b@example.org",
    )
    result, fields = extract_rules(doc, {"type": "object", "properties": {
        "vendor": {"type": "object", "properties": {
            "name": {"type": "string"}, "address": {"type": "string"}}},
        "emails": {"type": "array", "items": {"type": "string", "format": "email"}},
    }})
    assert result["vendor"] == {"name": "ACME Ltd", "address": "1 Main Street, Springfield"}
    assert result["emails"] == ["a@example.org", "b@example.org"]
    assert "/vendor/name" in fields and "/emails/1" in fields


def test_table_rows_with_descriptions_over_several_lines_and_a_second_page() -> None:
    def page(number: int, rows: list[tuple[str, str, str]]) -> Page:
        words = [Word("Item", 50, 90, 70, 100), Word("Qty", 300, 90, 315, 100), Word("Amount", 450, 90, 485, 100)]
        y = 110.0
        for description, qty, amount in rows:
            words.append(Word(description, 50, y, 50 + 5 * len(description), y + 10))
            if qty:
                words += [Word(qty, 310, y, 315, y + 10), Word(amount, 465, y, 485, y + 10)]
            y += 14
        words.append(Word("Total", 300, y + 20, 325, y + 30))
        words.append(Word("99.00", 460, y + 20, 485, y + 30))
        return Page(number, 600, 800, group_lines(words))

    doc = Document((
        page(1, [("Service A", "12", "120.00"), ("Repair of the", "", ""), ("front panel", "", "")]),
        page(2, [("Service B", "5", "7.50")]),
    ))
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
        "description": {"type": "string"}, "quantity": {"type": "number"}, "amount": {"type": "number"}}}}}}
    result, fields = extract_rules(doc, schema)
    assert result["items"] == [
        {"description": "Service A Repair of the front panel", "quantity": 12.0, "amount": 120.0},
        {"description": "Service B", "quantity": 5.0, "amount": 7.5},
    ]
    assert fields["/items/1/amount"]["page"] == 2


def test_fields_named_in_other_words_find_their_concept() -> None:
    assert [c.name for c in concepts_for("amount", TOTAL)][:1] == ["total"]
    assert [c.name for c in concepts_for("due_date", {})][:1] == ["due_date"]
    assert [c.name for c in concepts_for("company", {"description": "Name of the shop"})][:1] == ["vendor"]
    assert [c.name for c in concepts_for("address", {"description": "Postal address of the shop"})][:1] == [
        "address"]


def test_nothing_found_is_left_out_not_invented() -> None:
    doc = Document((Page(1, 100, 100, (Line((Word("Hello", 0, 0, 20, 10),)),)),))
    result, fields = extract_rules(doc, SCHEMA)
    assert result == {} and fields == {}
