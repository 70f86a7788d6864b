"""Finding and normalising typed values in a piece of text (pure functions).

Each ``find_*`` function scans a string and returns `Found` values with the
character span they came from, so the caller can point at their boxes:

- dates in numeric (``25/12/2018``, ``2014-08-03``, ``8-9-22``) and written
  forms (``August 3, 2014``, ``7. Mai 2014``, ``02 Juillet 2015``) in the
  common European languages, to ISO 8601; day-first unless the document or
  the value says otherwise (`DateOrder`);
- amounts with either decimal separator, thousands groups, currency signs or
  codes on either side and negative forms (``-9,32``, ``(12.00)``);
- integers, booleans, e-mails, URIs, enum members, currencies, phone numbers.

`ValueKind` names what a schema field holds; dates read by OCR are mended
first (`repair_dates`).
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
import unicodedata
from enum import Enum
from typing import Any, NamedTuple


class ValueKind(Enum):
    """What a field's value is, hence how it is read from text (`fields.read_values`)."""

    DATE = "date"
    AMOUNT = "amount"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    EMAIL = "email"
    URI = "uri"
    ENUM = "enum"
    CURRENCY = "currency"
    ID = "id"
    PHONE = "phone"
    PARTY = "party"  # a person's or a company's name
    ADDRESS = "address"
    TEXT = "text"

    @property
    def numeric(self) -> bool:
        return self in (ValueKind.AMOUNT, ValueKind.INTEGER)

    @property
    def written(self) -> bool:
        """Read as the words written (a name, an address, any text), not as a value of a shape."""
        return self in (ValueKind.TEXT, ValueKind.PARTY, ValueKind.ADDRESS)


class Found(NamedTuple):
    value: Any
    start: int
    end: int
    quality: float = 1.0  # how sure the text is this kind of value (0..1)
    currency: str | None = None


_FOLDED: dict[int, str] = {}


def _fold_char(ch: str) -> str:
    base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c)).lower()
    base = {"ł": "l", "ø": "o", "đ": "d", "ß": "s", "æ": "a", "œ": "o"}.get(base, base)
    # Exactly one character per character: spans found in folded text are spans of the original.
    return base if len(base) == 1 else (ch.lower()[:1] or ch)


def fold(text: str) -> str:
    """Lower case without accents, one character per character, for matching words of
    any European language."""
    if text.isascii():
        return text.lower()
    for ch in set(text):
        if ord(ch) > 127 and ord(ch) not in _FOLDED:
            _FOLDED[ord(ch)] = _fold_char(ch)
    return text.translate(_FOLDED).lower()


_WORD = re.compile(r"[^\W\d_][\w'.\-/]*", re.UNICODE)


def words(text: str) -> list[str]:
    """The words of `text` (letters first, then letters, digits and inner punctuation)."""
    return [w.strip(".-/'") or w for w in _WORD.findall(text)]


# --- dates ---------------------------------------------------------------------

class DateOrder(Enum):
    DMY = "dmy"
    MDY = "mdy"


_MONTHS: dict[str, int] = {}
for _number, _names in enumerate(
    [
        "january jan januar janvier janv janeiro enero ene gennaio genn januari stycznia styczen sty jänner janner",
        "february feb februar fevrier fevr fev fevereiro febrero gennaio_ febbraio febr februari lutego luty lut",
        "march mar marz maerz mars marco marzo maart mrt marca marzec mac",
        "april apr avril avr abril aprile aprilie kwietnia kwiecien kwi",
        "may mai mei mayo maggio maio maj maja",
        "june jun juni juin junho junio giugno czerwca czerwiec cze",
        "july jul juli juillet juil julho julio luglio lipca lipiec lip",
        "august aug august aout agosto augustus sierpnia sierpien sie ogos ogo",
        "september sep sept septembre setembro septiembre settembre wrzesnia wrzesien wrz",
        "october oct oktober octobre outubro octubre ottobre okt pazdziernika pazdziernik paz okt",
        "november nov novembre novembro noviembre listopada listopad lis",
        "december dec dezember decembre dezembro diciembre dicembre december dez des grudnia grudzien gru dis",
    ],
    start=1,
):
    for _name in _names.split():
        if not _name.endswith("_"):
            _MONTHS.setdefault(_name, _number)

