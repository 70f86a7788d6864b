"""The rules engine: schema fields found by their labels, values read beside
or below them, typed, with evidence (pure: a `Document` and a definition in,
a result and its per-field evidence out).

For each field of the schema:

1. its labels (`labels.field_labels`) are searched in every page's text;
2. from each label the value is read to the right on the same line, else in
   the cell below the label (`label_reader`);
3. a total is checked against what a receipt prints around it (`totals`);
4. the best candidate wins (the last of equals for totals, the first
   otherwise: `candidates.choose`); with no label, a field of a known kind
   falls back on where such values usually are (the first date, the issuer
   at the top of a receipt (`parties`), the currency written beside the
   amounts, …) with a low confidence;
5. arrays of objects are read from tables (`tables`).

A document read by OCR more than once gets the values most readings agree
on (`voting`).

Confidence is the candidate's score (label strength x position x value
quality), times the OCR confidence of the words it came from.
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property
from typing import Any

from daemon.extraction.document import Document
from daemon.extraction.parsers.scanned import readings_of
from daemon.extraction.providers.rules.candidates import Candidate, choose, evidence_of, found_at, typed
from daemon.extraction.providers.rules.fields import FieldQuery, field_query, pointer_token, properties
from daemon.extraction.providers.rules.label_reader import LabelReader
from daemon.extraction.providers.rules.layout import Layout, LineRef
from daemon.extraction.providers.rules.parties import HeaderLine, address_candidate, header, vendor_candidate
from daemon.extraction.providers.rules.tables import read_table
from daemon.extraction.providers.rules.totals import Totals
from daemon.extraction.providers.rules.values import Found, ValueKind, find_currencies, find_time
from daemon.extraction.providers.rules.voting import agree

# Kinds a field falls back on wherever such a value is written, when no label names it.
_ANYWHERE = (ValueKind.EMAIL, ValueKind.URI, ValueKind.ENUM, ValueKind.PHONE)
# Kinds a list of values (an array of strings) is read anywhere for, when no label names it.
_LIST_ANYWHERE = (ValueKind.EMAIL, ValueKind.URI, ValueKind.DATE)
# A name or an address has a usual place (the issuer's header) that beats a weak label.
_USUAL_PLACE = (ValueKind.PARTY, ValueKind.ADDRESS)


def extract_rules(document: Document, definition: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `rules` provider on a parsed document: (result, resultMeta.fields).

    A document read by OCR more than once (`ScannedDocument`) is read in each
    reading; every field gets the value most readings agree on (`voting`).
    """
    readings = readings_of(document)
    if len(readings) == 1:
        return Engine(document).extract(definition)
    results = [Engine(reading).extract(definition) for reading in readings]
    result: dict[str, Any] = {}
    evidence: dict[str, Any] = {}
    agree(definition, "", [r for r, _ in results], [e for _, e in results], result, evidence)
    return result, evidence


