"""The rules engine's field queries: which kind of value a schema field asks
for, each kind's reader on a piece of text, and how a candidate becomes the
field's JSON value (`providers.rules.fields`, `providers.rules.candidates`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from daemon.extraction.document import Document, Page, grid_page, grid_text_line
from daemon.extraction.providers.rules.candidates import choose, found_at, typed
from daemon.extraction.providers.rules.fields import field_query, read_values
from daemon.extraction.providers.rules.layout import Layout
from daemon.extraction.providers.rules.values import Found, ValueKind


def layout(*texts: str, ocr: bool = False) -> Layout:
    lines = [line for row, text in enumerate(texts) if (line := grid_text_line(row, text)) is not None]
    page = grid_page(1, lines)
    if ocr:
        page = Page(page.number, page.width, page.height, page.lines, ocr=True)
    return Layout(Document((page,)))


@pytest.mark.parametrize(("name", "schema", "kind"), [
    ("total", {"type": "number"}, ValueKind.AMOUNT),
    ("count", {"type": ["integer", "null"]}, ValueKind.INTEGER),
    ("paid", {"type": "boolean"}, ValueKind.BOOLEAN),
    ("method", {"type": "string", "enum": ["CASH", "CARD"]}, ValueKind.ENUM),
    ("issued", {"type": "string", "format": "date-time"}, ValueKind.DATE),
    ("contact", {"type": "string", "format": "email"}, ValueKind.EMAIL),
    ("site", {"type": "string", "format": "url"}, ValueKind.URI),
    ("currency", {"type": "string"}, ValueKind.CURRENCY),
    ("invoice_number", {"type": "string"}, ValueKind.ID),
    ("vendor", {"type": "string"}, ValueKind.PARTY),
    ("address", {"type": "string"}, ValueKind.ADDRESS),
    ("note", {"type": "string"}, ValueKind.TEXT),
    # A string field that names an amount is read as written, not as a number.
    ("total", {"type": "string"}, ValueKind.TEXT),
])
def test_a_field_asks_for_the_kind_its_type_format_and_labels_decide(name: str, schema: dict[str, Any],
                                                                      kind: ValueKind) -> None:
    assert field_query(name, schema).kind is kind


def test_each_kind_reads_its_own_values() -> None:
    plain = layout("Total 1.234,56 EUR  12.03.2024")
    assert [f.value for f in read_values(field_query("total", {"type": "number"}), "1.234,56 EUR", plain)] \
        == [1234.56]
    assert [f.value for f in read_values(field_query("currency", {"type": "string"}), "1.234,56 EUR", plain)] \
        == ["EUR"]
    email = read_values(field_query("contact", {"type": "string", "format": "email"}), "mail: a@b.example", plain)
    assert [f.value for f in email] == ["a@b.example"]
    phone = read_values(field_query("phone", {"type": "string"}), "Tel: +49 30 1234567", plain)
    assert [f.value for f in phone] == ["+49 30 1234567"]


def test_dates_read_by_ocr_are_mended_first() -> None:
    query = field_query("date", {"type": "string", "format": "date"})
    assert read_values(query, "2O/O3/2Ol8", layout("x")) == []
    assert [str(f.value) for f in read_values(query, "2O/O3/2Ol8", layout("x", ocr=True))] == ["2018-03-20"]


def test_names_and_addresses_are_the_words_written_scored_by_their_shape() -> None:
    plain = layout("x")
    vendor = field_query("vendor", {"type": "string"})
    (name,) = read_values(vendor, ": ACME Trading GmbH |", plain)
    assert (name.value, name.quality) == ("ACME Trading GmbH", 0.9)
    assert read_values(vendor, "1023456-K", plain)[0].quality == 0.3  # a number, not a name
    address = field_query("address", {"type": "string"})
    assert read_values(address, "12 Jalan Mawar, 43000 Kajang", plain)[0].quality == 0.9
    assert read_values(address, "GST No.", plain)[0].quality == 0.4  # another label
    assert read_values(vendor, " :-- ", plain) == []


def test_the_best_candidate_wins_and_of_near_equals_the_first_or_the_last() -> None:
    document = layout("Total  10.00", "Total  12.00", "Date  01/02/2024")
    lines = document.lines()
    total = field_query("total", {"type": "number"})
    date = field_query("date", {"type": "string", "format": "date"})
    first = found_at(lines[0], 7, 12, Found(10.0, 7, 12), 0.9)
    second = found_at(lines[1], 7, 12, Found(12.0, 7, 12), 0.89)
    assert total.labels.last and choose(total, [first, second]) is second  # the total printed last
    assert not date.labels.last and choose(date, [first, second]) is first
    assert choose(total, [first, found_at(lines[1], 7, 12, Found(12.0, 7, 12), 0.5)]) is first
    assert choose(total, []) is None


def test_a_candidate_becomes_the_json_value_of_its_field() -> None:
    ref = layout("Issued 2024-03-12 14:05  Qty 3.0  Net 1,234.50").lines()[0]
    when = found_at(ref, 7, 17, Found(dt.date(2024, 3, 12), 7, 17), 1.0)
    assert typed(field_query("issued", {"type": "string", "format": "date-time"}), when) == "2024-03-12T14:05:00Z"
    assert typed(field_query("issued", {"type": "string", "format": "date"}), when) == "2024-03-12"
    at = ref.text.index("3.0")
    quantity = found_at(ref, at, at + 3, Found(3.0, at, at + 3), 1.0)
    assert typed(field_query("quantity", {"type": "integer"}), quantity) == 3
    assert typed(field_query("quantity", {"type": "boolean"}), quantity) is None
    at = ref.text.index("1,234.50")
    net = found_at(ref, at, at + 8, Found(1234.5, at, at + 8), 1.0)
    assert typed(field_query("net", {"type": "number"}), net) == 1234.5
    assert typed(field_query("net", {"type": "string"}), net) == "1,234.50"  # as written
