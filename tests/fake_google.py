"""A fake Google on loopback for the Google Drive tests: the OAuth 2.0 token endpoint and
the Drive v3 endpoints docex uses, over real HTTP (trio + h11, `webhook_receiver`).

    async with open_fake_google() as google:
        code, state = google.consent(authorization_url)   # the user consented in the browser
        ... GET /api/integrations/google-drive/callback?code=<code>&state=<state> ...
        google.add_file("Invoices/2024/a.txt", b"...")

What it checks like Google does: the client id and secret, single-use codes bound to
the redirect URI and to their request's PKCE challenge, refresh tokens (revocable),
access tokens (expiring, revocable) and their scope (no drive scope → 403
insufficientPermissions). `fail_next` queues error answers for the next Drive calls
(throttling, 5xx). Every request is recorded.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import re
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from webhook_receiver import Received, Receiver, Reply, open_receiver

DRIVE_SCOPE = "https://www.googleapis.com/auth/drive.readonly"
FOLDER = "application/vnd.google-apps.folder"
CLIENT_ID = "docex-client"
CLIENT_SECRET = "docex-client-secret"
REDIRECT_URL = "https://docex.example.com/api/integrations/google-drive/callback"


@dataclass
class DriveFile:
    id: str
    name: str
    mime_type: str
    parent: str
    content: bytes = b""
    trashed: bool = False
    exports: dict[str, bytes] = field(default_factory=dict)
    version: int = 1  # Drive's own: it grows with every change to the file

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "mimeType": self.mime_type, "trashed": self.trashed,
                               "version": str(self.version)}
        if not self.mime_type.startswith("application/vnd.google-apps."):
            out["size"] = str(len(self.content))
            # Drive's names a revision of the content (not the file's other changes); Google
            # formats have none.
            out["headRevisionId"] = "0B" + hashlib.sha256(self.content).hexdigest()[:24]
        return out


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(body).encode()


def google_error(status: int, reason: str, detail: str | None = None) -> Reply:
    error: dict[str, Any] = {"code": status, "message": reason, "errors": [{"domain": "global", "reason": reason}]}
    if detail:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": detail}]
    return _json(status, {"error": error})


class FakeGoogle:
    def __init__(self) -> None:
        self.receiver: Receiver | None = None
        self.codes: dict[str, str] = {}              # code → scope granted
        self.challenges: dict[str, str] = {}         # code → the PKCE challenge it is bound to
        self.refresh_tokens: dict[str, str] = {}     # refresh token → scope (absent: revoked)
        self.access_tokens: dict[str, tuple[float, str]] = {}  # token → (expires at, scope)
        self.files: dict[str, DriveFile] = {}
        self.email = "alice@gmail.example"
        # Lifetime of the access tokens the next answers carry.
        self.code_token_ttl_s = 3600
        self.refresh_token_ttl_s = 3600
        self.fail_next: list[Reply] = []             # answers for the next Drive requests
        self.token_failures: list[Reply] = []        # answers for the next token requests
        self.revoke_failures: list[Reply] = []       # answers for the next revocation requests
        self.revoked: list[str] = []                 # tokens revoked through the endpoint
        self.grants: list[str] = []                  # grant_type of each token request
        self.drive_tokens: list[str] = []            # the access token of each Drive request
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        assert self.receiver is not None
        return self.receiver.url("")

    @property
    def requests(self) -> list[Received]:
        assert self.receiver is not None
        return self.receiver.requests

    # --- what tests set up -------------------------------------------------------------

    def issue_code(self, scope: str = DRIVE_SCOPE) -> str:
        """A code for the callback, as if the user had consented to `scope`."""
        code = "4/" + secrets.token_urlsafe(16)
        self.codes[code] = scope
        return code

    def consent(self, authorization_url: str, scope: str = DRIVE_SCOPE) -> tuple[str, str]:
        """The user consented on the page `authorization_url` opened: the code and state the
        browser brings back to the callback. The code is bound to the request's PKCE
        challenge: only that request's verifier exchanges it."""
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(authorization_url).query))
        code = self.issue_code(scope)
        if query.get("code_challenge_method") == "S256":
            self.challenges[code] = query["code_challenge"]
        return code, query["state"]

    def revoke_all(self) -> None:
        """The user removed docex's access: every token stops working."""
        self.refresh_tokens.clear()
        self.access_tokens.clear()

    def expire_access_tokens(self) -> None:
        self.access_tokens = {t: (0.0, scope) for t, (_, scope) in self.access_tokens.items()}

    def add_folder(self, path: str) -> str:
        """The folders of `path` (created as needed); returns the last one's id."""
        parent = "root"
        for name in [p for p in path.split("/") if p]:
            found = next((f for f in self.files.values() if f.parent == parent and f.name == name
                          and f.mime_type == FOLDER), None)
            if found is None:
                found = self._add(name, FOLDER, parent)
            parent = found.id
        return parent

    def add_file(self, path: str, content: bytes = b"", mime_type: str = "text/plain", **kw: Any) -> DriveFile:
        folder, _, name = path.rpartition("/")
        return self._add(name, mime_type, self.add_folder(folder), content=content, **kw)

    def _add(self, name: str, mime_type: str, parent: str, **kw: Any) -> DriveFile:
        item = DriveFile(id=f"f{next(self._ids):04d}x{secrets.token_hex(3)}", name=name, mime_type=mime_type,
                         parent=parent, **kw)
        self.files[item.id] = item
        return item

    # --- the HTTP side ---------------------------------------------------------------------

    async def handle(self, request: Received) -> Reply:
        path, _, query = request.path.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        if request.method == "POST" and path == "/token":
            return self._token(dict(urllib.parse.parse_qsl(request.body.decode())))
        if request.method == "POST" and path == "/revoke":
            return self._revoke(dict(urllib.parse.parse_qsl(request.body.decode())))
        if request.method == "GET" and path.startswith("/drive/v3/"):
            return self._drive(request, path.removeprefix("/drive/v3"), params)
        return _json(404, {"error": "not found"})

    def _token(self, form: dict[str, str]) -> Reply:
        self.grants.append(form.get("grant_type", ""))
        if self.token_failures:
            return self.token_failures.pop(0)
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return _json(401, {"error": "invalid_client", "error_description": "The OAuth client was not found."})
        if form.get("grant_type") == "authorization_code":
            scope = self.codes.pop(form.get("code", ""), None)  # single use
            if scope is None or form.get("redirect_uri") != REDIRECT_URL:
                return _json(400, {"error": "invalid_grant", "error_description": "Bad Request"})
            challenge = self.challenges.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            if challenge is not None and base64.urlsafe_b64encode(
                    hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=") != challenge:
                return _json(400, {"error": "invalid_grant", "error_description": "Invalid code verifier."})
            refresh = "1//" + secrets.token_urlsafe(16)
            self.refresh_tokens[refresh] = scope
            return _json(200, {**self._access(scope, self.code_token_ttl_s), "refresh_token": refresh})
        if form.get("grant_type") == "refresh_token":
            scope = self.refresh_tokens.get(form.get("refresh_token", ""))
            if scope is None:
                return _json(400, {"error": "invalid_grant", "error_description": "Token has been expired or revoked."})
            return _json(200, self._access(scope, self.refresh_token_ttl_s))
        return _json(400, {"error": "unsupported_grant_type"})

    def _revoke(self, form: dict[str, str]) -> Reply:
        """Google's revocation endpoint: either token of a grant ends the whole grant."""
        if self.revoke_failures:
            return self.revoke_failures.pop(0)
        token = form.get("token", "")
        if token not in self.refresh_tokens and token not in self.access_tokens:
            return _json(400, {"error": "invalid_token", "error_description": "Token expired or revoked"})
        self.revoked.append(token)
        self.revoke_all()
        return _json(200, {})

    def _access(self, scope: str, ttl_s: int) -> dict[str, Any]:
        token = "ya29." + secrets.token_urlsafe(16)
        self.access_tokens[token] = (time.time() + ttl_s, scope)
        return {"access_token": token, "expires_in": ttl_s, "scope": scope, "token_type": "Bearer"}

    def _drive(self, request: Received, path: str, params: dict[str, str]) -> Reply:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        self.drive_tokens.append(token)
        expires, scope = self.access_tokens.get(token, (0.0, ""))
        if expires <= time.time():
            return google_error(401, "authError")
        if DRIVE_SCOPE not in scope.split():
            return google_error(403, "insufficientPermissions", "ACCESS_TOKEN_SCOPE_INSUFFICIENT")
        if self.fail_next:
            return self.fail_next.pop(0)
        if path == "/about":
            return _json(200, {"user": {"emailAddress": self.email, "displayName": "Alice"}})
        if path == "/files":
            return self._list(params)
        match = re.fullmatch(r"/files/([^/]+)(/export)?", path)
        item = self.files.get(match.group(1)) if match else None
        if match is None or item is None:
            return google_error(404, "notFound")
        if match.group(2):
            exported = item.exports.get(params.get("mimeType", ""))
            if exported is None:
                return google_error(400, "badRequest")
            return 200, {"Content-Type": params["mimeType"]}, exported
        if params.get("alt") == "media":
            if item.mime_type.startswith("application/vnd.google-apps."):
                return google_error(403, "fileNotDownloadable")
            return 200, {"Content-Type": item.mime_type}, item.content
        return _json(200, item.meta())

    def _list(self, params: dict[str, str]) -> Reply:
        q = params.get("q", "")
        parent = re.search(r"'((?:\\.|[^'])*)' in parents", q)
        name = re.search(r"name = '((?:\\.|[^'])*)'", q)
        is_type = re.search(r"mimeType = '([^']*)'", q)
        not_type = re.search(r"mimeType != '([^']*)'", q)

        def unquote(text: str) -> str:
            return re.sub(r"\\(.)", r"\1", text)

        found = [
            f for f in self.files.values()
            if (parent is None or f.parent == unquote(parent.group(1)))
            and (name is None or f.name == unquote(name.group(1)))
            and (is_type is None or f.mime_type == is_type.group(1))
            and (not_type is None or f.mime_type != not_type.group(1))
            and not ("trashed = false" in q and f.trashed)
        ]
        size = int(params.get("pageSize", "100"))
        start = int(params.get("pageToken", "0"))
        page = found[start:start + size]
        body: dict[str, Any] = {"files": [f.meta() for f in page]}
        if start + size < len(found):
            body["nextPageToken"] = str(start + size)
        return _json(200, body)


@contextlib.asynccontextmanager
async def open_fake_google() -> AsyncIterator[FakeGoogle]:
    google = FakeGoogle()
    async with open_receiver(google.handle) as receiver:
        google.receiver = receiver
        yield google
