"""Unlabelled parties: the issuer printed at the top of a receipt or invoice,
and its postal address printed right below it.

A receipt rarely says "Vendor:"; its header reads, top to bottom: maybe a
logo or a handwritten note, the shop's name (often with a legal suffix such
as SDN BHD, S/B, LTD, GMBH, or a trade such as TRADING, HARDWARE,
RESTAURANT), its registration number, its address, then phone, tax numbers
and the document's own data. These rules give each header line a role and
read that order; they only run when no label names the field.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from enum import Enum

from daemon.extraction.providers.rules.candidates import Candidate
from daemon.extraction.providers.rules.layout import Layout, LineRef
from daemon.extraction.providers.rules.values import find_dates

# How many lines from the top the header is read in.
_HEADER_LINES = 16
# Among this many name-like lines the one with a legal suffix is the issuer.
_NAME_LINES = 5
# Lines that may sit between the name and the address (registration number, date, a
# former name), and lines an address may have.
_BEFORE_ADDRESS = 4
_ADDRESS_LINES = 6

# Words of a business's legal name: a line with one is the registered name. Most
# end the name (SDN BHD, LTD, GMBH); a few start it (PERNIAGAAN, SYARIKAT).
# "5/B" is S/B misread where a suffix stands: at the end of the line or before the company number.
_SUFFIXES = (r"sdn\.?\s*bhd|bhd|berhad|s/b|5/b(?=\s*[(\[]|\s*$)|sdn|enterprises?|trading|traders|ltd|limited|"
             r"llc|l\.l\.c|inc|incorporated|corp|corporation|co|company|gmbh|b\.v|n\.v|s\.a|s\.a\.s|sarl|s\.r\.l|s\.p\.a|"
             r"sp\.?\s?z\s?o\.?o|plc|pte|pty")
_LEGAL = re.compile(rf"(?<![a-z])(?:{_SUFFIXES}|perniagaan|syarikat|kedai)(?![a-z])")
# A line that starts with a suffix ("CO. (M) SDN BHD", "(SETIA ALAM) SDN BHD") ends the name begun above it.
_SUFFIX_FIRST = re.compile(rf"^(?:\(|(?:{_SUFFIXES})(?![a-z]))")
# Trades written in a shop's name: a weaker sign than a legal suffix.
_TRADES = (r"restaurant|restoran|cafe|bistro|kitchen|kitchenette|bakery|hardware|mart|market|supermarket|"
           r"minimarket|store|stores|shop|stationery|books|bookstore|pharmacy|farmasi|hotel|motor|motors|electrical|"
           r"machinery|delights|gallery|station|services|industries|international|holdings|group|pub|bar|food|foods|"
           r"tea|coffee|petrol|pet|deco|pasar")
_TRADE = re.compile(rf"(?<![a-z])(?:{_TRADES}|cash\s*(?:&|and)\s*carry)(?![a-z])")
# A trade or a legal word of four letters or more at the end of a run of capitals.
_GLUED_WORD = re.compile(rf"(?<=[A-Z]{{3}})(?=[A-Z]{{4}})(?:{_TRADES.upper()}|ENTERPRISES?|TRADING|TRADERS|LIMITED|"
                         r"BERHAD)$")
# Lines that are no longer the issuer's name or address: the document's own data
# (a wholesaler's trade, "CASH & CARRY", is not the payment "CASH").
_STOP = re.compile(
    r"(?<![a-z])(?:tel|tel\.|phone|telephone|fax|hp|h/p|mobile|e-?mail|www|http|gst|vat|tax|invoice|receipt|"
    r"bill|cash(?!\s*(?:&|and)\s*carry)|date|time|cashier|table|order|no\.? ?:|reg\.? ?no|registration|roc|"
    r"co\.? ?no|company no|ssm|tin|npwp|kvk|siret|abn|acn|uen|document|doc|ref|member|customer|counter|pos|terminal|"
    r"qty|description|item|price|amount|total|operator|trans|slip|welcome|thank)(?![a-z])"
)
# A sentence to the customer ("Goods sold are not returnable", "Items must be ..."): a
# name or an address has no verb.
_NOTICE = re.compile(r"(?<![a-z])(?:are|is|must|will|shall|should|cannot|please|not)(?![a-z])")
_GLUED_STOP = re.compile(r"invoice|receipt|cashier|check|counter|welcome")
_ONLINE = re.compile(r"\.com\b|\.my\b|www\.|[\w.]@[\w-]+\.[a-z]")
_REGISTRATION = re.compile(r"^[\(\[]?\s*(?:co\.?\s*(?:reg|no)|company\s*(?:reg|no)|roc|reg|ssm)?[\s.:#]*"
                           r"[a-z]{0,3}\d[\d\- ]{3,}[a-z]?\s*[\)\]]?\.?$")
_REGISTRATION_WORDS = re.compile(r"(?<![a-z])(?:co\.?\s*reg|company\s*reg|reg\.?\s*no|roc\s*no|co\.?\s*no|"
                                 r"company\s*no|business\s*reg|sst\s*(?:reg|no)|gst\s*(?:reg|no|id))")
# A company number with its check letter, as printed under a shop's name: "(1174703-K)", "JM0517726-T".
_COMPANY_NUMBER = re.compile(r"(?<![a-z0-9])[a-z]{0,3}\d{5,}-?\s?[a-z](?![a-z0-9])")
# The same at the end of the name's line, with its brackets (either may be lost).
_TRAILING_NUMBER = re.compile(r"\s*[(\[]?\s*[A-Za-z]{0,3}\d{5,}-?\s?[A-Za-z]\s*[)\]]?\s*$")
# A company's registered form, which ends its name: what follows it with a digit is its
# company number, however misread ("S/B 273500-U (GKJ)", "SDN BHD BOZTZ5-U").
_CORPORATE = re.compile(r"(?<![A-Za-z])(?:sdn\.?\s*bhd|bhd|berhad|s/b|ltd|limited|llc|inc|gmbh|plc)\.?(?![A-Za-z])",
                        re.IGNORECASE)
_PHONE_NUMBER = re.compile(r"(?<!\d)\d{2,4}\s?-\s?\d{3,4}\s?\d{3,5}(?!\d)")
# A tax or account number: nine digits or more in a row.
_LONG_NUMBER = re.compile(r"\d{9,}")
_DATA_FIELD = re.compile(r"^\s*[A-Za-z][A-Za-z .#/]{0,14}\s?[:;]\s*\S*\d")
_PRICE = re.compile(r"(?<![\d.,])\d{1,6}[.,]\d{2}(?![\d.,]?\d)")
_TIME = re.compile(r"(?<!\d)\d{1,2}:\d{2}(?::\d{2})?(?!\d)")
# A postcode: five digits on their own (Malaysia, Germany, France, the US, ...), maybe
# glued to the comma before them; not after a letter, where they are a lot or company
# number ("PT17920", "(S19537-X)").
_POSTCODE = re.compile(r"(?<![a-z\d./-])\d{5}(?![\d.,/-]\d|\d)")
# Words that start or make a street address (English and Malay).
_ADDRESS_WORDS = re.compile(
    r"(?<![a-z])(?:no|lot|level|floor|flr|tingkat|jalan|jln|jl|lorong|persiaran|lebuh|lebuhraya|taman|tmn|"
    r"bandar|kawasan|kampung|kg|blok|block|batu|seksyen|sek|wisma|menara|bangunan|kompleks|plaza|street|st|road|"
    r"rd|avenue|ave|lane|ln|drive|building|suite|unit|industrial|park|square|centre|center)(?![a-z])"
)
# The same without "no", which also starts the document's own numbers.
_STREET_WORDS = re.compile(
    r"(?<![a-z])(?:lot|level|floor|flr|tingkat|jalan|jln|jl|lorong|persiaran|lebuh|lebuhraya|taman|tmn|"
    r"bandar|kawasan|kampung|blok|block|batu|seksyen|wisma|menara|bangunan|kompleks|plaza|street|road|avenue)"
    r"(?![a-z])"
)
# The last line of an address ends with its country (the countries of the receipts and
# invoices docex reads, in English and in their own languages).
_COUNTRY = re.compile(
    r"(?<![a-z])(?:malaysia|singapore|indonesia|thailand|philippines|vietnam|viet nam|brunei|india|china|"
    r"hong kong|japan|korea|australia|new zealand|united kingdom|uk|ireland|usa|u\.s\.a|united states|canada|"
    r"germany|deutschland|france|netherlands|nederland|belgium|belgique|luxembourg|switzerland|schweiz|suisse|"
    r"austria|osterreich|italy|italia|spain|espana|portugal|poland|polska)$"
)
# A street address's first words, a house number and its comma: "No: G3,", "LOT 12A,"
# (a document number after "No:" is longer and has no comma after it).
_HOUSE_NUMBER = re.compile(r"^(?:no|lot)\s?[.:]?\s?[a-z]?\d[\w&/-]{0,6},")
# Lines under a name that are more of the name, not the address yet.
_MORE_NAMES = re.compile(r"(?<![a-z])(?:formerly|known as|licensee|owned by|own by|a member of|branch)(?![a-z])")
# A line of a name ending so goes on on the next line.
_JOINS = ("&", "-", " AND", " and")


class LineRole(Enum):
    """What a header line is, as far as finding the issuer's name and address goes."""

    NOISE = "noise"  # a logo, a stamp, a handwritten note, a notice to the customer
    CONTACT = "contact"  # a phone number, an e-mail or web address
    REGISTRATION = "registration"  # a company or tax number
    DATE = "date"
    STOP = "stop"  # the document's own data: no longer the issuer's
    TEXT = "text"  # a name or an address


