"""A client generated from the served OpenAPI document works for the main flows.

openapi-python-client (the generator most Python users reach for) turns
`/api/openapi.json` into a typed package; that package, untouched, then signs up,
creates a schema, uploads a document, waits for the job and reads its result
from a real `docex serve`. A document that names a body, a response or a type
wrongly breaks generation or one of these calls.
"""

from __future__ import annotations

import importlib
import io
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from e2e_helpers import INVOICE_SCHEMA, QUICK_ENV, wait_until_serving

GENERATOR = Path(sys.executable).parent / "openapi-python-client"


def generate_client(document: bytes, into: Path) -> Any:
    """The generated package, imported from `into`."""
    spec = into / "openapi.json"
    spec.write_bytes(document)
    done = subprocess.run([str(GENERATOR), "generate", "--path", str(spec), "--meta", "none",
                           "--output-path", str(into / "docex_client")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # openapi-python-client#1451 (open): an operation whose required body has several content
    # types (our uploads: multipart or JSON) is annotated `| Unset` without importing it. The
    # one import the generator forgot, and nothing else, is added here.
    for module in (into / "docex_client" / "api").rglob("*.py"):
        code = module.read_text()
        if "| Unset" in code and "import UNSET, Unset" not in code and "Unset," not in code:
            module.write_text("from ...types import UNSET, Unset\n" + code)
    sys.path.insert(0, str(into))
    try:
        return importlib.import_module("docex_client")
    finally:
        sys.path.remove(str(into))


def test_a_generated_client_signs_up_uploads_and_reads_the_result(start_daemon: Callable[..., Any],
                                                                  tmp_path: Path) -> None:
    daemon = start_daemon(env=QUICK_ENV)
    wait_until_serving(daemon)
    docex_client = generate_client(httpx.get(daemon.url("/api/openapi.json")).content, tmp_path)
    api = importlib.import_module("docex_client.api")
    models = importlib.import_module("docex_client.models")
    File = importlib.import_module("docex_client.types").File
    from docex_client.api.auth import post_register  # type: ignore[import-not-found]
    from docex_client.api.jobs import get_get_job, get_list_jobs, post_create_job  # type: ignore[import-not-found]
    from docex_client.api.schemas import post_create_schema  # type: ignore[import-not-found]

    assert api and models  # the package and its modules import
    public = docex_client.Client(base_url=daemon.url(""))
    registered = post_register.sync_detailed(client=public, body=models.RegisterBody(
        name="Ada", email="ada@example.com", password="correct horse"))
    assert registered.status_code == 201, registered.content
    client = docex_client.AuthenticatedClient(base_url=daemon.url(""), token=registered.parsed.access_token)

    created = post_create_schema.sync_detailed(client=client, body=models.CreateSchemaBody(
        name="Invoice", definition=models.CreateSchemaBodyDefinition.from_dict(INVOICE_SCHEMA)))
    assert created.status_code == 201, created.content
    schema_id = created.parsed.id

    document = b"ACME Ltd\nInvoice No: INV-2041\nTotal: 1,234.50 EUR\n"
    upload = post_create_job.sync_detailed(client=client, body=models.CreateJobForm(
        type_="EXTRACTION", schema_id=schema_id,
        file=File(payload=io.BytesIO(document), file_name="invoice.txt", mime_type="text/plain")))
    assert upload.status_code == 201, upload.content
    job_id = upload.parsed.id

    deadline = time.monotonic() + 60
    while (job := get_get_job.sync_detailed(job_id, client=client)).parsed.status not in ("COMPLETED", "FAILED"):
        assert time.monotonic() < deadline, job.content
        time.sleep(0.1)
    assert job.parsed.status == "COMPLETED", job.content
    assert job.parsed.result.to_dict() == {"invoice_number": "INV-2041", "total": 1234.5}

    listed = get_list_jobs.sync_detailed(client=client)
    assert listed.status_code == 200 and [j.id for j in listed.parsed.data] == [job_id]
