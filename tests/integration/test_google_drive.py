"""Google Drive (SPEC §10) against a fake Google on loopback (tests/fake_google.py): the
OAuth authorization-code flow with its signed state, token refresh before expiry and on
a 401, expired or revoked grants (needs_reconnection, then reconnect), a missing scope,
missing files and folders, files by id and by path, folder listings into batch runs,
Google Docs and Sheets exported, throttling retried. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import logging
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from fake_google import FakeGoogle, google_error, open_fake_google
from integrations_helpers import connect_drive as connect
from integrations_helpers import drive_callback as _callback
from integrations_helpers import post_source_job, post_source_run, with_google, with_retry_backoff
from jobs_helpers import (
    INVOICE_RESULT,
    INVOICE_TXT,
    bad_request,
    error_of,
    event_types,
    running_workers,
    wait_for_run,
    wait_for_status,
    with_jobs_config,
    xlsx_bytes,
)

from daemon.clock import utcnow
from daemon.integrations.oauth import sign_state, state_key
from daemon.integrations.sealing import open_secrets, seal_secrets
from daemon.storage.tables import integrations

DONE = ("COMPLETED", "FAILED", "CANCELLED")
PDF = "application/pdf"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


@pytest.fixture
async def google(services: Any) -> AsyncIterator[FakeGoogle]:
    async with open_fake_google() as fake:
        with_google(services, fake.url)
        with_retry_backoff(services, 10)
        yield fake


def _state_of(authorization_url: str) -> str:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(authorization_url).query))["state"]


def invoice_pdf() -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    page = canvas.Canvas(out, pagesize=A4)
    page.drawString(72, 760, "Invoice Number: INV-42")
    page.drawString(72, 740, "Total: 12.50")
    page.save()
    return out.getvalue()


async def _job(client: Any, auth: dict[str, str], schema_id: str, source: dict[str, Any]) -> dict[str, Any]:
    r = await post_source_job(client, auth, schema_id, source)
    body = await r.get_json()
    assert r.status_code == 201, body
    assert body["status"] == "PENDING"
    return body  # type: ignore[no-any-return]


# --- the consent flow ------------------------------------------------------------------------


async def test_the_consent_flow_connects_and_stores_the_tokens_sealed(
        client: Any, services: Any, alice: dict[str, str], google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    assert integration["status"] == "connected"
    assert integration["config"] == {"accountEmail": "alice@gmail.example"}
    assert google.grants == ["authorization_code"]
    # The token request carried the operator's client and the configured redirect URI.
    token_request = urllib.parse.parse_qs(google.requests[0].body.decode())
    assert token_request["redirect_uri"] == ["https://docex.example.com/api/integrations/google-drive/callback"]
    assert len(token_request["code_verifier"][0]) >= 43  # PKCE: the fake checked it against the URL's challenge

    # The tokens are in the database only sealed, and in no answer.
    tokens = [*google.access_tokens, *google.refresh_tokens]
    rows = await services.db.read(lambda conn: list(conn.execute(sa.select(integrations))))
    dumped = repr([tuple(row) for row in rows]).encode() + b"".join(bytes(row.secrets_sealed) for row in rows)
    listed = await (await client.get("/api/integrations", headers=alice)).get_json()
    for token in tokens:
        assert token.encode() not in dumped and token not in str(listed) and token not in str(integration)
    r = await client.post(f"/api/integrations/{integration['id']}/test", headers=alice)
    assert r.status_code == 200 and await r.get_json() == {"ok": True}


async def test_the_callback_refuses_what_it_cannot_trust(client: Any, services: Any, alice: dict[str, str],
                                                         google: FakeGoogle) -> None:
    r = await client.post("/api/integrations", json={"provider": "google-drive", "name": "Drive"}, headers=alice)
    created = await r.get_json()
    state = _state_of(created["authorizationUrl"])

    assert (await _callback(client, error="access_denied", state=state)) == (
        400, (await _callback(client, error="access_denied", state=state))[1])
    assert "You declined access." in (await _callback(client, error="access_denied", state=state))[1]
    status, page = await _callback(client, code="x")
    assert status == 400 and "missing its code or state" in page
    status, page = await _callback(client, code=google.issue_code(), state=state[:-2] + "xx")
    assert status == 400 and "not valid (state signature does not match)" in page
    secret = services.config.auth.jwt_access_secret.reveal()
    stale = sign_state(state_key(secret), user_id="u", integration_id=created["id"], nonce="n",
                       now=utcnow() - dt.timedelta(hours=1))
    status, page = await _callback(client, code=google.issue_code(), state=stale)
    assert status == 400 and "state expired" in page
    # A code Google does not accept, then Google failing.
    status, page = await _callback(client, code="4/forged", state=state)
    assert status == 400 and "did not accept" in page
    google.token_failures.append(google_error(503, "backendError"))
    status, page = await _callback(client, code=google.issue_code(), state=state)
    assert status == 502
    assert (await (await client.get(f"/api/integrations/{created['id']}", headers=alice)).get_json())[
        "status"] == "pending_authorization"

    # A code from another authorization request (intercepted, or injected into this
    # browser) is refused: its PKCE challenge is not this request's.
    other = await (await client.post("/api/integrations", json={"provider": "google-drive", "name": "Other"},
                                     headers=alice)).get_json()
    stolen, _ = google.consent(other["authorizationUrl"])
    status, page = await _callback(client, code=stolen, state=state)
    assert status == 400 and "did not accept" in page
    assert google.requests[-1].path == "/token"  # Google, not docex, refused it: the verifier did not match

    # The right one works once; the same link again is refused, and no secret shows in a page.
    code, _ = google.consent(created["authorizationUrl"])
    status, page = await _callback(client, code=code, state=state)
    assert status == 200 and "Google Drive is connected" in page and "alice@gmail.example" in page
    # Whoever opened the link, the page names the docex account that now reads the Drive.
    owner = await (await client.get("/api/auth/me", headers=alice)).get_json()
    assert f"of the docex account {owner['email']} can now read these files" in page
    status, page = await _callback(client, code=google.issue_code(), state=state)
    assert status == 400 and "already used" in page


async def test_the_callback_shows_an_error_code_but_no_text_from_the_link(client: Any, google: FakeGoogle) -> None:
    status, page = await _callback(client, error="server_error")
    assert status == 400 and "Google answered: server_error." in page
    status, page = await _callback(client, error="Your session expired. Sign in again at https://evil.example")
    assert status == 400 and "Google refused the authorization." in page
    assert "evil" not in page and "session expired" not in page
    for token in [*google.access_tokens, *google.refresh_tokens, "docex-client-secret"]:
        assert token not in page


# --- files -----------------------------------------------------------------------------------


async def test_files_by_id_by_path_and_exported(client: Any, services: Any, alice: dict[str, str],
                                                schema_id: str, google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    iid = integration["id"]
    by_id = google.add_file("Inbox/invoice.txt", INVOICE_TXT)
    google.add_file("Invoices/2024/Q1 'final'.txt", INVOICE_TXT)
    doc = google.add_file("Docs/Quarterly", mime_type="application/vnd.google-apps.document",
                          exports={PDF: invoice_pdf()})
    sheet = google.add_file("Docs/Budget", mime_type="application/vnd.google-apps.spreadsheet",
                            exports={XLSX: xlsx_bytes()})

    jobs = [
        await _job(client, alice, schema_id, {"integrationId": iid, "fileId": by_id.id}),
        await _job(client, alice, schema_id, {"integrationId": iid, "folderPath": "/Invoices/2024/",
                                              "key": "Q1 'final'.txt"}),
        await _job(client, alice, schema_id, {"integrationId": iid, "fileId": doc.id}),
        await _job(client, alice, schema_id, {"integrationId": iid, "fileId": sheet.id}),
    ]
    async with running_workers(services, workers=2):
        done = [await wait_for_status(client, alice, job["id"], *DONE) for job in jobs]
    text, path, pdf, xlsx = done
    assert (text["status"], text["fileName"], text["mimeType"], text["result"]) == (
        "COMPLETED", "invoice.txt", "text/plain", INVOICE_RESULT), text
    assert (path["status"], path["fileName"], path["result"]) == ("COMPLETED", "Q1 'final'.txt", INVOICE_RESULT)
    assert (pdf["status"], pdf["fileName"], pdf["mimeType"]) == ("COMPLETED", "Quarterly.pdf", PDF), pdf
    assert pdf["result"] == INVOICE_RESULT
    assert (xlsx["fileName"], xlsx["mimeType"]) == ("Budget.xlsx", XLSX), xlsx
    # Fetched and handed to the extraction. (Whether the XLSX parser then reads it is the parser's
    # business: openpyxl refuses a path without an .xlsx suffix, uploads included.)
    assert await event_types(services, job_id=xlsx["id"]) in (
        ["job.queued", "job.started", "job.completed"], ["job.queued", "job.started", "job.failed"])
    for job in (text, path, pdf):
        assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.started", "job.completed"]
    r = await client.get(f"/api/jobs/{text['id']}/file", headers=alice)
    assert await r.get_data() == INVOICE_TXT


@pytest.mark.parametrize("case", ["unknown id", "trashed", "no folder", "no file in folder", "a folder",
                                  "a form"])
async def test_missing_files_and_things_that_are_not_files(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle, case: str) -> None:
    integration = await connect(client, alice, google)
    source: dict[str, Any] = {"integrationId": integration["id"]}
    code, words = "REMOTE_FILE_NOT_FOUND", ""
    if case == "unknown id":
        source["fileId"], words = "nope", "Google Drive has no file nope"
    elif case == "trashed":
        source["fileId"] = google.add_file("old.txt", INVOICE_TXT, trashed=True).id
        words = "is in the trash"
    elif case == "no folder":
        google.add_folder("Invoices")
        source |= {"folderPath": "Invoices/2031", "key": "a.txt"}
        words = "Google Drive has no folder Invoices/2031"
    elif case == "no file in folder":
        google.add_file("Invoices/other.txt", INVOICE_TXT)
        source |= {"folderPath": "Invoices", "key": "a.txt"}
        words = "Google Drive has no file Invoices/a.txt"
    elif case == "a folder":
        source["fileId"] = google.add_folder("Invoices")
        code, words = "UNSUPPORTED_FILE", "is a folder"
    elif case == "a form":
        source["fileId"] = google.add_file("Survey", mime_type="application/vnd.google-apps.form").id
        code, words = "UNSUPPORTED_FILE", "is a form, which has no file"
    job = await _job(client, alice, schema_id, source)
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE)
    assert (failed["status"], failed["errorCode"], failed["attempts"]) == ("FAILED", code, 1), failed
    assert words in failed["errorMessage"], failed
    assert await event_types(services, job_id=job["id"]) == ["job.queued", "job.failed"]


async def test_a_folder_path_lists_into_a_run(client: Any, services: Any, alice: dict[str, str],
                                              schema_id: str, google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    for i in range(3):
        google.add_file(f"Invoices/2024/inv-{i}.txt", f"Invoice Number: INV-{i}\nTotal: {i}.50\n".encode())
    google.add_file("Invoices/2024/Sub/deeper.txt", INVOICE_TXT)  # a sub-folder's files are not listed
    google.add_file("Invoices/2024/Survey", mime_type="application/vnd.google-apps.form")  # nothing to export
    google.add_file("Invoices/2024/Notes", mime_type="application/vnd.google-apps.document",
                    exports={PDF: invoice_pdf()})
    r = await post_source_run(client, alice, schema_id, [{"integrationId": integration["id"],
                                                          "folderPath": "Invoices/2024"}])
    run = await r.get_json()
    assert r.status_code == 201, run
    assert sorted(j["fileName"] for j in run["jobs"]) == ["Notes", "inv-0.txt", "inv-1.txt", "inv-2.txt"]
    async with running_workers(services, workers=2):
        finished = await wait_for_run(client, alice, run["id"], "COMPLETED", "FAILED")
    assert finished["status"] == "COMPLETED" and finished["counts"]["completed"] == 4, finished

    messages = await bad_request(await post_source_run(client, alice, schema_id, [
        {"integrationId": integration["id"], "folderPath": "Invoices/2031"}]))
    assert messages == ["sources.0: Google Drive has no folder Invoices/2031"]
    messages = await bad_request(await post_source_run(client, alice, schema_id, [
        {"integrationId": integration["id"], "prefix": "Invoices"}]))
    assert messages == ["sources.0.prefix is for s3: a Google Drive folder is named with folderPath"]


# --- tokens ----------------------------------------------------------------------------------


async def _expire_stored_token_in(services: Any, integration_id: str, seconds: float) -> str:
    """Make the stored access token expire `seconds` from now (as if time had passed);
    returns that token (Google itself still accepts it)."""
    def load(conn: sa.Connection) -> Any:
        return conn.execute(sa.select(integrations).where(integrations.c.id == integration_id)).one()

    row = await services.db.read(load)
    stored = open_secrets(services.config, integration_id, row.secrets_sealed)
    stored["tokens"]["expiresAt"] = (utcnow() + dt.timedelta(seconds=seconds)).timestamp()
    sealed = seal_secrets(services.config, integration_id, stored)
    await services.db.run(lambda conn: conn.execute(
        integrations.update().where(integrations.c.id == integration_id).values(secrets_sealed=sealed)))
    return str(stored["tokens"]["accessToken"])


async def test_a_token_about_to_expire_is_refreshed_before_use(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    old_token = await _expire_stored_token_in(services, integration["id"], 30)  # within the 60 s margin
    google.drive_tokens.clear()
    item = google.add_file("invoice.txt", INVOICE_TXT)

    async with running_workers(services):
        job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": item.id})
        done = await wait_for_status(client, alice, job["id"], *DONE)
        assert done["status"] == "COMPLETED", done
        assert google.grants == ["authorization_code", "refresh_token"]
        assert old_token not in google.drive_tokens  # never sent again: refreshed first
        # The refreshed token was stored: the next job uses it without refreshing again.
        again = await _job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": item.id})
        assert (await wait_for_status(client, alice, again["id"], *DONE))["status"] == "COMPLETED"
    assert google.grants == ["authorization_code", "refresh_token"]
    assert len(set(google.drive_tokens)) == 1

    # Far from expiry, nothing is refreshed.
    await _expire_stored_token_in(services, integration["id"], 120)
    r = await client.post(f"/api/integrations/{integration['id']}/test", headers=alice)
    assert r.status_code == 200 and google.grants == ["authorization_code", "refresh_token"]


async def test_a_401_refreshes_once_and_retries(client: Any, services: Any, alice: dict[str, str],
                                                schema_id: str, google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    google.expire_access_tokens()  # Google ended it early (the refresh token still works)
    item = google.add_file("invoice.txt", INVOICE_TXT)
    job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": item.id})
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], *DONE)
    assert done["status"] == "COMPLETED" and done["attempts"] == 1, done
    assert google.grants == ["authorization_code", "refresh_token"]


async def test_a_revoked_grant_fails_jobs_and_asks_for_reconnection(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    iid = integration["id"]
    item = google.add_file("invoice.txt", INVOICE_TXT)
    job = await _job(client, alice, schema_id, {"integrationId": iid, "fileId": item.id})
    google.revoke_all()
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE)
    assert (failed["status"], failed["errorCode"], failed["attempts"]) == ("FAILED", "INTEGRATION_AUTH_EXPIRED", 1)
    assert "reconnect" in failed["errorMessage"]
    shown = await (await client.get(f"/api/integrations/{iid}", headers=alice)).get_json()
    assert shown["status"] == "needs_reconnection"
    test = await error_of(await client.post(f"/api/integrations/{iid}/test", headers=alice), 400)
    assert test["details"] == {"errorCode": "INTEGRATION_AUTH_EXPIRED", "retryable": False}
    messages = await bad_request(await post_source_job(client, alice, schema_id, {"integrationId": iid,
                                                                                  "fileId": item.id}))
    assert messages == [f"source.integrationId: integration {iid} is needs_reconnection; reconnect it first"]

    # Reconnecting: a new link; the old state no longer works; the new one does.
    first = await client.post(f"/api/integrations/{iid}/reconnect", headers=alice)
    old_state = _state_of((await first.get_json())["authorizationUrl"])
    r = await client.post(f"/api/integrations/{iid}/reconnect", headers=alice)
    body = await r.get_json()
    assert r.status_code == 200 and body["status"] == "needs_reconnection"
    status, page = await _callback(client, code=google.issue_code(), state=old_state)
    assert status == 400 and "replaced by a newer one" in page
    code, state = google.consent(body["authorizationUrl"])
    status, _ = await _callback(client, code=code, state=state)
    assert status == 200
    assert (await (await client.get(f"/api/integrations/{iid}", headers=alice)).get_json())["status"] == "connected"
    r = await client.post(f"/api/jobs/{job['id']}/restart", headers=alice)
    assert (await r.get_json())["status"] == "PENDING"
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], *DONE)
    assert done["status"] == "COMPLETED", done


async def test_deleting_the_integration_revokes_its_grant_at_google(
        client: Any, services: Any, alice: dict[str, str], google: FakeGoogle,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    integration = await connect(client, alice, google)
    (refresh_token,) = google.refresh_tokens
    r = await client.delete(f"/api/integrations/{integration['id']}", headers=alice)
    assert r.status_code == 204
    # Google was told: the refresh token docex held no longer works anywhere.
    assert google.revoked == [refresh_token]
    assert google.refresh_tokens == {} and google.access_tokens == {}
    assert refresh_token not in caplog.text
    assert any(getattr(rec, "action", None) == "integration.grant_revoked" for rec in caplog.records)


async def test_deleting_an_integration_never_authorized_asks_google_nothing(
        client: Any, alice: dict[str, str], google: FakeGoogle) -> None:
    r = await client.post("/api/integrations", json={"provider": "google-drive", "name": "Drive"}, headers=alice)
    created = await r.get_json()
    assert (await client.delete(f"/api/integrations/{created['id']}", headers=alice)).status_code == 204
    assert google.requests == []


@pytest.mark.parametrize("google_answer", ["unreachable", "503", "already revoked"])
async def test_deleting_works_whatever_google_answers_to_the_revocation(
        client: Any, services: Any, alice: dict[str, str], google: FakeGoogle, google_answer: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    integration = await connect(client, alice, google)
    (refresh_token,) = google.refresh_tokens
    if google_answer == "unreachable":
        services.config = dataclasses.replace(services.config, google=dataclasses.replace(
            services.config.google, revoke_url="http://127.0.0.1:9/revoke"))  # nothing listens on port 9
    elif google_answer == "503":
        google.revoke_failures.append(google_error(503, "backendError"))
    else:
        google.revoke_all()  # the user removed docex at Google first
    r = await client.delete(f"/api/integrations/{integration['id']}", headers=alice)
    assert r.status_code == 204
    await error_of(await client.get(f"/api/integrations/{integration['id']}", headers=alice), 404)
    actions = [getattr(rec, "action", None) for rec in caplog.records]
    if google_answer == "already revoked":
        assert "integration.grant_revoked" in actions
    else:
        assert "integration.grant_not_revoked" in actions and "integration.grant_revoked" not in actions
    assert refresh_token not in caplog.text


async def test_a_grant_without_the_drive_scope_is_permission_denied(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle) -> None:
    r = await client.post("/api/integrations", json={"provider": "google-drive", "name": "Drive"}, headers=alice)
    created = await r.get_json()
    code, state = google.consent(created["authorizationUrl"], "openid email")
    status, page = await _callback(client, code=code, state=state)
    assert status == 200 and "INTEGRATION_PERMISSION_DENIED" in page  # connected, and told what will happen
    test = await error_of(await client.post(f"/api/integrations/{created['id']}/test", headers=alice), 400)
    assert test["details"]["errorCode"] == "INTEGRATION_PERMISSION_DENIED"
    item = google.add_file("invoice.txt", INVOICE_TXT)
    job = await _job(client, alice, schema_id, {"integrationId": created["id"], "fileId": item.id})
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE)
    assert (failed["status"], failed["errorCode"]) == ("FAILED", "INTEGRATION_PERMISSION_DENIED"), failed
    shown = await (await client.get(f"/api/integrations/{created['id']}", headers=alice)).get_json()
    assert shown["status"] == "connected"  # a scope is not an expiry: no reconnection flag


async def test_throttling_and_server_errors_are_retried(client: Any, services: Any, alice: dict[str, str],
                                                        schema_id: str, google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    item = google.add_file("invoice.txt", INVOICE_TXT)
    google.fail_next = [google_error(403, "userRateLimitExceeded"), google_error(503, "backendError")]
    job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": item.id})
    async with running_workers(services):
        done = await wait_for_status(client, alice, job["id"], *DONE)
    assert done["status"] == "COMPLETED" and done["attempts"] == 1, done
    assert google.fail_next == []

    with_jobs_config(services, max_attempts=2)
    google.fail_next = [google_error(500, "backendError")] * 5
    job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": item.id})
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE)
    assert (failed["status"], failed["errorCode"], failed["attempts"]) == ("FAILED", "INTERNAL_ERROR", 2), failed


async def test_a_file_over_the_limit_is_refused_before_download(
        client: Any, services: Any, alice: dict[str, str], schema_id: str, google: FakeGoogle) -> None:
    integration = await connect(client, alice, google)
    item = google.add_file("big.txt", b"Total: 1\n" * 500)
    with_jobs_config(services, max_file_size_bytes=1000)
    job = await _job(client, alice, schema_id, {"integrationId": integration["id"], "fileId": item.id})
    async with running_workers(services):
        failed = await wait_for_status(client, alice, job["id"], *DONE)
    assert failed["errorCode"] == "UNSUPPORTED_FILE"
    assert failed["errorMessage"] == ("File too large: big.txt is 4500 bytes, over the maximum of 1000 bytes "
                                      "(MAX_FILE_SIZE)")
    assert not [r for r in google.requests if "alt=media" in r.path]