_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_YEAR = r"(?P<y>\d{4}|\d{2}(?![\d]))"
# Not glued to a word before it: "HC03-7-15" is an item code. A date's last
# number may run into the time printed after it when OCR loses the space between
# them ("10-03-201823:03:06", "06/04/1711:43am", "2018-01-0522:55:25").
_GLUED_TIME = r"(?=\d{1,2}:\d{2}(?!\d))"
_NUMERIC_DATE = re.compile(
    r"(?<![\w.,/-])(?P<a>\d{1,2})\s?(?P<s>[/.\-])\s?(?P<b>\d{1,2})\s?(?P=s)\s?"
    r"(?P<y>(?:\d{4}|\d{2})" + _GLUED_TIME + r"|(?:\d{4}|\d{2})(?![\d]|[.,]\d))"
)
_ISO_DATE = re.compile(r"(?<![\d.,/-])(?P<y>\d{4})(?P<s>[-/.])(?P<m>\d{1,2})(?P=s)"
                       r"(?P<d>\d{2}" + _GLUED_TIME + r"|\d{1,2}(?!\d))")
_DAY_MONTH_YEAR = re.compile(
    r"(?<![\w])(?P<d>\d{1,2})(?:st|nd|rd|th|er|e|\.)?[\s\-/]*(?:of\s+|de\s+)?(?P<m>" + _MONTH_RE
    + r")\.?(?:\s*de)?[\s\-/,.']*" + _YEAR + r"(?!\d)",
    re.IGNORECASE,
)
_MONTH_DAY_YEAR = re.compile(
    r"(?<![\w])(?P<m>" + _MONTH_RE + r")\.?[\s\-]*(?P<d>\d{1,2})(?:st|nd|rd|th)?\s*,?\s*(?P<y>\d{4})(?!\d)",
    re.IGNORECASE,
)
_TIME = re.compile(r"(?<![\d:])(?P<h>\d{1,2})[:h](?P<mi>\d{2})(?::(?P<s>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?(?![\d])",
                   re.IGNORECASE)


_LATEST_LIKELY_YEAR = dt.date.today().year + 5


def _year(text: str) -> int:
    year = int(text)
    if year < 100:
        # Two-digit years: this century unless that is more than ten years ahead.
        pivot = dt.date.today().year % 100 + 10
        year += 2000 if year <= pivot else 1900
    return year


def _date(y: int, m: int, d: int) -> dt.date | None:
    if not 1900 <= y <= 2199:
        return None
    try:
        return dt.date(y, m, d)
    except ValueError:
        return None


def numeric_date_orders(text: str) -> tuple[int, int]:
    """How many numeric dates in `text` can only be day-first, and only month-first."""
    dmy = mdy = 0
    for match in _NUMERIC_DATE.finditer(text):
        a, b = int(match["a"]), int(match["b"])
        # No day is over 31: "3.49 .21" is two amounts, not a month-first date.
        if 31 >= a > 12 >= b:
            dmy += 1
        elif 31 >= b > 12 >= a:
            mdy += 1
    return dmy, mdy


_LETTER_RUN = re.compile(r"[^\W\d_]+")


def _names_a_month(folded: str) -> bool:
    """Whether a run of letters in `folded` is a month's name, maybe after a day's suffix
    ("1stjan", "1ejan") and before "de" ("mayde 2018"): the written-month patterns, whose
    alternation of 133 names costs more than the rest of `find_dates`, can match nothing
    otherwise."""
    for run in _LETTER_RUN.findall(folded):
        run = run.casefold()
        ends = (len(run), len(run) - 2) if run.endswith("de") else (len(run),)
        if any(run[start:end] in _MONTHS for start in (0, 1, 2) for end in ends):
            return True
    return False