@dataclass(frozen=True)
class HeaderLine:
    ref: LineRef
    role: LineRole


def _letters(text: str) -> int:
    return sum(ch.isalpha() for ch in text)


def _is_noise(ref: LineRef) -> bool:
    text = ref.text.strip()
    letters = _letters(text)
    content = letters + sum(ch.isdigit() for ch in text)
    if content < 3 or content < 0.6 * len(text.replace(" ", "")) or (letters < 3 and content - letters < 3):
        return True
    # Handwritten or stamped names in lower case above a printed header.
    return not any(ch.isupper() for ch in text)


def _is_registration(ref: LineRef) -> bool:
    folded = ref.folded.strip()
    if _REGISTRATION.match(folded) is not None or _REGISTRATION_WORDS.search(folded) is not None:
        return True
    number = _COMPANY_NUMBER.search(folded)
    # "99 SPEED MART S/B (519537-X)": a name printed with its number is the name.
    if len(folded) < 40 and number is not None and _LEGAL.search(folded[: number.start()]) is None:
        return True
    # A short run of digits with a letter or two misread in it: "(4M0517726)".
    digits = sum(ch.isdigit() for ch in folded)
    letters = _letters(folded)
    return len(folded) < 25 and digits >= 6 and letters <= 2 and " " not in folded.strip("()[] ")


