"""Jobs as rows of a spreadsheet (pure): the columns a schema gives, a job's cells, and
formula neutralising. Used by the export routes (CSV, XLSX) and `docex submit --format csv`.

Columns: the job's own (`JOB_COLUMNS`), then one per schema value, nested objects
flattened with dotted names (`vendor.name`), arrays of plain values joined with "; ";
a name an earlier column took is numbered (`distinct`).
An array of objects (line items) is a *table*: exported as one row per item repeating
the job's columns (`rows`), or as a sheet of its own keyed by job id (XLSX). A job's
cells come from its current result, so a corrected result exports the corrected values.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

JOB_COLUMNS = ("jobId", "fileName", "status", "complete", "reviewedAt", "createdAt", "finishedAt", "errorCode")
# OWASP's list and a line feed: a cell starting with one of these is read as a formula by spreadsheet programs.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")
ARRAY_SEPARATOR = "; "


@dataclass(frozen=True)
class Table:
    """An array of objects in the result: its dotted name, its path, and its items' columns."""

    name: str
    path: tuple[str, ...]
    columns: tuple[tuple[str, tuple[str, ...]], ...]  # (dotted name, path within an item)


@dataclass(frozen=True)
class Layout:
    """Where each value of a schema's results goes."""

    values: tuple[tuple[str, tuple[str, ...]], ...]  # (dotted name, path in the result)
    tables: tuple[Table, ...]

    def header(self) -> list[str]:
        """The job's columns, then the values'."""
        return [*JOB_COLUMNS, *(name for name, _ in self.values)]


def layout(definition: Mapping[str, Any]) -> Layout:
    """The columns of a schema's results (JSON Schema; see daemon.schemas)."""
    values: list[tuple[str, tuple[str, ...]]] = []
    tables: list[Table] = []
    _walk(definition, (), values, tables)
    return Layout(tuple(values), tuple(tables))


def _walk(schema: Mapping[str, Any], path: tuple[str, ...], values: list[tuple[str, tuple[str, ...]]],
          tables: list[Table]) -> None:
    for name, child in (schema.get("properties") or {}).items():
        if not isinstance(child, Mapping):
            continue
        here = (*path, name)
        items = child.get("items") if child.get("type") == "array" else None
        if child.get("type") == "object" and child.get("properties"):
            _walk(child, here, values, tables)
        elif isinstance(items, Mapping) and items.get("type") == "object":
            item_values: list[tuple[str, tuple[str, ...]]] = []
            _walk(items, (), item_values, [])  # a table within a table stays one JSON cell
            tables.append(Table(".".join(here), here, tuple(item_values)))
        else:
            values.append((".".join(here), here))


def _at(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def cell(value: Any) -> Any:
    """A value as a spreadsheet cell: numbers, booleans and text as they are, arrays joined,
    objects as JSON. (Text is made safe where it is written: `neutralised` for CSV, a text
    cell for XLSX.)"""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return ARRAY_SEPARATOR.join(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value)
    return json.dumps(value, ensure_ascii=False)


def csv_writer(out: TextIO) -> Any:
    """A CSV writer that quotes every text: a spreadsheet set to split on ";" (Excel in many
    European locales) splits an unquoted "x;=1+2" into a formula cell, past `neutralised`."""
    return csv.writer(out, quoting=csv.QUOTE_NONNUMERIC)


def neutralised(value: Any) -> Any:
    """For CSV: text a spreadsheet would run as a formula gets a leading apostrophe, which
    Excel, LibreOffice and Google Sheets take as "this is text"; other values unchanged."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def job_cells(job: Mapping[str, Any], shape: Layout) -> list[Any]:
    """The job's own columns and its values (tables not included), from its job object."""
    meta = job.get("resultMeta") or {}
    own = [job.get("id"), job.get("fileName"), job.get("status"), meta.get("complete"), job.get("reviewedAt"),
           job.get("createdAt"), job.get("finishedAt"), job.get("errorCode")]
    result = job.get("result") or {}
    return [cell(v) for v in own] + [cell(_at(result, path)) for _, path in shape.values]


def item_cells(item: Any, table: Table) -> list[Any]:
    return [cell(_at(item, path)) for _, path in table.columns]


def items(job: Mapping[str, Any], table: Table) -> list[Any]:
    found = _at(job.get("result") or {}, table.path)
    return found if isinstance(found, list) else []


def rows(job: Mapping[str, Any], shape: Layout) -> Iterator[list[Any]]:
    """The job's rows when tables become rows: one per item of the first table (the job's
    cells repeated), or one with empty item cells; further tables as one JSON cell each."""
    base = job_cells(job, shape)
    if not shape.tables:
        yield base
        return
    first, *others = shape.tables
    base += [cell(items(job, table) or None) for table in others]
    listed = items(job, first)
    if not listed:
        yield base + [None] * len(first.columns)
    for item in listed:
        yield base + item_cells(item, first)


def distinct(names: Iterable[str]) -> list[str]:
    """A header row: `names`, each one an earlier one took numbered ("jobId (2)"). A schema's
    field may be named like a job's column ("status"), and a field "a.b" is flattened like
    "b" within "a": two columns of one header, of which a reader going by header
    (csv.DictReader) read one as the other."""
    taken: set[str] = set()
    numbered: dict[str, int] = {}
    out: list[str] = []
    for name in names:
        unique = name
        while unique in taken:
            numbered[name] = numbered.get(name, 1) + 1
            unique = f"{name} ({numbered[name]})"
        taken.add(unique)
        out.append(unique)
    return out


def rows_header(shape: Layout) -> list[str]:
    """The header matching `rows`."""
    if not shape.tables:
        return shape.header()
    first, *others = shape.tables
    return [*shape.header(), *(table.name for table in others), *(f"{first.name}.{n}" for n, _ in first.columns)]
