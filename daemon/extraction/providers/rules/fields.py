"""What the engine looks for in a schema field, and how it reads such a value
from a piece of text.

A `FieldQuery` is one scalar field of the definition: its labels
(`labels.field_labels`), its JSON type and format, and the `ValueKind` those
decide. Each kind has its reader (`read_values`): an amount is read with the
document's decimal separator, a date in its day/month order (mended first
when read by OCR), a name or an address as the words written, scored by how
much they look like one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from daemon.extraction.providers.rules.labels import FieldLabels, field_labels
from daemon.extraction.providers.rules.layout import Layout
from daemon.extraction.providers.rules.values import (
    Found,
    ValueKind,
    clean_text,
    find_amounts,
    find_booleans,
    find_currencies,
    find_dates,
    find_emails,
    find_enum,
    find_identifier,
    find_integers,
    find_phones,
    find_uris,
    fold,
    repair_dates,
    words,
)


@dataclass(frozen=True)
class FieldQuery:
    name: str
    schema: dict[str, Any]
    labels: FieldLabels
    type: str = "string"
    format: str | None = None
    kind: ValueKind = ValueKind.TEXT  # what to look for


def _kind_of(json_type: str, fmt: str | None, schema: dict[str, Any], labels: FieldLabels) -> ValueKind:
    if schema.get("enum"):
        return ValueKind.ENUM
    if json_type == "number":
        return ValueKind.AMOUNT
    if json_type == "integer":
        return ValueKind.INTEGER
    if json_type == "boolean":
        return ValueKind.BOOLEAN
    if fmt in ("date", "date-time"):
        return ValueKind.DATE
    if fmt == "email":
        return ValueKind.EMAIL
    if fmt in ("uri", "url"):
        return ValueKind.URI
    if labels.kind is ValueKind.AMOUNT:
        return ValueKind.TEXT  # a string field that holds an amount: read it as written
    return labels.kind


def field_query(name: str, schema: dict[str, Any], *, column: bool = False) -> FieldQuery:
    """The query for field `name` of JSON Schema `schema` (`column`: a table's column)."""
    labels = field_labels(name, schema, column=column)
    json_type = schema.get("type", "string")
    if isinstance(json_type, list):
        json_type = next((k for k in json_type if k != "null"), "string")
    fmt = str(schema["format"]) if schema.get("format") else None
    return FieldQuery(name, schema, labels, str(json_type), fmt, _kind_of(str(json_type), fmt, schema, labels))


# --- each kind's reader -------------------------------------------------------------

Reader = Callable[[FieldQuery, str, Layout], list[Found]]


def read_values(query: FieldQuery, text: str, layout: Layout) -> list[Found]:
    """The values of `query`'s kind in `text`, in the order written."""
    return _READERS[query.kind](query, text, layout)


def _date(_: FieldQuery, text: str, layout: Layout) -> list[Found]:
    return find_dates(repair_dates(text) if layout.ocr else text, layout.date_order)


def _identifier(_: FieldQuery, text: str, __: Layout) -> list[Found]:
    found = find_identifier(text)
    return [found] if found else []


def _written(text: str, quality: Callable[[str], float]) -> list[Found]:
    """The words written in `text` without the punctuation around them, as one value."""
    cleaned = text.strip(" \t:;|-–—=#")
    if not cleaned or not any(ch.isalnum() for ch in cleaned):
        return []
    start = text.index(cleaned)
    return [Found(clean_text(cleaned), start, start + len(cleaned), quality(cleaned))]


def _text(_: FieldQuery, text: str, __: Layout) -> list[Found]:
    return _written(text, lambda _: 0.9)


def _party(query: FieldQuery, text: str, _: Layout) -> list[Found]:
    def quality(cleaned: str) -> float:
        if sum(ch.isdigit() for ch in cleaned) > sum(ch.isalpha() for ch in cleaned):
            return 0.3  # a name is words, not a registration number
        first = words(fold(cleaned))[:1]
        if first and first[0] in query.labels.negatives:
            return 0.3  # "Company *Reg No* 1234-K": a longer label, not a name
        return 0.9

    return _written(text, quality)


def _address(_: FieldQuery, text: str, __: Layout) -> list[Found]:
    def quality(cleaned: str) -> float:
        if (not any(ch.isdigit() for ch in cleaned) or len(cleaned) < 8
                or sum(ch.isalpha() for ch in cleaned) < 5):
            # A postal address has a number (street, postcode) and words: "GST No." is
            # another label, "Location/SP: 05 /0531" a code.
            return 0.4
        return 0.9

    return _written(text, quality)


_READERS: dict[ValueKind, Reader] = {
    ValueKind.AMOUNT: lambda _, text, layout: find_amounts(text, layout.decimal),
    ValueKind.INTEGER: lambda _, text, __: find_integers(text),
    ValueKind.DATE: _date,
    ValueKind.EMAIL: lambda _, text, __: find_emails(text),
    ValueKind.URI: lambda _, text, __: find_uris(text),
    ValueKind.BOOLEAN: lambda _, text, __: find_booleans(text),
    ValueKind.ENUM: lambda query, text, _: find_enum(text, list(query.schema["enum"])),
    ValueKind.CURRENCY: lambda _, text, __: find_currencies(text),
    ValueKind.ID: _identifier,
    ValueKind.PHONE: lambda _, text, __: find_phones(text),
    ValueKind.PARTY: _party,
    ValueKind.ADDRESS: _address,
    ValueKind.TEXT: _text,
}


# --- walking a definition -------------------------------------------------------------

def properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """An object schema's properties with their type (a nullable type's other one)."""
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            json_type = sub.get("type")
            if isinstance(json_type, list):
                json_type = next((k for k in json_type if k != "null"), None)
            yield name, sub, json_type


def pointer_token(name: str) -> str:
    """`name` as one reference token of a JSON pointer (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")
