"""The docex schema subset (SPEC §5): which definitions are accepted, and whether a
result matches one.

A definition is a JSON Schema, draft 2020-12, of this shape and nothing more::

    root      {"type": "object", "properties": {name: property, ...}, "required"?: [name, ...],
               "$schema"?: DIALECT, "title"?, "description"?,
               "x-docex-provider"?: PROVIDERS, "x-docex-incomplete"?: "complete" | "fail",
               "x-docex-learning"?: true | false}
    property  a scalar, an object or an array, each with an optional "title" and "description"
    scalar    {"type": "string" | "number" | "integer" | "boolean", "enum"?: [value, ...],
               "format"?: "date" | "date-time" | "email" | "uri"}      (format on strings only)
    object    {"type": "object", "properties": {name: property, ...}, "required"?: [...]}
    array     {"type": "array", "items": item}
    item      a scalar or an object, without "title" or "description" (describe the array)

No $ref, combinators or constraints: the subset is exactly what the field form of
`daemon.schemas.convert` can say (so conversions are lossless), every extractor can
fill it, and the limits below bound the work a hostile definition can cause.

Problems are named by a JSON path from a root (``definition.properties.total.type``;
names that are not identifiers are quoted: ``definition.properties["unit price"]``).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.config import PROVIDERS

if TYPE_CHECKING:
    from jsonschema import FormatChecker
    from jsonschema.protocols import Validator

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Top-level keyword of a schema definition choosing its provider (one of config.PROVIDERS).
PROVIDER_KEYWORD = "x-docex-provider"
# Top-level keyword saying what a result that lacks required values does (SPEC §7): "complete"
# (the default) completes the job with the values found, marked incomplete for a person to
# finish; "fail" fails it with RESULT_INVALID.
INCOMPLETE_KEYWORD = "x-docex-incomplete"
INCOMPLETE_POLICIES = ("complete", "fail")
# Top-level keyword turning learning from corrections off for one schema (issue #16):
# false, and its jobs neither read with learned examples nor teach new ones.
LEARNING_KEYWORD = "x-docex-learning"
TYPES = ("string", "number", "integer", "boolean", "object", "array")
SCALAR_TYPES = ("string", "number", "integer", "boolean")
ITEM_TYPES = (*SCALAR_TYPES, "object")  # no arrays of arrays
FORMATS = ("date", "date-time", "email", "uri")

# Limits: generous for invoices, receipts and contracts, small enough that neither the
# extractor nor jsonschema can be made to do unbounded work by one definition.
MAX_DEPTH = 5  # levels of properties: the root's are level 1, an object's members one deeper
MAX_PROPERTIES = 200  # properties at every level together
MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 2000  # title and description
MAX_ENUM_VALUES = 500
# An enum value is a category ("CARD", "credit card"), not a text: 500 values of 7,900
# characters made a definition of 3.5 MB, and a page of 100 such schemas 395 MB.
MAX_ENUM_CHARS = MAX_NAME_CHARS
# check_definition and check_result report at most this many problems, a result's each
# cut to this length (a message quotes the failing value, which may be a whole table).
MAX_PROBLEMS = 100
MAX_MESSAGE_CHARS = 300

ROOT_KEYWORDS = ("$schema", "type", "title", "description", "properties", "required", PROVIDER_KEYWORD,
                 INCOMPLETE_KEYWORD, LEARNING_KEYWORD)
PROPERTY_KEYWORDS = ("type", "title", "description", "format", "enum", "properties", "required", "items")
ITEM_KEYWORDS = ("type", "format", "enum", "properties", "required")

TYPE_NOUNS = {"string": "a string", "number": "a number", "integer": "an integer number",
              "boolean": "a boolean value"}

Path = tuple[str | int, ...]

_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


# jsonschema (and what it loads, ~70 ms) is imported when a definition or a result is
# first checked, not when the API starts.
@functools.cache
def _meta_validator() -> Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(Draft202012Validator.META_SCHEMA)


def json_path(root: str, parts: Iterable[str | int]) -> str:
    """``root.a.b[0]["c d"]``: how problems name a place in a JSON document."""
    out = root
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def matches_type(json_type: str, value: object) -> bool:
    """Whether `value` is an instance of the scalar JSON Schema `json_type` (bools are not numbers)."""
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


# --- definitions ---------------------------------------------------------------------

def check_definition(definition: object, *, root: str = "definition") -> list[str]:
    """Problems that keep `definition` from being a docex schema; empty if it is one.

    The subset rules (module docstring) and limits are checked first; then, unless a limit
    was exceeded, the definition is validated against the draft 2020-12 meta-schema, whose
    findings are kept where the subset rules found nothing (they read
    ``definition.required: 'total' is not of type 'array'``). Each problem starts with
    the JSON path of its place under `root`. Never raises.
    """
    if not isinstance(definition, dict):
        return [f"{root} must be an object"]
    walk = _Walk()
    walk.root(definition)
    for path in _mixed_arrays(definition):
        walk.add(path, "must not hold objects, arrays or values of different types (a definition's arrays "
                       "hold names or values of one type)")
        walk.over_limit = True
    found = list(walk.found)
    if not walk.over_limit:
        reported = [path for path, _ in walk.found]
        for error in _meta_validator().iter_errors(definition):
            path = tuple(error.absolute_path)
            if not any(path[: len(p)] == p for p in reported):
                found.append((path, f": {error.message}"))
    # A meta-schema message quotes the value ("[... 400,000 names ...] has non-unique elements"): cut.
    problems = [_cut(json_path(root, path) + message) for path, message in found[:MAX_PROBLEMS]]
    if len(found) > MAX_PROBLEMS:  # 250,000 undeclared `required` names made a 25 MB answer
        problems.append(f"{root} has {len(found) - MAX_PROBLEMS} more problems")
    return problems


_JSON_KINDS = ((bool, "boolean"), (int | float, "number"), (str, "string"), (dict, "object"), (list, "array"))


def _mixed_arrays(definition: dict[str, Any]) -> list[Path]:
    """Paths of the arrays in `definition` holding objects or arrays, or values of more than
    one type. No docex definition has one (`required` holds names, `enum` values of one
    type), and jsonschema checks the meta-schema's uniqueItems (`required`, `type`,
    `dependentRequired`) of such an array pairwise: 8,000 objects in `required` cost a
    minute of CPU on the event loop, so the meta-schema is not run over them."""
    found: list[Path] = []
    queue: list[tuple[Path, Any]] = [((), definition)]
    for path, node in queue:  # grows as it goes: breadth first, without recursion
        if isinstance(node, dict):
            queue.extend(((*path, key), value) for key, value in node.items())
        elif isinstance(node, list):
            kinds = {next((name for kind, name in _JSON_KINDS if isinstance(v, kind)), "null") for v in node}
            if len(kinds) > 1 or kinds & {"object", "array"}:
                found.append(path)
    return found


class _Walk:
    """Collects (path, message) problems of the subset rules, with bounded recursion."""

    def __init__(self) -> None:
        self.found: list[tuple[Path, str]] = []
        self.properties = 0
        self.over_limit = False

    def add(self, path: Path, message: str) -> None:
        self.found.append((path, " " + message))

    def root(self, node: dict[str, Any]) -> None:
        if node.get("type") != "object":
            self.add(("type",), "must be object (the root of a schema is an object)")
            return  # anything else said about a root of the wrong type would be noise
        self.unknown_keywords(node, (), ROOT_KEYWORDS, "the root of a schema")
        if "$schema" in node and node["$schema"] != DIALECT:
            self.add(("$schema",), f"must be {DIALECT}")
        if PROVIDER_KEYWORD in node and node[PROVIDER_KEYWORD] not in PROVIDERS:
            self.add((PROVIDER_KEYWORD,), f"must be one of {', '.join(PROVIDERS)}")
        if INCOMPLETE_KEYWORD in node and node[INCOMPLETE_KEYWORD] not in INCOMPLETE_POLICIES:
            self.add((INCOMPLETE_KEYWORD,), f"must be one of {', '.join(INCOMPLETE_POLICIES)}")
        if LEARNING_KEYWORD in node and not isinstance(node[LEARNING_KEYWORD], bool):
            self.add((LEARNING_KEYWORD,), "must be true or false")
        self.texts(node, ())
        self.members(node, (), depth=1)

    def unknown_keywords(self, node: dict[str, Any], path: Path, allowed: Sequence[str], what: str) -> None:
        for key in node:
            if key not in allowed:
                self.add((*path, key), f"is not supported: {what} may only use {', '.join(allowed)}")

    def texts(self, node: dict[str, Any], path: Path) -> None:
        for key in ("title", "description"):
            value = node.get(key)
            if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
                self.add((*path, key), f"must be shorter than or equal to {MAX_TEXT_CHARS} characters")

    def members(self, node: dict[str, Any], path: Path, depth: int) -> None:
        """The members of an object whose own members are at level `depth`."""
        props = node.get("properties")
        if props is None or props == {}:
            self.add((*path, "properties"), "must declare at least one property")
            return
        if not isinstance(props, dict):
            return  # the meta-schema says what is wrong
        if depth > MAX_DEPTH:
            self.add((*path, "properties"), f"is nested deeper than {MAX_DEPTH} levels")
            self.over_limit = True
            return
        for name, child in props.items():
            self.properties += 1
            if self.properties > MAX_PROPERTIES:
                self.add((), f"has more than {MAX_PROPERTIES} properties (at most {MAX_PROPERTIES} in all)")
                self.over_limit = True
                return
            if not 1 <= len(name) <= MAX_NAME_CHARS:
                self.add((*path, "properties", name), f"must have a name of 1 to {MAX_NAME_CHARS} characters")
            self.schema(child, (*path, "properties", name), depth)
        required = node.get("required")
        if isinstance(required, list):
            for i, name in enumerate(required):
                if isinstance(name, str) and name not in props:
                    self.add((*path, "required", i),
                             f"must name a declared property ({json.dumps(name)} is not one)")

    def schema(self, node: object, path: Path, depth: int, *, item: bool = False) -> None:
        """A property (or, with `item`, the items of an array) at level `depth`."""
        if not isinstance(node, dict):
            self.add(path, "must be an object")
            return
        if item:
            self.unknown_keywords(node, path, ITEM_KEYWORDS, "array items")
        else:
            self.unknown_keywords(node, path, PROPERTY_KEYWORDS, "a property")
            self.texts(node, path)
        kind = node.get("type")
        allowed_types = ITEM_TYPES if item else TYPES
        if kind not in allowed_types:
            self.add((*path, "type"), f"must be one of {', '.join(allowed_types)}")
            return
        if "format" in node:
            if kind != "string":
                self.add((*path, "format"), "is only allowed on strings")
            elif node["format"] not in FORMATS:
                self.add((*path, "format"), f"must be one of {', '.join(FORMATS)}")
        if "enum" in node:
            if kind in SCALAR_TYPES:
                self.enum(node["enum"], kind, (*path, "enum"))
            else:
                self.add((*path, "enum"), "is only allowed on strings, numbers, integers and booleans")
        for key in ("properties", "required"):
            if key in node and kind != "object":
                self.add((*path, key), "is only allowed on objects")
        if "items" in node and kind != "array":
            self.add((*path, "items"), "is only allowed on arrays")
        if kind == "object":
            self.members(node, path, depth + 1)
        elif kind == "array":
            if "items" not in node:
                self.add((*path, "items"), "must describe the items of the array")
            else:
                self.schema(node["items"], (*path, "items"), depth, item=True)

    def enum(self, values: object, kind: str, path: Path) -> None:
        if not isinstance(values, list):
            return  # the meta-schema says what is wrong
        if not values:
            self.add(path, "must contain at least 1 elements")
        if len(values) > MAX_ENUM_VALUES:
            self.add(path, f"must contain no more than {MAX_ENUM_VALUES} elements")
            return
        for i, value in enumerate(values):
            if not matches_type(kind, value):
                self.add((*path, i), f"must be {TYPE_NOUNS[kind]}")
            elif isinstance(value, str) and len(value) > MAX_ENUM_CHARS:
                self.add((*path, i), f"must be shorter than or equal to {MAX_ENUM_CHARS} characters")


# --- formats -------------------------------------------------------------------------
# jsonschema's own date-time and uri checks pass silently unless optional packages are
# installed, and its email check only looks for an "@"; these are always enforced.

_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATE_TIME = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:)([0-9]{2})((?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2}))"
)
_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(?:\.[^@\s.]+)+")
# RFC 3986 URI: a scheme, then only unreserved, reserved and percent-encoded characters.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?#\[\]]|%[0-9A-Fa-f]{2})*")


def is_date(value: str) -> bool:
    """RFC 3339 full-date: ``2024-02-29``."""
    if not _DATE.fullmatch(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def is_date_time(value: str) -> bool:
    """RFC 3339 date-time with an offset: ``2024-02-29T13:05:00Z``, ``…T13:05:00.5+01:00``."""
    m = _DATE_TIME.fullmatch(value)
    if m is None:
        return False
    seconds = "59" if m[2] == "60" else m[2]  # a leap second is valid RFC 3339
    try:
        dt.datetime.fromisoformat((m[1] + seconds + m[3]).upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def is_email(value: str) -> bool:
    """``local@domain.tld`` without spaces: what a document's e-mail address looks like."""
    return _EMAIL.fullmatch(value) is not None


