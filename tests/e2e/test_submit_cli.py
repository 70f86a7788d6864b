"""`docex submit` against a real `docex serve`: uploads, waits, prints JSON or CSV, draws its
progress, is safe to run again, and says plainly what is wrong (issue #17)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from e2e_helpers import QUICK_ENV, wait_until_serving

SCHEMA = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "description": "Invoice number"},
        "total": {"type": "number", "description": "Total amount due"},
    },
    "required": ["invoice_number", "total"],
}


def _setup(daemon: Any) -> tuple[str, str]:
    """A user's API key and schema id."""
    pair = httpx.post(daemon.url("/api/auth/register"),
                      json={"name": "Ci", "email": "ci@example.com", "password": "scripted secret"}).json()
    auth = {"Authorization": f"Bearer {pair['accessToken']}"}
    key = httpx.post(daemon.url("/api/auth/api-keys"), headers=auth, json={"name": "cron"}).json()["apiKey"]
    schema = httpx.post(daemon.url("/api/schemas"), headers=auth, json={"name": "inv", "definition": SCHEMA})
    return key, schema.json()["id"]


def _jobs(daemon: Any, key: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = httpx.get(daemon.url("/api/jobs"), headers={"Authorization": f"Bearer {key}"}
                                           ).json()["data"]
    return jobs


def _invoices(folder: Path) -> list[Path]:
    paths = []
    for n, total in ((1, "12.50"), (2, "=7+1")):
        path = folder / f"invoice-{n}.txt"
        path.write_text(f"ACME Ltd\nInvoice number: INV-{n:03d}\nTotal amount due: {total}\n", encoding="utf-8")
        paths.append(path)
    return paths


async def test_submit_waits_and_prints_csv_then_json(start_daemon: Callable[..., Any],
                                                     run_docex: Callable[..., Any], tmp_path: Path) -> None:
    daemon = start_daemon(env=QUICK_ENV)
    wait_until_serving(daemon)
    key, schema_id = _setup(daemon)
    files = [str(p) for p in _invoices(tmp_path)]
    env = {"DOCEX_URL": daemon.url(""), "DOCEX_API_KEY": key}

    done = await run_docex("submit", *files, "--schema", schema_id, "--wait", "--format", "csv", "--progress",
                           env=env)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(r["file"], r["status"], r["invoice_number"]) for r in rows] == [
        (files[0], "COMPLETED", "INV-001"), (files[1], "COMPLETED", "INV-002")]
    assert rows[0]["total"] == "12.5"
    assert "2/2 uploaded" in done.stderr and "2/2 ended" in done.stderr

    # Again: the same jobs (Idempotency-Key from the file and schema), as JSON lines.
    again = await run_docex("submit", *files, "--schema", schema_id, env=env)
    assert again.returncode == 0, again.stderr
    lines = [json.loads(line) for line in again.stdout.splitlines()]
    assert [line["jobId"] for line in lines] == [r["jobId"] for r in rows]
    assert [line["file"] for line in lines] == files
    assert again.stderr == ""  # no terminal, no --progress: no bar
    assert len(_jobs(daemon, key)) == 2


async def test_submit_reports_what_is_wrong(start_daemon: Callable[..., Any], run_docex: Callable[..., Any],
                                            tmp_path: Path) -> None:
    daemon = start_daemon(env=QUICK_ENV)
    wait_until_serving(daemon)
    key, schema_id = _setup(daemon)
    good = str(_invoices(tmp_path)[0])
    binary = tmp_path / "noise.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    env = {"DOCEX_URL": daemon.url(""), "DOCEX_API_KEY": key}

    mixed = await run_docex("submit", good, str(binary), "--schema", schema_id, "--wait", env=env)
    assert mixed.returncode == 1
    first, second = (json.loads(line) for line in mixed.stdout.splitlines())
    assert first["status"] == "COMPLETED" and first["result"]["invoice_number"] == "INV-001"
    assert second["status"] == "REFUSED" and "Unsupported file type" in second["errorMessage"]
    assert "noise.bin: 400" in mixed.stderr

    for args, extra_env, says in [
        ((good, "--schema", schema_id), {"DOCEX_API_KEY": ""}, "set DOCEX_API_KEY"),
        ((good, "--schema", "01aaaaaaaaaaaaaaaaaaaaaaaa"), {}, "not found"),
        ((str(tmp_path / "absent.pdf"), "--schema", schema_id), {}, "no such file"),
        ((str(tmp_path), "--schema", schema_id), {}, "not a regular file"),
        ((good, "--schema", schema_id), {"DOCEX_API_KEY": "dx_live_wrong"}, "refused (401)"),
        # The API's own address given for the daemon's: it said "schema ... not found".
        ((good, "--schema", schema_id), {"DOCEX_URL": daemon.url("/api")}, "DOCEX_URL is docex's root URL"),
        ((good, "--schema", schema_id), {"DOCEX_URL": f"localhost:{daemon.port}"}, "must start with http://"),
    ]:
        refused = await run_docex("submit", *args, env={**env, **extra_env})
        assert refused.returncode == 2, (args, refused.stderr)
        assert says in refused.stderr and refused.stdout == ""


async def test_submit_waits_out_the_rate_limit_instead_of_giving_up(
        start_daemon: Callable[..., Any], run_docex: Callable[..., Any], tmp_path: Path) -> None:
    """Each job was polled on its own every 3 s at most: 100 jobs went past the key's 1,200
    requests a minute, and every file "stopped waiting: 429" while its job was still queued.
    Here the limit is 4 requests in 2 s for 8 files, read one at a time."""
    daemon = start_daemon(env={**QUICK_ENV, "DOCEX_RATE_LIMITS_AUTHENTICATED": "4/2s", "DOCEX_JOBS_WORKERS": "1"})
    wait_until_serving(daemon)
    key, schema_id = _setup(daemon)
    files = []
    for n in range(8):
        path = tmp_path / f"invoice-{n}.txt"
        path.write_text(f"ACME Ltd\nInvoice number: INV-{n:03d}\nTotal amount due: 1{n}.00\n", encoding="utf-8")
        files.append(str(path))
    env = {"DOCEX_URL": daemon.url(""), "DOCEX_API_KEY": key}
    done = await run_docex("submit", *files, "--schema", schema_id, "--wait", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["status"] for line in lines] == ["COMPLETED"] * 8, lines
