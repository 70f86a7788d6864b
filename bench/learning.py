"""Learning from corrections (issue #16): field accuracy on receipts of issuers corrected
before and on first-seen ones, and what 1,000 learned examples cost an extraction.

    .venv/bin/python bench/learning.py [--sets receipts,receipts-extra] [--count N] [--shuffle SEED]
        [--compare] [--cost 1000] [--samples ../shared/samples] [--engine rapidocr]

Figures and targets:

  stream    each receipt of --sets (in file order, or shuffled with --shuffle SEED;
            the first --count of them), one after the other, through `docex serve`:
            upload, wait for COMPLETED, score against its answer (SAMPLES/score.py's
            comparison), then correct the job with the answer over the API
            (PATCH /api/jobs/:id/result, the date as ISO 8601, the total a number).
            A receipt's issuer is its answer's company (score.py's text form).
            mean field accuracy, issuers corrected before                ≥ 0.95
            mean field accuracy, first-seen issuers           ≥ the same without learning
            the running curve: both means after every --every receipts, and how
            many values came from a learned example (resultMeta learnedFrom)
  compare   with --compare the stream runs again on a daemon with
            DOCEX_LEARNING_ENABLED=false: the figures without learning, side by side
  cost      with --cost N: a text-layer PDF receipt (reportlab) extracted --rounds
            times for each of three schemas of one user, taking turns: one with no
            learned example, one with an example of the receipt's issuer (taught by
            a correction over the API), one with that and N-1 of other issuers
            (written straight to the database); medians of resultMeta.durationMs,
            N over none                                                   ≤ +10 %
            (and N over one: what the number of examples costs by itself)

Prints human-readable lines, then one JSON line with every figure. A missed target
is reported as MISS and does not fail the run; a daemon that does not start, a
request that fails or a job that does not complete does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import random
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from harness import Daemon, expect, load_scorer, verdict

ROOT = harness.ROOT
sys.path.insert(0, str(ROOT))

TARGET_SEEN = 0.95
TARGET_COST = 0.10



def start(workdir: Path, name: str, engine: str, learning: bool) -> Daemon:
    data = workdir / name
    data.mkdir()
    env = harness.daemon_env(data, DOCEX_AUTH_BCRYPT_ROUNDS="4", DOCEX_JOBS_WORKERS="1",
                             DOCEX_EXTRACTION_OCR_ENGINE=engine,
                             DOCEX_LEARNING_ENABLED="true" if learning else "false")
    daemon = Daemon(name, workdir, env)
    daemon.start()
    return daemon


def sign_up(client: httpx.Client, definition: dict[str, Any], name: str) -> tuple[dict[str, str], str]:
    pair = harness.register(client, f"bench-{secrets.token_hex(4)}@example.com", "bench-password-0123")
    headers = {"Authorization": f"Bearer {pair['accessToken']}"}
    r = client.post("/api/schemas", json={"name": name, "definition": definition}, headers=headers)
    return headers, str(expect(r, 201, "create schema")["id"])


def run_job(client: httpx.Client, headers: dict[str, str], schema_id: str, name: str, data: bytes,
            timeout_s: float = 600) -> dict[str, Any]:
    r = client.post("/api/jobs", data={"type": "EXTRACTION", "schemaId": schema_id},
                    files={"file": (name, data, "application/octet-stream")}, headers=headers)
    job = expect(r, 201, f"upload {name}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = expect(client.get(f"/api/jobs/{job['id']}", headers=headers), 200, "get job")
        if job["status"] in ("COMPLETED", "FAILED"):
            if job["status"] != "COMPLETED":
                raise RuntimeError(f"{name}: {job['errorCode']} {job['errorMessage']}")
            return dict(job)
        time.sleep(0.05)
    raise RuntimeError(f"{name}: not completed after {timeout_s:g}s")


def correction(scorer: Any, answer: dict[str, Any]) -> dict[str, Any]:
    """The answer as the receipt schema's JSON types (a date the scorer cannot read as a date is left out)."""
    out: dict[str, Any] = {}
    for name, kind in scorer.FIELDS["receipts"].items():
        value = answer.get(name)
        if value in (None, ""):
            continue
        if kind == "date":
            iso = scorer.norm_date(value)
            try:
                dt.date.fromisoformat(iso)
            except ValueError:
                continue
            out[name] = iso
        elif kind == "amount":
            amount = scorer.norm_amount(value)
            if amount is not None:
                out[name] = amount
        else:
            out[name] = str(value)
    return out


