"""Learning from corrections (pure): what a confirmed result teaches about its issuer,
and a new document of that issuer read with it first.

    job's reading ──fingerprint──▶ keys (indexed: learned_keys)
    reading + confirmed result ──learn──▶ an example {pointer: lesson}
    new reading + the examples its keys match ──apply──▶ result, resultMeta.fields

A *reading* is what a job keeps of its document for this (`reading_of`): the text
lines of its first pages with their page and box (fractions of the page), at most
`MAX_LINES`, so that a correction never parses the file again.

The *fingerprint* of a document is a set of keys an issuer prints the same on every
document: its registration, tax and telephone numbers (``r:``) and its header lines
(``h:``, the top lines of page 1 reduced to letters and digits). Another document
matches an example when they share `MIN_SHARED` keys, or one number.

A *lesson* per confirmed value (`learn`):

- ``constant``: a string value printed in the header (a shop's name or address): the
  next document gets it as confirmed when its header prints it too (`coverage` at
  least `MIN_COVERAGE`), which is what OCR noise and a wrong guess of the generic
  rules cannot spoil (unless the rules read it with only other marks, which then stand);
- ``spots``: where the value stood: the words before it on its line (its label), else
  the line above it, and its box on the page. The next document's value is read after
  the same label, with the field's pattern (a date, an amount, the shape of a code);
  each example votes for the value its spots read, and the value most spots agree on
  wins (a receipt's total is after TOTAL, ROUNDED and often CASH: the majority holds
  when the cash paid differs).
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, NamedTuple

from daemon.extraction.document import Document
from daemon.extraction.providers.rules.values import as_date_time, find_amounts, find_dates, find_integers
from daemon.schemas.definition import format_checker

# A reading's line: [text, page (1-based), x0, y0, x1, y1], the box as fractions of the page.
ReadingLine = list[Any]

# What a job keeps of its document (≈ 25 KB as JSON): a receipt has 30-80 lines, an
# invoice's first page 40-120; what learning reads (labels, header) is on the first pages.
MAX_LINES = 400
# A line's characters kept: a receipt's or an invoice's line has well under this; a text
# file's line may have millions, and each value on it had a label of every word before it
# and a template of the whole line (quadratic: 13 s for one of 35 KB).
MAX_LINE_CHARS = 300
# The words of a label kept: the last ones before the value ("TOTAL ROUNDED INCL GST").
_LABEL_WORDS = 6
# The spots a lesson keeps: the first ones found.
_MAX_SPOTS = 8
# The header: the top lines of page 1, where an issuer prints its name, address and numbers.
HEADER_LINES = 15
# Header lines that fingerprint an issuer: enough letters to be words, not OCR specks.
_MIN_LETTERS = 6
_FINGERPRINT_LINES = 8
# Two documents are of one issuer when they share this many keys, or one registration,
# tax or telephone number (a number of 6+ digits on a line that names it).
MIN_SHARED = 2
# A learned constant is taken when the new header prints this share of its characters,
# in runs of at least _MIN_RUN (`coverage`).
MIN_COVERAGE = 0.95
_MIN_RUN = 3
# Aligning a value with a text costs up to the product of their lengths: a value longer
# than MAX_ALIGNED letters and digits counts only where it is printed whole, and only the
# first MAX_ALIGNED_TEXT of a text are aligned with. A shop's name or address has under
# 100, the header of a receipt (`header`) about 300.
MAX_ALIGNED = 200
MAX_ALIGNED_TEXT = 2_000
# The share of a generic reading the learned constant may cover and still be the same value.
SUPERSET_COVERAGE = 0.8
# Examples of an issuer read at most (the closest first): beyond a handful, more agree
# with no more to teach, and each costs a pass over the document's lines.
MAX_EXAMPLES = 5
# A string value longer than this is not read by its shape (a code, a reference), only as
# a constant: a name or an address is not a pattern.
MAX_CODE_CHARS = 40
# Worked examples an AI provider's prompt gets at most: the closest of the issuer, in
# this many characters (a few hundred tokens, beside a document of thousands).
MAX_PROMPT_EXAMPLES = 3
MAX_PROMPT_CHARS = 2000
# A label read with OCR noise still matches one learned at this similarity.
_LABEL_SIMILARITY = 0.8
# Comparing two labels by similarity costs up to the product of their lengths, and a
# document has a comparison per learned spot and value placed after a label word: a label
# keeps its last words within _MAX_LABEL_CHARS, and a document makes at most
# MAX_FUZZY_LABELS comparisons (then labels match only exactly). A receipt of the sample
# stream (`bench/learning.py`) made at most 419; a hostile one with labels of 275
# characters made 10,000 for one field, in 18 s.
_MAX_LABEL_CHARS = 48
MAX_FUZZY_LABELS = 5_000
# Values of a field's kind read on one line at most: a receipt's or an invoice's line holds
# a few. A hostile line of 150 one-letter words made each of them a value (a code's shape),
# each with a template of the whole line, on every line, for every field: minutes a job.
_VALUES_PER_LINE = 20
# Values placed after one label kept for reading spots (the first ones), and values placed
# in a document at most: a label printed more often than that is a column head or noise,
# and a document's every line being labelled for every field is an attack.
_PLACED_PER_LABEL = 32
MAX_PLACED = 20_000

_NUMBER_LABEL = re.compile(
    r"\b(GST|VAT|SST|TAX|REG|REGN|REGISTRATION|CO|COMPANY|ROC|TIN|ABN|UEN|BRN|SIRET|SIREN|UST|TEL|PHONE|FAX|"
    r"HP|ID|NO)\b")
_LONG_NUMBER = re.compile(r"\d[\d\- ]{4,}\d")
# Malaysian and Singaporean company numbers print their check letter: "(1034322-V)".
_COMPANY_NUMBER = re.compile(r"\b(\d{5,8})-?[A-Z]\b")
# A price ("3.50", "12,00"): the first line with one ends an issuer's header.
_PRICE = re.compile(r"\d[.,]\d\d(?!\d)(?!\s*[&,/-]\s*\d)")
# What `normalised`, `_words` and `_skeleton` keep of an upper-cased text.
_NOT_ALNUM = re.compile(r"[^A-Z0-9]")
_LETTERS = re.compile(r"[A-Z]+")
_WORD = re.compile(r"[A-Z0-9]+")
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
# Marks OCR makes of specks, stops and rules, which no issuer prints in a name or address.
_OCR_MARKS = re.compile(r"[_|~^`\\]")
# A line that names the document's customer ("BILL TO", "Customer GST No:", "ATTN:"): it and
# what follows are not the issuer's. A word such as CLIENT is a label only before a colon,
# a field's name or the line's end, not in a name ("CLIENT SOLUTIONS LTD").
_CUSTOMER = re.compile(r"\b(?:BILL(?:ED)?|SHIP(?:PED)?|SOLD|INVOICE[DS]?|DELIVER(?:Y|ED)?|CHARGE)\s*TO\b|"
                       r"\b(?:CUSTOMER|CLIENT|BUYER|CONSIGNEE|RECIPIENT|ATTN|ATTENTION)(?:'?S)?\s*"
                       r"(?:[:.#]|(?:NAME|NO|NUMBER|ID|GST|VAT|TAX|CODE|ACCOUNT|ADDRESS|REF)\b|$)")
# Lines every receipt prints, which say nothing of its issuer: its title, and the column
# heads of its items ("Description Qty U.price Total TAX"), which every shop on the same
# till software prints alike.
_GENERIC = re.compile(r"^(SIMPLIFIED|TAX|INVOICE|RECEIPT|CASH|BILL|OFFICIAL|SALES|ORDER|COPY|THANK|YOU|AND|"
                      r"GST|ID|NO|REG|TEL|FAX|DATE|TIME|TABLE|CASHIER|DESCRIPTION|DESC|ITEMS?|QTY|QUANTITY|"
                      r"UNIT|U ?PRICE|PRICE|TOTAL|AMOUNT|AMT|DISC|RM|CODE|\s)+$")
# A line of a postcode and its town ("43200 CHERAS SELANGOR.", "81100 JOHOR BAHRU",
# "Springfield, IL 62704"): every shop of the town prints it.
_POSTCODE_LINE = re.compile(r"\W*\d{4,6}(?:\W+[A-Z]+){1,4}\W*|\W*(?:[A-Z]+\W+){1,4}\d{4,6}\W*")


@dataclass(frozen=True, slots=True)
class Match:
    """A learned example a document matched: its id, lessons and how many keys they share."""

    example_id: str
    fields: dict[str, Any]
    shared: int
    shared_numbers: int


# --- the reading and its fingerprint -----------------------------------------------------


def reading_of(document: Document, max_lines: int = MAX_LINES) -> list[ReadingLine]:
    """The lines of `document`'s first pages with their boxes, at most `max_lines`."""
    out: list[ReadingLine] = []
    for page in document.pages:
        for line in page.lines:
            if len(out) >= max_lines:
                return out
            out.append([line.text[:MAX_LINE_CHARS], page.number,
                        *page.relative(line.x0, line.y0, line.x1, line.y1)])
    return out


