"""Scanned receipts: values read through OCR noise.

A receipt prints its total several times (the total, the rounded total, the
amount tendered when no change is given) and lets it be computed (tendered
minus change, total plus the rounding adjustment). OCR misreads a digit here
and there, rarely the same way twice: the amount that most readings and
computations agree on is the total. Dates are read with the look-alike
letters OCR puts in them ("2O/O3/2Ol8") taken for digits, inside
date-shaped tokens only. These rules only run on pages read by OCR; a text
layer is read as printed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from daemon.extraction.providers.rules.values import find_amounts

if TYPE_CHECKING:
    from daemon.extraction.providers.rules.engine import Candidate, Engine, FieldSpec

_SAME = 0.005
# "Rounding adj. -0.02", "Round. Adj 0.01": the adjustment itself is a few cents.
_ROUNDING_LINE = re.compile(r"(?<![a-z])(?:round|rounding|rounded|rnd|adj|adjustment)(?![a-z])")
_ROUNDED_LABEL = re.compile(r"(?<![a-z])(?:rounded|round)(?![a-z])|after\s+adj")
_MAX_ROUNDING = 0.10
_CENTS = re.compile(r"\d[.,]\d{2}(?!\d)")


# A date as OCR may read it: digits, their look-alike letters, and one of three separators.
_DIGITISH = "0-9OoDQIl|SZB"
_DATE_SHAPE = re.compile(
    rf"(?<![\w.,/-])([{_DIGITISH}]{{1,2}})(\s?)([/.\-])(\s?)([{_DIGITISH}]{{1,2}})(\s?)([/.\-])(\s?)"
    rf"([{_DIGITISH}]{{4}}|[{_DIGITISH}]{{2}})(?![\w/])"
)
_AS_DIGIT = str.maketrans("OoDQIl|SZB", "0000111528")


def repair_dates(text: str) -> str:
    """`text` with its date-shaped tokens read as dates: look-alike letters as
    digits ("2O/O3/2Ol8"), a misread separator as the other one ("12.01-19").

    Only tokens of the shape day, separator, month, separator, year with four
    true digits or more are touched; every character stays in its place, so
    spans found in the result are spans of `text`.
    """
    if not any(sep in text for sep in "/.-"):
        return text

    def fix(match: re.Match[str]) -> str:
        day, month, year = match.group(1), match.group(5), match.group(9)
        if sum(ch.isdigit() for ch in day + month + year) < 4:
            return match.group()
        first, second = match.group(3), match.group(7)
        if first != second:
            second = first
        return (day.translate(_AS_DIGIT) + match.group(2) + first + match.group(4) + month.translate(_AS_DIGIT)
                + match.group(6) + second + match.group(8) + year.translate(_AS_DIGIT))

    return _DATE_SHAPE.sub(fix, text)


def is_ocr(engine: Engine) -> bool:
    return any(page.page.ocr for page in engine.layout.pages)


def roundings(engine: Engine) -> list[float]:
    """The rounding adjustments printed on the document (non-zero, a few cents)."""
    found = engine.memo("receipts.roundings")
    if isinstance(found, list):
        return found
    out: list[float] = []
    for ref in engine.layout.lines():
        folded = ref.folded
        if not _ROUNDING_LINE.search(folded) or "total" in folded:
            continue
        for value in find_amounts(ref.text, engine.layout.decimal):
            amount = float(value.value)
            if 0.004 < abs(amount) <= _MAX_ROUNDING:
                out.append(amount)
    engine.remember("receipts.roundings", out)
    return out


def _writes_cents(engine: Engine) -> bool:
    """Whether the document's amounts have two decimals (most do: cents, sen, pence)."""
    found = engine.memo("receipts.cents")
    if isinstance(found, bool):
        return found
    with_cents = without = 0
    for ref in engine.layout.lines():
        for value in find_amounts(ref.text, engine.layout.decimal):
            if _CENTS.search(ref.text[value.start : value.end]):
                with_cents += 1
            elif "." in ref.text[value.start : value.end] or "," in ref.text[value.start : value.end]:
                without += 1
    answer = with_cents >= 3 and with_cents >= 3 * without
    engine.remember("receipts.cents", answer)
    return answer


def _payment_lines(engine: Engine) -> list[int]:
    """Document order of the lines that say what was tendered or given back."""
    from daemon.extraction.providers.rules.engine import PAYMENT_SPECS

    found = engine.memo("receipts.payments")
    if isinstance(found, list):
        return found
    orders = sorted({ref.order for spec in PAYMENT_SPECS for ref, _, end, _ in engine.label_matches(spec.labels)
                     if find_amounts(ref.text[end:], engine.layout.decimal)})
    engine.remember("receipts.payments", orders)
    return orders


def repair_totals(engine: Engine, candidates: list[Candidate]) -> list[Candidate]:
    """Total candidates of a scanned receipt without the impossible ones, with
    the readings of a lost decimal point.

    A receipt's total is more than nothing ("Total GST 0.00" misread as a
    total), and where every price has cents "GRAND TOTAL 1000" is 10.00 with
    its point lost (a candidate; the payment or another label must agree).
    """
    if not candidates or not is_ocr(engine):
        return candidates
    from daemon.extraction.providers.rules.engine import Candidate

    out = [c for c in candidates if float(c.value) > 0]
    if _writes_cents(engine):
        for candidate in list(out):
            digits = candidate.text.strip()
            if digits.isdigit() and len(digits) >= 3:
                out.append(Candidate(round(float(candidate.value) / 100, 2), 0.7 * candidate.score, candidate.ref,
                                     candidate.start, candidate.end, candidate.text, repaired=True))
    return out


def agree_totals(engine: Engine, spec: FieldSpec, candidates: list[Candidate]) -> list[Candidate]:
    """Totals of a scanned receipt scored by how many readings agree with them.

    Each candidate read beside a total label gains when another label reads the
    same amount, when its label says it is rounded (the last amount of a
    receipt that rounds), and when a total above it plus the printed rounding
    adjustment makes it.
    """
    if not candidates or not is_ocr(engine):
        return candidates
    cents = _writes_cents(engine)
    adjustments = roundings(engine)
    payments = _payment_lines(engine)
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
        # Tendered and change are printed right under the total.
        if any(0 < order - candidate.ref.order <= 3 for order in payments):
            bonus += 0.15
        candidate.score += bonus
        if cents and not _CENTS.search(candidate.text) and not candidate.repaired:
            # "34200." or "75.060" where every price has two decimals: a misread.
            candidate.score *= 0.6
    return candidates
