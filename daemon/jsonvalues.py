"""JSON text read strictly: only numbers every reader of docex's output can carry.

Python's json reads NaN, Infinity, 1e309 (as inf) and integer literals of any length,
although RFC 8259 has no such numbers and most readers cannot hold them: stored in a
result, `NaN` made every later answer, export and webhook body unreadable to
JSON.parse (the console) and PostgreSQL's jsonb, and a 400-digit integer broke the
XLSX export midway (openpyxl writes numbers as doubles) and reads as Infinity in
JavaScript. Request bodies (`daemon.http.requests`) and AI providers' answers are read
here.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Digits of the longest integer a double can hold (its largest finite value, 1.8e308, has 309).
_MAX_INT_DIGITS = 309


class NotFinite(ValueError):
    """A number JSON cannot carry: NaN, Infinity, or a literal that overflows a double."""


def loads(text: str | bytes) -> Any:
    """`json.loads`, refusing numbers beyond a double (`NotFinite`).

    Raises:
        NotFinite: NaN, Infinity, or a number literal beyond a double.
        ValueError: text that is not JSON (`json.JSONDecodeError`).
        RecursionError: arrays or objects nested past the interpreter's stack.
    """
    return json.loads(text, parse_float=_finite_float, parse_int=_finite_int, parse_constant=_not_a_number)


def _finite_float(literal: str) -> float:
    number = float(literal)
    if math.isinf(number):
        raise NotFinite(literal)
    return number


def _finite_int(literal: str) -> int:
    # Counted before int() converts it: a literal of millions of digits takes seconds to convert.
    if len(literal.lstrip("-")) > _MAX_INT_DIGITS:
        raise NotFinite(literal)
    number = int(literal)
    try:
        float(number)
    except OverflowError:
        raise NotFinite(literal) from None
    return number


def _not_a_number(literal: str) -> Any:
    raise NotFinite(literal)


def storable(value: Any) -> Any:
    """`value` with the NUL characters of its strings (keys too) dropped, and each unpaired
    surrogate replaced by U+FFFD: a document may hold them (UTF-16 text, a PDF's text layer,
    an AI provider's answer), and a request body may not (PostgreSQL's text takes no NUL,
    UTF-8 no surrogate), so a result that kept one could never be saved back; a surrogate
    also broke every export and webhook that carried it."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "")
        return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value


# json keeps a pair of surrogate escapes as one character: any surrogate left is unpaired.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
