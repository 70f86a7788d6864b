"""Unlabelled parties: the issuer printed at the top of a receipt or invoice,
and its postal address printed right below it.

A receipt rarely says "Vendor:"; its first lines are the shop's name (often
with a legal suffix such as SDN BHD, LTD, GMBH or a trade such as TRADING,
HARDWARE, RESTAURANT), its registration number, then its address, then
phone, tax numbers and the document's own data. These rules read that
order; they only run when no label names the field.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from daemon.extraction.providers.rules.layout import LineRef

if TYPE_CHECKING:
    from daemon.extraction.providers.rules.engine import Candidate, Engine

# How many lines from the top the issuer may start at.
_TOP_LINES = 8

_SUFFIX = re.compile(
    r"(?<![a-z])(?:sdn\.?\s*bhd|bhd|s/b|sdn|enterprises?|trading|traders|ltd|limited|llc|l\.l\.c|inc|"
    r"incorporated|corp|corporation|co|company|gmbh|ag|kg|b\.?v|n\.?v|s\.?a|s\.?a\.?s|sarl|s\.?r\.?l|s\.?p\.?a|"
    r"sp\.?\s?z\s?o\.?o|plc|pte|pty|oy|ab|as|aps|restaurant|restoran|cafe|bistro|kitchen|kitchenette|bakery|"
    r"hardware|mart|market|supermarket|minimarket|store|stores|shop|stationery|books|bookstore|pharmacy|"
    r"farmasi|hotel|motor|motors|electrical|machinery|perniagaan|kedai|delights|gallery|station|services|"
    r"industries|international|holdings|group|pub|bar|food|foods|tea|coffee|petrol|pet|deco)(?![a-z])",
)
# Lines that are no longer the issuer's name or address.
_STOP = re.compile(
    r"(?<![a-z])(?:tel|tel\.|phone|telephone|fax|hp|h/p|mobile|e-?mail|www|http|gst|vat|tax|invoice|receipt|"
    r"bill|cash|date|time|cashier|table|order|no\.? ?:|reg\.? ?no|registration|roc|co\.? ?no|company no|"
    r"ssm|tin|npwp|kvk|siret|abn|acn|uen|document|doc|ref|member|customer|counter|pos|terminal|"
    r"qty|description|item|price|amount|total|operator|trans|slip|welcome|thank)(?![a-z])"
)
_REGISTRATION = re.compile(r"^[\(\[]?\s*(?:co\.?\s*(?:reg|no)|company\s*(?:reg|no)|roc|reg|ssm)?[\s.:#]*"
                           r"[a-z]{0,3}\d[\d\- ]{3,}[a-z]?\s*[\)\]]?\.?$")


def _letters(text: str) -> int:
    return sum(ch.isalpha() for ch in text)


def _is_noise(ref: LineRef) -> bool:
    text = ref.text.strip()
    letters = _letters(text)
    if letters < 3 or letters < 0.4 * len(text.replace(" ", "")):
        return True
    # Handwritten or stamped names in lower case above a printed header.
    upper = sum(ch.isupper() for ch in text)
    return upper == 0


_REGISTRATION_WORDS = re.compile(r"(?<![a-z])(?:co\.?\s*reg|company\s*reg|reg\.?\s*no|roc\s*no|co\.?\s*no|"
                                 r"company\s*no|business\s*reg|sst\s*(?:reg|no)|gst\s*(?:reg|no|id))")
# A company number with its check letter, as printed under a shop's name: "(1174703-K)", "JM0517726-T".
_COMPANY_NUMBER = re.compile(r"(?<![a-z0-9])[a-z]{0,3}\d{5,}-?\s?[a-z](?![a-z0-9])")


def _is_registration(ref: LineRef) -> bool:
    folded = ref.folded.strip()
    return (_REGISTRATION.match(folded) is not None or _REGISTRATION_WORDS.search(folded) is not None
            or (len(folded) < 40 and _COMPANY_NUMBER.search(folded) is not None))


def issuer_lines(engine: Engine) -> list[LineRef]:
    """The lines of the issuer's name at the top of the first page ([] if none)."""
    if not engine.layout.pages:
        return []
    lines = engine.layout.pages[0].lines
    candidates = []
    for ref in lines[: _TOP_LINES + 4]:
        if _is_noise(ref):
            continue
        if _STOP.search(ref.folded) and not _SUFFIX.search(ref.folded):
            break
        candidates.append(ref)
        if len(candidates) >= _TOP_LINES:
            break
    if not candidates:
        return []
    chosen = next((ref for ref in candidates[:4] if _SUFFIX.search(ref.folded)), candidates[0])
    start = chosen.index
    # A name over two lines: "HOME MASTER HARDWARE &" / "ELECTRICAL", "AIK HUAT" / "(SETIA ALAM) SDN BHD".
    if start > 0 and chosen is not candidates[0]:
        previous = lines[start - 1]
        if (previous in candidates and not _SUFFIX.search(previous.folded) and previous.text.isupper()
                and _close(previous, chosen) and len(previous.text.split()) <= 4
                and re.match(r"^\(|^(?:sdn|bhd|s/b|ltd|limited|inc|gmbh)", chosen.folded)):
            start -= 1
    out = [lines[start]]
    index = start + 1
    while index < len(lines) and len(out) < 3:
        ref = lines[index]
        last = out[-1]
        if not _close(last, ref) or _is_registration(ref) or _STOP.search(ref.folded):
            break
        joins = last.text.rstrip().endswith(("&", "-", "AND", "and")) or (
            not _SUFFIX.search(" ".join(r.folded for r in out))
            and _SUFFIX.search(ref.folded) is not None
            and not any(ch.isdigit() for ch in ref.text)
        )
        if not joins:
            break
        out.append(ref)
        index += 1
    return out