def is_uri(value: str) -> bool:
    """An absolute RFC 3986 URI (scheme required): ``https://example.com/a?b=c``, ``mailto:a@b.c``."""
    return _URI.fullmatch(value) is not None


def _on_strings(check: Callable[[str], bool]) -> Callable[[object], bool]:
    # A format says nothing about other types (JSON Schema); `type` catches those.
    def checker(value: object) -> bool:
        return not isinstance(value, str) or check(value)

    return checker


@functools.cache
def format_checker() -> FormatChecker:
    """The formats a result must match (date, date-time, email, uri), always enforced."""
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    checker.checks("date")(_on_strings(is_date))
    checker.checks("date-time")(_on_strings(is_date_time))
    checker.checks("email")(_on_strings(is_email))
    checker.checks("uri")(_on_strings(is_uri))
    return checker


# --- results -------------------------------------------------------------------------

def json_pointer(parts: Iterable[str | int]) -> str:
    """RFC 6901 pointer of a value; the whole result is ``/`` (no property has an empty name)."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@dataclass(frozen=True)
class ResultCheck:
    """How a result compares with its definition (SPEC §7).

    `problems` are values of the wrong type or shape, each ``<pointer>: <message>``
    (``/total: 'abc' is not of type 'number'``), at most `MAX_PROBLEMS`, each at most
    `MAX_MESSAGE_CHARS` long. `missing` are the JSON pointers of the required values not
    found (``/vendor/name``, ``/lines/0/qty``); a required object that is absent is named
    itself, not its members. With neither the result matches; with only `missing` it is
    incomplete, a job for a person to finish.
    """

    problems: list[str]
    missing: list[str]


def learning_on(definition: dict[str, Any], enabled: bool) -> bool:
    """Whether jobs of `definition` learn from corrections: `enabled` (``learning.enabled``)
    unless the definition says ``"x-docex-learning": false``."""
    return enabled and definition.get(LEARNING_KEYWORD) is not False


def incomplete_fails(definition: dict[str, Any]) -> bool:
    """Whether the definition opted into failing a result that lacks required values."""
    return definition.get(INCOMPLETE_KEYWORD) == "fail"


def check_result(definition: dict[str, Any], result: object) -> ResultCheck:
    """Compare `result` with `definition` (which passed `check_definition`).

    Formats (date, date-time, email, uri) are enforced. Once `MAX_PROBLEMS` problems
    are found the rest of the result is not looked at (`missing` may then be short). Never
    raises.
    """
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(definition, format_checker=format_checker())
    problems: dict[str, None] = {}
    missing: dict[str, None] = {}
    for error in validator.iter_errors(result):
        path = tuple(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            # jsonschema does not look inside an absent value: a missing object's members
            # are never reported besides it.
            for name in error.validator_value:
                if name not in error.instance:
                    missing.setdefault(json_pointer((*path, name)), None)
        else:
            problems.setdefault(_cut(f"{json_pointer(path)}: {error.message}"), None)
            if len(problems) >= MAX_PROBLEMS:
                break  # invalid whatever else is wrong or missing: bound the work
    return ResultCheck(problems=list(problems), missing=list(missing))


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 1] + "…"
