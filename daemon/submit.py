"""`docex submit FILE... --schema ID [--wait] [--format json|csv]`: send documents to a
running docex over its API and print what became of them, for scripts and cron jobs.

Talks to `DOCEX_URL` (default http://127.0.0.1:8080) with the API key in
`DOCEX_API_KEY`. Each file is one job (`POST /api/jobs`), a few uploads at a time, each
with an Idempotency-Key made of the file's SHA-256 and the schema: running the same
command again within 24 h (after a crash, a lost answer) returns the same jobs instead of
making new ones. With `--wait` it polls each job until it ends and prints its result.

Output (stdout), in the order of the arguments: `json` prints one JSON object per file,
`{"file", "jobId", "status", "result", "errorCode", "errorMessage"}`; `csv` prints a
header and one row per job as the export routes do (a column per schema value; line
items as rows), with `file` first. Progress goes to stderr as a bar when stderr is a
terminal (or with `--progress`). Exit: 0 every file accepted (and, with --wait,
COMPLETED), 1 otherwise, 2 for a usage problem (no key, a missing file, an unknown schema).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import trio

from daemon.jobs import export

DEFAULT_URL = "http://127.0.0.1:8080"
UPLOADS_AT_ONCE = 4
POLL_FIRST_S = 0.5
POLL_MAX_S = 3.0
# All the jobs waited for together are asked about at most this often a second (each job's
# delay grows with their number): 100 jobs every 3 s went past the daemon's 1,200 requests a
# minute per API key, and every one of them "stopped waiting: 429".
POLLS_PER_S = 10.0
# A 429's Retry-After is obeyed up to this.
MAX_RETRY_AFTER_S = 60.0
ENDED = {"COMPLETED", "FAILED", "CANCELLED"}
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """What the person must change before the command can run."""


@dataclass
class Submission:
    path: Path
    job: dict[str, Any] | None = None
    refused: str | None = None  # why the upload was refused


@dataclass
class Progress:
    """A one-line bar on stderr: files uploaded and, with --wait, jobs ended."""

    total: int
    out: TextIO | None
    uploaded: int = 0
    ended: int = 0
    waiting: bool = False
    width: int = field(default=30)

    def draw(self) -> None:
        if self.out is None:
            return
        done = self.ended if self.waiting else self.uploaded
        filled = round(self.width * done / self.total) if self.total else self.width
        verb = "ended" if self.waiting else "uploaded"
        self.out.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} {verb}")
        if done == self.total:
            self.out.write("\n")
        self.out.flush()


async def submit(files: list[str], schema_id: str, *, url: str, api_key: str | None, wait: bool, fmt: str,
                 out: TextIO, progress_to: TextIO | None) -> int:
    """Upload `files` as jobs of `schema_id`, optionally wait, print them; the exit status.

    Raises:
        UsageError: no API key, a file that cannot be read, or a schema the key cannot see.
    """
    if not api_key:
        raise UsageError("set DOCEX_API_KEY to an API key (POST /api/auth/api-keys, or the console's API keys)")
    if not (api_key.isascii() and api_key.isprintable()):  # an HTTP header cannot carry it (a traceback)
        raise UsageError("DOCEX_API_KEY is not an API key (printable ASCII)")
    paths = [Path(name) for name in files]
    for path in paths:
        if not path.is_file():
            raise UsageError(f"{path}: " + ("not a regular file" if path.exists() else "no such file"))
    if not url.lower().startswith(("http://", "https://")):  # "localhost:8080" read as a scheme "localhost"
        raise UsageError(f"DOCEX_URL {url!r} must start with http:// or https://")
    headers = {"Authorization": f"Bearer {api_key}", "User-Agent": "docex-submit"}
    try:
        client = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=120)
    except httpx.InvalidURL as exc:  # not an HTTPError: "http://[::1" was a traceback
        raise UsageError(f"DOCEX_URL {url!r} is not a URL: {exc}") from exc
    async with client:
        schema = await _schema(client, schema_id)
        submissions = [Submission(path) for path in paths]
        progress = Progress(len(paths), progress_to)
        limiter = trio.CapacityLimiter(UPLOADS_AT_ONCE)
        async with trio.open_nursery() as nursery:
            for submission in submissions:
                nursery.start_soon(_upload, client, submission, schema_id, limiter, progress)
        if wait:
            progress.waiting = True
            progress.ended = sum(1 for s in submissions if s.job is None or s.job["status"] in ENDED)
            progress.draw()
            async with trio.open_nursery() as nursery:
                for submission in submissions:
                    if submission.job is not None and submission.job["status"] not in ENDED:
                        nursery.start_soon(_wait, client, submission, progress,
                                           max(POLL_MAX_S, len(submissions) / POLLS_PER_S))
    _print(submissions, schema, fmt, out)
    accepted = all(s.job is not None for s in submissions)
    return EXIT_OK if accepted and (not wait or all(s.job and s.job["status"] == "COMPLETED"
                                                    for s in submissions)) else EXIT_FAILED


async def _schema(client: httpx.AsyncClient, schema_id: str) -> dict[str, Any]:
    try:
        # Quoted: an id with "/", "?" or a line break named another path or was a traceback.
        response = await client.get(f"/api/schemas/{urllib.parse.quote(schema_id, safe='')}")
    except httpx.HTTPError as exc:
        raise UsageError(f"cannot reach docex at {client.base_url}: {exc}") from exc
    if response.status_code in (401, 403):
        raise UsageError(f"the API key was refused ({response.status_code}): {_message(response)}")
    if response.status_code == 404 and _message(response) == "Schema not found":
        raise UsageError(f"schema {schema_id} not found (GET /api/schemas lists yours)")
    try:
        schema = response.json() if response.status_code == 200 else None
    except ValueError:
        schema = None
    if not isinstance(schema, dict):  # a 5xx, or DOCEX_URL is not docex: was a traceback
        hint = " (DOCEX_URL is docex's root URL, as http://127.0.0.1:8080, without /api)" \
            if response.status_code == 404 else ""
        raise UsageError(f"{client.base_url} did not answer as docex ({response.status_code}): "
                         f"{_message(response)}{hint}")
    return schema


async def _upload(client: httpx.AsyncClient, submission: Submission, schema_id: str,
                  limiter: trio.CapacityLimiter, progress: Progress) -> None:
    async with limiter:
        await _send(client, submission, schema_id)
    if submission.refused:
        _say_refused(submission, progress)
    progress.uploaded += 1
    progress.draw()


async def _send(client: httpx.AsyncClient, submission: Submission, schema_id: str) -> None:
    """Upload one file: its job into `submission.job`, or why not into `submission.refused`."""
    try:
        data = await trio.Path(submission.path).read_bytes()
    except OSError as exc:  # unreadable, or gone since it was checked: that file's problem only (was a traceback)
        submission.refused = f"cannot read it: {exc.strerror or exc}"
        return
    # The file's name is in it too: the daemon counts it as part of the request, so two files
    # of the same bytes under two names were one key and the second a 409.
    name = shown(submission.path.name)
    key = f"submit-{hashlib.sha256(data).hexdigest()}-{schema_id}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    for _ in range(5):  # the same key: a repeat makes no second job
        try:
            response = await client.post(
                "/api/jobs", headers={"Idempotency-Key": key},
                data={"type": "EXTRACTION", "schemaId": schema_id},
                files={"file": (name, data)})
        except httpx.HTTPError as exc:
            submission.refused = f"upload failed: {exc}"
            return
        if response.status_code != 429:
            break
        await trio.sleep(_retry_after(response))
    if response.status_code not in (200, 201):
        submission.refused = f"{response.status_code}: {_message(response)}"
    elif (job := _job_of(response)) is None:
        submission.refused = f"{client.base_url} did not answer as docex ({response.status_code}): {_message(response)}"
    else:
        submission.job = job


async def _wait(client: httpx.AsyncClient, submission: Submission, progress: Progress, max_delay: float) -> None:
    assert submission.job is not None
    delay = POLL_FIRST_S
    while submission.job["status"] not in ENDED:
        await trio.sleep(delay)
        delay = min(max_delay, delay * 1.5)
        try:
            response = await client.get(f"/api/jobs/{urllib.parse.quote(submission.job['id'], safe='')}")
        except httpx.HTTPError:
            continue  # the daemon restarting: the job is kept, ask again
        if response.status_code >= 500:
            continue  # likewise
        if response.status_code == 429:  # asked too often (this key's other programs too): wait as told
            await trio.sleep(_retry_after(response))
            continue
        job = _job_of(response) if response.status_code == 200 else None
        if job is None:  # deleted (404), the key revoked (401), not docex: it polled for ever
            what = "the job was deleted" if response.status_code == 404 else f"{response.status_code}: " \
                f"{_message(response)}"
            submission.refused = f"stopped waiting: {what}"
            _say_refused(submission, progress)
            break
        submission.job = job
    progress.ended += 1
    progress.draw()


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(MAX_RETRY_AFTER_S, max(1.0, float(response.headers.get("Retry-After", "1"))))
    except ValueError:  # an HTTP date, or nonsense: a second
        return 1.0


def _say_refused(submission: Submission, progress: Progress) -> None:
    """Why a file came to nothing, on stderr (on a line of its own below a progress bar)."""
    print(f"{chr(10) if progress.out else ''}{shown(submission.path)}: {submission.refused}", file=sys.stderr)


def _job_of(response: httpx.Response) -> dict[str, Any] | None:
    """The job a docex answer holds, or None when it holds none (a proxy's page, cut-off JSON)."""
    try:
        job = response.json()
    except ValueError:
        return None
    if isinstance(job, dict) and isinstance(job.get("id"), str) and isinstance(job.get("status"), str):
        return job
    return None


def shown(path: Path | str) -> str:
    """A path as text any output can carry: a name that is not UTF-8 (its bytes kept by
    Python as lone surrogates) could be neither sent as a file name nor printed: a traceback."""
    return os.fsencode(path).decode("utf-8", "replace")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    message = body.get("message") if isinstance(body, dict) else None
    if message is None:
        return response.text[:200]
    return "; ".join(map(str, message)) if isinstance(message, list) else str(message)


def _print(submissions: list[Submission], schema: dict[str, Any], fmt: str, out: TextIO) -> None:
    if fmt == "csv":
        shape = export.layout(schema.get("definition") or {})
        writer = export.csv_writer(out)
        # Property names are a user's text like any value: a name starting with "=" is neutralised too.
        writer.writerow([export.neutralised(v) for v in export.distinct(["file", *export.rows_header(shape)])])
        for submission in submissions:
            if submission.job is not None:
                for row in export.rows(submission.job, shape):
                    writer.writerow([export.neutralised(v) for v in [shown(submission.path), *row]])
        return
    for submission in submissions:
        job = submission.job or {}
        line = {"file": shown(submission.path), "jobId": job.get("id"), "status": job.get("status", "REFUSED"),
                "result": job.get("result"), "errorCode": job.get("errorCode"),
                "errorMessage": job.get("errorMessage") or submission.refused}
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
