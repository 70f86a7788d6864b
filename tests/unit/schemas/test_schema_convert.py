"""Field form ⇄ JSON Schema, and inference from a sample result (daemon.schemas.convert)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.schemas.convert import (
    ConversionError,
    FieldSpec,
    field_json,
    fields_to_schema,
    infer_schema,
    schema_to_fields,
)
from daemon.schemas.definition import DIALECT, check_definition, check_result

FIELDS: list[dict[str, Any]] = [
    {"name": "invoiceNumber", "type": "string", "required": True, "title": "No.", "description": "Invoice number"},
    {"name": "issued", "type": "date", "required": True},
    {"name": "sentAt", "type": "string", "format": "date-time"},
    {"name": "email", "type": "string", "format": "email"},
    {"name": "currency", "type": "string", "enum": ["EUR", "USD"]},
    {"name": "total", "type": "number", "required": True},
    {"name": "pages", "type": "integer", "enum": [1, 2, 3]},
    {"name": "paid", "type": "boolean"},
    {"name": "dueDates", "type": "array", "itemType": "date", "enum": ["2024-01-01"]},
    {"name": "links", "type": "array", "itemType": "string", "format": "uri", "description": "Links"},
    {"name": "buyer", "type": "object", "required": True, "fields": [
        {"name": "name", "type": "string", "required": True},
        {"name": "address", "type": "object", "fields": [{"name": "city", "type": "string"}]},
    ]},
    {"name": "lines", "type": "array", "description": "Line items", "fields": [
        {"name": "sku", "type": "string", "required": True},
        {"name": "qty", "type": "integer"},
    ]},
]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoiceNumber": {"type": "string", "title": "No.", "description": "Invoice number"},
        "issued": {"type": "string", "format": "date"},
        "sentAt": {"type": "string", "format": "date-time"},
        "email": {"type": "string", "format": "email"},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "total": {"type": "number"},
        "pages": {"type": "integer", "enum": [1, 2, 3]},
        "paid": {"type": "boolean"},
        "dueDates": {"type": "array", "items": {"type": "string", "format": "date", "enum": ["2024-01-01"]}},
        "links": {"type": "array", "items": {"type": "string", "format": "uri"}, "description": "Links"},
        "buyer": {"type": "object", "properties": {
            "name": {"type": "string"},
            "address": {"type": "object", "properties": {"city": {"type": "string"}}},
        }, "required": ["name"]},
        "lines": {"type": "array", "description": "Line items", "items": {
            "type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku"],
        }},
    },
    "required": ["invoiceNumber", "issued", "total", "buyer"],
}


def specs(raw: list[dict[str, Any]]) -> list[FieldSpec]:
    return [FieldSpec.model_validate(f) for f in raw]


def problems_of(fn: Any, *args: Any) -> list[str]:
    with pytest.raises(ConversionError) as info:
        fn(*args)
    return info.value.problems


# --- fields ⇄ JSON Schema ------------------------------------------------------------

def test_fields_become_the_expected_json_schema() -> None:
    schema = fields_to_schema(specs(FIELDS))
    assert schema == SCHEMA
    assert list(schema["properties"]) == [f["name"] for f in FIELDS]  # order kept
    assert check_definition(schema) == []


def test_json_schema_becomes_the_expected_fields() -> None:
    fields = schema_to_fields(SCHEMA)
    assert fields == specs(FIELDS)
    assert field_json(fields[1]) == {"name": "issued", "type": "date", "required": True}
    assert field_json(fields[2]) == {"name": "sentAt", "type": "string", "required": False, "format": "date-time"}


def test_fields_to_schema_to_fields_is_lossless() -> None:
    assert schema_to_fields(fields_to_schema(specs(FIELDS))) == specs(FIELDS)


def test_schema_to_fields_to_schema_is_lossless() -> None:
    assert fields_to_schema(schema_to_fields(SCHEMA)) == SCHEMA


def test_required_comes_back_in_property_order_and_root_annotations_are_dropped() -> None:
    schema = {"$schema": DIALECT, "title": "T", "description": "D", "type": "object",
              "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["b", "a"]}
    assert fields_to_schema(schema_to_fields(schema)) == {
        "type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]
    }


def test_enum_values_keep_their_json_types() -> None:
    fields = specs([{"name": "n", "type": "number", "enum": [1, 2.5]}, {"name": "b", "type": "boolean",
                                                                       "enum": [True]}])
    schema = fields_to_schema(fields)
    assert schema["properties"]["n"]["enum"] == [1, 2.5] and schema["properties"]["b"]["enum"] == [True]
    assert type(schema_to_fields(schema)[1].enum[0]) is bool  # type: ignore[index]


@pytest.mark.parametrize(("raw", "problem"), [
    ([{"name": "n", "type": "number", "format": "email"}],
     "fields[0].format is only allowed on strings and arrays of strings (use type date for dates)"),
    ([{"name": "o", "type": "object"}], "fields[0].fields must list the members of the object"),
    ([{"name": "l", "type": "array"}],
     "fields[0] must have either fields (an array of objects) or itemType (an array of scalars)"),
    ([{"name": "l", "type": "array", "itemType": "string", "fields": [{"name": "a", "type": "string"}]}],
     "fields[0] must have either fields (an array of objects) or itemType (an array of scalars)"),
    ([{"name": "s", "type": "string", "fields": [{"name": "a", "type": "string"}]}],
     "fields[0].fields is only allowed on objects and arrays"),
    # Before: converted, and POST /api/schemas refused what convert answered.
    ([{"name": "c", "type": "string", "enum": ["EUR", "x" * 201]}],
     "fields[0].enum[1] must be shorter than or equal to 200 characters"),
    ([{"name": "l", "type": "array", "itemType": "string", "enum": ["x" * 201]}],
     "fields[0].enum[0] must be shorter than or equal to 200 characters"),
    ([{"name": "s", "type": "string", "itemType": "string"}], "fields[0].itemType is only allowed on arrays"),
    ([{"name": "a", "type": "string"}, {"name": "a", "type": "number"}],
     'fields[1].name must be unique ("a" is used twice)'),
    ([{"name": "i", "type": "integer", "enum": [1, "two"]}], "fields[0].enum[1] must be an integer number"),
    ([{"name": "d", "type": "date", "enum": [20240101]}], "fields[0].enum[0] must be a string"),
    ([{"name": "o", "type": "object", "enum": ["x"], "fields": [{"name": "a", "type": "string"}]}],
     "fields[0].enum is only allowed on scalar fields and arrays of scalars"),
    ([{"name": "o", "type": "object", "fields": [{"name": "x", "type": "string", "format": "uri"},
                                                  {"name": "y", "type": "boolean", "format": "uri"}]}],
     "fields[0].fields[1].format is only allowed on strings and arrays of strings (use type date for dates)"),
])
def test_fields_that_break_a_rule_name_their_path(raw: list[dict[str, Any]], problem: str) -> None:
    assert problem in problems_of(fields_to_schema, specs(raw))


def test_fields_are_limited_in_depth_and_number() -> None:
    deep: dict[str, Any] = {"name": "x", "type": "string"}
    for _ in range(5):
        deep = {"name": "x", "type": "object", "fields": [deep]}
    assert problems_of(fields_to_schema, specs([deep])) == [
        "fields[0].fields[0].fields[0].fields[0].fields[0].fields is nested deeper than 5 levels"
    ]
    many = [{"name": f"f{i}", "type": "object", "fields": [{"name": "a", "type": "string"}]} for i in range(101)]
    assert problems_of(fields_to_schema, specs(many)) == ["fields has more than 200 fields (at most 200 in all)"]


def test_a_schema_outside_the_subset_cannot_become_fields() -> None:
    assert problems_of(schema_to_fields, {"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}
                       ) == ["jsonSchema.properties.a.pattern is not supported: a property may only use "
                             "type, title, description, format, enum, properties, required, items"]
    assert problems_of(schema_to_fields, []) == ["jsonSchema must be an object"]


# --- inference -----------------------------------------------------------------------

def test_a_sample_invoice_gives_types_formats_and_tables() -> None:
    example = {
        "invoiceNumber": "INV-1", "issued": "2024-03-01", "sentAt": "2024-03-01T10:00:00Z",
        "email": "billing@acme.com", "site": "https://acme.com", "total": 12.5, "pages": 2, "paid": False,
        "note": None, "tags": ["a", "b"],
        "buyer": {"name": "Globex", "vat": None},
        "lines": [{"sku": "A", "qty": 1, "price": 2}, {"sku": "B", "qty": 2, "price": 2.5, "memo": "x"}],
    }
    schema = infer_schema(example)
    assert schema == {
        "type": "object",
        "properties": {
            "invoiceNumber": {"type": "string"},
            "issued": {"type": "string", "format": "date"},
            "sentAt": {"type": "string", "format": "date-time"},
            "email": {"type": "string", "format": "email"},
            "site": {"type": "string", "format": "uri"},
            "total": {"type": "number"},
            "pages": {"type": "integer"},
            "paid": {"type": "boolean"},
            "note": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "buyer": {"type": "object", "properties": {"name": {"type": "string"}, "vat": {"type": "string"}},
                      "required": ["name"]},
            "lines": {"type": "array", "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"},
                               "memo": {"type": "string"}},
                "required": ["sku", "qty", "price"],
            }},
        },
        "required": ["invoiceNumber", "issued", "sentAt", "email", "site", "total", "pages", "paid", "tags",
                     "buyer", "lines"],
    }
    assert check_definition(schema) == []
    # The sample satisfies what was inferred from it, once its nulls are left out.
    result = {k: v for k, v in example.items() if v is not None} | {"buyer": {"name": "G"}}
    assert check_result(schema, result).problems == [] and check_result(schema, result).missing == []


def test_mixed_strings_lose_their_format_and_empty_arrays_give_strings() -> None:
    schema = infer_schema({"when": ["2024-01-01", "soon"], "none": [], "nums": [1, None, 2]})
    assert schema["properties"] == {
        "when": {"type": "array", "items": {"type": "string"}},
        "none": {"type": "array", "items": {"type": "string"}},
        "nums": {"type": "array", "items": {"type": "integer"}},
    }


@pytest.mark.parametrize(("example", "problem"), [
    ({}, "example is an empty object; give at least one member to infer from"),
    ({"meta": {}}, "example.meta is an empty object; give at least one member to infer from"),
    ({"grid": [[1, 2]]}, "example.grid is an array of arrays, which a schema cannot hold"),
    ({"vals": [1, "x"]}, "example.vals[*] holds integer and string values; one field has one type"),
    ({"lines": [{"a": 1}, {"a": "x"}]}, "example.lines[*].a holds integer and string values; one field has one type"),
    ({"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}, "example.a.b.c.d.e is nested deeper than 5 levels"),
    ({f"k{i}": i for i in range(201)}, "jsonSchema has more than 200 properties (at most 200 in all)"),
])
def test_examples_that_cannot_be_inferred_name_their_path(example: dict[str, Any], problem: str) -> None:
    assert problem in problems_of(infer_schema, example)
