"""Google Drive through its REST API v3, on an injected `httpx.AsyncClient`.

    OAuthClient     the token endpoint: exchange a code, refresh a grant
    TokenKeeper     one grant in use: refreshed `REFRESH_MARGIN_S` before it expires
                    (and once more if Drive still answers 401), saved through a callback
    DriveSource     a `RemoteSource`: files by id or by name in a folder path, folder
                    listings, Google Docs/Sheets/Slides/Drawings exported

The endpoints come from the [google] configuration (`auth_url`, `token_url`,
`api_base_url`), Google's own by default, so tests point them at a loopback fake.

Errors are translated here (`drive_error`, `oauth.token_error`), most specific first:
401 or a refused grant → INTEGRATION_AUTH_EXPIRED; 403 for a missing scope or an
unshared file → INTEGRATION_PERMISSION_DENIED; 403 rate limits, 429 and 5xx →
transient (Google answers rate limits with 403 too, told apart by their `reason`);
404 → REMOTE_FILE_NOT_FOUND.
"""

from __future__ import annotations

import builtins
import json
import logging
import posixpath
import re
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from daemon.clock import utcnow
from daemon.config import GoogleConfig
from daemon.errors import JobError, PermanentJobError, TransientJobError
from daemon.integrations.base import FileRef, PageTokens, RemoteEntry, RemoteFile, unreachable
from daemon.integrations.oauth import Tokens, missing_scopes, needs_refresh, token_error, tokens_from_response
from daemon.jobs import filetypes
from daemon.jobs.models import ErrorCode

log = logging.getLogger(__name__)

# Read-only access to the user's files (https://developers.google.com/drive/api/guides/api-specific-auth).
DRIVE_SCOPE = "https://www.googleapis.com/auth/drive.readonly"
SCOPES = [DRIVE_SCOPE]
FOLDER = "application/vnd.google-apps.folder"
# Google's own formats have no bytes of their own: they are exported (files.export).
EXPORTS = {
    "application/vnd.google-apps.document": (filetypes.PDF, ".pdf"),
    "application/vnd.google-apps.spreadsheet": (filetypes.XLSX, ".xlsx"),
    "application/vnd.google-apps.presentation": (filetypes.PDF, ".pdf"),
    "application/vnd.google-apps.drawing": (filetypes.PDF, ".pdf"),
}
CHUNK_BYTES = 256 * 1024
# The largest JSON answer read: a page of 1000 files with `_FILE_FIELDS` is about 200 KB. An
# answer read whole without a bound (38 MB in the test) held the memory and, parsed and walked
# on the event loop, stalled it for 11 s.
MAX_JSON_BYTES = 8 * 1024 * 1024
# Smaller answers parse in well under a millisecond per 10 KB: not worth a thread.
_PARSE_ON_LOOP_BYTES = 256 * 1024
# `headRevisionId` changes with a file's content only; `version` with every change (a rename,
# a share), and is all a Google format has.
_FILE_FIELDS = "id,name,mimeType,size,trashed,version,headRevisionId"
_RATE_LIMITED = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", "quotaExceeded",
                           "dailyLimitExceeded", "backendError", "sharingRateLimitExceeded"})
_NO_SCOPE = frozenset({"insufficientPermissions", "ACCESS_TOKEN_SCOPE_INSUFFICIENT", "insufficientScopes"})

SaveTokens = Callable[[Tokens], Awaitable[None]]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None


# JSON may spell half of a surrogate pair alone ("\\ud800"); json.loads makes it a lone
# surrogate, which is not text: no database driver, log or JSON answer can encode it.
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_body(raw: bytes) -> dict[str, Any]:
    """A Drive answer's JSON object ({} if it is none), its strings valid text: a lone
    surrogate in a file's name stored as a job's fileName or in an errorMessage crashed the
    worker that fetched it (UnicodeEncodeError) and left the job for dead."""
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    if _SURROGATE_ESCAPE.search(raw):
        value = _text_only(value)
    return value if isinstance(value, dict) else {}


def _text_only(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too) made U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_text_only(item) for item in value]
    if isinstance(value, dict):
        return {_text_only(k): _text_only(v) for k, v in value.items()}
    return value


def error_reasons(body: Mapping[str, Any]) -> set[str]:
    """The `reason`s of a Google API error body (v3 `errors[]` and AIP-193 `details[]`)."""
    error = body.get("error")
    if not isinstance(error, dict):
        return set()
    reasons = set()
    for item in [*(error.get("errors") or []), *(error.get("details") or [])]:
        if isinstance(item, dict) and isinstance(item.get("reason"), str):
            reasons.add(item["reason"])
    return reasons


