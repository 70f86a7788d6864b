"""The SSRF guard on S3 integration endpoints (SPEC §10, daemon.webhooks.ssrf): a USER's
endpointUrl never reaches loopback, link-local, private or other non-public addresses
unless the operator sets ``integrations.allow_private_networks``; and whatever an
endpoint does short of answering like S3, the error is the same, so that trying
endpoints does not map what listens where. Runs on SQLite and PostgreSQL.

The "internal service" is a real HTTP server on loopback that answers every request
with a secret; names that resolve to refused addresses come from a resolver hook
(`socket.getaddrinfo`, which both the guard and, before it existed, urllib3 use).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
from integrations_helpers import create_s3, post_source_job, post_source_run, with_private_networks
from jobs_helpers import bad_request, blob_files, error_of, running_workers, wait_for_status
from webhook_receiver import Received, Reply, open_receiver

from daemon.config import Config

SECRET = b"internal-service-secret: do not leak"
DONE = ("COMPLETED", "FAILED", "CANCELLED")
REFUSED_MESSAGE = ("config.endpointUrl must not point to a private, loopback or link-local address "
                   "(integrations.allow_private_networks is off)")
NO_ANSWER = "No answer from an S3 service at the integration's endpoint"

# Names the resolver hook answers, and what it answers.
HOOKED = {
    "s3.loopback.test": "127.0.0.1",
    "s3.metadata.test": "169.254.169.254",
    "s3.private.test": "10.1.2.3",
    "s3.mapped.test": "::ffff:127.0.0.1",
    "minio": "127.0.0.1",  # a LAN host name (dotless, so that moto reads the bucket from the path)
}
# The spellings of loopback an endpoint may use; every one reaches 127.0.0.1 (or ::1).
LOOPBACK_HOSTS = ["127.0.0.1", "127.1", "0x7f000001", "2130706433", "0177.0.0.1", "[::1]", "[::ffff:127.0.0.1]",
                  "localhost", "LOCALHOST.", "s3.loopback.test", "s3.mapped.test"]
NAMES = {"localhost", "LOCALHOST.", "s3.loopback.test", "s3.mapped.test"}
# Literal addresses that are refused when the integration is created.
LITERAL_REFUSED = ["127.0.0.1", "127.1", "0x7f000001", "2130706433", "0177.0.0.1", "[::1]", "[::ffff:127.0.0.1]",
                   "localhost", "LOCALHOST.", "api.localhost", "169.254.169.254", "[fe80::1]",
                   "[::ffff:169.254.169.254]", "10.0.0.1", "172.16.0.1", "192.168.1.10", "100.64.0.1", "0.0.0.0",
                   "[fd00::1]", "[64:ff9b::a9fe:a9fe]"]


@pytest.fixture(autouse=True)
def resolver_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name in HOOKED:
            address = HOOKED[name]
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (address, int(port or 0), 0, 0) if family == socket.AF_INET6 else (address, int(port or 0))
            return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def config(config: Config) -> Config:
    """One attempt per job (the guard's refusal is permanent anyway; this keeps other failures quick)."""
    return dataclasses.replace(config, jobs=dataclasses.replace(config.jobs, max_attempts=1))


@contextlib.asynccontextmanager
async def internal_service() -> AsyncIterator[Any]:
    """A loopback HTTP service that answers everything with SECRET (on 127.0.0.1 and, if the
    host has IPv6, the same port on ::1)."""
    async def handler(request: Received) -> Reply:
        return 200, {"Content-Type": "text/plain"}, SECRET

    async with open_receiver(handler) as receiver:
        yield receiver


async def _integration_to(client: Any, services: Any, auth: dict[str, str], s3_server: Any, endpoint: str) -> str:
    """An integration on `endpoint`, as one made while the operator allowed private networks
    (or before the guard existed): the setting is off again afterwards."""
    with_private_networks(services, True)
    created = await create_s3(client, auth, s3_server, "some-bucket", endpoint_url=endpoint)
    with_private_networks(services, False)
    return str(created["id"])


# --- at creation ----------------------------------------------------------------------------


@pytest.mark.parametrize("host", LITERAL_REFUSED)
async def test_a_literal_non_public_endpoint_is_refused_at_creation(client: Any, services: Any,
                                                                     alice: dict[str, str], host: str) -> None:
    config = {"accessKeyId": "AKIA1234", "secretAccessKey": "s3cr3t", "bucket": "my-bucket", "region": "eu-west-1",
              "endpointUrl": f"http://{host}:9000"}
    r = await client.post("/api/integrations", json={"provider": "s3", "name": "x", "config": config},
                          headers=alice)
    assert await bad_request(r) == [REFUSED_MESSAGE]

    with_private_networks(services, True)  # the operator's choice: MinIO on the LAN
    r = await client.post("/api/integrations", json={"provider": "s3", "name": "x", "config": config},
                          headers=alice)
    assert r.status_code == 201, await r.get_json()


async def test_a_user_cannot_turn_the_guard_off(client: Any, alice: dict[str, str]) -> None:
    config = {"accessKeyId": "AKIA1234", "secretAccessKey": "s3cr3t", "bucket": "my-bucket", "region": "eu-west-1",
              "endpointUrl": "http://127.0.0.1:9000"}
    for extra in ({"allowPrivateNetworks": True}, {"allow_private_networks": True}):
        messages = await bad_request(await client.post(
            "/api/integrations", json={"provider": "s3", "name": "x", "config": {**config, **extra}}, headers=alice))
        assert REFUSED_MESSAGE in messages or any("should not exist" in m for m in messages), messages
    messages = await bad_request(await client.post(
        "/api/integrations", json={"provider": "s3", "name": "x", "config": config,
                                   "allowPrivateNetworks": True}, headers=alice))
    assert any("should not exist" in m for m in messages), messages


# --- /test, job sources and batch-run listings -----------------------------------------------------


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
async def test_the_test_route_does_not_reach_loopback(client: Any, services: Any, alice: dict[str, str],
                                                      s3_server: Any, host: str) -> None:
    async with internal_service() as service:
        iid = await _integration_to(client, services, alice, s3_server, f"http://{host}:{service.port}")
        body = await error_of(await client.post(f"/api/integrations/{iid}/test", headers=alice), 400)
        assert service.requests == []
    assert body["details"] == {"errorCode": "INTEGRATION_ACCESS_DENIED", "retryable": False}, body
    message = body["message"]
    assert "loopback" in message and "integrations.allow_private_networks is off" in message, body
    # It names the host as the user wrote it, never the port, nor what a name resolved to.
    assert str(service.port) not in message, body
    if host in NAMES:
        assert "resolves to a loopback address" in message and "127.0.0.1" not in message, body


@pytest.mark.parametrize("host", ["169.254.169.254", "s3.metadata.test", "10.1.2.3", "s3.private.test",
                                  "[fe80::1]", "100.64.0.1"])
async def test_the_test_route_does_not_reach_link_local_or_private_addresses(
        client: Any, services: Any, alice: dict[str, str], s3_server: Any, host: str) -> None:
    iid = await _integration_to(client, services, alice, s3_server, f"http://{host}/")
    with trio.fail_after(5):  # refused before any connection: no connect timeout to wait for
        body = await error_of(await client.post(f"/api/integrations/{iid}/test", headers=alice), 400)
    assert body["details"] == {"errorCode": "INTEGRATION_ACCESS_DENIED", "retryable": False}, body
    assert "integrations.allow_private_networks is off" in body["message"], body


@pytest.mark.parametrize("host", ["127.0.0.1", "0x7f000001", "[::ffff:127.0.0.1]", "localhost", "s3.loopback.test"])
async def test_a_job_source_on_loopback_fails_without_storing_a_file(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any, host: str) -> None:
    async with internal_service() as service:
        iid = await _integration_to(client, services, alice, s3_server, f"http://{host}:{service.port}")
        r = await post_source_job(client, alice, schema_id, {"integrationId": iid, "key": "latest/meta-data"})
        job = await r.get_json()
        assert r.status_code == 201 and job["status"] == "PENDING", job
        async with running_workers(services):
            failed = await wait_for_status(client, alice, job["id"], *DONE)
        assert service.requests == []
    assert (failed["status"], failed["errorCode"]) == ("FAILED", "INTEGRATION_ACCESS_DENIED"), failed
    assert str(service.port) not in failed["errorMessage"], failed
    assert failed["fileSize"] is None and failed["sha256"] is None
    r = await client.get(f"/api/jobs/{job['id']}/file", headers=alice)
    assert r.status_code == 404 and SECRET not in await r.get_data()
    assert blob_files(services) == []


async def test_a_job_source_on_the_metadata_address_fails(client: Any, services: Any, alice: dict[str, str],
                                                          schema_id: str, s3_server: Any) -> None:
    iid = await _integration_to(client, services, alice, s3_server, "http://s3.metadata.test")
    r = await post_source_job(client, alice, schema_id, {"integrationId": iid, "key": "latest/meta-data"})
    job = await r.get_json()
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE, deadline_s=10)
    assert (failed["status"], failed["errorCode"]) == ("FAILED", "INTEGRATION_ACCESS_DENIED"), failed
    assert "link-local" in failed["errorMessage"] and "169.254.169.254" not in failed["errorMessage"]
    assert blob_files(services) == []