def find_dates(text: str, order: DateOrder = DateOrder.DMY) -> list[Found]:
    """Every date in `text`, as `datetime.date`, in order of appearance."""
    found: list[Found] = []
    # The spans taken so far, which never overlap: sorted by start, so by end too
    # (a line of thousands of dates is not searched once per date).
    starts: list[int] = []
    ends: list[int] = []

    def add(date: dt.date | None, match: re.Match[str], quality: float) -> None:
        if date is None:
            return
        if date.year > _LATEST_LIKELY_YEAR:
            quality *= 0.5  # far in the future: more likely a misread digit
        start, end = match.span()
        after = bisect.bisect_right(ends, start)  # the first taken span ending after this one starts
        if after < len(starts) and starts[after] < end:
            return
        starts.insert(after, start)
        ends.insert(after, end)
        found.append(Found(date, start, end, quality))

    folded = fold(text)
    if _names_a_month(folded):
        for match in _DAY_MONTH_YEAR.finditer(folded):
            add(_date(_year(match["y"]), _MONTHS[match["m"].lower()], int(match["d"])), match, 1.0)
        for match in _MONTH_DAY_YEAR.finditer(folded):
            add(_date(_year(match["y"]), _MONTHS[match["m"].lower()], int(match["d"])), match, 1.0)
    for match in _ISO_DATE.finditer(text):
        add(_date(int(match["y"]), int(match["m"]), int(match["d"])), match, 1.0)
    for match in _NUMERIC_DATE.finditer(text):
        a, b, y = int(match["a"]), int(match["b"]), _year(match["y"])
        quality = 1.0 if len(match["y"]) == 4 else 0.9
        first, second = (a, b) if order is DateOrder.MDY else (b, a)  # (month, day)
        add(_date(y, first, second) or _date(y, second, first), match, quality)
    found.sort(key=lambda f: f.start)
    return found


def as_date_time(moment: dt.datetime) -> str:
    """`moment`, a clock time printed without a zone, as an RFC 3339 date-time in UTC
    ("2018-12-25T20:13:39Z"): JSON Schema's `date-time` requires an offset."""
    return moment.replace(tzinfo=None).isoformat() + "Z"


def find_time(text: str) -> tuple[int, int, int] | None:
    match = _TIME.search(text)
    if match is None:
        return None
    hour, minute, second = int(match["h"]), int(match["mi"]), int(match["s"] or 0)
    ampm = (match["ampm"] or "").lower().replace(".", "")
    if ampm == "pm" and hour < 12:
        hour += 12
    elif ampm == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59 or second > 59:
        return None
    return hour, minute, second


# --- amounts -------------------------------------------------------------------

