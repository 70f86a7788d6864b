"""Learning from corrections (issue #16): a correction or an approval teaches how its
issuer's documents read, and the next document of that issuer comes out right, for that
user and schema only. Jobs run through the worker pool and the rules provider on text
receipts of two issuers, whose receipt number follows a label ("Bon") the generic rules
do not know. Runs on SQLite and, with DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa
from jobs_helpers import completed_job, create_schema, error_of, register

from daemon.config import LearningConfig
from daemon.services import Services
from daemon.storage.tables import learned_examples, learned_keys

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "shop": {"type": "string", "description": "Name of the shop"},
        "receipt_number": {"type": "string", "description": "Number of the receipt"},
        "total": {"type": "number", "description": "Total amount paid"},
    },
}
MUELLER = "KAFFEEHAUS MUELLER GMBH\nHauptstrasse 12, 10115 Berlin\nUSt-IdNr DE123456789\n"
SCHMIDT = "BAECKEREI SCHMIDT KG\nBahnhofstrasse 3, 80331 Muenchen\nUSt-IdNr DE987654321\n"


def receipt(head: str, number: str, total: str) -> bytes:
    return f"{head}Bon {number}\nKaffee 3.50\nKuchen 4.20\nSumme EUR {total}\nGegeben 50.00\n".encode()


extracted = completed_job


async def corrected(client: Any, auth: dict[str, str], job: dict[str, Any], **values: Any) -> None:
    r = await client.patch(f"/api/jobs/{job['id']}/result", json={"result": {**job["result"], **values}},
                           headers=auth)
    assert r.status_code == 200, await r.get_json()


async def examples(client: Any, auth: dict[str, str], schema_id: str) -> list[dict[str, Any]]:
    r = await client.get(f"/api/schemas/{schema_id}/examples", headers=auth)
    body = await r.get_json()
    assert r.status_code == 200, body
    return list(body["data"])


async def test_a_correction_makes_the_next_receipt_of_its_issuer_right_and_no_other(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    assert "receipt_number" not in first["result"]  # the generic rules do not know "Bon"
    other_before = await extracted(client, services, alice, schema_id, receipt(SCHMIDT, "9999-C", "8.10"))

    await corrected(client, alice, first, receipt_number="4711-A")
    [example] = await examples(client, alice, schema_id)
    assert example["jobId"] == first["id"] and example["schemaId"] == schema_id
    assert example["fields"]["/receipt_number"]["value"] == "4711-A"

    second = await extracted(client, services, alice, schema_id, receipt(MUELLER, "5823-B", "12.30"))
    assert second["result"] == {"shop": "KAFFEEHAUS MUELLER GMBH", "receipt_number": "5823-B", "total": 12.3}
    evidence = second["resultMeta"]["fields"]["/receipt_number"]
    assert evidence["learnedFrom"] == example["id"] and evidence["confidence"] == 0.9
    assert evidence["text"] == "Bon 5823-B"
    assert second["resultMeta"]["complete"] is True

    # Another issuer's receipt reads as before.
    other = await extracted(client, services, alice, schema_id, receipt(SCHMIDT, "9999-C", "8.10"))
    assert other["result"] == other_before["result"]
    assert not any("learnedFrom" in e for e in other["resultMeta"]["fields"].values())

    # A second correction of the same job replaces its example; a second job's adds one.
    await corrected(client, alice, first, receipt_number="4711-A", total=7.7)
    assert [e["jobId"] for e in await examples(client, alice, schema_id)] == [first["id"]]
    await corrected(client, alice, second, receipt_number="5823-B")
    third = await extracted(client, services, alice, schema_id, receipt(MUELLER, "6001-D", "3.50"))
    assert third["result"]["receipt_number"] == "6001-D"
    assert third["resultMeta"]["fields"]["/receipt_number"]["confidence"] == 0.95  # two examples agree


async def test_an_approval_teaches_too(client: Any, services: Services, alice: dict[str, str]) -> None:
    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    r = await client.post(f"/api/jobs/{first['id']}/approve", headers=alice)
    assert r.status_code == 200, await r.get_json()
    [example] = await examples(client, alice, schema_id)
    assert example["jobId"] == first["id"]
    second = await extracted(client, services, alice, schema_id, receipt(MUELLER, "5823-B", "12.30"))
    # The approved result had no receipt number: nothing taught about it, the rest confirmed.
    assert "receipt_number" not in second["result"]
    assert second["resultMeta"]["fields"]["/total"]["learnedFrom"] == example["id"]


async def test_one_users_corrections_never_change_another_users_results(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    bob = await register(client, "bob@example.com")
    alice_schema = await create_schema(client, alice, SCHEMA, name="Receipt")
    bob_schema = await create_schema(client, bob, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, alice_schema, receipt(MUELLER, "4711-A", "7.70"))
    await corrected(client, alice, first, receipt_number="4711-A")
    [example] = await examples(client, alice, alice_schema)

    bobs = await extracted(client, services, bob, bob_schema, receipt(MUELLER, "5823-B", "12.30"))
    assert "receipt_number" not in bobs["result"]
    assert not any("learnedFrom" in e for e in bobs["resultMeta"]["fields"].values())
    # Alice's schema and examples do not exist for Bob.
    await error_of(await client.get(f"/api/schemas/{alice_schema}/examples", headers=bob), 404)
    await error_of(await client.delete(f"/api/schemas/{alice_schema}/examples/{example['id']}", headers=bob), 404)
    await error_of(await client.delete(f"/api/schemas/{bob_schema}/examples/{example['id']}", headers=bob), 404)
    assert await examples(client, bob, bob_schema) == []
    assert len(await examples(client, alice, alice_schema)) == 1


async def test_a_deleted_example_is_forgotten(client: Any, services: Services, alice: dict[str, str]) -> None:
    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    await corrected(client, alice, first, receipt_number="4711-A")
    [example] = await examples(client, alice, schema_id)

    r = await client.delete(f"/api/schemas/{schema_id}/examples/{example['id']}", headers=alice)
    assert r.status_code == 204
    assert await examples(client, alice, schema_id) == []
    await error_of(await client.delete(f"/api/schemas/{schema_id}/examples/{example['id']}", headers=alice), 404)
    keys = await services.db.read(lambda conn: conn.execute(sa.select(sa.func.count()).select_from(learned_keys))
                                  .scalar())
    assert keys == 0  # the example's fingerprint went with it
    later = await extracted(client, services, alice, schema_id, receipt(MUELLER, "5823-B", "12.30"))
    assert "receipt_number" not in later["result"]


async def _learning_changes_nothing(client: Any, services: Services, auth: dict[str, str], schema_id: str) -> None:
    first = await extracted(client, services, auth, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    await corrected(client, auth, first, receipt_number="4711-A")
    assert await examples(client, auth, schema_id) == []
    later = await extracted(client, services, auth, schema_id, receipt(MUELLER, "5823-B", "12.30"))
    assert later["result"] == {k: v for k, v in first["result"].items()} | {"total": 12.3}
    assert not any("learnedFrom" in e for e in later["resultMeta"]["fields"].values())


async def test_learning_off_for_a_schema_changes_nothing(client: Any, services: Services,
                                                         alice: dict[str, str]) -> None:
    schema_id = await create_schema(client, alice, {**SCHEMA, "x-docex-learning": False}, name="Receipt")
    await _learning_changes_nothing(client, services, alice, schema_id)
    r = await client.post("/api/schemas", json={"name": "Bad", "definition": {**SCHEMA, "x-docex-learning": "no"}},
                          headers=alice)
    body = await error_of(r, 400)
    assert "x-docex-learning" in str(body["message"])


async def test_learning_off_in_the_configuration_changes_nothing(client: Any, services: Services,
                                                                 alice: dict[str, str]) -> None:
    services.config = dataclasses.replace(services.config, learning=LearningConfig(enabled=False))
    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    await _learning_changes_nothing(client, services, alice, schema_id)


async def test_examples_are_listed_in_pages(client: Any, services: Services, alice: dict[str, str]) -> None:
    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    jobs = [await extracted(client, services, alice, schema_id, receipt(head, f"{n}-A", "7.70"))
            for n, head in ((1, MUELLER), (2, SCHMIDT), (3, MUELLER))]
    for job in jobs:
        await corrected(client, alice, job, receipt_number=job["result"].get("receipt_number", "0-A"))
    r = await client.get(f"/api/schemas/{schema_id}/examples?limit=2", headers=alice)
    page = await r.get_json()
    assert [e["jobId"] for e in page["data"]] == [jobs[2]["id"], jobs[1]["id"]]
    r = await client.get(f"/api/schemas/{schema_id}/examples?limit=2&cursor={page['nextCursor']}", headers=alice)
    rest = await r.get_json()
    assert [e["jobId"] for e in rest["data"]] == [jobs[0]["id"]] and rest["nextCursor"] is None
    await error_of(await client.get("/api/schemas/01ARZ3NDEKTSV4RRFFQ69G5FAV/examples", headers=alice), 404)


async def test_a_correction_is_saved_even_when_nothing_can_be_learned_from_it(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    from daemon.storage.tables import jobs

    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    # What the job kept of its document is damaged (a row written by a broken process, say).
    await services.db.run(lambda conn: conn.execute(
        sa.update(jobs).where(jobs.c.id == first["id"]).values(reading={"lines": [42, "x", None], "keys": 7})))
    await corrected(client, alice, first, receipt_number="4711-A")  # 200, not a 500
    r = await client.get(f"/api/jobs/{first['id']}", headers=alice)
    assert (await r.get_json())["result"]["receipt_number"] == "4711-A"
    assert await examples(client, alice, schema_id) == []


async def test_corrections_that_teach_nothing_keep_no_example_and_crowd_out_none(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    """Before: each was kept with no values, and five of them took every place a lookup reads
    from the issuer's one useful example."""
    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    await corrected(client, alice, first, receipt_number="4711-A")
    for n in range(5):
        job = await extracted(client, services, alice, schema_id, receipt(MUELLER, f"{n}00-X", "7.70"))
        # Values printed nowhere on the receipt: nothing says where to read them next time.
        await corrected(client, alice, job, shop="NOWHERE LTD", receipt_number="ZZZ-999", total=999.99)
    assert [e["jobId"] for e in await examples(client, alice, schema_id)] == [first["id"]]

    later = await extracted(client, services, alice, schema_id, receipt(MUELLER, "5823-B", "12.30"))
    assert later["result"]["receipt_number"] == "5823-B"
    assert "learnedFrom" in later["resultMeta"]["fields"]["/receipt_number"]