def stream(daemon: Daemon, files: list[Path], samples: Path, every: int) -> dict[str, Any]:
    """The receipts through `daemon`, each scored, then corrected with its answer."""
    scorer = load_scorer(samples)
    fields: dict[str, str] = scorer.FIELDS["receipts"]
    definition = json.loads((samples / "receipts.schema.json").read_text())
    # [right, all] values; "first_matched": first-seen by the answer's company, yet read with
    # an example (the fingerprint says it is an issuer seen before: a spelling of its name)
    tally = {"seen": [0, 0], "first": [0, 0], "first_matched": [0, 0]}
    per_field = {k: {name: [0, 0] for name in fields} for k in tally}
    learned = [0, 0]  # [values learned from an example, of which right]
    curve: list[dict[str, Any]] = []
    seen: set[str] = set()
    seconds: list[float] = []
    right_of: dict[str, int] = {}  # receipt → its values right
    matched_first: list[str] = []
    with httpx.Client(base_url=daemon.base, timeout=60) as client:
        headers, schema_id = sign_up(client, definition, "Receipt")
        for n, path in enumerate(files, 1):
            answer = json.loads(path.with_suffix(".json").read_text())
            t0 = time.monotonic()
            job = run_job(client, headers, schema_id, path.name, path.read_bytes())
            seconds.append(time.monotonic() - t0)
            issuer = scorer.norm_text(answer["company"])
            which = "seen" if issuer in seen else "first"
            result = job["result"] or {}
            evidence = (job["resultMeta"] or {}).get("fields") or {}
            matched = any("learnedFrom" in e for e in evidence.values())
            for name, kind in fields.items():
                right = bool(scorer.same(kind, answer[name], result.get(name)))
                tally[which][0] += right
                tally[which][1] += 1
                per_field[which][name][0] += right
                per_field[which][name][1] += 1
                if "learnedFrom" in evidence.get(f"/{name}", {}):
                    learned[0] += 1
                    learned[1] += right
                if which == "first" and matched:
                    tally["first_matched"][0] += right
                    tally["first_matched"][1] += 1
                right_of[path.name] = right_of.get(path.name, 0) + right
            if which == "first" and matched:
                matched_first.append(path.name)
            seen.add(issuer)
            r = client.patch(f"/api/jobs/{job['id']}/result", json={"result": correction(scorer, answer)},
                             headers=headers)
            expect(r, 200, f"correct {path.name}")
            if n % every == 0 or n == len(files):
                point = {"receipts": n, "seen": share(tally["seen"]), "first": share(tally["first"]),
                         "learned_values": learned[0]}
                curve.append(point)
                print(f"  after {n:4d}: issuers seen before {fmt(point['seen'])} ({tally['seen'][1] // 4} receipts), "
                      f"first-seen {fmt(point['first'])} ({tally['first'][1] // 4}), "
                      f"values from a learned example {learned[0]} ({learned[1]} right)", flush=True)
    return {
        "receipts": len(files),
        "seen": share(tally["seen"]), "seen_receipts": tally["seen"][1] // len(fields),
        "first": share(tally["first"]), "first_receipts": tally["first"][1] // len(fields),
        "first_matched": share(tally["first_matched"]),
        "first_matched_receipts": tally["first_matched"][1] // len(fields),
        "per_field": {k: {name: share(t) for name, t in v.items()} for k, v in per_field.items()},
        "learned_values": learned[0], "learned_right": learned[1],
        "seconds_per_receipt": round(statistics.median(seconds), 2) if seconds else None,
        "curve": curve,
        "fields": len(fields), "right_of": right_of, "matched_first": matched_first,
    }


def share(tally: list[int]) -> float | None:
    return round(tally[0] / tally[1], 3) if tally[1] else None


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# --- cost ------------------------------------------------------------------------------------

COST_SCHEMA = {"type": "object", "properties": {
    "company": {"type": "string", "description": "Name of the shop"},
    "receipt_number": {"type": "string", "description": "Number of the receipt"},
    "date": {"type": "string", "format": "date"},
    "total": {"type": "number", "description": "Total amount paid"}}}


