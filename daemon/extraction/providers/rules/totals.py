"""A document's total: its total labels' candidates checked against the
arithmetic a receipt prints around them.

A receipt prints its total several times (the total, the rounded total, the
amount tendered when no change is given) and lets it be computed (tendered
minus change, total plus the rounding adjustment) and adds up to it (subtotal
plus tax, the totals of two parts of the bill). OCR misreads a digit here
and there, rarely the same way twice: the amount that most readings and
computations agree on is the total. A total in a tax summary table ("GST
SUMMARY", "VAT analysis") is that table's, not the document's. Without a
total label, the largest amount written with a currency stands in.

The readings of a lost decimal point and the agreement bonuses apply to
pages read by OCR only; a text layer is read as printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from daemon.extraction.providers.rules.candidates import Candidate, choose, found_at
from daemon.extraction.providers.rules.fields import FieldQuery, field_query
from daemon.extraction.providers.rules.label_reader import LabelReader
from daemon.extraction.providers.rules.labels import PAYMENT_CONCEPTS, concept_labels, word_set
from daemon.extraction.providers.rules.layout import LineRef
from daemon.extraction.providers.rules.values import ValueKind, find_amounts, find_dates

TENDERED = FieldQuery("tendered", {"type": "number"}, concept_labels(PAYMENT_CONCEPTS["tendered"]), "number", None,
                      ValueKind.AMOUNT)
CHANGE = FieldQuery("change", {"type": "number"}, concept_labels(PAYMENT_CONCEPTS["change"]), "number", None,
                    ValueKind.AMOUNT)
# The parts a total is the sum of, when each is printed above it with its own label.
PARTS = (field_query("subtotal", {"type": "number"}), field_query("tax", {"type": "number"}))

_SAME = 0.005
# "Rounding adj. -0.02", "Round. Adj 0.01": the adjustment itself is a few cents.
_ROUNDING_LINE = re.compile(r"(?<![a-z])(?:round|rounding|rounded|rnd|adj|adjustment)(?![a-z])")
_ROUNDED_LABEL = re.compile(r"(?<![a-z])(?:rounded|round)(?![a-z])|after\s+adj")
_MAX_ROUNDING = 0.10
# "000656195584": a registration or account number; money is not printed with leading zeros.
_LEADING_ZERO = re.compile(r"(?<![\d.,])0\d{4,}")
_CENTS = re.compile(r"[.,]\d{2}(?!\d)")
_SUMMARY = word_set("summary sunmary summery analysis breakdown recap recapitulatif overzicht specificatie "
                    "ubersicht aufstellung podsumowanie resumen riepilogo")
_TAX_WORDS = word_set("tax gst vat tva btw mwst ust iva sst")
# "GSTSUMMARY", "GST Sunmary", "Tax Suinmay": a tax summary's title as OCR reads it.
_OCR_SUMMARY = re.compile(r"(?<![a-z])(?:gst|tax|vat|sst)\s*[_-]?\s*su\w{0,2}m\w{2,4}(?![a-z])")


@dataclass(frozen=True)
class Payment:
    """What the receipt says was paid: tendered minus change (None unless both are
    written, in that order, with cents), and the change's candidate."""

    paid: float | None
    change: Candidate | None