def _is_contact(ref: LineRef) -> bool:
    folded = ref.folded
    return bool(_ONLINE.search(folded) or _PHONE_NUMBER.search(folded))


def _conf(ref: LineRef) -> float:
    words = ref.line.words
    chars = sum(len(w.text) for w in words) or 1
    return sum(w.conf * len(w.text) for w in words) / chars


def header(layout: Layout) -> list[HeaderLine]:
    """The first lines of the first page, each with its role (the engine reads them once)."""
    out: list[HeaderLine] = []
    if layout.pages:
        lines = layout.pages[0].lines[:_HEADER_LINES]
        heights = [ref.line.height for ref in lines] or [1.0]
        usual = statistics.median(heights)
        for ref in lines:
            out.append(HeaderLine(ref, _role(ref, usual)))
    return out


def _role(ref: LineRef, usual_height: float) -> LineRole:
    folded = ref.folded
    if _is_registration(ref) or _LONG_NUMBER.search(folded):
        return LineRole.REGISTRATION
    if _is_contact(ref):
        return LineRole.CONTACT
    if find_dates(ref.text) or _TIME.search(folded):
        return LineRole.DATE
    street = ((_STREET_WORDS.search(folded) is not None and any(ch.isdigit() for ch in folded))
              or _HOUSE_NUMBER.match(folded) is not None)
    if (_STOP.search(folded) or _GLUED_STOP.search(folded)) and not _LEGAL.search(folded) and not street:
        return LineRole.STOP
    # "TRN: 1CR0576494", "Table : 5", a price: the document's own data.
    if (_DATA_FIELD.search(ref.text) or _PRICE.search(ref.text)) and not street:
        return LineRole.STOP
    if _is_noise(ref) or _NOTICE.search(folded):
        return LineRole.NOISE
    # A barcode or a logo read as letters: much taller than the text and unsure, or
    # taller than a printer's double-height name however sure.
    tall = ref.line.height / usual_height
    if len(ref.text.split()) <= 2 and (tall > 3 or (tall > 2.2 and _conf(ref) < 0.5)):
        return LineRole.NOISE
    return LineRole.TEXT


def _substantial(ref: LineRef) -> bool:
    """A name rather than a stray mark: two words, or one of six letters or more, read with some confidence."""
    words = ref.text.split()
    return (len(words) >= 2 or _letters(ref.text) >= 6) and _conf(ref) >= 0.3


def _address_like(ref: LineRef) -> bool:
    return _POSTCODE.search(ref.folded) is not None or (
        _ADDRESS_WORDS.search(_street_words(ref.folded)) is not None and any(ch.isdigit() for ch in ref.text))


