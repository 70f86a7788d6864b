"""`docex extract FILE --schema schema.json`: the extraction pipeline on one
file, with no daemon and no database.

Prints ``{"result": ..., "resultMeta": ...}`` as JSON on stdout and exits 0
(a result that lacks required values too: ``resultMeta.complete`` is false and
``resultMeta.missing`` names them, as the daemon would record it); an
extraction error, RESULT_INVALID included, prints ``{"errorCode",
"errorMessage"}`` and exits 1. A missing file or an unreadable schema is a
usage error: one line on stderr, exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

import trio

from daemon.config import Config
from daemon.errors import JobError
from daemon.extraction.pipeline import extract, warn_if_ocr_missing
from daemon.jobs import filetypes
from daemon.schemas.definition import PROVIDER_KEYWORD, check_definition

EXIT_FAILED = 1
EXIT_USAGE = 2


def detect_type(path: Path) -> str | None:
    """The file's type from its bytes (never its name), as uploads are told."""
    with path.open("rb") as fh:
        head = fh.read(filetypes.SNIFF_BYTES)
    kind = filetypes.sniff(head)
    if kind == filetypes.ZIP:
        kind = filetypes.refine_zip(path, head)
    return kind


def run(file: str, schema_file: str, provider: str | None, config: Config, out: TextIO = sys.stdout) -> int:
    """The whole command; returns the exit code."""
    path = Path(file)
    for given in (path, Path(schema_file)):
        if not given.is_file():  # a FIFO or a device would be read until it ends
            print(f"docex: {given}: {'not a regular file' if given.exists() else 'no such file'}", file=sys.stderr)
            return EXIT_USAGE
    try:
        definition = json.loads(Path(schema_file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # deep nesting: RecursionError
        print(f"docex: {schema_file}: cannot read the schema ({exc})", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(definition, dict) and "type" not in definition:
        if "jsonSchema" in definition:
            definition = definition["jsonSchema"]  # the shape /api/schema/convert answers with
        elif isinstance(definition.get("definition"), dict):
            definition = definition["definition"]  # a schema as the API shows it (GET /api/schemas/:id)
    # The daemon's own check (a root that is no object included): a definition it would refuse
    # (`"properties": [1]`) made a provider fail with INTERNAL_ERROR, or read nothing, instead
    # of saying what is wrong.
    if problems := check_definition(definition, root="schema"):
        for problem in problems:
            print(f"docex: {schema_file}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if provider:
        definition = {**definition, PROVIDER_KEYWORD: provider}
    engine = config.extraction.ocr_engine
    if not warn_if_ocr_missing(engine):
        print(f"docex: warning: {engine} is not installed; images and scanned pages cannot be read",
              file=sys.stderr)
    mime_type = detect_type(path)
    if mime_type is None:
        return _fail(out, "UNSUPPORTED_FILE", "Unsupported file type")
    try:
        extraction = trio.run(extract, path, mime_type, definition, config)
    except JobError as exc:
        return _fail(out, exc.code, exc.message)
    json.dump({"result": extraction.result, "resultMeta": extraction.meta}, out, ensure_ascii=False, indent=2)
    out.write("\n")
    return 0


def _fail(out: TextIO, code: str, message: str) -> int:
    json.dump({"errorCode": code, "errorMessage": message}, out, ensure_ascii=False, indent=2)
    out.write("\n")
    return EXIT_FAILED
