"""daemon.jobs.models: a result's lowest confidence, as the review queue reads it."""

from __future__ import annotations

from daemon.jobs.models import least_confidence

FIELDS = {"/total": {"confidence": 0.5}, "/vendor/name": {"confidence": 0.8}, "/items/0/amount": {"confidence": 0.7}}
EXTRACTED = {"total": 1.0, "vendor": {"name": "ACME"}, "items": [{"amount": 2.0}]}


def test_the_lowest_confidence_of_the_extracted_values() -> None:
    assert least_confidence(FIELDS) == 0.5
    assert least_confidence({}) == 0.0  # nothing located: nothing to trust


def test_a_value_a_person_changed_is_certain_and_the_others_keep_theirs() -> None:
    assert least_confidence(FIELDS, EXTRACTED, EXTRACTED) == 0.5
    assert least_confidence(FIELDS, {**EXTRACTED, "total": 1.5}, EXTRACTED) == 0.7
    corrected = {"total": 1.5, "vendor": {"name": "ACME Ltd"}, "items": [{"amount": 3.0}]}
    assert least_confidence(FIELDS, corrected, EXTRACTED) == 1.0
    removed = {"vendor": {"name": "ACME"}, "items": []}  # a person deleted the doubtful values
    assert least_confidence(FIELDS, removed, EXTRACTED) == 0.8
