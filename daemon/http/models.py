"""The base of every request and response body the API declares, and the types of
values that pydantic's own parsing would read too leniently."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError


class ApiModel(BaseModel):
    # Built at first use, not at import: building the API's ~55 models costs ~70 ms of a
    # ~1 s start (bench/idle.py, restart), before the first request needs any of them.
    model_config = ConfigDict(defer_build=True)


# The errors' types are pydantic's own, so that they read like its others (`validation`).


def _digits(value: Any) -> Any:
    # int() also reads "1_0", "+1" and " 1".
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise PydanticCustomError("int_parsing", "Input should be a whole number written in digits")
    return value


_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _iso_datetime(value: Any) -> Any:
    # pydantic reads a number, or a string of one, as seconds since 1970 (or milliseconds,
    # past 2e10: 1e11 was 1973); the API documents ISO 8601.
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
            isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise PydanticCustomError("datetime_parsing", "Input should be an ISO 8601 date-time, not a number")
    return value


QueryInt = Annotated[int, BeforeValidator(_digits)]
IsoDateTime = Annotated[dt.datetime, BeforeValidator(_iso_datetime)]