def receipt_pdf(number: int) -> bytes:
    """A text-layer PDF receipt of one issuer, 30 item lines, its number after a label the rules do not know."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=A4)
    y = 800
    for line in ("KAFFEEHAUS MUELLER GMBH", "Hauptstrasse 12, 10115 Berlin", "USt-IdNr DE123456789",
                 f"Datum 03.02.2025  Bon {number}-A"):
        c.drawString(60, y, line)
        y -= 16
    rng = random.Random(number)
    total = 0.0
    for i in range(30):
        price = rng.randint(100, 900) / 100
        total += price
        c.drawString(60, y, f"Artikel {i + 1:02d} Kaffee und Kuchen")
        c.drawRightString(520, y, f"{price:.2f}")
        y -= 14
    c.drawString(60, y - 6, "Summe EUR")
    c.drawRightString(520, y - 6, f"{total:.2f}")
    c.drawString(60, y - 22, "Gegeben")
    c.drawRightString(520, y - 22, "500.00")
    c.save()
    return out.getvalue()


def other_examples(daemon: Daemon, workdir: Path, user_id: str, schema_id: str, count: int) -> None:
    """`count` examples of other issuers for the schema, straight into the daemon's database."""
    import sqlalchemy as sa

    from daemon.clock import utcnow
    from daemon.storage.repos.learning import record_example

    engine = sa.create_engine(f"sqlite:///{workdir / daemon.name / 'docex.db'}")
    lessons = {"/total": {"value": 1.0, "constant": False,
                          "spots": [{"where": "right", "label": "TOTAL", "y": 0.5, "line": "TOTAL @"}]}}
    with engine.begin() as conn:
        for i in range(count):
            keys = [f"h:{secrets.token_hex(8)}" for _ in range(4)] + [f"r:{1000000 + i}"]
            record_example(conn, user_id=user_id, schema_id=schema_id, job_id=f"bench{i:021d}", fields=lessons,
                           keys=keys, now=utcnow())
    engine.dispose()