def issuer_lines(lines: list[HeaderLine]) -> list[LineRef]:
    """The lines of the issuer's name among the `header` lines ([] if none)."""
    names: list[int] = []  # indexes into `lines` of lines that may be the name
    for index, item in enumerate(lines):
        if item.role is LineRole.TEXT and _address_like(item.ref):
            break  # the name is above the address
        if item.role in (LineRole.STOP, LineRole.CONTACT) and any(_substantial(lines[i].ref) for i in names):
            break  # and above the phone and the document's data (a slogan may come first)
        if item.role is not LineRole.TEXT:
            continue
        names.append(index)
        if len(names) >= _NAME_LINES:
            break
    if not names:
        return []
    chosen = next((i for i in names if _LEGAL.search(lines[i].ref.folded)), None)
    if chosen is None:
        chosen = next((i for i in names if _substantial(lines[i].ref)), names[0])
    out = _name_from(lines, chosen)
    # A trade name with a weak suffix ("... TEA & CO.") above the registered company
    # that owns the shop ("owned by ... SDN. BHD."): the registered name is the issuer.
    if not _CORPORATE.search(" ".join(ref.text for ref in out)):
        taken = {id(ref) for ref in out}
        registered = next((i for i in names if id(lines[i].ref) not in taken and i > chosen
                           and _CORPORATE.search(lines[i].ref.text)), None)
        if registered is not None:
            out = _name_from(lines, registered)
    return out


def _name_from(lines: list[HeaderLine], chosen: int) -> list[LineRef]:
    """The name's lines around the `header` line at `chosen`: the line above it it
    continues, and the lines below that continue it."""
    start = chosen
    # A name over two lines: "AIK HUAT HARDWARE" / "ENTERPRISE (SETIA" / "ALAM) SDN BHD".
    if start > 0:
        previous, current = lines[start - 1], lines[start]
        if (previous.role is LineRole.TEXT and _close(previous.ref, current.ref) and _substantial(previous.ref)
                and not _address_like(previous.ref)
                and (previous.ref.text.rstrip().endswith(_JOINS) or _SUFFIX_FIRST.match(current.ref.folded))):
            start -= 1
    out = [lines[start].ref]
    index = start + 1
    while index < len(lines) and len(out) < 3:
        item = lines[index]
        last = out[-1]
        if item.role is not LineRole.TEXT or not _close(last, item.ref) or _address_like(item.ref):
            break
        name = _clean_name(" ".join(r.text for r in out))
        joins = (
            last.text.rstrip().endswith(_JOINS)
            or name.count("(") > name.count(")")
            or (not _LEGAL.search(" ".join(r.folded for r in out)) and _LEGAL.search(item.ref.folded) is not None
                and not any(ch.isdigit() for ch in item.ref.text) and len(item.ref.text.split()) <= 5)
        )
        if not joins:
            break
        out.append(item.ref)
        index += 1
    return out


def _close(upper: LineRef, lower: LineRef) -> bool:
    """Printed together: a receipt's line spacing leaves up to about 1.3 line heights
    between the lines of a block, a blank line over two."""
    return lower.line.y0 - upper.line.y1 < 1.5 * max(upper.line.height, lower.line.height)


def _clean_name(text: str) -> str:
    """The name without OCR debris at its ends: a lone bracket or bar, an unclosed "(1"."""
    words = text.split()
    while words and (words[-1] in ("|", "_", "~", "-", "—", "=", "*", ".", ",")
                     or (words[-1].startswith("(") and ")" not in words[-1] and len(words[-1]) <= 3)):
        words.pop()
    while words and words[0] in ("|", "_", "~", "-", "—", "=", "*", ".", ",", "'", "‘", "“", '"'):
        words.pop(0)
    return " ".join(words)


# SDN BHD with a space inside a word, none between the words, or a hyphen before it.
_SUFFIX_SPACING = re.compile(r"(?:(?<=[A-Za-z])(-)|(?<![A-Za-z]))(?=S DN|SDNBHD|SDN BHD)(S) ?(DN) ?(BHD)(?![A-Za-z])",
                             re.IGNORECASE)


def _repair_suffix(text: str) -> str:
    """"SON BHD", "SDN BED" -> "SDN BHD": a misread letter in the commonest legal
    suffix of the kind, mended when the other word of the pair is read right or the
    pair ends the name ("SIN BHU");
    "5/B" -> "S/B" as the name's last word; the pair's spacing as printed
    ("S DN BHD", "SDNBHD", "INTERNATIONAL-SDN BHD")."""
    text = _SUFFIX_SPACING.sub(lambda m: f"{' ' if m.group(1) else ''}{m.group(2)}{m.group(3)} {m.group(4)}", text)
    words = text.split(" ")
    if words and words[-1].upper() == "5/B":
        words[-1] = "S/B"
    for index in range(len(words) - 1):
        first, second = words[index], words[index + 1]
        core1, core2 = first.rstrip(".,"), second.rstrip(".,")
        if len(core1) != 3 or len(core2) != 3 or not (core1.isalpha() and core2.isalnum()):
            continue
        up1, up2 = core1.upper(), core2.upper()
        # Both words misread only where the pair ends the name, where nothing else stands.
        last = index + 2 == len(words)
        if (up1 == "SDN" or up2 == "BHD" or last) and _near(up1, "SDN") and _near(up2, "BHD"):
            fix1, fix2 = ("SDN", "BHD") if core1.isupper() else ("Sdn", "Bhd")
            words[index] = fix1 + first[len(core1):]
            words[index + 1] = fix2 + second[len(core2):]
    return " ".join(words)