# Signs and words written beside amounts, to ISO 4217.
CURRENCY_SIGNS: dict[str, str] = {
    "us$": "USD", "usd": "USD", "$": "USD", "a$": "AUD", "au$": "AUD", "c$": "CAD", "ca$": "CAD",
    "hk$": "HKD", "s$": "SGD", "nz$": "NZD", "€": "EUR", "eur": "EUR", "euro": "EUR", "euros": "EUR",
    "£": "GBP", "gbp": "GBP", "¥": "JPY", "jpy": "JPY", "cny": "CNY", "rmb": "CNY", "₹": "INR", "rs": "INR",
    "rs.": "INR", "inr": "INR", "rm": "MYR", "myr": "MYR", "zł": "PLN", "zl": "PLN", "pln": "PLN",
    "chf": "CHF", "fr.": "CHF", "sek": "SEK", "nok": "NOK", "dkk": "DKK", "kr": "SEK", "czk": "CZK",
    "kč": "CZK", "huf": "HUF", "ft": "HUF", "ron": "RON", "lei": "RON", "brl": "BRL", "r$": "BRL",
    "mxn": "MXN", "zar": "ZAR", "aud": "AUD", "cad": "CAD", "sgd": "SGD", "hkd": "HKD", "nzd": "NZD",
    "krw": "KRW", "₩": "KRW", "try": "TRY", "₺": "TRY", "aed": "AED", "sar": "SAR", "idr": "IDR",
    "rp": "IDR", "thb": "THB", "฿": "THB", "php": "PHP", "₱": "PHP", "vnd": "VND", "₫": "VND",
    "rub": "RUB", "₽": "RUB", "uah": "UAH", "₴": "UAH", "ils": "ILS", "₪": "ILS", "egp": "EGP",
    "ngn": "NGN", "₦": "NGN", "kes": "KES", "pkr": "PKR", "bdt": "BDT", "lkr": "LKR",
}
# Any word that might be a currency beside a number; `CURRENCY_SIGNS` decides.
_CURRENCY_WORD = r"[A-Za-z]{1,3}\$|[A-Za-zł]{2,5}\.?|Kč|[$€£¥₹₩₺₽₫฿₱₴₪₦]"
_AMOUNT = re.compile(
    r"(?:(?<![^\W\d_])(?P<pre>" + _CURRENCY_WORD + r")\s{0,2})?"
    r"(?P<neg>[-−–]\s?|\()?"
    r"(?:(?P<pre2>[$€£¥₹])\s?)?"
    # A number glued to a word ("RM51.30") is an amount only after a currency (`find_amounts` checks).
    r"(?(pre)|(?<![\w.,/:]))"
    r"(?P<num>\d{1,3}(?:(?P<g>[,.'\u00a0\u202f])\d{3})(?:(?P=g)\d{3})*(?:[.,]\d{1,2})?"
    r"|\d{1,3}(?:\s\d{3})+,\d{1,2}"
    r"|\d+(?:[.,]\d{1,3})?"
    # " .02": a few cents whose leading zero the printer or OCR dropped (a rounding, no
    # change), after a space or a currency: "Incl.68" is a word's dot and a misread "6%".
    r"|(?<=[\s$€£¥₹])\.\d{2}(?!\d))"
    r"(?P<neg2>-)?\)?"
    r"(?![\w/:]|[.,]\d)"
    r"(?:\s{0,2}(?P<post>" + _CURRENCY_WORD + r")(?![^\W\d_]))?",
)


# Two-decimal endings ("12,50", "3.20"), counted by `decimal_hint`; each with the same
# matches searched from the separator (the regex engine then jumps from one separator to
# the next instead of trying every digit of a page: ten times faster), and two of them
# sharing a digit ("1,23,45"), which the first finds once and the second twice.
_COMMA_DECIMALS = re.compile(r"\d,\d{2}(?!\d)")
_COMMA_DECIMALS_AT = re.compile(r",(?<=\d,)\d{2}(?!\d)")
_COMMA_DECIMALS_CHAINED = re.compile(r",(?<=\d,)\d\d,\d\d(?!\d)")
_DOT_DECIMALS = re.compile(r"\d\.\d{2}(?!\d)")
_DOT_DECIMALS_AT = re.compile(r"\.(?<=\d\.)\d{2}(?!\d)")
_DOT_DECIMALS_CHAINED = re.compile(r"\.(?<=\d\.)\d\d\.\d\d(?!\d)")
_SPACE_GROUP = re.compile(r"(?<=\d) (?=\d{3}\b)")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_TWO_DECIMALS = re.compile(r"[.,]\d{2}$")


def decimal_hint(text: str) -> str:
    """The document's decimal separator: whichever ends more two-decimal amounts."""
    commas = _count(_COMMA_DECIMALS, _COMMA_DECIMALS_AT, _COMMA_DECIMALS_CHAINED, text)
    dots = _count(_DOT_DECIMALS, _DOT_DECIMALS_AT, _DOT_DECIMALS_CHAINED, text)
    return "," if commas > dots else "."


def _count(pattern: re.Pattern[str], at: re.Pattern[str], chained: re.Pattern[str], text: str) -> int:
    """``len(pattern.findall(text))``, through `at` where no two matches share a digit
    (then every match `at` finds is one of `pattern`'s)."""
    if chained.search(text) is None:
        return len(at.findall(text))
    return len(pattern.findall(text))