def normalised(text: str) -> str:
    """Letters and digits only, upper case: what OCR reads the same way twice."""
    return _NOT_ALNUM.sub("", text.upper())


def _skeleton(text: str) -> str:
    """The words of `text` (runs of letters and digits, upper case): two texts with the same
    skeleton differ only in case and marks, not in a letter or a space ("POPULARBOOK")."""
    return " ".join(_WORD.findall(text.upper()))


def _words(text: str) -> str:
    """Upper-case words of letters only, one space apart: a label without its noise."""
    return " ".join(_LETTERS.findall(text.upper()))


def header(reading: Sequence[ReadingLine]) -> list[str]:
    """The texts of the top lines of page 1 (at most `HEADER_LINES`), up to the first line
    with a price: there the sale begins, and what follows is not the issuer's."""
    out: list[str] = []
    for line in reading:
        if line[1] != 1 or len(out) >= HEADER_LINES or _PRICE.search(line[0]):
            break
        out.append(line[0])
    return out


def fingerprint(reading: Sequence[ReadingLine]) -> list[str]:
    """The issuer's keys of a document: ``r:<digits>`` per registration, tax or telephone
    number in its header, ``h:<hash>`` per distinctive header line above the sale's date,
    all up to the line that names the customer ("BILL TO", "Customer GST No"): invoices of many suppliers to one
    customer print its name, address and numbers alike, and were taken for one issuer's.
    Sorted, unique."""
    keys: set[str] = set()
    lines = 0
    dated = False
    for text in header(reading):
        upper = text.upper()
        if _CUSTOMER.search(upper):
            break
        # The sale's own lines begin at its date (document number, cashier, salesperson,
        # column heads): every shop on the same till software prints them alike.
        dated = dated or bool(find_dates(text))
        for match in _COMPANY_NUMBER.finditer(upper):
            keys.add("r:" + match[1])
        if _NUMBER_LABEL.search(upper):
            for match in _LONG_NUMBER.finditer(upper):
                digits = re.sub(r"\D", "", match[0])
                if len(digits) >= 6:
                    keys.add("r:" + digits)
        words = _words(upper)
        if lines < _FINGERPRINT_LINES and not dated and sum(c.isalpha() for c in words) >= _MIN_LETTERS \
                and not _GENERIC.match(words) and not _POSTCODE_LINE.fullmatch(upper):
            lines += 1
            keys.add("h:" + hashlib.blake2b(normalised(text).encode(), digest_size=8).hexdigest())
    return sorted(keys)


