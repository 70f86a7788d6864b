"""Validation failures worded like class-validator, one message per failed rule.

Clients of the seed's API match on messages such as ``"email must be an
email"`` and ``"password must be longer than or equal to 6 characters"``;
pydantic's own wording is translated here, in one place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from daemon.errors import BadRequest


def _path(loc: Iterable[int | str]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query")]
    return ".".join(parts) or "body"


def _message(err: ErrorDetails) -> str:
    path = _path(err["loc"])
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    if kind == "value_error":
        # Our own validators raise ValueError with the whole message, property name first.
        return str(ctx.get("error", err["msg"]))
    if kind == "missing":
        return f"{path} should not be empty"
    if kind == "extra_forbidden":
        return f"property {path} should not exist"
    if kind in ("string_type", "string_unicode"):
        return f"{path} must be a string"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return f"{path} should not be empty"
        return f"{path} must be longer than or equal to {ctx['min_length']} characters"
    if kind == "string_too_long":
        return f"{path} must be shorter than or equal to {ctx['max_length']} characters"
    if kind == "string_pattern_mismatch":
        return f"{path} must match {ctx.get('pattern')} regular expression"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{path} must be an integer number"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"{path} must be a number conforming to the specified constraints"
    if kind in ("bool_type", "bool_parsing"):
        return f"{path} must be a boolean value"
    if kind in ("greater_than_equal", "greater_than"):
        return f"{path} must not be less than {ctx.get('ge', ctx.get('gt'))}"
    if kind in ("less_than_equal", "less_than"):
        return f"{path} must not be greater than {ctx.get('le', ctx.get('lt'))}"
    if kind in ("enum", "literal_error"):
        expected = str(ctx.get("expected", "")).replace("'", "")
        return f"{path} must be one of the following values: {expected.replace(' or ', ', ')}"
    if kind in ("list_type", "tuple_type", "set_type"):
        return f"{path} must be an array"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{path} must be an object" if path != "body" else "request body must be a JSON object"
    if kind in ("too_short",):
        return f"{path} must contain at least {ctx.get('min_length')} elements"
    if kind in ("too_long",):
        return f"{path} must contain no more than {ctx.get('max_length')} elements"
    if kind.startswith("datetime") or kind.startswith("date"):
        return f"{path} must be a valid ISO 8601 date string"
    return f"{path} {err['msg'][:1].lower()}{err['msg'][1:]}"


def messages(error: ValidationError) -> list[str]:
    """One message per failed rule, in the order pydantic found them, without repeats."""
    seen: dict[str, None] = {}
    for err in error.errors(include_url=False):
        seen.setdefault(_message(err), None)
    return list(seen)


def in_utc(value: dt.datetime, name: str) -> dt.datetime:
    """`value` (with a zone) as UTC, the way the database stores and compares it, or the
    ValueError of a field validator: 9999-12-31T23:59:59-23:59 and 0001-01-01T00:00:00+23:59
    parse, but have no UTC datetime (OverflowError where it is stored or compared: a 500)."""
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError(f"{name} must be a date between 0001-01-01 and 9999-12-31 in UTC") from None


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], data: Any) -> M:
    """Validate `data` as `model`, or raise the 400 the decorators would have."""
    if not isinstance(data, dict):
        raise BadRequest(["request body must be a JSON object"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(messages(exc)) from None
