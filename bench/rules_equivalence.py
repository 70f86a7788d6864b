"""Whether the `rules` provider still gives the same output on the sample documents.

    .venv/bin/python bench/rules_equivalence.py save  [--cache /tmp/docex-rules-eq] [--samples ../shared/samples]
    .venv/bin/python bench/rules_equivalence.py check [--cache /tmp/docex-rules-eq] [--samples ../shared/samples]
    .venv/bin/python bench/rules_equivalence.py score [--cache /tmp/docex-rules-eq] [--samples ../shared/samples]

For refactoring the rules engine without changing what it finds. The first
run parses every document of SAMPLES/{invoices,receipts,receipts-extra} with
the default parsers (tesseract OCR for images: a few minutes) and caches the
parsed `Document` objects (pickle) under --cache; later runs read the cache,
so only the engine runs. `save` writes the engine's output on every document
(result and resultMeta.fields: confidence, page, bbox, text) as JSON beside
the cache; `check` runs it again and compares the JSON byte for byte,
printing the documents whose output differs (exit status 1 if any does).
`score` prints each set's mean field accuracy by SAMPLES/score.py on the
documents `bench/extract.py` scores (the same figures, from the cache).

Each document is read with its set's schema, and also with a wide schema
that asks for every kind of value the engine knows (line items, lists,
nested objects, enums, booleans, phone numbers, ...), so that the paths the
sample schemas never take are compared too.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daemon.config import load_config  # noqa: E402
from daemon.extraction.command import detect_type  # noqa: E402
from daemon.extraction.document import Document  # noqa: E402
from daemon.extraction.parsers import parse  # noqa: E402
from daemon.extraction.pipeline import parse_options  # noqa: E402
from daemon.extraction.providers.rules.engine import extract_rules  # noqa: E402

SETS = {"invoices": "invoices.schema.json", "receipts": "receipts.schema.json",
        "receipts-extra": "receipts.schema.json"}
SKIP = {".json", ".md"}
# The format `bench/extract.py` scores for each answer: the first present, in this order.
SCORED = {"invoices": (".pdf", ".txt"), "receipts": (".jpg", ".png"), "receipts-extra": (".jpg", ".png")}

WIDE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "description": "Invoice number"},
        "date": {"type": "string", "format": "date"},
        "issued_at": {"type": "string", "format": "date-time", "description": "Date and time of the sale"},
        "due_date": {"type": ["string", "null"], "format": "date"},
        "total": {"type": "number", "description": "Total amount due"},
        "subtotal": {"type": "number"},
        "tax": {"type": "number", "description": "Tax amount"},
        "tendered": {"type": "number", "description": "Cash tendered"},
        "change": {"type": "number", "description": "Change given"},
        "amount_text": {"type": "string", "description": "Total amount as written"},
        "currency": {"type": "string", "description": "ISO 4217 currency code"},
        "email": {"type": "string", "format": "email"},
        "website": {"type": "string", "format": "uri"},
        "phone": {"type": "string", "description": "Phone number"},
        "vendor": {"type": "string", "description": "Name of the seller"},
        "address": {"type": "string", "description": "Postal address"},
        "customer": {"type": "object", "properties": {"name": {"type": "string"},
                                                        "address": {"type": "string"}}},
        "item_count": {"type": "integer", "description": "Number of items"},
        "paid": {"type": "boolean", "description": "Paid"},
        "payment_method": {"type": "string", "enum": ["CASH", "VISA", "MASTERCARD", "Bank transfer"]},
        "iban": {"type": "string"},
        "vat_number": {"type": "string", "description": "VAT registration number"},
        "emails": {"type": "array", "items": {"type": "string", "format": "email"}},
        "dates": {"type": "array", "items": {"type": "string", "format": "date"}},
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {
                "description": {"type": "string"}, "quantity": {"type": "integer"},
                "unit_price": {"type": "number"}, "amount": {"type": "number"},
            }},
        },
    },
}


def _parse_one(path: str) -> tuple[str, Document | str]:
    mime = detect_type(Path(path))
    if mime is None:
        return path, "unsupported"
    try:
        return path, parse(Path(path), mime, parse_options(load_config(environ={})))
    except Exception as exc:  # a document the parsers refuse is reported, not compared
        return path, f"{type(exc).__name__}: {exc}"


def documents(samples: Path, cache: Path) -> dict[str, Document]:
    """Every sample document parsed, keyed "set/file name" (parsed once, then read from the cache)."""
    pickled = cache / "documents.pickle"
    if pickled.exists():
        loaded: dict[str, Document] = pickle.loads(pickled.read_bytes())
        return loaded
    paths = sorted(str(p) for name in SETS for p in (samples / name).iterdir() if p.suffix not in SKIP)
    started = time.perf_counter()
    out: dict[str, Document] = {}
    with ProcessPoolExecutor(2) as pool:
        for path, parsed in pool.map(_parse_one, paths):
            key = f"{Path(path).parent.name}/{Path(path).name}"
            if isinstance(parsed, str):
                print(f"  {key}: not parsed ({parsed})")
            else:
                out[key] = parsed
    print(f"parsed {len(out)} documents in {time.perf_counter() - started:.0f} s")
    cache.mkdir(parents=True, exist_ok=True)
    pickled.write_bytes(pickle.dumps(out))
    return out


def outputs(samples: Path, docs: dict[str, Document]) -> dict[str, str]:
    """The engine's output on each document and schema, as JSON text."""
    schemas = {name: json.loads((samples / file).read_text()) for name, file in SETS.items()}
    out: dict[str, str] = {}
    for key, document in docs.items():
        for label, schema in (("own", schemas[key.split("/")[0]]), ("wide", WIDE_SCHEMA)):
            result, fields = extract_rules(document, schema)
            out[f"{key} {label}"] = json.dumps({"result": result, "fields": fields}, ensure_ascii=False)
    return out


