"""The event envelope as the bytes of a request body, per `bodyFormat` (pure).

JSON
    ``{"id", "type", "data", "occurredAt"}``, compact, UTF-8.
XML
    ``<?xml version="1.0" encoding="UTF-8"?>`` then
    ``<event><id/><type/><occurredAt/><data>…</data></event>``. An object becomes
    child elements named by its keys, an array repeated ``<item>`` elements, a
    string its text, a number its JSON spelling, a boolean ``true``/``false``,
    null an empty element with ``null="true"``. A key that is not a safe XML
    name (``/total``, ``Invoice no.``, ``xmlns``) becomes ``<field name="…">``.
    Characters XML 1.0 cannot carry are replaced by U+FFFD.
FORM_URLENCODED
    ``id``, ``type``, ``occurredAt`` and ``data`` (compact JSON), in that order.

The signature covers these exact bytes; receivers must verify the raw body.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any, TypedDict
from xml.sax.saxutils import escape, quoteattr

from daemon.webhooks.models import BodyFormat


class Envelope(TypedDict):
    id: str
    type: str
    data: dict[str, Any]
    occurredAt: str


# Conservative: ASCII names only, and nothing starting with "xml" (reserved by XML 1.0).
_SAFE_NAME = re.compile(r"(?!(?i:xml))[A-Za-z_][A-Za-z0-9_.\-]*")
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# A bare CR in text would reach the receiver's parser as LF: keep it as a reference.
_TEXT_ENTITIES = {"\r": "&#13;"}


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def encode(envelope: Envelope, body_format: BodyFormat | str) -> bytes:
    """The body bytes of `envelope` in `body_format`."""
    fmt = BodyFormat(body_format)
    if fmt is BodyFormat.JSON:
        return _compact(envelope).encode("utf-8")
    if fmt is BodyFormat.FORM_URLENCODED:
        fields = [("id", envelope["id"]), ("type", envelope["type"]), ("occurredAt", envelope["occurredAt"]),
                  ("data", _compact(envelope["data"]))]
        return urllib.parse.urlencode(fields).encode("ascii")
    out: list[str] = ['<?xml version="1.0" encoding="UTF-8"?>', "<event>"]
    for key in ("id", "type", "occurredAt"):
        _element(out, key, envelope[key])
    _element(out, "data", envelope["data"])
    out.append("</event>")
    return "".join(out).encode("utf-8")


def _text(value: str) -> str:
    return escape(_NOT_XML_CHAR.sub("\ufffd", value), _TEXT_ENTITIES)


def _element(out: list[str], key: str, value: Any) -> None:
    if _SAFE_NAME.fullmatch(key):
        open_tag, close_tag = key, key
    else:
        open_tag, close_tag = f"field name={quoteattr(_NOT_XML_CHAR.sub(chr(0xFFFD), key))}", "field"
    if value is None:
        out.append(f'<{open_tag} null="true"/>')
        return
    out.append(f"<{open_tag}>")
    if isinstance(value, dict):
        for k, v in value.items():
            _element(out, str(k), v)
    elif isinstance(value, list | tuple):
        for item in value:
            _element(out, "item", item)
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int | float):
        out.append(json.dumps(value))
    else:
        out.append(_text(str(value)))
    out.append(f"</{close_tag}>")