async def test_a_batch_run_does_not_list_a_loopback_endpoint(client: Any, services: Any, alice: dict[str, str],
                                                             schema_id: str, s3_server: Any) -> None:
    async with internal_service() as service:
        iid = await _integration_to(client, services, alice, s3_server, f"http://s3.loopback.test:{service.port}")
        r = await post_source_run(client, alice, schema_id, [{"integrationId": iid, "prefix": "inbox/"}])
        body = await error_of(r, 400)
        assert service.requests == []
    assert body["details"] == {"errorCode": "INTEGRATION_ACCESS_DENIED"}, body


async def test_allowing_private_networks_reaches_the_lan(client: Any, services: Any, alice: dict[str, str],
                                                         s3_server: Any) -> None:
    """The same loopback moto server is reachable, by a name too, once the operator allows it."""
    bucket = s3_server.new_bucket({})
    with_private_networks(services, True)
    created = await create_s3(client, alice, s3_server, bucket,
                              endpoint_url=f"http://minio:{s3_server.port}")
    r = await client.post(f"/api/integrations/{created['id']}/test", headers=alice)
    assert r.status_code == 200 and await r.get_json() == {"ok": True}, await r.get_json()
    with_private_networks(services, False)  # as after a SIGHUP: the next use is refused
    body = await error_of(await client.post(f"/api/integrations/{created['id']}/test", headers=alice), 400)
    assert body["details"]["errorCode"] == "INTEGRATION_ACCESS_DENIED"


