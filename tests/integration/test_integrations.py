"""Integrations over HTTP (SPEC §10): create, list, get, delete, test; credentials sealed at
rest and never answered or logged; ownership; sources of jobs checked at creation.
S3 calls go to the session's moto server (tests/moto_s3.py). Runs on both backends."""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

import pytest
import sqlalchemy as sa
from integrations_helpers import create_s3, post_source_job, post_source_run, private_networks, with_google
from jobs_helpers import bad_request, count_jobs, create_schema, error_of, register

from daemon.config import Config
from daemon.storage.tables import events, integrations

INTEGRATION_KEYS = {"id", "provider", "name", "status", "config", "createdAt", "updatedAt"}


@pytest.fixture
def config(config: Config) -> Config:
    """The S3 servers of these tests listen on loopback: the operator's setting lets them in."""
    return private_networks(config)


@pytest.fixture
async def bob(client: Any) -> dict[str, str]:
    return await register(client, "bob@example.com")


@pytest.fixture
def bucket(s3_server: Any) -> str:
    return s3_server.new_bucket({"invoices/a.txt": b"Invoice Number: INV-1\n"})


async def _rows(services: Any, table: sa.Table) -> list[Any]:
    return await services.db.read(lambda conn: list(conn.execute(sa.select(table))))