def matches(candidates: Sequence[Match]) -> list[Match]:
    """The candidates that are the same issuer, closest (most keys shared) first, at most
    `MAX_EXAMPLES`; the caller gives them newest first, which breaks ties. An example that
    teaches nothing (an older daemon stored them) takes no place."""
    same = [m for m in candidates if m.fields and (m.shared >= MIN_SHARED or m.shared_numbers >= 1)]
    return sorted(same, key=lambda m: -m.shared)[:MAX_EXAMPLES]


# --- the schema's scalar fields ----------------------------------------------------------


def scalar_fields(schema: dict[str, Any], pointer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(JSON pointer, sub-schema) of every string, number or integer property, nested objects included."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return
    for name, sub in props.items():
        if not isinstance(sub, dict):
            continue
        path = f"{pointer}/{str(name).replace('~', '~0').replace('/', '~1')}"
        kind = sub.get("type")
        if kind == "object" or (kind is None and "properties" in sub):
            yield from scalar_fields(sub, path)
        elif kind in ("string", "number", "integer"):
            yield path, sub


def _get(result: dict[str, Any], pointer: str) -> Any:
    node: Any = result
    for token in pointer.split("/")[1:]:
        if not isinstance(node, dict):
            return None
        node = node.get(token.replace("~1", "/").replace("~0", "~"))
    return node


def _set(result: dict[str, Any], pointer: str, value: Any) -> None:
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = result
    for token in tokens[:-1]:
        nxt = node.get(token)
        if not isinstance(nxt, dict):
            nxt = node[token] = {}
        node = nxt
    node[tokens[-1]] = value


# --- values of a field's kind in a line --------------------------------------------------


def _kind(schema: dict[str, Any]) -> str:
    if schema.get("type") in ("number", "integer"):
        return str(schema["type"])
    if schema.get("format") in ("date", "date-time"):
        return "date"
    return "text"


def _as_date(value: Any) -> dt.date | None:
    text = str(value)
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        found = find_dates(text)
        return found[0].value if found else None


_RUN = re.compile(r"([^\W\d_]+)|(\d+)|(\s+)|.", re.DOTALL)
_RUN_PATTERNS = {1: r"[^\W\d_]+", 2: r"\d+", 3: r"\s+"}


def _shape(value: str) -> str:
    """A pattern for a code's shape: runs of letters and of digits, what stands between them.
    No two neighbouring parts can match the same character, so matching is linear."""
    # Each run is the class whose alternative matched it, not str.isdigit's: "²" is a word
    # character but not \d, a run of its own, and made \d+ as "1²1²…" made twenty \d+ in a
    # row, which tried every split of a long run of digits (forever for 40).
    parts = []
    for run in _RUN.finditer(value):
        parts.append(_RUN_PATTERNS[run.lastindex] if run.lastindex else re.escape(run[0]))
    return "".join(parts)


def values_in(kind: str, text: str, shape: str | None = None) -> list[tuple[Any, int, int]]:
    """(value, start, end) of the first `_VALUES_PER_LINE` values of `kind` in `text`, in order."""
    if kind == "date":
        return [(f.value, f.start, f.end) for f in find_dates(text)[:_VALUES_PER_LINE]]
    if kind == "number":
        return [(f.value, f.start, f.end) for f in find_amounts(text)[:_VALUES_PER_LINE]]
    if kind == "integer":
        return [(f.value, f.start, f.end) for f in find_integers(text)[:_VALUES_PER_LINE]]
    if shape:
        found = re.finditer(r"(?<!\w)" + shape + r"(?!\w)", text)
        return [(m[0], m.start(), m.end()) for m in itertools.islice(found, _VALUES_PER_LINE)]
    return []


def _same(kind: str, a: Any, b: Any) -> bool:
    if kind in ("number", "integer"):
        try:
            return abs(float(a) - float(b)) < 0.005
        except (TypeError, ValueError, OverflowError):  # a corrected value may be any JSON integer (10**400)
            return False
    if kind == "date":
        return a is not None and a == b
    return normalised(str(a)) == normalised(str(b)) != ""


def _confirmed(kind: str, value: Any) -> Any:
    return _as_date(value) if kind == "date" else value


# --- learning ----------------------------------------------------------------------------


def coverage(value: str, lines: Sequence[str]) -> float:
    """The share of `value`'s letters and digits found in `lines`, in order, in runs of
    `_MIN_RUN` or more: the longest run the two share, then the same on each side of it
    (`difflib`'s matching blocks, found by substring search).

    Aligning costs a substring search of the text per character of the value and per run
    found, so both are bounded (`MAX_ALIGNED`): `difflib` itself took minutes for a value
    of 1,200 characters of two letters against a header of 4,500, in a job's worker and
    in a correction's request; this takes at most a few hundredths of a second.
    """
    wanted = normalised(value)
    if not wanted:
        return 0.0
    text = normalised(" ".join(lines))
    if wanted in text:  # printed whole, as it mostly is
        return 1.0
    if len(wanted) > MAX_ALIGNED:
        return 0.0
    text = text[:MAX_ALIGNED_TEXT]
    found = 0
    pending = [(0, len(wanted), 0, len(text))]
    while pending:
        w_lo, w_hi, t_lo, t_hi = pending.pop()
        block = _longest_run(wanted, w_lo, w_hi, text, t_lo, t_hi)
        if block is not None:
            start, at, size = block
            found += size
            pending += [(w_lo, start, t_lo, at), (start + size, w_hi, at + size, t_hi)]
    return found / len(wanted)


def _longest_run(wanted: str, w_lo: int, w_hi: int, text: str, t_lo: int,
                 t_hi: int) -> tuple[int, int, int] | None:
    """The longest run of `wanted[w_lo:w_hi]` printed in `text[t_lo:t_hi]`, at least
    `_MIN_RUN` long, as (its start in `wanted`, its first place in `text`, its length);
    of equals the first in `wanted`. One search per start, for a run longer than the
    longest so far, and one per character it grows by."""
    best: tuple[int, int, int] | None = None
    size = _MIN_RUN
    for start in range(w_lo, w_hi - size + 1):
        if start + size > w_hi:
            break
        at = text.find(wanted[start : start + size], t_lo, t_hi)
        if at < 0:
            continue
        grown = size
        while start + grown < w_hi:
            further = text.find(wanted[start : start + grown + 1], t_lo, t_hi)
            if further < 0:
                break
            at, grown = further, grown + 1
        best = (start, at, grown)
        size = grown + 1
    return best


def _label_before(reading: Sequence[ReadingLine], index: int, start: int) -> tuple[str, str]:
    """The label of a value at `start` of line `index`: ("right", words before it on its
    line), else ("below", the line above's words)."""
    before = _last_words(reading[index][0][:start])
    if before:
        return "right", before
    if index > 0 and reading[index - 1][1] == reading[index][1]:
        return "below", _last_words(reading[index - 1][0])
    return "below", ""


def _last_words(text: str) -> str:
    words = _LETTERS.findall(text.upper())[-_LABEL_WORDS:]
    while words and sum(len(word) + 1 for word in words) - 1 > _MAX_LABEL_CHARS:
        words.pop(0)
    return " ".join(words)


def _template(text: str, found: list[tuple[Any, int, int]], at: int) -> str:
    """A line as its words, with ``@`` for the value at `at` and ``#`` for the other values
    `found` in it (`values_in`):
    "TOTAL 27.55" is "TOTAL @", the tax summary's "TOTAL : 26.00 1.56" is "TOTAL @ #"."""
    parts: list[str] = []
    last = 0
    for _, start, end in found:
        parts += [_words(text[last:start]), "@" if start == at else "#"]
        last = end
    parts.append(_words(text[last:]))
    return " ".join(p for p in parts if p)


def learn(reading: Sequence[ReadingLine], result: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """What a confirmed `result` teaches, per JSON pointer of a scalar field it has a value for:
    ``{"value", "constant", "spots": [{"where", "label", "y"}], "shape"?}``."""
    # A reading kept before lines were clipped (`MAX_LINE_CHARS`) is clipped here.
    reading = [[line[0][:MAX_LINE_CHARS], *line[1:]] for line in reading]
    top = header(reading)
    lessons: dict[str, Any] = {}
    # A value equal to a corrected text holds its letters and digits in a row: the lines
    # that do not are not read for it (a correction of 200 fields read every line 200 times).
    in_lines = [normalised(line[0]) for line in reading]
    values_on = functools.cache(lambda kind, shape, index: values_in(kind, reading[index][0], shape))
    for pointer, sub in scalar_fields(schema):
        value = _get(result, pointer)
        if value is None or isinstance(value, bool):
            continue
        kind = _kind(sub)
        lesson: dict[str, Any] = {"value": value, "constant": False, "spots": []}
        if kind == "text" and isinstance(value, str):
            letters = sum(c.isalpha() for c in value)
            # A value too long to be printed in the header is not aligned with it: the
            # alignment is quadratic (18 s for a corrected value of 100,000 characters).
            fits = len(normalised(value)) * MIN_COVERAGE <= len(normalised(" ".join(top)))
            lesson["constant"] = letters >= _MIN_LETTERS and fits and coverage(value, top) >= MIN_COVERAGE
            if len(value.strip()) <= MAX_CODE_CHARS:
                lesson["shape"] = _shape(value.strip())
        wanted = _confirmed(kind, value)
        printed = normalised(str(value)) if kind == "text" else ""
        for index, line in enumerate(reading):
            if len(lesson["spots"]) >= _MAX_SPOTS:
                break
            if kind == "text" and (not printed or printed not in in_lines[index]):
                continue
            found = values_on(kind, lesson.get("shape"), index)
            for value_found, start, _ in found:
                if _same(kind, value_found, wanted) and len(lesson["spots"]) < _MAX_SPOTS:
                    where, label = _label_before(reading, index, start)
                    if label:
                        lesson["spots"].append({"where": where, "label": label, "y": line[3],
                                                "line": _template(line[0], found, start)})
        if lesson["constant"] or lesson["spots"]:
            lessons[pointer] = lesson
    return lessons


# --- applying ----------------------------------------------------------------------------


# Bounded: the pairs are every label of every document read in this process's lifetime
# (an unbounded cache grew by ~20,000 entries a job of a hostile issuer, never freed).
@functools.lru_cache(maxsize=65_536)
def _similar(a: str, b: str) -> bool:
    if a == b:
        return True
    if len(a) < 4 or max(len(a), len(b)) > _MAX_LABEL_CHARS:
        return False
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    return matcher.real_quick_ratio() >= _LABEL_SIMILARITY and matcher.ratio() >= _LABEL_SIMILARITY


class _Placed(NamedTuple):
    """A value of a field's kind in the new document, with what a spot compares."""

    value: Any
    line: int
    template: str
    y: float


class _Placements:
    """The values of one kind (and shape) in a document, by where they stand ("right" of
    or "below" a label) and their label: what a spot reads (`_read_spot`)."""

    def __init__(self) -> None:
        self.by_label: dict[tuple[str, str], list[_Placed]] = {}
        self.labels: dict[str, list[str]] = {"right": [], "below": []}

    def add(self, where: str, label: str, placed: _Placed) -> None:
        kept = self.by_label.get((where, label))
        if kept is None:
            self.by_label[(where, label)] = [placed]
            self.labels[where].append(label)
        elif len(kept) < _PLACED_PER_LABEL:
            kept.append(placed)


class _Budget:
    """What reading a document with examples may still do: values placed (`MAX_PLACED`) and
    fuzzy label comparisons (`MAX_FUZZY_LABELS`); past them, nothing more is placed and
    labels match only exactly, so the generic rules' values stand."""

    def __init__(self, placed: int = MAX_PLACED, comparisons: int = MAX_FUZZY_LABELS) -> None:
        self.placed = placed
        self.comparisons = comparisons

    def similar(self, a: str, b: str) -> bool:
        if a == b:
            return True
        if self.comparisons <= 0:
            return False
        self.comparisons -= 1
        return _similar(a, b)


def _placed(reading: Sequence[ReadingLine], upper: _UpperText, right: frozenset[str], below: frozenset[str],
            budget: _Budget, kind: str, shape: str | None) -> _Placements:
    """Every value of `kind` (`shape`) in `reading` with its label, on the lines a spot can
    read: those with a word of the labels values stood `right` of, and those under a line
    with a word of the labels they stood `below` (reading values costs more than the rest
    of `apply`)."""
    out = _Placements()
    has_right, has_below = upper.lines_with(right), upper.lines_with(below)
    for index, line in enumerate(reading):
        if budget.placed <= 0:
            break
        if not (index in has_right or (index - 1) in has_below):
            continue
        found = values_in(kind, line[0], shape)
        budget.placed -= len(found)
        for value, start, _ in found:
            where, label = _label_before(reading, index, start)
            if label:
                out.add(where, label, _Placed(value, index, _template(line[0], found, start), line[3]))
    return out


class _UpperText:
    """A reading's lines in upper case, one text, to find which lines hold a label's word
    (`lines_with`): a few substring searches over the whole text, not a search per line."""

    def __init__(self, reading: Sequence[ReadingLine]) -> None:
        lines = [line[0].upper() for line in reading]
        self.text = "\n".join(lines)
        self.starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))

    def lines_with(self, words: frozenset[str]) -> set[int]:
        """The indices of the lines that have one of `words` (upper-case letters) in them."""
        out: set[int] = set()
        find, starts = self.text.find, self.starts
        for word in words:
            at = find(word)
            while at != -1:
                index = bisect.bisect_right(starts, at) - 1
                out.add(index)
                at = find(word, starts[index + 1])
        return out


