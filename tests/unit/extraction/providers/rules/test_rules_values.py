"""Typed values from text: dates, amounts, identifiers, booleans (pure functions)."""

from __future__ import annotations

import datetime as dt

import pytest

from daemon.extraction.providers.rules.values import (
    DateOrder,
    decimal_hint,
    find_amounts,
    find_booleans,
    find_dates,
    find_emails,
    find_enum,
    find_identifier,
    find_time,
    fold,
    numeric_date_orders,
    parse_number,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("25/12/2018", dt.date(2018, 12, 25)),
        ("2014-08-03", dt.date(2014, 8, 3)),
        ("8-9-2022", dt.date(2022, 9, 8)),
        ("12-01-19", dt.date(2019, 1, 12)),
        ("28.11.2022", dt.date(2022, 11, 28)),
        ("August 3 , 2014", dt.date(2014, 8, 3)),
        ("Jan 1, 2022", dt.date(2022, 1, 1)),
        ("3rd of March 2024", dt.date(2024, 3, 3)),
        ("7. Mai 2014", dt.date(2014, 5, 7)),
        ("19 april 2014", dt.date(2014, 4, 19)),
        ("02 Juillet 2015", dt.date(2015, 7, 2)),
        ("le 1er février 2023", dt.date(2023, 2, 1)),
        ("25 DEC 2018", dt.date(2018, 12, 25)),
        ("25-Dec-18", dt.date(2018, 12, 25)),
        ("12 października 2021", dt.date(2021, 10, 12)),
        ("15 de enero de 2024", dt.date(2024, 1, 15)),
        ("10-03-201823:03:06", dt.date(2018, 3, 10)),  # OCR lost the space before the time
        ("06/04/1711:43am", dt.date(2017, 4, 6)),
        ("2018-01-0522:55:25", dt.date(2018, 1, 5)),
        # A month's name glued to what the patterns allow around it (OCR loses spaces).
        ("05MAR2018", dt.date(2018, 3, 5)),
        ("5thMarch 2018", dt.date(2018, 3, 5)),
        ("1erjanvier 2024", dt.date(2024, 1, 1)),
        ("3 mayode 2024", dt.date(2024, 5, 3)),
        ("March5, 2024", dt.date(2024, 3, 5)),
    ],
)
def test_dates_in_numeric_and_written_forms(text: str, expected: dt.date) -> None:
    found = find_dates(f"Date: {text} ")
    assert [f.value for f in found] == [expected]


def test_ambiguous_numeric_dates_follow_the_document_order() -> None:
    assert find_dates("03/04/2024")[0].value == dt.date(2024, 4, 3)
    assert find_dates("03/04/2024", DateOrder.MDY)[0].value == dt.date(2024, 3, 4)
    # An impossible reading is never chosen.
    assert find_dates("03/20/2023")[0].value == dt.date(2023, 3, 20)


def test_only_real_dates_tell_the_document_s_date_order() -> None:
    assert numeric_date_orders("13/02/2018") == (1, 0)
    assert numeric_date_orders("02/13/2018") == (0, 1)
    assert numeric_date_orders("6%  3.49 .21") == (0, 0)  # two amounts: no day is 49


def test_not_dates() -> None:
    assert find_dates("Version 1.2.3, 99/99/2020, phone 12-34-5678") == []
    # Digits after the year that are not a time: a longer number, not a date.
    assert find_dates("1/2/20231 10-03-2018123:03") == []


def test_time_of_day() -> None:
    assert find_time("25/12/2018 8:13:39 PM") == (20, 13, 39)
    assert find_time("at 09:05") == (9, 5, 0)


@pytest.mark.parametrize(
    ("text", "value", "currency"),
    [
        ("$1,234.56", 1234.56, "USD"),
        ("1.234,56 €", 1234.56, "EUR"),
        ("€ 4.904,94", 4904.94, "EUR"),
        ("1 234,56 EUR", 1234.56, "EUR"),
        ("RM 33.90", 33.90, "MYR"),
        ("Rs 1939", 1939.0, "INR"),
        ("316,83 PLN", 316.83, "PLN"),
        ("£12", 12.0, "GBP"),
        ("-9,32", -9.32, None),
        ("(12.00)", -12.0, None),
        ("CHF 1'250.00", 1250.0, "CHF"),
    ],
)
def test_amounts_with_either_separator_and_currency(text: str, value: float, currency: str | None) -> None:
    found = find_amounts(text, decimal_hint(text))
    assert [(f.value, f.currency) for f in found] == [(value, currency)]


def test_a_currency_glued_to_its_amount_is_read_and_a_code_glued_to_a_word_is_not() -> None:
    assert [(f.value, f.currency) for f in find_amounts("Grand Total RM51.30")] == [(51.30, "MYR")]
    assert [(f.value, f.currency) for f in find_amounts("Cash EUR20.00")] == [(20.00, "EUR")]
    assert find_amounts("SR100100000171-Meat Dish") == []
    assert find_amounts("No1, Jalan Besar") == []


def test_cents_without_their_leading_zero_are_read_after_a_space_only() -> None:
    assert [f.value for f in find_amounts("Rounding Adj RM .02")] == [0.02]
    assert [f.value for f in find_amounts("Change  .00")] == [0.0]
    assert find_amounts("Total Incl.68 GST") == []  # an abbreviation's dot, then a misread "6%"


def test_a_lone_three_digit_group_follows_the_document_decimal_separator() -> None:
    assert parse_number("1,500", ".") == 1500
    assert parse_number("1,500", ",") == 1.5
    assert parse_number("1.500", ",") == 1500
    assert parse_number("1.500", ".") == 1.5
    assert decimal_hint("Total 12,50 € VAT 2,38 €") == ","


def test_identifiers_keep_their_marks_and_prefer_digits() -> None:
    assert find_identifier(": # BLR_WFLD2015").value == "#BLR_WFLD2015"  # type: ignore[union-attr]
    assert find_identifier(" n°562044387 du").value == "562044387"  # type: ignore[union-attr]
    assert find_identifier("INV/2023/03/0008").value == "INV/2023/03/0008"  # type: ignore[union-attr]
    word = find_identifier("at the time of check-out")
    assert word is not None and word.quality < 0.5


def test_booleans_emails_enums_and_folding() -> None:
    assert [f.value for f in find_booleans("Signed: yes")] == [True]
    assert [f.value for f in find_booleans("Nein")] == [False]
    assert [f.value for f in find_emails("mail: Billing@Acme.example.")] == ["Billing@Acme.example"]
    assert [f.value for f in find_enum("Payment by Credit Card", ["cash", "credit card"])] == ["credit card"]
    assert fold("Należność ÉTÉ") == "naleznosc ete"
    assert len(fold("ﬁ")) == 1
