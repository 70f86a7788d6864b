"""The OpenAPI document's `webhooks` section: every event type a receiver can get, with its
headers and a typed body whose example is valid (a real delivery of each lifecycle event is
checked against it in test_webhook_delivery.py)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from daemon.events import CATALOG


def documented(document: dict[str, Any], event_type: str) -> tuple[Any, dict[str, Any]]:
    media = document["webhooks"][event_type]["post"]["requestBody"]["content"]["application/json"]
    pointer = f"#/webhooks/{event_type}/post/requestBody/content/application~1json/schema"
    return jsonschema.Draft202012Validator({**document, "$ref": pointer}), media["example"]


async def test_every_event_type_is_documented_with_a_valid_example(client: Any) -> None:
    document = await (await client.get("/api/openapi.json")).get_json()
    assert set(document["webhooks"]) == set(CATALOG)
    for event_type, meaning in CATALOG.items():
        operation = document["webhooks"][event_type]["post"]
        assert operation["description"] == meaning
        assert {p["name"] for p in operation["parameters"]} == {
            "X-Webhook-Id", "X-Webhook-Event", "X-Webhook-Timestamp", "X-Webhook-Signature"}
        validator, example = documented(document, event_type)
        validator.validate(example)
        assert example["type"] == event_type


@pytest.mark.parametrize(("event_type", "body"), [
    ("job.completed", {"id": "e", "type": "job.completed", "data": {"jobRun": {}},
                       "occurredAt": "2026-01-01T00:00:00Z"}),
    ("job.completed", {"id": "e", "type": "job.failed", "data": {"job": None}, "occurredAt": "2026-01-01T00:00:00Z"}),
    ("job_run.progress", {"id": "e", "type": "job_run.progress", "data": {"jobRun": {"id": 1}},
                          "occurredAt": "2026-01-01T00:00:00Z"}),
    ("webhook.ping", {"id": "e", "type": "webhook.ping", "data": {"message": "pong"}, "occurredAt": "x"}),
])
async def test_a_body_of_the_wrong_shape_does_not_match(client: Any, event_type: str, body: dict[str, Any]) -> None:
    document = await (await client.get("/api/openapi.json")).get_json()
    validator, _ = documented(document, event_type)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(body)