class Totals:
    """The total of one document (each fact read once, when first needed)."""

    def __init__(self, reader: LabelReader) -> None:
        self.reader = reader
        self.layout = reader.layout

    def candidates(self, query: FieldQuery, labelled: list[Candidate]) -> list[Candidate]:
        """The total labels' candidates, checked: impossible ones out, lost decimal points
        read, agreement with the payment, the rounding and the other labels scored."""
        return self._agree(self._check(query, self._repair(labelled)))

    def largest_amount(self, query: FieldQuery) -> Candidate | None:
        """The largest amount written with a currency, outside dates (a low score)."""
        layout = self.layout
        best: Candidate | None = None
        for ref in layout.lines():
            dates = [(d.start, d.end) for d in find_dates(ref.text, layout.date_order)]
            for value in find_amounts(ref.text, layout.decimal):
                if value.currency is None or any(s <= value.start < e for s, e in dates):
                    continue
                if layout.ocr and (value.value <= 0 or not _CENTS.search(ref.text[value.start : value.end])):
                    continue  # a misread registration or phone number beside "RM"
                if best is None or value.value > best.value:
                    best = found_at(ref, value.start, value.end, value, 0.3)
        return best

    # --- what the receipt prints around its total ----------------------------------------

    @cached_property
    def payment(self) -> Payment:
        tendered = choose(TENDERED, self.reader.candidates(TENDERED))
        change = choose(CHANGE, self.reader.candidates(CHANGE))
        paid = None
        if (tendered is not None and change is not None and tendered.ref.order < change.ref.order
                and _CENTS.search(tendered.text) and _CENTS.search(change.text)):
            given, back = float(tendered.value), float(change.value)
            if given > 0 and 0 <= back < given:
                paid = round(given - back, 2)
        return Payment(paid, change)

    @cached_property
    def summary_lines(self) -> list[LineRef]:
        """The titles of tax summary tables."""
        return [
            ref for ref in self.layout.lines()
            if (not _SUMMARY.isdisjoint(ref.token_set) and not _TAX_WORDS.isdisjoint(ref.token_set))
            or (self.layout.ocr and _OCR_SUMMARY.search(ref.folded) is not None)
        ]

    @cached_property
    def roundings(self) -> list[float]:
        """The rounding adjustments printed on the document (non-zero, a few cents)."""
        out: list[float] = []
        for ref in self.layout.lines():
            folded = ref.folded
            if not _ROUNDING_LINE.search(folded) or "total" in folded:
                continue
            for value in find_amounts(ref.text, self.layout.decimal):
                amount = float(value.value)
                if 0.004 < abs(amount) <= _MAX_ROUNDING:
                    out.append(amount)
        return out

    @cached_property
    def parts(self) -> list[Candidate]:
        """The amounts printed beside a subtotal or tax label, with cents (counts are not parts)."""
        return [c for query in PARTS for c in self.reader.candidates(query)
                if float(c.value) > 0 and _CENTS.search(c.text)]

    def adds_up(self, value: float, order: int, others: list[Candidate]) -> bool:
        """Whether two amounts printed above line `order`, on two lines, add up to `value`,
        or to it before the printed rounding adjustment (whose sign is often lost)."""
        above = [c for c in others + self.parts
                 if c.ref.order < order and 0 < float(c.value) < value and _CENTS.search(c.text)]
        targets = [value] + [value + sign * r for r in self.roundings for sign in (1, -1)]
        return any(a.ref is not b.ref and abs(float(a.value) + float(b.value) - target) < _SAME
                   for i, a in enumerate(above) for b in above[i + 1 :] for target in targets)

    def rounds_to(self, value: float, candidates: list[Candidate]) -> bool:
        """Whether a total plus the printed rounding adjustment (its sign often lost) makes `value`."""
        return any(abs(abs(value - float(c.value)) - abs(r)) < _SAME for c in candidates for r in self.roundings)

    @cached_property
    def writes_cents(self) -> bool:
        """Whether the document's amounts have two decimals (most do: cents, sen, pence)."""
        with_cents = without = 0
        for ref in self.layout.lines():
            for value in find_amounts(ref.text, self.layout.decimal):
                if _CENTS.search(ref.text[value.start : value.end]):
                    with_cents += 1
                elif "." in ref.text[value.start : value.end] or "," in ref.text[value.start : value.end]:
                    without += 1
        return with_cents >= 3 and with_cents >= 3 * without

    @cached_property
    def payment_lines(self) -> list[int]:
        """Document order of the lines that say what was tendered or given back."""
        return sorted({ref.order for query in (TENDERED, CHANGE)
                       for ref, _, end, _ in self.reader.label_matches(query.labels)
                       if find_amounts(ref.text[end:], self.layout.decimal)})

    # --- the checks, in the order they run -------------------------------------------------

    def _repair(self, candidates: list[Candidate]) -> list[Candidate]:
        """Without the impossible totals of a scanned receipt, with the readings of a lost decimal point.

        A receipt's total is more than nothing ("Total GST 0.00" misread as a
        total) and is not written with leading zeros (a registration number);
        where every price has cents "GRAND TOTAL 1000" is 10.00 with its point
        lost (a candidate; the payment or another label must agree).
        """
        if not candidates or not self.layout.ocr:
            return candidates
        out = [c for c in candidates if float(c.value) > 0 and not _LEADING_ZERO.search(c.text)]
        if self.writes_cents:
            for candidate in list(out):
                digits = candidate.text.strip()
                if digits.isdigit() and len(digits) >= 3:
                    out.append(Candidate(round(float(candidate.value) / 100, 2), 0.7 * candidate.score,
                                         candidate.ref, candidate.start, candidate.end, candidate.text,
                                         repaired=True))
        return out

    def _check(self, query: FieldQuery, candidates: list[Candidate]) -> list[Candidate]:
        """Totals that agree with the payment (tendered - change) win; totals
        in a tax summary table (below "GST SUMMARY", "VAT analysis") lose."""
        summaries = self.summary_lines
        for candidate in candidates:
            if any(ref.page == candidate.ref.page and ref.index < candidate.ref.index for ref in summaries):
                candidate.score *= 0.5
        payment = self.payment
        paid = payment.paid
        if paid is None:
            return candidates
        agreeing = [c for c in candidates if abs(float(c.value) - paid) < 0.005]
        for candidate in agreeing:
            candidate.score = min(candidate.score + 0.3, 1.2)
        if not agreeing:
            # Two readings (tendered, change) agree with each other better than a
            # misread total: the amount paid, where it is written, else as computed;
            # surely so when the receipt's own arithmetic (a total and the rounding
            # adjustment, subtotal and tax) makes it too.
            sure = 0.4 if self.rounds_to(paid, candidates) or self.adds_up(paid, self.layout.line_count,
                                                                             candidates) else 0.0
            for ref in self.layout.lines():
                for value in find_amounts(ref.text, self.layout.decimal):
                    if abs(float(value.value) - paid) < 0.005:
                        candidates.append(found_at(ref, value.start, value.end, value, 0.75 + sure))
                        return candidates
            change = payment.change
            if change is not None:
                candidates.append(Candidate(paid, 0.6 + sure, change.ref, change.start, change.end, change.text))
        return candidates

    def _agree(self, candidates: list[Candidate]) -> list[Candidate]:
        """Totals of a scanned receipt scored by how many readings agree with them.

        Each candidate read beside a total label gains when another label reads the
        same amount, when its label says it is rounded (the last amount of a
        receipt that rounds), when a total above it plus the printed rounding
        adjustment makes it, and when two amounts above it add up to it.
        """
        if not candidates or not self.layout.ocr:
            return candidates
        cents = self.writes_cents
        adjustments = self.roundings
        payments = self.payment_lines
        for candidate in candidates:
            value = float(candidate.value)
            others = [o for o in candidates if o is not candidate]
            same = sum(1 for o in others if abs(float(o.value) - value) < _SAME and o.ref is not candidate.ref)
            bonus = 0.1 * min(same, 2)
            if _ROUNDED_LABEL.search(candidate.ref.folded[: candidate.start]):
                bonus += 0.1
            # The adjustment is printed between the total and the rounded total; its sign
            # is often lost ("-RM 0.02", a faint minus).
            if any(abs(abs(float(o.value) - value) - abs(r)) < _SAME
                   for o in others if o.ref.order < candidate.ref.order for r in adjustments):
                bonus += 0.3
            # Subtotal and tax, or the totals of two parts of the bill, add up to the total.
            if self.adds_up(value, candidate.ref.order, others):
                bonus += 0.2
            # Tendered and change are printed right under the total.
            if any(0 < order - candidate.ref.order <= 3 for order in payments):
                bonus += 0.15
            candidate.score += bonus
            if cents and not _CENTS.search(candidate.text) and not candidate.repaired:
                # "34200." or "75.060" where every price has two decimals: a misread.
                candidate.score *= 0.6
        return candidates