def _read_spot(placed: _Placements, spot: dict[str, Any], budget: _Budget) -> tuple[Any, int, bool] | None:
    """The value after `spot`'s label, the index of its line and whether the line has the
    learned shape (`_template`): of the values whose label matches, one on a line of the
    learned shape first, then the nearest to the learned height."""
    where, wanted = spot["where"], spot["label"]
    labels = [wanted] if (where, wanted) in placed.by_label else []
    for label in placed.labels.get(where, ()):
        if budget.comparisons <= 0:
            break
        if label != wanted and budget.similar(label, wanted):
            labels.append(label)
    best: tuple[tuple[bool, float], _Placed] | None = None
    for label in labels:
        for candidate in placed.by_label[(where, label)]:
            rank = (candidate.template != spot.get("line"), abs(candidate.y - spot["y"]))
            if best is None or rank < best[0]:
                best = (rank, candidate)
    return None if best is None else (best[1].value, best[1].line, not best[0][0])


def _json_value(kind: str, schema: dict[str, Any], value: Any) -> Any:
    """`value` as the field takes it; None when it does not fit the field as it is now (its
    schema may have changed since the example was learned: a type, an enum, a format)."""
    if isinstance(value, dt.date) and schema.get("format") == "date-time":
        value = as_date_time(dt.datetime(value.year, value.month, value.day))  # a learned spot reads the date
    elif isinstance(value, dt.date):
        value = value.isoformat()
    elif kind == "integer":
        try:
            value = int(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return value if _fits(json.dumps(schema, sort_keys=True), value) else None


@functools.lru_cache(maxsize=1024)
def _validator(schema: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema), format_checker=format_checker())


