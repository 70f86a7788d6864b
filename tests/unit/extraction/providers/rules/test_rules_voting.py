"""Several OCR readings' results made one (`providers.rules.voting`): each
scalar by majority, then by sureness, then the first reading's; nested objects
field by field; arrays as the first reading has them."""

from __future__ import annotations

from typing import Any

from daemon.extraction.providers.rules.voting import agree

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "company": {"type": "string"},
        "total": {"type": ["number", "null"]},
        "vendor": {"type": "object", "properties": {"name": {"type": "string"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"amount": {"type": "number"}}}},
    },
}


def seen(confidence: float, text: str) -> dict[str, Any]:
    return {"confidence": confidence, "page": 1, "text": text}


def test_each_field_takes_the_value_most_readings_read() -> None:
    results = [
        {"company": "Kedai  Maju", "total": 10.004, "vendor": {"name": "A"}, "items": [{"amount": 1.0}]},
        {"company": "KEDAI MAJU", "total": 10.0, "vendor": {"name": "B"}, "items": [{"amount": 2.0}]},
        {"company": "KEDAI MAJO", "total": 19.0, "vendor": {"name": "B"}},
    ]
    evidences = [
        {"/company": seen(0.5, "Kedai  Maju"), "/total": seen(0.4, "10.004"), "/vendor/name": seen(0.9, "A"),
         "/items/0/amount": seen(0.8, "1.00")},
        {"/company": seen(0.7, "KEDAI MAJU"), "/total": seen(0.6, "10.00"), "/vendor/name": seen(0.5, "B")},
        {"/company": seen(0.9, "KEDAI MAJO"), "/total": seen(0.9, "19.00"), "/vendor/name": seen(0.6, "B")},
    ]
    result: dict[str, Any] = {}
    evidence: dict[str, Any] = {}
    agree(SCHEMA, "", results, evidences, result, evidence)
    # Upper case and spacing apart, two readings agree; of those the surer one's text.
    assert result["company"] == "KEDAI MAJU" and evidence["/company"]["confidence"] == 0.7
    assert result["total"] == 10.0  # the same to the cent
    assert result["vendor"] == {"name": "B"} and evidence["/vendor/name"]["confidence"] == 0.6
    assert result["items"] == [{"amount": 1.0}] and evidence["/items/0/amount"]["text"] == "1.00"


def test_a_tie_goes_to_the_surer_reading_then_to_the_first() -> None:
    result: dict[str, Any] = {}
    agree(SCHEMA, "", [{"total": 1.0}, {"total": 2.0}], [{"/total": seen(0.3, "1")}, {"/total": seen(0.8, "2")}],
          result, {})
    assert result == {"total": 2.0}
    result = {}
    agree(SCHEMA, "", [{"total": 1.0}, {"total": 2.0}], [{}, {}], result, {})
    assert result == {"total": 1.0}
