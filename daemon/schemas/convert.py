"""The field form of a schema, and conversions to and from it (SPEC §5, /api/schema/convert).

A schema in field form is a list of `FieldSpec`, one per property, in order::

    {"name": "total", "type": "number", "required": true}     {"type": "number"}, listed in required
    {"name": "issued", "type": "date"}                         {"type": "string", "format": "date"}
    {"name": "email", "type": "string", "format": "email"}     {"type": "string", "format": "email"}
    {"name": "buyer", "type": "object", "fields": [...]}       {"type": "object", "properties": {...}}
    {"name": "lines", "type": "array", "fields": [...]}        {"type": "array", "items": {"type": "object", ...}}
    {"name": "tags", "type": "array", "itemType": "string"}    {"type": "array", "items": {"type": "string"}}

`fields` gives the members of an object or of each item of an array of objects (a
table); `itemType` (string, number, integer, boolean, date) gives the items of an
array of scalars, and on such an array `format` and `enum` describe the items. `date`
is a type of its own, so `format` is one of date-time, email, uri. `title` and
`description` go on the property (the array, not its items).

Round trips: fields → JSON Schema → fields gives back equal `FieldSpec`s; a definition
accepted by `check_definition` → fields → JSON Schema gives back the same properties,
in order, with `required` listed in property order. The root's ``$schema``, ``title``
and ``description`` have no place in a list of fields and are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.schemas.definition import (
    MAX_DEPTH,
    MAX_ENUM_CHARS,
    MAX_ENUM_VALUES,
    MAX_NAME_CHARS,
    MAX_PROPERTIES,
    MAX_TEXT_CHARS,
    TYPE_NOUNS,
    check_definition,
    is_date,
    is_date_time,
    is_email,
    is_uri,
    json_path,
    matches_type,
)

FieldType = Literal["string", "number", "integer", "boolean", "date", "object", "array"]
ItemType = Literal["string", "number", "integer", "boolean", "date"]
EnumValue = str | bool | int | float


class ConversionError(ValueError):
    """The input cannot be converted; `problems` names the path of each reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class FieldSpec(BaseModel):
    """One property in field form (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    type: FieldType
    required: bool = False
    title: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    description: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    format: Literal["date-time", "email", "uri"] | None = None
    enum: list[EnumValue] | None = Field(default=None, min_length=1, max_length=MAX_ENUM_VALUES)
    itemType: ItemType | None = None
    fields: list[FieldSpec] | None = Field(default=None, min_length=1, max_length=MAX_PROPERTIES)


def field_json(field: FieldSpec) -> dict[str, Any]:
    """A field as the API shows it: `name`, `type`, `required`, and the other keys that are set."""
    return field.model_dump(exclude_none=True)


# --- fields → JSON Schema ------------------------------------------------------------

def fields_to_schema(fields: Sequence[FieldSpec], *, root: str = "fields") -> dict[str, Any]:
    """The definition (``{"type": "object", "properties": ...}``) that `fields` describe.

    Raises:
        ConversionError: the fields break a rule the shape alone does not show (a
            `format` on a number, an array with neither `fields` nor `itemType`, a
            repeated name, too deep or too many); each problem names its path under `root`.
    """
    problems = _check_fields(fields, root, depth=1, count=[0])  # count: fields seen, at every level
    if problems:
        raise ConversionError(problems)
    schema = _object_schema(fields)
    # What the fields' own rules missed, schemas would refuse: never answer one it cannot save.
    if problems := check_definition(schema, root="jsonSchema"):
        raise ConversionError(problems)
    return schema


def _check_fields(fields: Sequence[FieldSpec], path: str, depth: int, count: list[int]) -> list[str]:
    if depth > MAX_DEPTH:
        return [f"{path} is nested deeper than {MAX_DEPTH} levels"]
    problems: list[str] = []
    seen: set[str] = set()
    for i, field in enumerate(fields):
        count[0] += 1
        if count[0] == MAX_PROPERTIES + 1:
            problems.append(f"{path} has more than {MAX_PROPERTIES} fields (at most {MAX_PROPERTIES} in all)")
        at = f"{path}[{i}]"
        if field.name in seen:
            problems.append(f"{at}.name must be unique ({json.dumps(field.name)} is used twice)")
        seen.add(field.name)
        if field.type == "object" and field.fields is None:
            problems.append(f"{at}.fields must list the members of the object")
        if field.type == "array" and (field.fields is None) == (field.itemType is None):
            problems.append(f"{at} must have either fields (an array of objects) or itemType (an array of scalars)")
        if field.type not in ("object", "array") and field.fields is not None:
            problems.append(f"{at}.fields is only allowed on objects and arrays")
        if field.type != "array" and field.itemType is not None:
            problems.append(f"{at}.itemType is only allowed on arrays")
        value_type = field.itemType if field.type == "array" else field.type
        if field.format is not None and value_type != "string":
            problems.append(f"{at}.format is only allowed on strings and arrays of strings (use type date for dates)")
        if field.enum is not None:
            if value_type in (None, "object", "array"):
                problems.append(f"{at}.enum is only allowed on scalar fields and arrays of scalars")
            else:
                json_type = "string" if value_type == "date" else str(value_type)
                problems += [f"{at}.enum[{j}] must be {TYPE_NOUNS[json_type]}"
                             for j, value in enumerate(field.enum) if not matches_type(json_type, value)]
                problems += [f"{at}.enum[{j}] must be shorter than or equal to {MAX_ENUM_CHARS} characters"
                             for j, value in enumerate(field.enum) if isinstance(value, str)
                             and len(value) > MAX_ENUM_CHARS]
        if field.fields is not None:
            problems += _check_fields(field.fields, f"{at}.fields", depth + 1, count)
    return problems


def _object_schema(fields: Sequence[FieldSpec]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {f.name: _property(f) for f in fields}}
    required = [f.name for f in fields if f.required]
    if required:
        schema["required"] = required
    return schema


def _property(field: FieldSpec) -> dict[str, Any]:
    if field.type == "object":
        assert field.fields is not None
        node = _object_schema(field.fields)
    elif field.type == "array":
        if field.fields is not None:
            items = _object_schema(field.fields)
        else:
            assert field.itemType is not None
            items = _scalar(field.itemType, field.format, field.enum)
        node = {"type": "array", "items": items}
    else:
        node = _scalar(field.type, field.format, field.enum)
    if field.title is not None:
        node["title"] = field.title
    if field.description is not None:
        node["description"] = field.description
    return node


def _scalar(kind: str, format: str | None, enum: list[EnumValue] | None) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string", "format": "date"} if kind == "date" else {"type": kind}
    if format is not None:
        node["format"] = format
    if enum is not None:
        node["enum"] = list(enum)
    return node


# --- JSON Schema → fields ------------------------------------------------------------

def schema_to_fields(definition: object, *, root: str = "jsonSchema") -> list[FieldSpec]:
    """The field form of `definition`.

    Raises:
        ConversionError: `definition` is outside the supported subset; the problems
            are those of `check_definition`, named under `root`.
    """
    problems = check_definition(definition, root=root)
    if problems:
        raise ConversionError(problems)
    assert isinstance(definition, dict)
    return _fields(definition)


def _fields(node: Mapping[str, Any]) -> list[FieldSpec]:
    required = set(node.get("required", ()))
    return [_field(name, child, name in required) for name, child in node["properties"].items()]


def _field(name: str, node: Mapping[str, Any], required: bool) -> FieldSpec:
    common: dict[str, Any] = {"name": name, "required": required,
                              "title": node.get("title"), "description": node.get("description")}
    if node["type"] == "object":
        common.update(type="object", fields=_fields(node))
    elif node["type"] == "array" and node["items"]["type"] == "object":
        common.update(type="array", fields=_fields(node["items"]))
    elif node["type"] == "array":
        items = node["items"]
        common.update(type="array", itemType=_scalar_type(items), format=_format(items), enum=items.get("enum"))
    else:
        common.update(type=_scalar_type(node), format=_format(node), enum=node.get("enum"))
    return FieldSpec.model_validate(common)


def _scalar_type(node: Mapping[str, Any]) -> str:
    return "date" if node.get("format") == "date" else str(node["type"])


def _format(node: Mapping[str, Any]) -> str | None:
    format = node.get("format")
    return None if format == "date" else format


# --- a sample result → JSON Schema ---------------------------------------------------

def infer_schema(example: Mapping[str, Any], *, root: str = "example") -> dict[str, Any]:
    """A definition that `example` (a sample result) would satisfy.

    Types come from the values: booleans, integers, numbers, strings (with format
    date-time, date, email or uri when every value looks like one), objects, and arrays
    (their items merged across elements: objects' members are united, integers and
    numbers give number). A property is required when it is present and not null
    wherever its object appears; a null or an empty array says nothing about the type,
    which is then string (items string). Null elements of arrays are ignored.

    Raises:
        ConversionError: an empty object, an array of arrays, values of different types
            in one place, or a result beyond the limits of `check_definition`.
    """
    problems: list[str] = []
    schema = _infer_object([example], root, 1, problems)
    if not problems:
        problems = check_definition(schema, root="jsonSchema")
    if problems:
        raise ConversionError(problems)
    return schema


def _infer_object(samples: Sequence[Mapping[str, Any]], path: str, depth: int,
                  problems: list[str]) -> dict[str, Any]:
    """An object schema for `samples` (found at `path`), whose members are at level `depth`."""
    names = list(dict.fromkeys(name for sample in samples for name in sample))
    if not names:
        problems.append(f"{path} is an empty object; give at least one member to infer from")
    if depth > MAX_DEPTH:
        problems.append(f"{path} is nested deeper than {MAX_DEPTH} levels")
        names = []
    elif len(names) > MAX_PROPERTIES:
        # What check_definition would say of the schema, said before looking further: each name
        # is looked up in every sample, and 30,000 array elements with a member each were 900
        # million look-ups on the event loop.
        too_many = f"jsonSchema has more than {MAX_PROPERTIES} properties (at most {MAX_PROPERTIES} in all)"
        problems.extend([too_many] if too_many not in problems else [])
        names = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name in names:
        values = [sample[name] for sample in samples if sample.get(name) is not None]
        if len(values) == len(samples):
            required.append(name)
        properties[name] = _infer_values(values, json_path(path, [name]), depth, problems)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _infer_values(values: Sequence[Any], path: str, depth: int, problems: list[str]) -> dict[str, Any]:
    """One schema for every non-null value seen at `path` (a property at level `depth`;
    ``[*]`` in a path stands for every element of an array)."""
    kinds = {_kind(v) for v in values}
    if not kinds:
        return {"type": "string"}
    if kinds <= {"integer", "number"}:
        return {"type": "number" if "number" in kinds else "integer"}
    if len(kinds) > 1:
        problems.append(f"{path} holds {' and '.join(sorted(kinds))} values; one field has one type")
        return {"type": "string"}
    kind = kinds.pop()
    if kind == "object":
        return _infer_object(values, path, depth + 1, problems)
    if kind == "array":
        elements = [e for array in values for e in array if e is not None]
        if any(isinstance(e, list) for e in elements):
            problems.append(f"{path} is an array of arrays, which a schema cannot hold")
            return {"type": "array", "items": {"type": "string"}}
        return {"type": "array", "items": _infer_values(elements, path + "[*]", depth, problems)}
    if kind == "string":
        formats = {_string_format(v) for v in values}
        if len(formats) == 1 and (format := formats.pop()) is not None:
            return {"type": "string", "format": format}
    return {"type": kind}


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"


def _string_format(value: str) -> str | None:
    if is_date_time(value):
        return "date-time"
    if is_date(value):
        return "date"
    if is_email(value):
        return "email"
    if "://" in value and is_uri(value):
        return "uri"
    return None