def cost(workdir: Path, engine: str, examples: int, rounds: int) -> dict[str, Any]:
    """Three schemas of one user, the same definition: one with no learned example, one
    with an example of the issuer (taught by a correction over the API), one with that
    and `examples` - 1 of other issuers. Each round extracts the same receipt once per
    schema, in turn (the order rotating), so that the machine's drift falls on all three."""
    daemon = start(workdir, "cost", engine, learning=True)
    try:
        with httpx.Client(base_url=daemon.base, timeout=60) as client:
            headers, none_id = sign_up(client, COST_SCHEMA, "Receipt, nothing learned")
            user_id = expect(client.get("/api/auth/me", headers=headers), 200, "me")["id"]
            arms = {"none": none_id}
            for arm in ("one", "many"):
                r = client.post("/api/schemas", json={"name": f"Receipt, {arm}", "definition": COST_SCHEMA},
                                headers=headers)
                arms[arm] = expect(r, 201, "create schema")["id"]
                taught = run_job(client, headers, arms[arm], "taught.pdf", receipt_pdf(5000))
                fixed = {**taught["result"], "receipt_number": "5000-A"}
                expect(client.patch(f"/api/jobs/{taught['id']}/result", json={"result": fixed}, headers=headers),
                       200, "correct")
            other_examples(daemon, workdir, user_id, arms["many"], examples - 1)
            run_job(client, headers, none_id, "warm.pdf", receipt_pdf(999))  # the worker process's imports
            took: dict[str, list[float]] = {arm: [] for arm in arms}
            learned_right = 0
            for i in range(rounds):
                order = list(arms)[i % 3:] + list(arms)[:i % 3]
                for arm in order:
                    job = run_job(client, headers, arms[arm], "r.pdf", receipt_pdf(100 + i))
                    took[arm].append(job["resultMeta"]["durationMs"])
                    if arm == "many":
                        learned_right += job["result"].get("receipt_number") == f"{100 + i}-A"
    finally:
        daemon.stop()
    b, o, a = (statistics.median(took[arm]) for arm in ("none", "one", "many"))
    return {"examples": examples, "rounds": rounds, "median_ms_without": round(b, 2), "median_ms_one": round(o, 2),
            "median_ms_with": round(a, 2), "rise": round(a / b - 1, 3), "rise_from_one": round(a / o - 1, 3),
            "receipt_number_learned": f"{learned_right}/{rounds}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=Path, default=ROOT.parent / "shared" / "samples")
    parser.add_argument("--sets", default="receipts,receipts-extra")
    parser.add_argument("--count", type=int, default=0, help="the first N receipts of the stream (0: all)")
    parser.add_argument("--shuffle", type=int, default=None, help="shuffle the stream with this seed")
    parser.add_argument("--every", type=int, default=20, help="a point of the curve every N receipts")
    parser.add_argument("--engine", default="rapidocr", choices=("rapidocr", "tesseract"))
    parser.add_argument("--compare", action="store_true", help="run the stream again with learning off")
    parser.add_argument("--cost", type=int, default=0, help="learned examples for the cost figure (0: skip)")
    parser.add_argument("--rounds", type=int, default=100, help="extractions per schema of the cost figure")
    parser.add_argument("--no-stream", action="store_true", help="only the cost figure")
    args = parser.parse_args()
    if not harness.require_docex():
        return 1

    files = [p for name in args.sets.split(",") for p in sorted((args.samples / name).glob("*.jpg"))]
    if args.shuffle is not None:
        random.Random(args.shuffle).shuffle(files)
    if args.count:
        files = files[:args.count]
    figures: dict[str, Any] = harness.machine_figures()
    ok = True
    with tempfile.TemporaryDirectory(prefix="docex-bench-learning-") as tmp:
        workdir = Path(tmp)
        if not args.no_stream:
            sides = [("learning", True)] + ([("without", False)] if args.compare else [])
            for name, learning in sides:
                print(f"{name}: {len(files)} receipts of {args.sets}"
                      f"{'' if args.shuffle is None else f' shuffled ({args.shuffle})'}", flush=True)
                daemon = start(workdir, name, args.engine, learning)
                try:
                    figures[name] = stream(daemon, files, args.samples, args.every)
                finally:
                    daemon.stop()
            on = figures["learning"]
            seen_ok = on["seen"] is not None and on["seen"] >= TARGET_SEEN
            print(f"issuers seen before: {fmt(on['seen'])} over {on['seen_receipts']} receipts "
                  f"(target ≥ {TARGET_SEEN}) {verdict(seen_ok)}")
            print(f"  per field: {on['per_field']['seen']}")
            print(f"first-seen issuers:  {fmt(on['first'])} over {on['first_receipts']} receipts")
            print(f"  per field: {on['per_field']['first']}")
            print(f"  of which {on['first_matched_receipts']} matched an issuer's fingerprint (its name spelt "
                  f"otherwise in an earlier answer): {fmt(on['first_matched'])}")
            if args.compare:
                off = figures["without"]
                first_ok = (on["first"] or 0) >= (off["first"] or 0)
                print(f"without learning:    seen before {fmt(off['seen'])}, first-seen {fmt(off['first'])}; "
                      f"first-seen no worse with learning: {verdict(first_ok)}")
                print(f"  per field, seen before: {off['per_field']['seen']}")
                print(f"  per field, first-seen:  {off['per_field']['first']}")
                names = on["matched_first"]
                if names:
                    same = sum(off["right_of"][n] for n in names) / (off["fields"] * len(names))
                    print(f"  the {len(names)} first-seen receipts that matched a fingerprint, without learning: "
                          f"{same:.3f}")
        if args.cost:
            print(f"cost: {args.rounds} extractions of a text-layer PDF for each of: no learned example, one, "
                  f"{args.cost}; taking turns", flush=True)
            figures["cost"] = c = cost(workdir, args.engine, args.cost, args.rounds)
            cost_ok = c["rise"] <= TARGET_COST
            print(f"  median durationMs: no example {c['median_ms_without']} ms, one example of the issuer "
                  f"{c['median_ms_one']} ms, {args.cost} examples {c['median_ms_with']} ms ({c['rise']:+.1%} "
                  f"over none, target ≤ +{TARGET_COST:.0%}: {verdict(cost_ok)}; {c['rise_from_one']:+.1%} over one); "
                  f"receipt numbers read as learned: {c['receipt_number_learned']}")
    print(json.dumps(figures))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