async def test_a_confirmed_result_and_its_lesson_are_saved_together(
        client: Any, services: Services, alice: dict[str, str], monkeypatch: Any) -> None:
    """A daemon that fails (or stops) between saving a correction or an approval and recording
    what it teaches keeps neither: no result is confirmed that taught nothing, and the request
    sent again teaches."""
    from daemon.storage.repos import learning as learning_repo

    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    record_example = learning_repo.record_example

    def disk_full(conn: Any, **_: Any) -> str:
        raise OSError("No space left on device")

    monkeypatch.setattr(learning_repo, "record_example", disk_full)
    corrected_result = {**first["result"], "receipt_number": "4711-A"}
    r = await client.patch(f"/api/jobs/{first['id']}/result", json={"result": corrected_result}, headers=alice)
    await error_of(r, 500)
    r = await client.get(f"/api/jobs/{first['id']}", headers=alice)
    assert (await r.get_json())["result"] == first["result"]  # the correction did not stay half-saved
    assert await examples(client, alice, schema_id) == []

    monkeypatch.setattr(learning_repo, "record_example", record_example)
    await corrected(client, alice, first, receipt_number="4711-A")
    [example] = await examples(client, alice, schema_id)
    assert example["fields"]["/receipt_number"]["value"] == "4711-A"

    # An approval likewise: it stands only with its lesson.
    await services.db.run(lambda conn: conn.execute(sa.delete(learned_examples)))
    monkeypatch.setattr(learning_repo, "record_example", disk_full)
    await error_of(await client.post(f"/api/jobs/{first['id']}/approve", headers=alice), 500)
    r = await client.get(f"/api/jobs/{first['id']}", headers=alice)
    assert (await r.get_json())["reviewedAt"] is None
    monkeypatch.setattr(learning_repo, "record_example", record_example)
    r = await client.post(f"/api/jobs/{first['id']}/approve", headers=alice)
    assert r.status_code == 200, await r.get_json()
    [example] = await examples(client, alice, schema_id)
    assert example["fields"]["/receipt_number"]["value"] == "4711-A"


async def test_a_correction_made_while_learning_is_off_forgets_what_the_job_taught(
        client: Any, services: Services, alice: dict[str, str]) -> None:
    """One example per job, of its last confirmed result: a correction that teaches nothing
    (learning off) took the job's earlier example along; it stayed, and once learning was on
    again the issuer's next receipt was read with values the job no longer has."""
    schema_id = await create_schema(client, alice, SCHEMA, name="Receipt")
    first = await extracted(client, services, alice, schema_id, receipt(MUELLER, "4711-A", "7.70"))
    await corrected(client, alice, first, receipt_number="4711-A", total=10.0)  # a slip
    assert [e["jobId"] for e in await examples(client, alice, schema_id)] == [first["id"]]

    services.config = dataclasses.replace(services.config, learning=LearningConfig(enabled=False))
    await corrected(client, alice, first, receipt_number="4711-A", total=7.7)  # put right
    assert await examples(client, alice, schema_id) == []

    services.config = dataclasses.replace(services.config, learning=LearningConfig(enabled=True))
    second = await extracted(client, services, alice, schema_id, receipt(MUELLER, "5823-B", "17.50"))
    assert second["result"]["total"] == 17.5
    assert not any("learnedFrom" in e for e in second["resultMeta"]["fields"].values())