def parse_number(raw: str, decimal: str = ".") -> float | None:
    """``1.234,56`` / ``1,234.56`` / ``1 234,56`` / ``1234,5`` → float."""
    text = raw
    if not text.isdigit():
        text = text.replace("\u00a0", " ").replace("\u202f", " ").replace("'", "").strip()
        if " " in text:
            text = _SPACE_GROUP.sub("", text)
        if not _NUMBER.fullmatch(text):
            return None
    last_dot, last_comma = text.rfind("."), text.rfind(",")
    if last_dot >= 0 and last_comma >= 0:
        dec = "." if last_dot > last_comma else ","
    elif last_dot >= 0 or last_comma >= 0:
        sep = "." if last_dot >= 0 else ","
        tail = len(text) - max(last_dot, last_comma) - 1
        if text.count(sep) > 1:
            dec = ""  # only groups
        elif tail == 3:
            # "1,500" / "1.500": a group, unless the document writes its decimals with it
            dec = sep if decimal == sep else ""
        else:
            dec = sep
    else:
        dec = ""
    group = {",": ".", ".": ",", "": ",."}[dec]
    for ch in group:
        text = text.replace(ch, "")
    if dec == ",":
        text = text.replace(",", ".")
    try:
        return float(text)
    except ValueError:
        return None


def find_amounts(text: str, decimal: str = ".") -> list[Found]:
    """Every amount in `text` with its currency when one is written beside it."""
    found: list[Found] = []
    for match in _AMOUNT.finditer(text):
        raw = match["num"]
        number = parse_number("0" + raw if raw[0] == "." else raw, decimal)
        if number is None:
            continue
        if match["neg"] or match["neg2"]:
            number = -number
        pre, pre2, post = match["pre"], match["pre2"], match["post"]
        before = CURRENCY_SIGNS.get(pre.lower()) if pre else None
        if pre and not before and match.end("pre") == match.start("num"):
            continue  # "SR100100000171", "No1": a code, not an amount
        after = CURRENCY_SIGNS.get(post.lower()) if post else None
        currency = before or (CURRENCY_SIGNS[pre2] if pre2 else None) or after
        if before:
            start = match.start("pre")
        elif match["neg"]:
            start = match.start("neg")
        elif pre2:
            start = match.start("pre2")
        else:
            start = match.start("num")
        end = match.end() if after else match.end("num")
        if currency is not None:
            quality = 1.0
        elif _TWO_DECIMALS.search(raw):
            quality = 0.95
        else:
            quality = 0.8
        found.append(Found(round(number, 6), start, end, quality, currency))
    return found


def find_integers(text: str) -> list[Found]:
    out = []
    for found in find_amounts(text):
        value = float(found.value)
        if value.is_integer():
            out.append(Found(int(value), found.start, found.end, found.quality))
    return out


# --- the rest ------------------------------------------------------------------

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,24}")
_URI = re.compile(r"\bhttps?://[^\s<>\"']+|\bwww\.[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+[^\s<>\"']*", re.IGNORECASE)
_TRUE = {"yes", "true", "y", "x", "[x]", "☑", "☒", "✓", "✔", "oui", "ja", "si", "sí", "tak", "1", "checked",
         "paid", "on"}
_FALSE = {"no", "false", "n", "[ ]", "☐", "non", "nein", "nee", "nie", "0", "unchecked", "unpaid", "off"}
_BOOL_WORD = re.compile(r"\[[ xX]\]|[☑☒✓✔☐]|[A-Za-zÀ-ÿ]+|\d")


def find_emails(text: str) -> list[Found]:
    return [Found(m.group().strip("."), m.start(), m.end()) for m in _EMAIL.finditer(text)]


def find_uris(text: str) -> list[Found]:
    out = []
    for m in _URI.finditer(text):
        value = m.group().rstrip(".,;)")
        if not value.lower().startswith("http"):
            value = "https://" + value
        out.append(Found(value, m.start(), m.start() + len(m.group().rstrip(".,;)"))))
    return out


