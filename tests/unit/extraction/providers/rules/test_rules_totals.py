"""A receipt's total checked against the arithmetic printed around it
(`providers.rules.totals`): tendered minus change, the rounding adjustment,
a tax summary's own totals, a lost decimal point."""

from __future__ import annotations

from daemon.extraction.document import Document, Line, Page, grid_text_line
from daemon.extraction.providers.rules.fields import field_query
from daemon.extraction.providers.rules.label_reader import LabelReader
from daemon.extraction.providers.rules.layout import Layout
from daemon.extraction.providers.rules.totals import Totals

TOTAL = field_query("total", {"type": "number", "description": "Total amount paid"})


def totals(*texts: str, ocr: bool = True) -> Totals:
    lines: list[Line] = [line for row, text in enumerate(texts) if (line := grid_text_line(row, text)) is not None]
    page = Page(1, max(line.x1 for line in lines), max(line.y1 for line in lines), tuple(lines), ocr=ocr)
    return Totals(LabelReader(Layout(Document((page,)))))


def checked(facts: Totals) -> list[tuple[float, float]]:
    """(value, score) of each total candidate after the checks, in document order."""
    candidates = facts.candidates(TOTAL, facts.reader.candidates(TOTAL))
    return [(float(c.value), round(c.score, 3)) for c in sorted(candidates, key=lambda c: c.order)]


def test_the_payment_is_tendered_minus_change_written_in_that_order_with_cents() -> None:
    assert totals("TOTAL  RM 41.20", "CASH  RM 50.00", "CHANGE  RM 8.80").payment.paid == 41.20
    assert totals("TOTAL  RM 41.20", "CHANGE  RM 8.80", "CASH  RM 50.00").payment.paid is None
    assert totals("TOTAL  RM 41.20", "CASH  RM 50", "CHANGE  RM 8.80").payment.paid is None
    assert totals("TOTAL  RM 41.20").payment.paid is None


def test_a_total_the_payment_agrees_with_wins_over_a_misread_one() -> None:
    facts = totals("TOTAL  RM 41.20", "GRAND TOTAL  RM 47.20", "CASH  RM 50.00", "CHANGE  RM 8.80")
    scores = dict(checked(facts))
    assert scores[41.20] > scores[47.20]


def test_without_a_total_that_agrees_the_amount_paid_is_a_candidate() -> None:
    facts = totals("TOTAL  RM 47.20", "CASH  RM 50.00", "CHANGE  RM 8.80")
    assert 41.20 in dict(checked(facts))


def test_the_printed_rounding_adjustment_and_the_rounded_label_favour_the_rounded_total() -> None:
    facts = totals("TOTAL  RM 33.92", "ROUNDING ADJ  -0.02", "TOTAL ROUNDED  RM 33.90", "CASH  RM 50.00")
    assert facts.roundings == [-0.02]
    scores = dict(checked(facts))
    assert scores[33.90] > scores[33.92]


def test_a_tax_summary_table_s_totals_lose() -> None:
    facts = totals("TOTAL  27.55", "GST SUMMARY", "TOTAL:  26.00")
    assert [ref.text for ref in facts.summary_lines] == ["GST SUMMARY"]
    scores = dict(checked(facts))
    assert scores[27.55] > scores[26.00]


def test_a_lost_decimal_point_is_read_where_every_price_has_cents() -> None:
    facts = totals("NASI LEMAK  4.50", "TEH TARIK  2.50", "KUIH  3.00", "GRAND TOTAL  1000")
    assert facts.writes_cents
    assert 10.00 in dict(checked(facts))
    # A text layer is read as printed.
    printed = totals("NASI LEMAK  4.50", "TEH TARIK  2.50", "KUIH  3.00", "GRAND TOTAL  1000", ocr=False)
    assert [value for value, _ in checked(printed)] == [1000.0]


def test_without_a_label_the_largest_amount_with_a_currency_stands_in() -> None:
    facts = totals("ITEM A  RM 4.50", "ITEM B  RM 12.00", "12/03/2018", "REG 123456789")
    found = facts.largest_amount(TOTAL)
    assert found is not None and found.value == 12.0 and found.score == 0.3


def test_the_total_the_parts_above_it_add_up_to_wins_over_a_part_printed_twice() -> None:
    # Two totals of parts of the bill (one repeated under the other), then what they add up to.
    facts = totals("Total exempt:  14.35", "Total taxable:  27.09", "Total exempt:  14.35", "Total Payable:  41.44")
    scores = dict(checked(facts))
    assert max(scores, key=lambda value: scores[value]) == 41.44
    # Subtotal plus tax make the total.
    facts = totals("Sub Total  20.00", "Service Tax  1.20", "Total  21.20")
    assert facts.adds_up(21.20, 2, [])
    alone = totals("Sub Total  20.00", "Total  21.20")
    assert not alone.adds_up(21.20, 1, [])


def test_cents_written_without_their_leading_zero_round_the_total_and_give_no_change() -> None:
    facts = totals("Total Sales  27.28", "Rounding Adj  RM  .02", "Rounded  RM  27.30", "CASH  RM  27.30",
                   "CHANGE  RM  .00")
    assert facts.roundings == [0.02]
    assert facts.payment.paid == 27.30
    scores = dict(checked(facts))
    assert max(scores, key=lambda value: scores[value]) == 27.30


def test_the_amount_paid_wins_over_a_misread_total_when_the_receipt_s_arithmetic_makes_it() -> None:
    # Subtotal + tax - rounding = 21.20 = cash - change; "21.24" is a misread.
    facts = totals("Sub Total  20.00", "Tax  1.23", "Rounding  -0.03", "Total  21.24", "Cash  21.20",
                   "Change  0.00")
    scores = dict(checked(facts))
    assert max(scores, key=lambda value: scores[value]) == 21.20
    # The total plus the rounding = 15.40 = paid - change, printed nowhere else.
    facts = totals("Total  15.39", "Rounding  0.01", "Cash  50.00", "Change  34.60")
    scores = dict(checked(facts))
    assert max(scores, key=lambda value: scores[value]) == 15.40


def test_a_number_written_with_leading_zeros_is_not_a_total() -> None:
    facts = totals("TOTAL:   000656195584")  # a registration number misread beside a total label
    assert facts.reader.candidates(TOTAL)
    assert checked(facts) == []
    assert [value for value, _ in checked(totals("TOTAL:   105.00"))] == [105.00]