def drive_error(status: int, body: Mapping[str, Any], what: str, retry_after_s: float | None = None) -> JobError:
    """The SPEC §6 error for a Drive API error answer about `what` (a file id or path)."""
    reasons = error_reasons(body)
    if status == 401:
        return PermanentJobError(ErrorCode.INTEGRATION_AUTH_EXPIRED,
                                 "Google refused the authorization: reconnect the integration")
    if status == 429 or status >= 500 or (status == 403 and reasons & _RATE_LIMITED):
        return TransientJobError(ErrorCode.INTERNAL_ERROR, f"Google Drive is busy or unavailable ({status})",
                                 retry_after_s=retry_after_s)
    if status == 403 and "exportSizeLimitExceeded" in reasons:
        return PermanentJobError(ErrorCode.UNSUPPORTED_FILE, f"Google Drive {what} is too large to export")
    if status == 403 and reasons & _NO_SCOPE:
        return PermanentJobError(ErrorCode.INTEGRATION_PERMISSION_DENIED,
                                 "The Google authorization lacks read access to Drive: reconnect and allow it")
    if status == 403:
        detail = f" ({', '.join(sorted(reasons))})" if reasons else ""
        return PermanentJobError(ErrorCode.INTEGRATION_PERMISSION_DENIED,
                                 f"Google Drive denied access to {what}{detail}")
    if status == 404:
        return PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND, f"Google Drive has no {what}")
    return PermanentJobError(ErrorCode.INTERNAL_ERROR, f"Google Drive answered {status} for {what}")