def find_booleans(text: str) -> list[Found]:
    out = []
    for m in _BOOL_WORD.finditer(text):
        word = fold(m.group())
        if word in _TRUE:
            out.append(Found(True, m.start(), m.end(), 0.9 if len(word) > 1 else 0.6))
        elif word in _FALSE:
            out.append(Found(False, m.start(), m.end(), 0.9 if len(word) > 1 else 0.6))
    return out


def find_enum(text: str, members: list[Any]) -> list[Found]:
    """Members of an enum written in `text` (case and accents ignored), longest first."""
    folded = fold(text)
    out: list[Found] = []
    for member in sorted(members, key=lambda m: -len(str(m))):
        key = fold(str(member))
        if not key:
            continue
        for m in re.finditer(r"(?<![\w])" + re.escape(key) + r"(?![\w])", folded):
            if not any(f.start < m.end() and m.start() < f.end for f in out):
                out.append(Found(member, m.start(), m.end()))
    out.sort(key=lambda f: f.start)
    return out


_ID_TOKEN = re.compile(r"(?:[#№]\s?)?[A-Za-z0-9][A-Za-z0-9_\-/.]*[A-Za-z0-9]|[A-Za-z0-9]")


def find_identifier(text: str) -> Found | None:
    """The first identifier-looking token: letters and digits, dashes, slashes.

    A leading ``#`` or ``№`` is kept with the token it marks, as printed
    (``# 123`` → ``#123``). Tokens with a digit are preferred; a lone word is
    accepted with a lower quality.
    """
    words = [m for m in _ID_TOKEN.finditer(text)]
    for index, m in enumerate(words):
        token = m.group().replace(" ", "").rstrip(".")
        if fold(token) in _ID_FILLERS:
            continue
        if any(ch.isdigit() for ch in token):
            return Found(token, m.start(), m.start() + len(m.group().rstrip(".")), 1.0)
        if index == 0:
            # A word is rarely a number; a sentence after a label is not one at all.
            rest = text[m.end():].strip()
            quality = 0.5 if len(rest.split()) <= 1 else 0.3
            return Found(token, m.start(), m.start() + len(m.group().rstrip(".")), quality)
    return None


_ID_FILLERS = {"no", "nr", "n", "n°", "no.", "nr.", "number", "num", "is", "of", "de", "du", "#", "id", "ref",
               "nummer", "numero", "numer"}


def clean_text(text: str) -> str:
    return " ".join(text.strip(" \t:;|,-–—").split())


# --- currencies and phone numbers ------------------------------------------------

_CODES = frozenset(v for v in CURRENCY_SIGNS.values())
_CURRENCY_TOKEN = re.compile(
    r"(?<![A-Za-z])(" + "|".join(sorted(_CODES, key=len, reverse=True)) + r")(?![A-Za-z])|[$€£¥₹]|"
    r"(?<![A-Za-z])(?:Rs\.?|RM|zł|US\$|A\$|C\$|HK\$|S\$)(?=\s?-?\d)"
)
_PHONE = re.compile(r"(?<![\w])\+?\(?\d[\d ()./\-]{6,}\d(?![\w])")


def find_currencies(text: str) -> list[Found]:
    out = []
    for m in _CURRENCY_TOKEN.finditer(text):
        token = m.group()
        code = token if token in _CODES else CURRENCY_SIGNS.get(token.lower())
        if code:
            out.append(Found(code, m.start(), m.end(), 1.0 if token in _CODES else 0.9))
    return out


def find_phones(text: str) -> list[Found]:
    return [Found(clean_text(m.group()), m.start(), m.end()) for m in _PHONE.finditer(text)]


# --- dates as OCR reads them -------------------------------------------------------

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
    spans found in the result are spans of `text`. OCR misreads a digit here
    and there; a text layer is read as printed, so only OCR'd text is mended.
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