# --- errors that do not tell what listens where ------------------------------------------------


@contextlib.asynccontextmanager
async def _tcp_server(handler: Any) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        try:
            yield listeners[0].socket.getsockname()[1]
        finally:
            nursery.cancel_scope.cancel()


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def _not_http(stream: trio.SocketStream) -> None:
    async with stream:
        await stream.send_all(b"SSH-2.0-OpenSSH_9.6\r\n")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def _short_timeouts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import daemon.storage.s3

    monkeypatch.setattr(daemon.storage.s3, "_READ_TIMEOUT_S", 1)
    monkeypatch.setattr(daemon.storage.s3, "_CONNECT_TIMEOUT_S", 1)
    yield


async def test_closed_open_silent_and_foreign_ports_answer_alike(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, s3_server: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def html_404(request: Received) -> Reply:
        return 404, {"Content-Type": "text/html"}, b"<html><body>Not Found</body></html>"

    async def html_200(request: Received) -> Reply:
        return 200, {"Content-Type": "text/html"}, b"<html><body>Admin console</body></html>"

    async def html_403(request: Received) -> Reply:
        return 403, {"Content-Type": "text/html"}, b"<html><body>Forbidden</body></html>"

    with_private_networks(services, True)  # the ports are on loopback; the point is what the errors say
    answers: dict[str, Any] = {}
    with _short_timeouts(monkeypatch):
        async with open_receiver(html_404) as web404, open_receiver(html_200) as web200, \
                open_receiver(html_403) as web403, _tcp_server(_silent) as silent, \
                _tcp_server(_not_http) as ssh:
            ports = {"closed": _closed_port(), "http 404": web404.port, "http 200": web200.port,
                     "http 403": web403.port, "silent": silent, "ssh": ssh}
            for case, port in ports.items():
                created = await create_s3(client, alice, s3_server, "some-bucket",
                                          endpoint_url=f"http://127.0.0.1:{port}")
                r = await client.post(f"/api/integrations/{created['id']}/test", headers=alice)
                answers[case] = {k: v for k, v in (await error_of(r, 400)).items()}
    first = answers["closed"]
    assert first["details"] == {"errorCode": "INTERNAL_ERROR", "retryable": True}, answers
    assert NO_ANSWER in first["message"], first
    for case, body in answers.items():
        assert body == first, (case, body, first)
