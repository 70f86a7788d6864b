"""Body formats (daemon.webhooks.bodies), parsed back with the standard library."""

from __future__ import annotations

import json
import urllib.parse
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from daemon.webhooks.bodies import Envelope, encode

DATA: dict[str, Any] = {
    "job": {
        "id": "01jd",
        "status": "COMPLETED",
        "attempts": 1,
        "score": 0.25,
        "ok": True,
        "errorCode": None,
        "result": {"lines": [{"sku": "A-1", "qty": 2}, {"sku": "B<2>&\"", "qty": 1}], "tags": ["x", "y"],
                   "empty": [], "nested": [[1, 2], [3]]},
        "resultMeta": {"fields": {"/total": {"confidence": 0.9}}},
        "Invoice no.": "Ä-17",
        "xmlish": "kept\r\nline\x01end",
    }
}
ENVELOPE: Envelope = {"id": "evt_1", "type": "job.completed", "data": DATA, "occurredAt": "2026-01-15T09:30:00.000Z"}


def test_json_is_the_envelope_compact_in_utf8() -> None:
    body = encode(ENVELOPE, "JSON")
    assert json.loads(body) == ENVELOPE
    assert list(json.loads(body)) == ["id", "type", "data", "occurredAt"]
    assert b"\xc3\x84-17" in body and b": " not in body  # UTF-8, not \u escapes; compact


def _value(element: ET.Element) -> Any:
    """Read back the mapping documented in daemon.webhooks.bodies."""
    if element.get("null") == "true":
        return None
    children = list(element)
    if not children:
        return element.text or ""
    if all(c.tag == "item" for c in children):
        return [_value(c) for c in children]
    return {(c.get("name") if c.tag == "field" else c.tag): _value(c) for c in children}


def test_xml_has_the_envelope_elements_in_order_and_reads_back() -> None:
    body = encode(ENVELOPE, "XML")
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?><event><id>evt_1</id>')
    root = ET.fromstring(body)
    assert root.tag == "event"
    assert [c.tag for c in root] == ["id", "type", "occurredAt", "data"]
    assert root.findtext("id") == "evt_1" and root.findtext("type") == "job.completed"
    assert root.findtext("occurredAt") == "2026-01-15T09:30:00.000Z"
    job = _value(root.find("data/job"))  # type: ignore[arg-type]
    assert job["status"] == "COMPLETED" and job["attempts"] == "1" and job["score"] == "0.25"
    assert job["ok"] == "true" and job["errorCode"] is None
    assert job["result"]["lines"] == [{"sku": "A-1", "qty": "2"}, {"sku": 'B<2>&"', "qty": "1"}]
    assert job["result"]["tags"] == ["x", "y"] and job["result"]["empty"] == ""
    assert job["result"]["nested"] == [["1", "2"], ["3"]]
    assert job["resultMeta"]["fields"] == {"/total": {"confidence": "0.9"}}  # unsafe names → <field name>
    assert job["Invoice no."] == "Ä-17"
    assert job["xmlish"] == "kept\r\nline\ufffdend"  # CR survives, a control character cannot travel in XML


def test_xml_element_names_are_always_safe() -> None:
    data = {"1abc": 1, "xmlFoo": 2, "a b": 3, "<script>": 4, "": 5, "ok_name-1.2": 6}
    root = ET.fromstring(encode({"id": "e", "type": "webhook.send", "data": data, "occurredAt": "t"}, "XML"))
    data_el = root.find("data")
    assert data_el is not None
    assert [(c.tag, c.get("name")) for c in data_el] == [
        ("field", "1abc"), ("field", "xmlFoo"), ("field", "a b"), ("field", "<script>"), ("field", ""),
        ("ok_name-1.2", None),
    ]


def test_form_urlencoded_has_id_type_occurred_at_and_data_as_json() -> None:
    body = encode(ENVELOPE, "FORM_URLENCODED")
    pairs = urllib.parse.parse_qsl(body.decode("ascii"), keep_blank_values=True, strict_parsing=True)
    assert [k for k, _ in pairs] == ["id", "type", "occurredAt", "data"]
    fields = dict(pairs)
    assert fields["id"] == "evt_1" and fields["type"] == "job.completed"
    assert fields["occurredAt"] == "2026-01-15T09:30:00.000Z"
    assert json.loads(fields["data"]) == DATA


def test_an_unknown_format_is_an_error() -> None:
    with pytest.raises(ValueError):
        encode(ENVELOPE, "YAML")
