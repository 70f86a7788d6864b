"""`docex serve` starts with only what serving needs (issue 13): the parsers, the OCR
engines, the office libraries and the S3 SDK are imported by the process and role
that use them, not by every daemon at start-up (bench/idle.py measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys

# What `docex serve --role all` imports up to READY: the CLI, the service and every part
# it starts, with the app built (create_app registers every blueprint).
SERVE_IMPORTS = """
import json, sys
from pathlib import Path
import daemon.cli, daemon.lifecycle
from daemon.config import Config
from daemon.http.app import create_app
from daemon.services import Services
from daemon.storage.blobs import LocalBlobStore
from daemon.storage.database import Database
create_app(Services(config=Config(data_dir="."), db=Database("sqlite://"), blobs=LocalBlobStore(Path("."))))
print(json.dumps(sorted(sys.modules)))
"""

# Each is loaded where it is used: parser worker processes, the S3 blob store or
# integration, schema and result checks.
NOT_AT_START = ("boto3", "botocore", "s3transfer", "pypdfium2", "PIL", "docx", "openpyxl", "rapidocr",
                "onnxruntime", "pytesseract", "lxml", "jsonschema",
                "alembic")  # only when the database is behind (tests/integration/test_storage.py)


def test_serving_imports_none_of_the_heavy_libraries(tmp_path):
    out = subprocess.run([sys.executable, "-c", SERVE_IMPORTS], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    loaded = {name.split(".")[0] for name in json.loads(out)}
    assert "daemon" in loaded and "quart_trio" in loaded  # the probe did import the daemon
    assert sorted(loaded.intersection(NOT_AT_START)) == []