def _spaced_brackets(text: str) -> str:
    """A name's brackets with the spaces OCR lost around them: "ENTERPRISE(SETIA ALAM)SDN BHD"
    -> "ENTERPRISE (SETIA ALAM) SDN BHD" (a name sets its bracketed part off by spaces)."""
    return _CLOSE_GLUED.sub(") ", _OPEN_GLUED.sub(" (", text))


_OPEN_GLUED = re.compile(r"(?<=[A-Za-z.])\((?=[A-Za-z])")
_CLOSE_GLUED = re.compile(r"(?<=[A-Za-z])\)(?=[A-Za-z])")


def _unglued(text: str) -> str:
    """A name read without a single space ("SANYUSTATIONERYSHOP"): OCR lost them all, and
    the trade and legal words at its end are set off again ("SANYU STATIONERY SHOP"). A
    name read with spaces keeps its glued words: they may be printed so."""
    if len(text) < 12 or not text.isalpha() or not text.isupper():
        return text
    tail = ""
    while (word := _GLUED_WORD.search(text)) is not None:
        text, tail = text[: word.start()], f" {word.group()}{tail}"
    return text + tail


def _near(word: str, target: str) -> bool:
    return sum(a != b for a, b in zip(word, target, strict=True)) <= 1


# The long words of a trade or a legal form, which a shop's name spells as everyone does:
# one read with a letter or two wrong ("HARDWAKE", "HARIWARL") is that word. Shorter words
# are left as read: a letter off makes another word as often as a misreading ("BAKERS").
_NAME_WORDS = tuple(word for word in (_TRADES + "|enterprise|enterprises|trading|traders|limited|berhad|company|"
                                      "corporation|incorporated|marketing|distributor|distributors").split("|")
                    if len(word) >= 7)
# An underscore between two letters of a name: the space it was printed with.
_UNDERSCORE_SPACE = re.compile(r"(?<=[A-Za-z])_(?=[A-Za-z])")
# A full stop after a whole word inside a name ("HARDWARE. ENTERPRISE"): a speck. A name
# stops only after an abbreviation ("CO.", "SDN.", "MR.", "P.T.") or at its end.
_SPECK_STOP = re.compile(r"(?<![A-Za-z])([A-Za-z]{5,})\.(?= \S)")


def _name_word(word: str) -> str:
    """`word`, or the trade or legal word it is misread from (in its case): one letter
    wrong in a word of seven letters or more, two in one of eight or more."""
    if len(word) < 7 or not word.isalpha() or word.lower() in _NAME_WORDS:
        return word
    lower = word.lower()
    for known in _NAME_WORDS:
        if len(known) == len(word) and sum(a != b for a, b in zip(lower, known, strict=True)) <= (
                2 if len(word) >= 8 else 1):
            return known.upper() if word.isupper() else known.capitalize() if word[0].isupper() else known
    return word


def _mended_name_words(text: str) -> str:
    """A name with its trade and legal words read as printed (`_name_word`), the spaces
    OCR read as underscores, and no stop a speck put after a word inside it."""
    text = _SPECK_STOP.sub(r"\1", _UNDERSCORE_SPACE.sub(" ", text))
    return re.sub(r"(?<![A-Za-z0-9])[A-Za-z]{7,}(?![A-Za-z0-9])", lambda match: _name_word(match.group()), text)


def vendor_candidate(lines: list[HeaderLine]) -> Candidate | None:
    """The issuer's name read from the `header` lines."""
    name = issuer_lines(lines)
    if not name:
        return None
    text = _clean_name(" ".join(" ".join(ref.text.split()) for ref in name))
    folded = " ".join(r.folded for r in name)
    if _LEGAL.search(folded):
        text = _TRAILING_NUMBER.sub("", text)
    text = _mended_name_words(_mended_letters(_spaced_brackets(_repair_suffix(_unglued(text)))))
    suffixes = list(_CORPORATE.finditer(text))
    if suffixes and any(ch.isdigit() for ch in text[suffixes[-1].end() :]):
        text = text[: suffixes[-1].end()]
    if not text:
        return None
    score = 0.6 if _LEGAL.search(folded) else 0.5 if _TRADE.search(folded) else 0.4
    return Candidate(text, score, name[0], 0, len(name[0].text), name[0].text, extra=name[1:])