class Engine:
    """Reads one document; `extract` may be called for several definitions."""

    def __init__(self, document: Document) -> None:
        self.layout = Layout(document)
        self.reader = LabelReader(self.layout)
        self.totals = Totals(self.reader)
        # Per field (name, schema): what `find` chose.
        self._found: dict[tuple[str, str], Candidate | None] = {}

    @cached_property
    def header_lines(self) -> list[HeaderLine]:
        """The top of the first page, where the issuer's name and address are printed."""
        return header(self.layout)

    # --- the whole schema --------------------------------------------------------------

    def extract(self, definition: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The result for `definition` and its evidence keyed by JSON pointer."""
        result: dict[str, Any] = {}
        evidence: dict[str, Any] = {}
        self._object(definition, "", "", result, evidence)
        return result, evidence

    def _object(self, schema: dict[str, Any], prefix: str, pointer: str, result: dict[str, Any],
                evidence: dict[str, Any]) -> None:
        for name, sub, json_type in properties(schema):
            path = f"{pointer}/{pointer_token(name)}"
            if json_type == "object":
                nested: dict[str, Any] = {}
                self._object(sub, f"{prefix}{name}_", path, nested, evidence)
                if nested:
                    result[name] = nested
            elif json_type == "array":
                raw_items = sub.get("items")
                items: dict[str, Any] = raw_items if isinstance(raw_items, dict) else {}
                if items.get("type") == "object" or "properties" in items:
                    rows = read_table(self.reader, items, path, evidence)
                    if rows:
                        result[name] = rows
                else:
                    values = self._list(prefix + name, sub, items, path, evidence)
                    if values:
                        result[name] = values
            else:
                query = field_query(prefix + name if prefix else name, sub)
                if prefix and not query.labels.concepts:
                    query = field_query(name, sub)
                chosen = self.find(query)
                if chosen is not None:
                    value = typed(query, chosen)
                    if value is not None:
                        result[name] = value
                        evidence[path] = evidence_of(self.layout, chosen)

    def _list(self, name: str, schema: dict[str, Any], items: dict[str, Any], pointer: str,
              evidence: dict[str, Any]) -> list[Any]:
        query = field_query(name, {**items, "description": schema.get("description", ""),
                                   "title": schema.get("title", "")})
        candidates = self.reader.candidates(query)
        if not candidates and query.kind in _LIST_ANYWHERE:
            for ref in self.layout.lines():
                for value in self.reader.values_in(query, ref.text):
                    candidates.append(found_at(ref, value.start, value.end, value, 0.4))
        out: list[Any] = []
        seen: set[str] = set()
        for candidate in sorted(candidates, key=lambda c: c.order):
            value = typed(query, candidate)
            if value is None or repr(value) in seen:
                continue
            seen.add(repr(value))
            evidence[f"{pointer}/{len(out)}"] = evidence_of(self.layout, candidate)
            out.append(value)
        return out

    # --- one field ------------------------------------------------------------------------

    def find(self, query: FieldQuery) -> Candidate | None:
        """The field's value: the best labelled candidate, else where such values usually are."""
        key = (query.name, repr(sorted(query.schema.items())))
        if key not in self._found:
            self._found[key] = self._find(query)
        return self._found[key]

    def _find(self, query: FieldQuery) -> Candidate | None:
        kind = query.kind
        if kind is ValueKind.CURRENCY:
            return self.currency(query)
        candidates = self.reader.candidates(query)
        if kind is ValueKind.AMOUNT and query.labels.concept == "total":
            candidates = self.totals.candidates(query, candidates)
        chosen = choose(query, candidates)
        # A name or an address after a weak label is less likely than the usual place.
        enough = 0.8 if kind in _USUAL_PLACE else 0.35
        if chosen is not None and chosen.score >= enough:
            return chosen
        fallback = self.fallback(query)
        if chosen is None:
            return fallback
        if fallback is not None and (fallback.score > chosen.score or kind in _USUAL_PLACE):
            return fallback
        return chosen

    def fallback(self, query: FieldQuery) -> Candidate | None:
        """Where a field's kind of value usually is, when no label names it (a low score)."""
        kind = query.kind
        concept = query.labels.concept
        if kind is ValueKind.DATE and concept in (None, "date"):
            return self._first_date(query)
        if kind is ValueKind.AMOUNT and concept == "total":
            return self.totals.largest_amount(query)
        if kind is ValueKind.PARTY and concept == "vendor":
            return vendor_candidate(self.header_lines)
        if kind is ValueKind.ADDRESS:
            return address_candidate(self.header_lines)
        if kind in _ANYWHERE:
            for ref in self.layout.lines():
                values = self.reader.values_in(query, ref.text)
                if values:
                    return found_at(ref, values[0].start, values[0].end, values[0], 0.4)
        return None

    def _first_date(self, query: FieldQuery) -> Candidate | None:
        best: Candidate | None = None
        sure: Candidate | None = None
        for ref in self.layout.lines():
            for value in self.reader.values_in(query, ref.text):
                if self.reader.date_context_ok(query, ref, value.start):
                    candidate = found_at(ref, value.start, value.end, value, 0.4)
                    if value.quality >= 0.9:
                        # On a scanned receipt the sale's date is stamped with its time; other
                        # date-shaped numbers (item codes, expiry dates) are not.
                        if not self.layout.ocr or find_time(ref.text[value.end :]) is not None:
                            return candidate
                        sure = sure or candidate
                    best = best or candidate
        return sure or best

    def currency(self, query: FieldQuery) -> Candidate | None:
        """The currency written beside the amounts (the total's first), else the most frequent."""
        labelled = choose(query, self.reader.candidates(query))
        if labelled is not None:
            return labelled
        total = self.find(field_query("total", {"type": "number"}))
        if total is not None and total.currency:
            return Candidate(total.currency, 0.85 * min(total.score, 1.0), total.ref, total.start, total.end,
                             total.text)
        seen: Counter[str] = Counter()
        first: dict[str, tuple[LineRef, Found]] = {}
        for ref in self.layout.lines():
            for value in find_currencies(ref.text):
                seen[value.value] += 1
                first.setdefault(value.value, (ref, value))
        if not seen:
            return None
        code, count = seen.most_common(1)[0]
        ref, value = first[code]
        return Candidate(code, 0.5 + 0.3 * count / sum(seen.values()), ref, value.start, value.end,
                         ref.text[value.start : value.end])