class OAuthClient:
    """The token endpoint of the configured OAuth client."""

    def __init__(self, http: httpx.AsyncClient, config: GoogleConfig) -> None:
        self.http = http
        self.config = config

    async def exchange_code(self, code: str, code_verifier: str, now: Any = None) -> Tokens:
        """The grant for an authorization code (RFC 6749 §4.1.3) with the PKCE verifier
        of the authorization it came from (RFC 7636 §4.5).

        Raises:
            JobError: refused (`oauth.token_error`) or unreachable (transient).
        """
        body = await self._post({"grant_type": "authorization_code", "code": code,
                                 "redirect_uri": self.config.redirect_url, "code_verifier": code_verifier})
        return tokens_from_response(body, now or utcnow())

    async def refresh(self, tokens: Tokens) -> Tokens:
        """A fresh access token for `tokens`' refresh token (RFC 6749 §6).

        Raises:
            PermanentJobError: INTEGRATION_AUTH_EXPIRED without a refresh token or for invalid_grant.
        """
        if not tokens.refresh_token:
            raise PermanentJobError(ErrorCode.INTEGRATION_AUTH_EXPIRED,
                                    "The Google authorization has no refresh token: reconnect the integration")
        body = await self._post({"grant_type": "refresh_token", "refresh_token": tokens.refresh_token})
        return tokens_from_response(body, utcnow(), previous=tokens)

    async def revoke(self, token: str) -> bool:
        """Revoke the grant `token` belongs to (Google's revocation endpoint, RFC 7009):
        True when Google no longer honours it (revoked now, or already invalid).

        Raises:
            JobError: unreachable (transient) or refused otherwise (`oauth.token_error`).
        """
        try:
            response = await self.http.post(self.config.revoke_url, data={"token": token})
        except httpx.HTTPError as exc:
            raise unreachable("the Google revocation endpoint", exc) from exc
        if response.status_code == 200:
            return True
        body = _json_body(response.content)
        if response.status_code == 400 and body.get("error") in ("invalid_token", "invalid_grant"):
            return True
        raise token_error(response.status_code, body, _retry_after(response))

    async def _post(self, form: dict[str, str]) -> dict[str, Any]:
        secret = self.config.client_secret.reveal() if self.config.client_secret else ""
        data = {**form, "client_id": self.config.client_id, "client_secret": secret}
        try:
            response = await self.http.post(self.config.token_url, data=data,
                                            headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise unreachable("the Google token endpoint", exc) from exc
        body = _json_body(response.content)
        if response.status_code != 200:
            raise token_error(response.status_code, body, _retry_after(response))
        return body


class TokenKeeper:
    """One grant in use by one `DriveSource`: refreshed before expiry, saved when it changes.

    Concurrent callers share one refresh (a lock); `save` runs after each refresh, so the
    next worker starts from the new token.
    """

    def __init__(self, oauth: OAuthClient, tokens: Tokens, save: SaveTokens) -> None:
        self.oauth = oauth
        self.tokens = tokens
        self._save = save
        self._lock = trio.Lock()

    async def access_token(self, *, force_refresh: bool = False) -> str:
        async with self._lock:
            if force_refresh or needs_refresh(self.tokens, utcnow()):
                stale = self.tokens.access_token
                self.tokens = await self.oauth.refresh(self.tokens)
                if self.tokens.access_token != stale:
                    await self._save(self.tokens)
                log.info("google token refreshed", extra={"action": "integration.token_refreshed"})
            return self.tokens.access_token


class DriveSource:
    """A Google Drive integration as a `RemoteSource`."""

    def __init__(self, http: httpx.AsyncClient, api_base_url: str, keeper: TokenKeeper) -> None:
        self.http = http
        self.api = api_base_url.rstrip("/")
        self.keeper = keeper

    # --- the RemoteSource protocol --------------------------------------------------------

    async def test(self) -> None:
        """The grant works and includes read access to Drive."""
        await self.account_email()
        if self.keeper.tokens.scope and missing_scopes(self.keeper.tokens.scope, SCOPES):
            raise PermanentJobError(ErrorCode.INTEGRATION_PERMISSION_DENIED,
                                    "The Google authorization lacks read access to Drive: reconnect and allow it")

    @asynccontextmanager
    async def open(self, ref: FileRef) -> AsyncIterator[RemoteFile]:
        meta = await self._locate(ref)
        what = f"file {meta['id']}"
        mime = str(meta.get("mimeType", ""))
        name = str(meta.get("name") or meta["id"])
        if mime == FOLDER:
            raise PermanentJobError(ErrorCode.UNSUPPORTED_FILE, f"Google Drive {what} ({name}) is a folder")
        if mime in EXPORTS:
            export_type, suffix = EXPORTS[mime]
            path, params = f"{_file_path(meta['id'])}/export", {"mimeType": export_type}
            name, size = (name if name.lower().endswith(suffix) else name + suffix), None
        elif mime.startswith("application/vnd.google-apps."):
            raise PermanentJobError(ErrorCode.UNSUPPORTED_FILE,
                                    f"Google Drive {what} ({name}) is a {mime.rsplit('.', 1)[-1]}, which has no file")
        else:
            path, params = _file_path(meta["id"]), {"alt": "media", "supportsAllDrives": "true"}
            size = _size(meta)

        async def chunks() -> AsyncGenerator[bytes, None]:
            # The download starts at the first chunk asked for: a file the caller refuses by its
            # size (known from the metadata) is never requested.
            async with self._response(path, params, what) as response:
                try:
                    async for chunk in response.aiter_bytes(CHUNK_BYTES):
                        yield chunk
                except httpx.HTTPError as exc:
                    raise unreachable(f"Google Drive for {what}", exc) from exc

        stream = chunks()
        try:
            yield RemoteFile(name=posixpath.basename(name) or name, size=size, mime_type=mime, chunks=stream)
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def list(self, folder: str, *, limit: int) -> list[RemoteEntry]:
        """The files directly in the folder `folder` (a path of names; sub-folders and
        Google formats without an export are skipped)."""
        return await self.list_in(await self._folder_id(folder), f"folder {folder!r}", limit=limit)

    async def list_in(self, parent: str, what: str, *, limit: int) -> builtins.list[RemoteEntry]:
        """`list` for the folder whose id is `parent` (`what` names it in errors)."""
        query = f"'{_quote(parent)}' in parents and trashed = false and mimeType != '{FOLDER}'"
        found: list[RemoteEntry] = []
        token: str | None = None
        tokens = PageTokens(f"Google Drive {what}")
        while len(found) <= limit:
            params = {"q": query, "fields": f"nextPageToken,files({_FILE_FIELDS})", "pageSize": "1000",
                      "supportsAllDrives": "true", "includeItemsFromAllDrives": "true"}
            if token:
                params["pageToken"] = token
            page = await self._json("/files", params, what)
            for item in _files(page, what):
                mime = str(item.get("mimeType", ""))
                if mime.startswith("application/vnd.google-apps.") and mime not in EXPORTS:
                    continue
                version = str(item["version"]) if item.get("version") else None
                revision = str(item["headRevisionId"]) if item.get("headRevisionId") else None
                found.append(RemoteEntry(FileRef(file_id=str(item["id"])), str(item.get("name", "")), _size(item),
                                         version=revision or version, former_version=version if revision else None))
                if len(found) > limit:
                    break  # enough to tell there are more than `limit`; the rest need not be read
            token = page.get("nextPageToken")
            if not token:
                break
            token = tokens.next(str(token))
        return found[: limit + 1]

    # --- helpers ------------------------------------------------------------------------

    async def account_email(self) -> str | None:
        """The Google account's e-mail address (`about.user`)."""
        about = await self._json("/about", {"fields": "user(emailAddress,displayName)"}, "account")
        user = about.get("user")
        email = user.get("emailAddress") if isinstance(user, dict) else None
        return email if isinstance(email, str) else None

    async def _locate(self, ref: FileRef) -> dict[str, Any]:
        """The metadata of the file `ref` names: by id, or by name in a folder path."""
        if ref.file_id is not None:
            meta = await self._json(_file_path(ref.file_id), {"fields": _FILE_FIELDS, "supportsAllDrives": "true"},
                                    f"file {ref.file_id}")
            if meta.get("trashed"):
                raise PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND, f"Google Drive file {ref.file_id} is in "
                                        "the trash")
            return meta
        if ref.key is None:
            raise PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND,
                                    "A Google Drive source names its file with `fileId`, or `key` in `folderPath`")
        parent = await self._folder_id(ref.folder_path or "")
        match = await self._child(parent, ref.key, folders_only=False, what=ref.describe())
        if match is None:
            raise PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND, f"Google Drive has no file {ref.describe()}")
        return match

    async def _folder_id(self, path: str) -> str:
        """The id of the folder at `path` (names from My Drive's root, ``/`` apart)."""
        folder_id, walked = "root", []
        for name in [part for part in path.split("/") if part]:
            walked.append(name)
            match = await self._child(folder_id, name, folders_only=True, what="/".join(walked))
            if match is None:
                raise PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND,
                                        f"Google Drive has no folder {'/'.join(walked)}")
            folder_id = str(match["id"])
        return folder_id

    async def _child(self, parent: str, name: str, *, folders_only: bool, what: str) -> dict[str, Any] | None:
        """The first item named `name` in `parent` (Drive allows duplicates; the first wins)."""
        query = f"'{_quote(parent)}' in parents and name = '{_quote(name)}' and trashed = false"
        if folders_only:
            query += f" and mimeType = '{FOLDER}'"
        page = await self._json("/files", {"q": query, "fields": f"files({_FILE_FIELDS})", "pageSize": "10",
                                           "supportsAllDrives": "true", "includeItemsFromAllDrives": "true"}, what)
        files = _files(page, what)
        return files[0] if files else None

    async def _json(self, path: str, params: dict[str, str], what: str) -> dict[str, Any]:
        """A JSON answer, read up to MAX_JSON_BYTES and parsed off the event loop when large."""
        raw = bytearray()
        async with self._response(path, params, what) as response:
            try:
                async for chunk in response.aiter_bytes(CHUNK_BYTES):
                    raw += chunk
                    if len(raw) > MAX_JSON_BYTES:
                        raise TransientJobError(ErrorCode.INTERNAL_ERROR, f"Google Drive's answer for {what} is "
                                                f"over {MAX_JSON_BYTES} bytes")
            except httpx.HTTPError as exc:
                raise unreachable(f"Google Drive for {what}", exc) from exc
        if len(raw) <= _PARSE_ON_LOOP_BYTES:
            return _json_body(bytes(raw))
        return await trio.to_thread.run_sync(_json_body, bytes(raw))

    @asynccontextmanager
    async def _response(self, path: str, params: dict[str, str], what: str) -> AsyncIterator[httpx.Response]:
        """A successful streamed answer to GET `path`; a 401 refreshes the token once and retries.

        Raises:
            JobError: `drive_error` of the answer, or transient if Drive cannot be reached.
        """
        for attempt in (1, 2):
            token = await self.keeper.access_token(force_refresh=attempt == 2)
            request = self.http.build_request("GET", self.api + path, params=params,
                                              headers={"Authorization": f"Bearer {token}"})
            try:
                response = await self.http.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise unreachable(f"Google Drive for {what}", exc) from exc
            try:
                if response.status_code == 401 and attempt == 1:
                    continue
                if response.status_code >= 400:
                    try:
                        raw = await response.aread()
                    except httpx.HTTPError:
                        raw = b""
                    raise drive_error(response.status_code, _json_body(raw), what, _retry_after(response))
                yield response
                return
            finally:
                with trio.CancelScope(shield=True):
                    await response.aclose()


def _files(page: dict[str, Any], what: str) -> list[dict[str, Any]]:
    """The files of a `files.list` answer, each with its id as a string.

    Raises:
        TransientJobError: `files` is not a list (an answer of another shape crashed the
            batch run's listing with a 500, or every sweep of the inbox).
    """
    files = page.get("files", [])
    if not isinstance(files, list):
        raise TransientJobError(ErrorCode.INTERNAL_ERROR, f"Google Drive answered no file list for {what}")
    return [item for item in files if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]]


def _file_path(file_id: object) -> str:
    """The API path of a file by its id, the id one path segment whatever it holds: a
    source's `fileId` of "../about" or "x?alt=media" reached other paths of the API."""
    return f"/files/{urllib.parse.quote(str(file_id), safe='')}"


def _size(item: dict[str, Any]) -> int | None:
    """A file's `size` (Drive sends an int64 as a decimal string), None if it is not one:
    str.isdigit() alone also passes "²" and 5000 digits, which int() refuses (a 500)."""
    value = item.get("size")
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 19 else None


def _quote(value: str) -> str:
    """A string literal of Drive's query language (backslash and single quote escaped)."""
    return value.replace("\\", "\\\\").replace("'", "\\'")