def _close(upper: LineRef, lower: LineRef) -> bool:
    return lower.line.y0 - upper.line.y1 < 1.2 * max(upper.line.height, lower.line.height)


_GLUED_STOP = re.compile(r"invoice|receipt|cashier|check|counter|welcome")
_PHONE_NUMBER = re.compile(r"(?<!\d)\d{2,4}\s?-\s?\d{3,4}\s?\d{3,5}(?!\d)")


def _ends_address(ref: LineRef) -> bool:
    """Phone, tax and registration numbers, e-mails and the document's own data end an address."""
    folded = ref.folded
    return bool(
        _STOP.search(folded) or _GLUED_STOP.search(folded) or "@" in folded or _is_registration(ref)
        or _PHONE_NUMBER.search(folded) or _letters(ref.text) < 2
    )


def vendor_candidate(engine: Engine) -> Candidate | None:
    from daemon.extraction.providers.rules.engine import Candidate

    lines = issuer_lines(engine)
    if not lines:
        return None
    text = " ".join(" ".join(ref.text.split()) for ref in lines)
    score = 0.6 if _SUFFIX.search(" ".join(r.folded for r in lines)) else 0.4
    return Candidate(text, score, lines[0], 0, len(lines[0].text), lines[0].text, extra=lines[1:])


def address_candidate(engine: Engine) -> Candidate | None:
    """The lines after the issuer's name, up to its phone, tax numbers or the document's data."""
    from daemon.extraction.providers.rules.engine import Candidate

    issuer = issuer_lines(engine)
    if not issuer:
        return None
    page = engine.layout.pages[issuer[0].page]
    index = issuer[-1].index + 1
    # Registration numbers printed under the name are not the address.
    while index < len(page.lines) and (_is_registration(page.lines[index]) or _letters(page.lines[index].text) < 2):
        index += 1
    # A street address starts with a number ("NO. 5", "LOT 12", "3RD FLR"): lines
    # before the first one with a digit are more names (a brand, "formerly known as").
    skipped = 0
    while (index < len(page.lines) and skipped < 3 and not any(ch.isdigit() for ch in page.lines[index].text)
           and not _ends_address(page.lines[index])):
        index += 1
        skipped += 1
    out: list[LineRef] = []
    while index < len(page.lines) and len(out) < 5:
        ref = page.lines[index]
        if out and not _close(out[-1], ref):
            break
        if _ends_address(ref):
            break
        out.append(ref)
        index += 1
    if not out:
        return None
    text = " ".join(" ".join(ref.text.split()) for ref in out)
    score = 0.6 if any(ch.isdigit() for ch in text) else 0.35
    return Candidate(text, score, out[0], 0, len(out[0].text), out[0].text, extra=out[1:])