def _ends_address(item: HeaderLine) -> bool:
    """Phone, tax and registration numbers, e-mails and the document's own data end an address."""
    return (item.role in (LineRole.CONTACT, LineRole.REGISTRATION, LineRole.DATE, LineRole.STOP)
            or _letters(item.ref.text) < 2)


def address_lines(lines: list[HeaderLine]) -> list[LineRef]:
    """The lines after the issuer's name, up to its phone, tax numbers or the document's data."""
    issuer = issuer_lines(lines)
    if not lines:
        return []
    positions = {id(item.ref): i for i, item in enumerate(lines)}
    first = positions[id(issuer[-1])] + 1 if issuer and id(issuer[-1]) in positions else 0
    index = _address_start(lines, first)
    if index is None:
        return []
    out: list[LineRef] = []
    postcode_seen = False
    after_postcode = 0
    # After the postcode only a state or a country, or the branch: a few words, or a
    # few more where the postcode ends its line and the town comes next.
    words_after = 4
    widest = 0.0  # the widest gap between the address's lines so far
    while index < len(lines) and len(out) < _ADDRESS_LINES:
        item = lines[index]
        ref = item.ref
        if out:
            gap = ref.line.y0 - out[-1].line.y1
            # Apart, or much further apart than the address's lines are: another block.
            if not _close(out[-1], ref) or (len(out) >= 2 and gap > max(2 * widest, 0.5 * ref.line.height)):
                break
            widest = max(widest, gap)
        if item.role is LineRole.CONTACT and out and _POSTCODE.search(_before_contact(ref.folded)):
            out.append(ref)  # the town and the phone on one line: the part before the phone
            break
        if _ends_address(item) or item.role is LineRole.NOISE:
            break
        postcode = _POSTCODE.search(ref.folded)
        if postcode_seen and postcode is None:
            after_postcode += 1
            if after_postcode > 2 or len(ref.text.split()) > words_after or _conf(ref) < 0.25:
                break
        out.append(ref)
        if postcode is not None:
            postcode_seen, after_postcode = True, 0
            words_after = 6 if not ref.folded[postcode.end() :].strip(" .,") else 4
        if _COUNTRY.search(ref.folded.rstrip(" .,")):
            break  # nothing of the address comes after the country
        index += 1
    return out


def _address_start(lines: list[HeaderLine], first: int) -> int | None:
    """Where the address starts among the `header` lines after the name (at `first`).

    The postcode line is the surest sign of an address: the address is the street
    lines printed right above it. Without a postcode, registration numbers, the
    date and more names (a brand, "formerly known as") may sit between the name
    and the address, which starts with a street line.
    """
    postcode = _postcode_line(lines, first)
    if postcode is not None:
        start = postcode
        while (start > first and postcode - start < _ADDRESS_LINES - 1 and _more_address(lines[start - 1])
               and _close(lines[start - 1].ref, lines[start].ref)):
            start -= 1
        while start < postcode and not _street_line(lines[start]):
            start += 1  # a branch's or a mall's name above the address is not part of it
        return start
    index = first
    for skipped in range(_BEFORE_ADDRESS + 1):
        if (index >= len(lines) or skipped == _BEFORE_ADDRESS
                or lines[index].role in (LineRole.CONTACT, LineRole.STOP)):
            return None
        item = lines[index]
        if _street_line(item):
            return index
        index += 1
    return None


def _postcode_line(lines: list[HeaderLine], first: int) -> int | None:
    """The first line from `first` with a postcode, before the phone and the document's own data."""
    for index in range(first, min(len(lines), first + _BEFORE_ADDRESS + _ADDRESS_LINES)):
        item = lines[index]
        if _more_address(item) and _POSTCODE.search(item.ref.folded):
            return index
        if item.role is LineRole.CONTACT or (
                item.role is LineRole.STOP and (_STOP.search(item.ref.folded) or _GLUED_STOP.search(item.ref.folded))):
            return None
    return None


def _more_address(item: HeaderLine) -> bool:
    """A line that may be part of an address: text, not a name."""
    folded = item.ref.folded
    return item.role is LineRole.TEXT and not _LEGAL.search(folded) and not _MORE_NAMES.search(folded)


# A code in brackets: a branch's or a site's ("Duty Free Zone (J8)"), not a house number.
_BRACKETED = re.compile(r"\([^()]*\)")


