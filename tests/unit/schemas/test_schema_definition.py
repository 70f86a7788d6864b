"""The docex schema subset and result validation (daemon.schemas.definition)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.schemas.definition import (
    DIALECT,
    MAX_PROBLEMS,
    ResultCheck,
    check_definition,
    check_result,
    format_checker,
    incomplete_fails,
)

INVOICE: dict[str, Any] = {
    "$schema": DIALECT,
    "title": "Invoice",
    "description": "A supplier invoice",
    "type": "object",
    "properties": {
        "invoiceNumber": {"type": "string", "description": "Invoice no."},
        "issued": {"type": "string", "format": "date"},
        "sentAt": {"type": "string", "format": "date-time"},
        "email": {"type": "string", "format": "email"},
        "website": {"type": "string", "format": "uri"},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "total": {"type": "number", "title": "Total"},
        "paid": {"type": "boolean"},
        "buyer": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "lines": {
            "type": "array",
            "description": "Line items",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"}},
                "required": ["sku", "qty"],
            },
        },
    },
    "required": ["invoiceNumber", "total"],
}

VALID_INVOICE: dict[str, Any] = {
    "invoiceNumber": "INV-7", "issued": "2024-02-29", "sentAt": "2024-03-01T09:30:00.250+01:00",
    "email": "billing@acme.example.com", "website": "https://acme.example.com/invoices?id=7",
    "currency": "EUR", "total": 1234.56, "paid": False, "buyer": {"name": "Globex"}, "tags": ["a"],
    "lines": [{"sku": "A-1", "qty": 2, "price": 10}, {"sku": "B-2", "qty": 1}],
}


def schema(properties: dict[str, Any], **root: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **root}


def nested(levels: int) -> dict[str, Any]:
    """A definition whose deepest properties are at level `levels`."""
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        node = {"type": "object", "properties": {"x": node}}
    return schema({"x": node})


# --- check_definition ----------------------------------------------------------------

def test_a_full_invoice_schema_is_valid() -> None:
    assert check_definition(INVOICE) == []


@pytest.mark.parametrize(("definition", "problem"), [
    ([], "definition must be an object"),
    ({"type": "array", "items": {"type": "string"}},
     "definition.type must be object (the root of a schema is an object)"),
    ({"type": "object"}, "definition.properties must declare at least one property"),
    (schema({}), "definition.properties must declare at least one property"),
    (schema({"total": {"type": "money"}}),
     "definition.properties.total.type must be one of string, number, integer, boolean, object, array"),
    (schema({"total": {"description": "no type"}}),
     "definition.properties.total.type must be one of string, number, integer, boolean, object, array"),
    (schema({"total": {"type": ["number", "null"]}}),
     "definition.properties.total.type must be one of string, number, integer, boolean, object, array"),
    (schema({"d": {"type": "string", "format": "time"}}),
     "definition.properties.d.format must be one of date, date-time, email, uri"),
    (schema({"n": {"type": "number", "format": "date"}}), "definition.properties.n.format is only allowed on strings"),
    (schema({"a": {"type": "string"}}, required=["a", "totl"]),
     'definition.required[1] must name a declared property ("totl" is not one)'),
    (schema({"o": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}}),
     'definition.properties.o.required[0] must name a declared property ("b" is not one)'),
    (schema({"a": {"type": "string", "minLength": 1}}),
     "definition.properties.a.minLength is not supported: a property may only use "
     "type, title, description, format, enum, properties, required, items"),
    (schema({"a": {"$ref": "#/$defs/x"}}),
     "definition.properties.a.$ref is not supported: a property may only use "
     "type, title, description, format, enum, properties, required, items"),
    (schema({"a": {"type": "string"}}, additionalProperties=False),
     "definition.additionalProperties is not supported: the root of a schema may only use "
     "$schema, type, title, description, properties, required, x-docex-provider, x-docex-incomplete, "
         "x-docex-learning"),
    (schema({"a": {"type": "string"}}, **{"x-docex-incomplete": "partial"}),
     'definition["x-docex-incomplete"] must be one of complete, fail'),
    (schema({"a": {"type": "string"}}, **{"x-docex-incomplete": True}),
     'definition["x-docex-incomplete"] must be one of complete, fail'),
    (schema({"a": {"type": "string"}}, **{"$schema": "http://json-schema.org/draft-07/schema#"}),
     "definition.$schema must be https://json-schema.org/draft/2020-12/schema"),
    (schema({"a": True}), "definition.properties.a must be an object"),
    (schema({"o": {"type": "object"}}), "definition.properties.o.properties must declare at least one property"),
    (schema({"l": {"type": "array"}}), "definition.properties.l.items must describe the items of the array"),
    (schema({"l": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}}),
     "definition.properties.l.items.type must be one of string, number, integer, boolean, object"),
    (schema({"l": {"type": "array", "items": {"type": "string", "description": "each tag"}}}),
     "definition.properties.l.items.description is not supported: array items may only use "
     "type, format, enum, properties, required"),
    (schema({"s": {"type": "string", "items": {"type": "string"}}}),
     "definition.properties.s.items is only allowed on arrays"),
    (schema({"s": {"type": "string", "properties": {"a": {"type": "string"}}}}),
     "definition.properties.s.properties is only allowed on objects"),
    (schema({"o": {"type": "object", "properties": {"a": {"type": "string"}}, "enum": [{}]}}),
     "definition.properties.o.enum is only allowed on strings, numbers, integers and booleans"),
    (schema({"n": {"type": "integer", "enum": [1, "2", True]}}),
     "definition.properties.n.enum[1] must be an integer number"),
    (schema({"c": {"type": "string", "enum": []}}), "definition.properties.c.enum must contain at least 1 elements"),
    (schema({"unit price": {"type": "cash"}}),
     'definition.properties["unit price"].type must be one of string, number, integer, boolean, object, array'),
    (schema({"": {"type": "string"}}), 'definition.properties[""] must have a name of 1 to 200 characters'),
    (schema({"a": {"type": "string", "description": "x" * 2001}}),
     "definition.properties.a.description must be shorter than or equal to 2000 characters"),
])
def test_problems_name_their_path(definition: object, problem: str) -> None:
    assert problem in check_definition(definition)


@pytest.mark.parametrize(("definition", "problem"), [
    (schema({"a": {"type": "string"}}, required="a"), "definition.required: 'a' is not of type 'array'"),
    (schema({"a": {"type": "string"}}, required=["a", "a"]), "definition.required: ['a', 'a'] has non-unique elements"),
    (schema({"a": {"type": "string", "description": 5}}),
     "definition.properties.a.description: 5 is not of type 'string'"),
    (schema({"a": {"type": "string", "title": ["x"]}}), "definition.properties.a.title: ['x'] is not of type 'string'"),
    (schema({"a": {"type": "string", "enum": "EUR"}}), "definition.properties.a.enum: 'EUR' is not of type 'array'"),
    ({"type": "object", "properties": []}, "definition.properties: [] is not of type 'object'"),
])
def test_meta_schema_violations_name_their_path(definition: object, problem: str) -> None:
    assert check_definition(definition) == [problem]


def test_a_problem_the_subset_rules_report_is_not_repeated_by_the_meta_schema() -> None:
    problems = check_definition(schema({"a": {"type": "string", "minLength": -1}, "b": {"type": 7}}))
    assert problems == [
        "definition.properties.a.minLength is not supported: a property may only use "
        "type, title, description, format, enum, properties, required, items",
        "definition.properties.b.type must be one of string, number, integer, boolean, object, array",
    ]


def test_every_problem_is_reported_at_once() -> None:
    problems = check_definition(schema({"a": {"type": "money"}, "b": {"type": "string", "format": "ip"}},
                                       required=["c"]))
    assert len(problems) == 3


def test_depth_is_limited_to_five_levels() -> None:
    assert check_definition(nested(5)) == []
    problems = check_definition(nested(6))
    assert problems == ["definition.properties.x.properties.x.properties.x.properties.x.properties.x.properties "
                        "is nested deeper than 5 levels"]


def test_depth_counts_arrays_of_objects_as_a_level() -> None:
    inner: dict[str, Any] = {"type": "string"}
    for _ in range(5):
        inner = {"type": "array", "items": {"type": "object", "properties": {"x": inner}}}
    assert any("nested deeper than 5 levels" in p for p in check_definition(schema({"x": inner})))


def test_a_hostile_depth_is_refused_without_recursing_into_it() -> None:
    problems = check_definition(nested(5000))
    assert problems == ["definition" + ".properties.x" * 5 + ".properties is nested deeper than 5 levels"]


def test_at_most_200_properties_in_all() -> None:
    ok = schema({f"p{i}": {"type": "string"} for i in range(100)}
                | {"o": {"type": "object", "properties": {f"q{i}": {"type": "string"} for i in range(99)}}})
    assert check_definition(ok) == []
    too_many = schema({f"p{i}": {"type": "string"} for i in range(201)})
    assert check_definition(too_many) == ["definition has more than 200 properties (at most 200 in all)"]


def test_the_root_name_can_be_chosen() -> None:
    assert check_definition(schema({"a": {"type": "x"}}), root="jsonSchema") == [
        "jsonSchema.properties.a.type must be one of string, number, integer, boolean, object, array"
    ]


# --- check_result --------------------------------------------------------------------

def test_a_valid_result_with_nested_line_items_has_no_errors() -> None:
    assert check_result(INVOICE, VALID_INVOICE) == ResultCheck(problems=[], missing=[])
    assert check_result(INVOICE, {"invoiceNumber": "1", "total": 0}) == ResultCheck(problems=[], missing=[])


def test_wrong_types_are_reported_with_the_pointer_of_the_value() -> None:
    check = check_result(INVOICE, VALID_INVOICE | {"total": "abc", "paid": "no"})
    assert check.problems == ["/total: 'abc' is not of type 'number'", "/paid: 'no' is not of type 'boolean'"]
    assert check.missing == []


def test_missing_required_values_are_not_problems_but_named_by_their_pointer() -> None:
    result = VALID_INVOICE | {"lines": [{"sku": "A"}, {"qty": 1}], "buyer": {}}
    del result["total"]
    assert check_result(INVOICE, result) == ResultCheck(
        problems=[], missing=["/buyer/name", "/lines/0/qty", "/lines/1/sku", "/total"])


def test_a_missing_required_object_is_named_without_its_members() -> None:
    definition = schema({"vendor": {"type": "object", "properties": {"name": {"type": "string"},
                                                                      "vat": {"type": "string"}},
                                    "required": ["name", "vat"]}}, required=["vendor"])
    assert check_result(definition, {}).missing == ["/vendor"]
    assert check_result(definition, {"vendor": {"vat": "DE1"}}).missing == ["/vendor/name"]


def test_a_wrong_value_beside_a_missing_one_is_a_problem_and_both_are_reported() -> None:
    result = {k: v for k, v in VALID_INVOICE.items() if k != "invoiceNumber"} | {"total": "abc"}
    check = check_result(INVOICE, result)
    assert check.problems == ["/total: 'abc' is not of type 'number'"]
    assert check.missing == ["/invoiceNumber"]


def test_a_null_is_a_wrong_value_not_a_missing_one() -> None:
    check = check_result(INVOICE, VALID_INVOICE | {"total": None})
    assert check.problems == ["/total: None is not of type 'number'"] and check.missing == []


def test_pointers_escape_slashes_and_tildes_in_names() -> None:
    definition = schema({"a/b": {"type": "string"}, "c~d": {"type": "string"}}, required=["a/b", "c~d"])
    assert check_result(definition, {}).missing == ["/a~1b", "/c~0d"]


@pytest.mark.parametrize(("policy", "fails"), [(None, False), ("complete", False), ("fail", True)])
def test_a_schema_may_opt_into_failing_incomplete_results(policy: str | None, fails: bool) -> None:
    definition = INVOICE if policy is None else {**INVOICE, "x-docex-incomplete": policy}
    assert check_definition(definition) == []
    assert incomplete_fails(definition) is fails


def test_enum_and_nested_types_are_enforced() -> None:
    errors = check_result(INVOICE, VALID_INVOICE | {"currency": "GBP", "tags": ["c"],
                                                     "lines": [{"sku": "A", "qty": 1.5}]}).problems
    assert sorted(errors) == sorted([
        "/currency: 'GBP' is not one of ['EUR', 'USD']",
        "/tags/0: 'c' is not one of ['a', 'b']",
        "/lines/0/qty: 1.5 is not of type 'integer'",
    ])


def test_a_result_that_is_not_an_object_is_reported_at_the_root() -> None:
    assert check_result(INVOICE, [1, 2]) == ResultCheck(problems=["/: [1, 2] is not of type 'object'"], missing=[])


@pytest.mark.parametrize(("key", "value", "fmt"), [
    ("issued", "2024-02-30", "date"),
    ("issued", "2024-2-3", "date"),
    ("issued", "20240203", "date"),
    ("issued", "03/02/2024", "date"),
    ("sentAt", "2024-03-01", "date-time"),
    ("sentAt", "2024-03-01T25:00:00Z", "date-time"),
    ("sentAt", "2024-03-01T10:00:00", "date-time"),  # RFC 3339 needs an offset
    ("email", "billing at acme.com", "email"),
    ("email", "billing@acme", "email"),
    ("website", "acme.com/invoices", "uri"),
    ("website", "https://acme.com/a b", "uri"),
])
def test_formats_are_enforced(key: str, value: str, fmt: str) -> None:
    assert check_result(INVOICE, VALID_INVOICE | {key: value}).problems == [f"/{key}: {value!r} is not a {fmt!r}"]


@pytest.mark.parametrize(("fmt", "value"), [
    ("date", "2024-02-29"),
    ("date-time", "2024-03-01T10:00:00Z"),
    ("date-time", "2024-03-01t10:00:00.123456789-05:30"),
    ("date-time", "2016-12-31T23:59:60Z"),  # a leap second
    ("email", "first.last+tag@sub.example.co.uk"),
    ("uri", "https://example.com/a/b?c=d&e=%20#frag"),
    ("uri", "mailto:someone@example.com"),
    ("uri", "urn:isbn:0451450523"),
])
def test_valid_formats_pass(fmt: str, value: str) -> None:
    assert format_checker().conforms(value, fmt)


def test_date_time_and_uri_are_checked_without_optional_packages() -> None:
    # jsonschema's defaults for these two silently accept anything when rfc3339-validator
    # and rfc3987 are absent; ours must not.
    assert not format_checker().conforms("yesterday", "date-time")
    assert not format_checker().conforms("not a uri", "uri")


def test_errors_are_capped_and_cut_short() -> None:
    definition = schema({"lines": {"type": "array", "items": {"type": "integer"}}})
    errors = check_result(definition, {"lines": ["x" * 1000] * 500}).problems
    assert len(errors) == MAX_PROBLEMS
    assert all(len(e) <= 300 for e in errors) and errors[0].startswith("/lines/0: 'xxx")


def test_a_problem_quoting_a_huge_value_is_cut() -> None:
    """400,000 copies of one name in `required` made one message of 2 MB quoting them all."""
    definition = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"] * 400_000}
    problems = check_definition(definition)
    assert problems and all(len(problem) <= 300 for problem in problems)
    assert problems[0].startswith("definition.required: ") and problems[0].endswith("…")