def scores(samples: Path, cache: Path, docs: dict[str, Document]) -> None:
    """Each set's mean field accuracy by SAMPLES/score.py, on the documents bench/extract.py scores."""
    for name, suffixes in SCORED.items():
        schema = json.loads((samples / SETS[name]).read_text())
        results: dict[str, Any] = {}
        for answer in sorted((samples / name).glob("*.json")):
            chosen = next((f"{name}/{answer.stem}{s}" for s in suffixes if f"{name}/{answer.stem}{s}" in docs), None)
            if chosen is not None:
                results[answer.stem] = extract_rules(docs[chosen], schema)[0]
        out = cache / f"{name}.results.json"
        out.write_text(json.dumps(results, indent=1))
        report = subprocess.run([sys.executable, str(samples / "score.py"), str(samples / name), str(out)],
                                capture_output=True, text=True, check=False).stdout
        print(f"{name} ({len(results)} documents)\n  " + report.rstrip().replace("\n", "\n  "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["save", "check", "score"])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/docex-rules-eq"))
    parser.add_argument("--samples", type=Path, default=ROOT.parent / "shared" / "samples")
    args = parser.parse_args()
    docs = documents(args.samples, args.cache)
    if args.action == "score":
        scores(args.samples, args.cache, docs)
        return
    started = time.perf_counter()
    found = outputs(args.samples, docs)
    seconds = time.perf_counter() - started
    baseline = args.cache / "baseline.json"
    if args.action == "save":
        baseline.write_text(json.dumps(found, indent=0, ensure_ascii=False))
        print(f"saved {len(found)} outputs ({len(docs)} documents) in {seconds:.1f} s to {baseline}")
        return
    expected: dict[str, str] = json.loads(baseline.read_text())
    differ = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
    for key in differ:
        print(f"  DIFFERS {key}\n    was {expected.get(key)}\n    now {found.get(key)}")
    same = len(expected) - len(differ)
    print(f"{same}/{len(expected)} outputs byte-identical ({len(docs)} documents, engine {seconds:.1f} s)")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
