"""The base of every request and response body the API declares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ApiModel(BaseModel):
    # Built at first use, not at import: building the API's ~55 models costs ~70 ms of a
    # ~1 s start (bench/idle.py, restart), before the first request needs any of them.
    model_config = ConfigDict(defer_build=True)