def _fits(schema: str, value: Any) -> bool:
    return bool(_validator(schema).is_valid(value))


def apply(reading: Sequence[ReadingLine], schema: dict[str, Any], examples: Sequence[Match],
          result: dict[str, Any], fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`result` and its evidence `fields` with every value the `examples` (`matches`) read
    in `reading`; what they do not cover stays as the generic rules read it.

    A value from an example carries ``learnedFrom`` (the example's id) and
    ``learnedExamples`` (how many agreed) in its evidence; its confidence is 0.9 for one
    example, 0.95 for two that agree and 0.98 for three or more, times the header's
    coverage for a constant; where the generic rules read the same value, theirs if higher.
    """
    if not examples:
        return result, fields
    result = _copy(result)
    fields = dict(fields)
    top = header(reading)
    # The lines any field's spots can read, and what they hold, placed once per kind and shape.
    spots = [spot for match in examples for lesson in match.fields.values() if isinstance(lesson, dict)
             for spot in lesson.get("spots", [])]
    right = frozenset(w for spot in spots if spot["where"] == "right" for w in spot["label"].split())
    below = frozenset(w for spot in spots if spot["where"] != "right" for w in spot["label"].split())
    budget = _Budget()
    placed = functools.cache(functools.partial(_placed, reading, _UpperText(reading), right, below, budget))
    for pointer, sub in scalar_fields(schema):
        kind = _kind(sub)
        taught = [(m, m.fields[pointer]) for m in examples if isinstance(m.fields.get(pointer), dict)]
        if not taught:
            continue
        chosen = (_constant(top, taught, _get(result, pointer))
                  or _spots(placed, kind, taught, _get(result, pointer), budget))
        if chosen is None:
            continue
        value, source, agreeing, sure, line = chosen
        learned = _json_value(kind, sub, value)
        if learned is None:
            continue
        confidence = round(_confidence(agreeing) * sure, 3)
        generic = _get(result, pointer)
        if pointer in fields and _same(kind, _confirmed(kind, generic), _confirmed(kind, value)):
            # The generic rules read the same value: two readings agreeing are no less sure than either.
            confidence = max(confidence, fields[pointer].get("confidence", 0.0))
            if sub.get("format") == "date-time":
                learned = generic  # with the clock time the rules read beside the date
        _set(result, pointer, learned)
        evidence: dict[str, Any] = {"confidence": confidence, "learnedFrom": source, "learnedExamples": agreeing}
        if line is not None:
            text, page, x0, y0, x1, y1 = reading[line][:6]
            evidence.update(page=page, bbox=[x0, y0, x1, y1], text=text)
        elif pointer in fields:
            evidence.update({k: fields[pointer][k] for k in ("page", "bbox", "text") if k in fields[pointer]})
        fields[pointer] = evidence
    return result, fields


def _confidence(agreeing: int) -> float:
    return 0.9 if agreeing <= 1 else 0.95 if agreeing == 2 else 0.98


def _constant(top: list[str], taught: list[tuple[Match, dict[str, Any]]],
              generic: Any) -> tuple[Any, str, int, float, None] | None:
    """The learned constant best printed in this header (coverage at least `MIN_COVERAGE`;
    of equals the closest example's), with how many examples taught that same value.

    Where the generic rules read the constant's letters and words with other marks ("MR.
    D.I.Y." for a learned "MR D.I.Y."), their value, as this document prints it, confirmed
    by the examples: an issuer's printers and its documents' readers differ in the marks of
    a name, not in its letters, which are what a correction mends (OCR's misreads, lost
    spaces); nor in a small l the page prints among small letters where a person typed a
    capital I (`_spells`). None, so that what this document prints stands unconfirmed, where they read
    the constant and more besides (`generic` holds all of it and a fifth again): this
    document prints a longer name or address than the one learned (another branch's
    "(KUCHAI)")."""
    best: tuple[float, Any, str] | None = None
    shares: dict[str, float] = {}  # an issuer's examples mostly teach the same constant: compare it once
    for match, lesson in taught:
        if lesson.get("constant"):
            text = str(lesson["value"])
            share = shares[text] if text in shares else shares.setdefault(text, coverage(text, top))
            if share >= MIN_COVERAGE and (best is None or share > best[0]):
                best = (share, lesson["value"], match.example_id)
    if best is None:
        return None
    share, value, source = best
    agreeing = sum(1 for _, lesson in taught if lesson.get("constant")
                   and normalised(str(lesson["value"])) == normalised(str(value)))
    if isinstance(generic, str):
        if _spells(generic, str(value)):
            value = generic
        elif _prints_more(generic, str(value)):
            return None
    return value, source, agreeing, min(1.0, share), None


def _spells(generic: str, constant: str) -> bool:
    """Whether the generic rules' `generic` has the words of `constant` (`_skeleton`), in
    other case and marks only, or with a small l where the constant has a capital I and the
    small l stands beside small letters ("Jln" for a typed "JIN"): in a sans-serif print
    those are one stroke; the reading tells them apart by the letters around them, and a
    person typing in capitals does not. (A small l among capitals, "D.l.Y.", is OCR's misread
    of a capital I, which the constant mends, as it does a mark only OCR makes: `_OCR_MARKS`.)"""
    page = " ".join(_ASCII_WORD.findall(generic))
    typed = _skeleton(constant)
    if page.upper() != _skeleton(generic) or len(page) != len(typed):
        return False
    if _OCR_MARKS.search(generic) and not _OCR_MARKS.search(constant):
        return False  # "BOOK TA _K" for a confirmed "BOOK TA .K": a stop OCR read as a stroke
    return all(a.upper() == b or (b == "I" and a == "l" and _among_small(page, i))
               for i, (a, b) in enumerate(zip(page, typed, strict=True)))


def _among_small(text: str, at: int) -> bool:
    return any(0 <= i < len(text) and text[i].islower() for i in (at - 1, at + 1))


def _prints_more(generic: str, constant: str) -> bool:
    """Whether the generic rules' `generic` holds all of `constant` and a fifth again."""
    if len(generic) > _FAR_LONGER * len(constant):
        # It holds a fifth again whatever it is: whether it holds the constant is read only
        # where it prints it whole, as aligning a value of 200 KB with it took 2 s (quadratic).
        return normalised(constant) in normalised(generic)
    return coverage(constant, [generic]) >= MIN_COVERAGE and coverage(generic, [constant]) < SUPERSET_COVERAGE


# A generic value this many times as long as a learned constant is not a misreading of it.
_FAR_LONGER = 10


def _spots(placed: Callable[[str, str | None], _Placements], kind: str,
           taught: list[tuple[Match, dict[str, Any]]], generic: Any,
           budget: _Budget) -> tuple[Any, str, int, float, int | None] | None:
    """The value most examples choose. An example chooses the value its spots read with
    the most weight, against the generic rules' value at 0.75. Its spots share one vote:
    they all held the value in the example, so where they now disagree the example cannot
    tell which was the field's (a receipt whose total and total after rounding were equal),
    and the rules decide. Within it, a spot after a label on its line weighs 1, one below
    a line 0.5 (item rows and column heads are there too), and 0.6 times that on a line of
    another shape: a lone label on a line unlike the learned one ("CASH RM 50.00" where
    the example had "CASH 30.90 0.00") does not beat the rules.
    """
    if generic is not None:
        generic = _confirmed(kind, generic)
    choices: list[tuple[Any, str, int | None]] = []  # (value, example id, line)
    for match, lesson in taught:
        read: list[tuple[Any, float, int | None]] = [(generic, 0.75, None)] if generic is not None else []
        spots = lesson.get("spots", [])
        for spot in spots:
            found = _read_spot(placed(kind, lesson.get("shape")), spot, budget)
            if found is not None:
                weight = (1.0 if spot["where"] == "right" else 0.5) * (1.0 if found[2] else 0.6) / len(spots)
                read.append((found[0], weight, found[1]))
        if len(read) > (generic is not None):
            value = max(read, key=lambda r: sum(w for v, w, _ in read if _same(kind, v, r[0])))[0]
            # Where a spot read it (the rules' own value has no line of its own here).
            line = next((at for v, _, at in read if at is not None and _same(kind, v, value)), None)
            choices.append((value, match.example_id, line))
    if not choices:
        return None
    value, source, line = max(choices, key=lambda c: sum(_same(kind, c[0], o[0]) for o in choices))
    agreeing = sum(_same(kind, value, c[0]) for c in choices)
    return value, source, agreeing, 1.0, line


def _copy(result: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, dict) else v for k, v in result.items()}


# --- worked examples for the AI providers ----------------------------------------------------


def worked_examples(examples: Sequence[Match], limit: int = MAX_PROMPT_EXAMPLES,
                    max_chars: int = MAX_PROMPT_CHARS) -> str:
    """What the closest `examples` of the issuer (`matches`) taught, as prompt text for an AI
    provider: per example its confirmed values and the label each followed; at most
    `limit` examples in `max_chars` characters (an example that does not fit is left
    out). Empty without examples."""
    blocks: list[str] = []
    size = 0
    for number, match in enumerate(examples[:limit], 1):
        values = {pointer: lesson["value"] for pointer, lesson in match.fields.items()}
        notes = []
        for pointer, lesson in match.fields.items():
            # Quoted as JSON: a property name is a user's text and may hold a line break (a
            # new "instruction" line in the prompt, unquoted).
            name = json.dumps(pointer, ensure_ascii=False)
            if lesson.get("constant"):
                notes.append(f"{name} is printed the same on every document of this issuer")
            elif lesson.get("spots"):
                spot = lesson["spots"][0]
                side = "after" if spot["where"] == "right" else "under the line"
                notes.append(f"{name} stood {side} {json.dumps(spot['label'], ensure_ascii=False)}")
        block = f"Example {number}: {json.dumps(values, ensure_ascii=False)}" + (f" ({'; '.join(notes)})"
                                                                                 if notes else "")
        if size + len(block) > max_chars:
            break
        blocks.append(block)
        size += len(block)
    if not blocks:
        return ""
    return ("Earlier documents of this issuer, with the values a person confirmed (keyed by JSON pointer). "
            "Read this document's own values; they stand in the same places:\n" + "\n".join(blocks))