def _street_line(item: HeaderLine) -> bool:
    """A line that may start an address: with a number (not a bracketed code) or a street word."""
    folded = item.ref.folded
    return _more_address(item) and (any(ch.isdigit() for ch in _BRACKETED.sub("", folded))
                                    or _ADDRESS_WORDS.search(_street_words(folded)) is not None)


_DEBRIS = "‘’“”'\"|~_°•*`"


# A colon after a word at the end of an address's line: a speck, or a comma's tail read
# whole; an address line ends with no label ("LOT NO:" ends with a short one, kept).
_LINE_END_COLON = re.compile(r"(?<=[A-Za-z]{4}):$")


def _clean_line(text: str) -> str:
    """A line without the marks OCR reads into the margin beside it."""
    return _LINE_END_COLON.sub("", " ".join(text.split()).lstrip(_DEBRIS + " ").rstrip(_DEBRIS.replace("'", "") + " "))


# A word read with i, 1 or I for an l ("Jaian", "J1n"), or with a digit for a letter that
# looks like it ("10T", "1.OT": the foot of an L read as a stop): which address word it is.
_MISREAD_WORD = re.compile(r"[a-z0-9]+(?:(?<=\d)\.[a-z0-9]+)?", re.IGNORECASE)
# The letters OCR reads as these digits (1 is an l far more often than an I in an address word).
_LOOKALIKE_LETTERS = str.maketrans("0158", "olsb")


def _street_words(text: str) -> str:
    """`text` with its address words' letters mended where OCR read an l as i, 1 or I
    ("Jaian" -> "Jalan"), or a letter as the digit it looks like ("10T" -> "LOT")."""

    def mend(match: re.Match[str]) -> str:
        word = match.group()
        if len(word) < 3 or _ADDRESS_WORDS.fullmatch(word.lower()):
            return word
        if not any(ch.isalpha() for ch in word):
            return word  # a number
        letters = word.replace(".", "").lower().translate(_LOOKALIKE_LETTERS)
        for mended in (letters, letters.replace("i", "l")):
            if _ADDRESS_WORDS.fullmatch(mended):
                return mended.upper() if not any(ch.islower() for ch in word) else _cased_like(mended, word)
        return word

    return _MISREAD_WORD.sub(mend, text)


def _cased_like(mended: str, word: str) -> str:
    """`mended` (lower case) in the case of the `word` it mends: "Jalan" for "Jaian", "jln" for "j1n"."""
    return mended.capitalize() if word[:1].isupper() else mended


# A capital I inside a word otherwise in lower case is a misread l: "WorId", "JIn", "BIk".
_CAPITAL_I = re.compile(r"(?<=[a-z])I(?=[a-z])|(?<=\b[A-Z])I(?=[a-z]+\b)")


def _mended_letters(text: str) -> str:
    return _CAPITAL_I.sub("l", text)


# A postcode with the space before its town lost: "43200Cheras".
_GLUED_TOWN = re.compile(r"(?<![A-Za-z\d])(\d{5})(?=[A-Za-z]{2})")
# A full stop read twice ("KL.."), or read beside the comma it is a speck of ("SELATAN.,").
_DOUBLED_STOP = re.compile(r"(?<=\w)\.(?=\.(?!\.)|,)")

# A full stop inside an address after a word (not an abbreviation: "JLN.", "P.T.") or a
# number: the comma that separates an address's parts, read as a stop in a small print.
_INNER_STOP = re.compile(r"(?:(?<=[A-Za-z]{4})|(?<=\d)|(?<=\d[A-Za-z])|(?<=\d-[A-Za-z]))\.(?= \S)")


# OCR's confusions judged by the kind of token they are in (a run of letters and digits).
_TOKEN = re.compile(r"[A-Za-z0-9]+")
# The letters OCR reads as these digits inside a word.
_DIGIT_AS_LETTER = str.maketrans("058", "OSB")
# A floor's ordinal with its D read as a zero: "3R0" -> "3RD", "2N0" -> "2ND".
_ORDINAL = re.compile(r"(\d{1,2}[RrNn])0")


def _mended_token(token: str) -> str:
    """A token with the characters OCR misread in it read as the kind of token it is: a word
    of letters with one digit that looks like a letter, not among its last two characters
    (where a digit is a block's number: "Uptown3", "USJ8A"), has the letter ("8ESAR" -> "BESAR"); a number with an O
    among its digits has a zero ("29O" -> "290")."""
    digits = sum(ch.isdigit() for ch in token)
    letters = len(token) - digits
    # (Not where a word starts after the digit: "Lot8Jalan" is a number glued between words.)
    glued = any(ch.islower() for ch in token) and any(ch.isupper() for ch in token[1:])
    if digits == 1 and letters >= 3 and not any(ch.isdigit() for ch in token[-2:]) and not glued:
        # A capital where it starts the word ("8esar" -> "Besar"), else in the word's case.
        inner = token[1:].translate(_DIGIT_AS_LETTER)
        return token[0].translate(_DIGIT_AS_LETTER) + (inner.lower() if any(ch.islower() for ch in token) else inner)
    if digits >= 2 and letters == token.upper().count("O") == 1 and not token[0].isalpha():
        return token.replace("O", "0").replace("o", "0")
    if (ordinal := _ORDINAL.fullmatch(token)) is not None:
        return ordinal.group(1) + ("D" if ordinal.group(1)[-1].isupper() else "d")
    return token