async def test_an_s3_integration_is_shown_without_its_secrets(
        client: Any, services: Any, alice: dict[str, str], s3_server: Any, bucket: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    created = await create_s3(client, alice, s3_server, bucket, prefix="invoices/")
    key_id, secret = s3_server.admin.access_key_id, s3_server.admin.secret_access_key
    assert set(created) == INTEGRATION_KEYS
    assert created["provider"] == "s3" and created["status"] == "connected" and created["name"] == "Invoices bucket"
    assert created["config"] == {"accessKeyId": "****" + key_id[-4:], "bucket": bucket, "region": "us-east-1",
                                 "endpointUrl": s3_server.endpoint_url, "prefix": "invoices/"}

    r = await client.get(f"/api/integrations/{created['id']}", headers=alice)
    assert r.status_code == 200 and await r.get_json() == created
    r = await client.get("/api/integrations", headers=alice)
    listed = await r.get_json()
    assert listed == {"data": [created], "nextCursor": None}
    r = await client.post(f"/api/integrations/{created['id']}/test", headers=alice)
    assert r.status_code == 200 and await r.get_json() == {"ok": True}

    # Neither the secret nor the whole key id is in any answer, row or log line.
    for text in [str(created), str(listed)] + [record.getMessage() + str(record.__dict__)
                                               for record in caplog.records]:
        assert secret not in text and key_id not in text
    for table in (integrations, events):
        for row in await _rows(services, table):
            dumped = repr(tuple(row)).encode() + b"".join(v for v in row if isinstance(v, bytes))
            assert secret.encode() not in dumped and key_id.encode() not in dumped


async def test_the_sealed_secrets_are_bound_to_their_row(client: Any, services: Any, alice: dict[str, str],
                                                         s3_server: Any, bucket: str) -> None:
    """A sealed value copied onto another integration does not open there: its test fails cleanly."""
    one = await create_s3(client, alice, s3_server, bucket, name="one")
    two = await create_s3(client, alice, s3_server, bucket, name="two")

    def swap(conn: sa.Connection) -> None:
        sealed = conn.execute(sa.select(integrations.c.secrets_sealed)
                              .where(integrations.c.id == one["id"])).scalar_one()
        conn.execute(integrations.update().where(integrations.c.id == two["id"]).values(secrets_sealed=sealed))

    await services.db.run(swap)
    body = await error_of(await client.post(f"/api/integrations/{two['id']}/test", headers=alice), 400)
    assert body["details"]["errorCode"] == "INTEGRATION_ACCESS_DENIED"
    assert "cannot be decrypted" in body["message"]
    r = await client.post(f"/api/integrations/{one['id']}/test", headers=alice)
    assert r.status_code == 200


async def test_test_answers_400_with_the_error_code(client: Any, alice: dict[str, str], s3_server: Any,
                                                    bucket: str, free_tcp_port: int) -> None:
    from moto_s3 import Credentials

    cases = [
        ({"credentials": s3_server.denied}, "INTEGRATION_ACCESS_DENIED", "AccessDenied"),
        ({"credentials": Credentials("AKIAUNKNOWNUNKNOWN00", "x" * 40)}, "INTEGRATION_ACCESS_DENIED",
         "InvalidAccessKeyId"),
        ({"credentials": Credentials(s3_server.admin.access_key_id, "wrong" * 8)}, "INTEGRATION_ACCESS_DENIED",
         "SignatureDoesNotMatch"),
        ({"bucket": "docex-no-such-bucket"}, "INTEGRATION_ACCESS_DENIED", "does not exist"),
        ({"endpoint_url": f"http://127.0.0.1:{free_tcp_port}"}, "INTERNAL_ERROR", "No answer from an S3 service"),
    ]
    for kwargs, code, words in cases:
        target = kwargs.pop("bucket", bucket)
        created = await create_s3(client, alice, s3_server, target, **kwargs)
        body = await error_of(await client.post(f"/api/integrations/{created['id']}/test", headers=alice), 400)
        assert body["details"]["errorCode"] == code, (kwargs, body)
        assert body["details"]["retryable"] is (code == "INTERNAL_ERROR"), body
        assert words in body["message"], body
        assert s3_server.admin.secret_access_key not in str(body)


async def test_create_validates_every_field(client: Any, alice: dict[str, str], s3_server: Any) -> None:
    good = {"accessKeyId": "AKIA1234", "secretAccessKey": "s3cr3t", "bucket": "my-bucket", "region": "eu-west-1"}
    assert any("provider" in m for m in await bad_request(
        await client.post("/api/integrations", json={"name": "x"}, headers=alice)))
    messages = await bad_request(await client.post("/api/integrations", json={"provider": "dropbox", "name": ""},
                                                   headers=alice))
    assert any(m.startswith("provider must be one of") for m in messages), messages
    assert any(m.startswith("name") for m in messages), messages
    for broken, words in [
        ({k: v for k, v in good.items() if k != "bucket"}, "config.bucket should not be empty"),
        ({**good, "secretAccessKey": ""}, "config.secretAccessKey should not be empty"),
        ({**good, "bucket": "No_Such Bucket!"}, "config.bucket must match"),
        ({**good, "endpointUrl": "ftp://minio"}, "config.endpointUrl must be an http(s) URL"),
        ({**good, "endpointUrl": "https://admin:hunter2@minio.example.com"},
         "config.endpointUrl must not contain a user name or password"),
        ({**good, "endpointUrl": "https://minio.example.com:99999"}, "config.endpointUrl must have a port from 1"),
        ({**good, "endpointUrl": "https://minio.example.com:0"}, "config.endpointUrl must have a port from 1"),
        ({**good, "color": "red"}, "property config.color should not exist"),
    ]:
        messages = await bad_request(await client.post(
            "/api/integrations", json={"provider": "s3", "name": "x", "config": broken}, headers=alice))
        assert any(m.startswith(words) for m in messages), (broken, messages)
        assert "s3cr3t" not in str(messages) and "hunter2" not in str(messages)
    assert any("config" in m for m in await bad_request(
        await client.post("/api/integrations", json={"provider": "s3", "name": "x"}, headers=alice)))
    await bad_request(await client.post("/api/integrations", json=["s3"], headers=alice))


async def test_another_users_integration_does_not_exist(client: Any, services: Any, alice: dict[str, str],
                                                        bob: dict[str, str], s3_server: Any, bucket: str) -> None:
    created = await create_s3(client, alice, s3_server, bucket)
    for method, path in [("GET", ""), ("DELETE", ""), ("POST", "/test"), ("POST", "/reconnect")]:
        r = await client.open(f"/api/integrations/{created['id']}{path}", method=method, headers=bob)
        await error_of(r, 404)
    assert (await (await client.get("/api/integrations", headers=bob)).get_json())["data"] == []
    await error_of(await client.get("/api/integrations", headers={}), 401)

    # A source naming another user's integration, or none, is refused when the job is created.
    schema_id = await create_schema(client, bob)
    messages = await bad_request(await post_source_job(client, bob, schema_id,
                                                       {"integrationId": created["id"], "key": "invoices/a.txt"}))
    assert messages == ["source.integrationId must be the id of one of your integrations"]
    messages = await bad_request(await post_source_run(client, bob, schema_id, [
        {"integrationId": created["id"], "key": "a"}, {"integrationId": "nope", "key": "b"}]))
    assert messages == [f"sources.{i}.integrationId must be the id of one of your integrations" for i in (0, 1)]
    assert await count_jobs(services) == 0


async def test_sources_must_name_a_file_the_providers_way(client: Any, services: Any, alice: dict[str, str],
                                                          s3_server: Any, bucket: str) -> None:
    created = await create_s3(client, alice, s3_server, bucket)
    schema_id = await create_schema(client, alice)
    iid = created["id"]
    for source, words in [
        ({"integrationId": iid}, "source must name a file with fileId or key"),
        ({"integrationId": iid, "folderPath": "invoices"}, "source must name a file with fileId or key"),
        ({"integrationId": iid, "fileId": "abc"}, "source.fileId is for google-drive"),
        ({"integrationId": iid, "key": "a", "fileId": "b"}, "source must name its file with fileId or key, not both"),
        ({"integrationId": iid, "key": "a", "prefix": "x"}, "source.prefix lists a folder in a batch run"),
        ({"integrationId": iid, "key": "a", "color": "red"}, "property source.color should not exist"),
    ]:
        messages = await bad_request(await post_source_job(client, alice, schema_id, source))
        assert any(m.startswith(words) for m in messages), (source, messages)
    messages = await bad_request(await post_source_run(client, alice, schema_id, [{"integrationId": iid}]))
    assert messages == ["sources.0 must name a file with fileId or key, or a folder with folderPath or prefix"]
    assert await count_jobs(services) == 0


async def test_delete_answers_204_and_the_integration_is_gone(client: Any, services: Any, alice: dict[str, str],
                                                              s3_server: Any, bucket: str) -> None:
    created = await create_s3(client, alice, s3_server, bucket)
    r = await client.delete(f"/api/integrations/{created['id']}", headers=alice)
    assert r.status_code == 204 and await r.get_data() == b""
    await error_of(await client.get(f"/api/integrations/{created['id']}", headers=alice), 404)
    await error_of(await client.delete(f"/api/integrations/{created['id']}", headers=alice), 404)
    assert await _rows(services, integrations) == []


async def test_the_list_pages_newest_first(client: Any, alice: dict[str, str], s3_server: Any, bucket: str) -> None:
    made = [await create_s3(client, alice, s3_server, bucket, name=f"n{i}") for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        body = await (await client.get(f"/api/integrations{query}", headers=alice)).get_json()
        seen += [item["name"] for item in body["data"]]
        cursor = body["nextCursor"]
        if not cursor:
            break
    assert seen == [m["name"] for m in reversed(made)]


async def test_google_drive_needs_the_operators_oauth_client(client: Any, services: Any,
                                                             alice: dict[str, str]) -> None:
    messages = await bad_request(await client.post("/api/integrations",
                                                   json={"provider": "google-drive", "name": "Drive"}, headers=alice))
    assert any("google.client_id" in m for m in messages), messages

    with_google(services, "https://fake-google.example")
    r = await client.post("/api/integrations", json={"provider": "google-drive", "name": "Drive"}, headers=alice)
    body = await r.get_json()
    assert r.status_code == 201, body
    assert set(body) == INTEGRATION_KEYS | {"authorizationUrl"}
    assert body["status"] == "pending_authorization" and body["config"] == {"accountEmail": None}
    url = urllib.parse.urlsplit(body["authorizationUrl"])
    query = dict(urllib.parse.parse_qsl(url.query))
    assert f"{url.scheme}://{url.netloc}{url.path}" == "https://fake-google.example/o/oauth2/v2/auth"
    assert query["client_id"] == "docex-client" and query["response_type"] == "code"
    assert query["redirect_uri"] == "https://docex.example.com/api/integrations/google-drive/callback"
    assert query["scope"] == "https://www.googleapis.com/auth/drive.readonly"
    assert query["access_type"] == "offline" and query["prompt"] == "consent" and query["state"]
    assert "docex-client-secret" not in str(body)

    # Not authorized yet: jobs cannot take files from it, and its test says why.
    schema_id = await create_schema(client, alice)
    messages = await bad_request(await post_source_job(client, alice, schema_id,
                                                       {"integrationId": body["id"], "fileId": "f1"}))
    assert messages == [f"source.integrationId: integration {body['id']} is pending_authorization; "
                        "complete the Google consent first"]
    test = await error_of(await client.post(f"/api/integrations/{body['id']}/test", headers=alice), 400)
    assert test["details"]["errorCode"] == "INTEGRATION_AUTH_EXPIRED"

    # An S3 integration is not reconnected in a browser.
    s3 = await client.post("/api/integrations", json={"provider": "s3", "name": "b", "config": {
        "accessKeyId": "AKIA1234", "secretAccessKey": "x", "bucket": "my-bucket", "region": "eu-west-1"}},
        headers=alice)
    s3_id = (await s3.get_json())["id"]
    assert any("google-drive" in m for m in await bad_request(
        await client.post(f"/api/integrations/{s3_id}/reconnect", headers=alice)))