def _mended_tokens(text: str) -> str:
    return _TOKEN.sub(lambda match: _mended_token(match.group()), text)


# A street word that starts an address's parts glued to the name after it ("JALANKPB"): OCR
# lost the space between them. (Not a Malay suffix after it: "JALANAN" is a word.)
_GLUED_STREET = re.compile(r"(?<![A-Za-z])(JALAN|Jalan|TAMAN|Taman|LORONG|Lorong|PERSIARAN|Persiaran)"
                           r"(?=[A-Z0-9]{3,}|[A-Z0-9][a-z0-9]{2,})(?!AN(?![A-Za-z]))")


# Words of the addresses docex reads (Malaysian ones: their street and place words, the
# states and federal territories): a word one character away from one of them is it,
# misread, where that character is a mark ("JA:AN", "SE_ANGOR") or one of the letters
# OCR confuses ("TANAN"); not another letter, which may be printed so ("PARINDUSTRIAN").
_PLACE_WORDS = (  # in order: the first that fits is taken
    "jalan", "lorong", "persiaran", "lebuhraya", "taman", "bandar", "kawasan", "perindustrian", "kampung",
    "seksyen", "wisma", "menara", "bangunan", "kompleks", "plaza", "tingkat", "street", "avenue", "building",
    "industrial", "square", "centre", "center", "level", "floor", "darul", "ehsan", "takzim", "khusus",
    "selangor", "johor", "kedah", "kelantan", "terengganu", "pahang", "perak", "perlis", "melaka", "negeri",
    "sembilan", "sabah", "sarawak", "penang", "pulau", "pinang", "kuala", "lumpur", "putrajaya", "labuan",
    "malaysia",
)
_CONFUSED = frozenset(("mn", "nm", "il", "li", "od", "do", "uv", "vu"))
_WORD_WITH_MARKS = re.compile(r"[A-Za-z][A-Za-z:_]{3,}[A-Za-z]")


def _place_word(word: str) -> str:
    """`word`, or the place word it is misread from."""
    lower = word.lower()
    if lower in _PLACE_WORDS:
        return word
    for place in _PLACE_WORDS:
        if len(place) != len(word):
            continue
        differ = [(a, b) for a, b in zip(lower, place, strict=True) if a != b]
        if len(differ) == 1 and (not differ[0][0].isalpha() or differ[0][0] + differ[0][1] in _CONFUSED):
            return place.upper() if not any(ch.islower() for ch in word) else place.capitalize()
    return word


def _unglued_address(text: str) -> str:
    text = _WORD_WITH_MARKS.sub(lambda match: _place_word(match.group()), text)
    return _GLUED_STREET.sub(r"\1 ", text)


def _spaced_address(text: str) -> str:
    """The address with the spacing and stops OCR garbled between its words mended."""
    text = _street_words(_mended_letters(_DOUBLED_STOP.sub("", _GLUED_TOWN.sub(r"\1 ", text))))
    return _INNER_STOP.sub(",", _unglued_address(_mended_tokens(text)))


# Where a line's phone, fax or e-mail starts: its label (maybe misread, "Te1"), else the number.
_CONTACT_START = re.compile(rf"(?i)(?<![a-z])(?:te[l1]|phone|telephone|fax|h/?p|mobile|e-?mail)(?![a-z])|"
                            rf"{_PHONE_NUMBER.pattern}")


def _before_contact(text: str) -> str:
    """A line up to the phone, fax or e-mail printed after the address on it."""
    found = _CONTACT_START.search(text)
    return text[: found.start()] if found is not None and found.start() > 0 else text


def address_candidate(lines: list[HeaderLine]) -> Candidate | None:
    """The issuer's postal address read from the `header` lines."""
    out = address_lines(lines)
    if not out:
        return None
    text = _spaced_address(" ".join(part for part in (_clean_line(_before_contact(ref.text)) for ref in out) if part))
    score = 0.6 if any(ch.isdigit() for ch in text) else 0.35
    return Candidate(text, score, out[0], 0, len(out[0].text), out[0].text, extra=out[1:])
