"""Field accuracy of the rules provider on the sample receipts, fast enough to
iterate on a rule: each receipt is read by OCR once per engine and the
reading is kept on disk; the rules run on the kept readings in seconds.

    .venv/bin/python bench/receipts.py [--engine rapidocr] [--sets receipts,receipts-extra]
        [--cache .cache/ocr] [--misses company] [--samples ../shared/samples]

Prints, per set, each field's accuracy, the mean and how many results are complete (scored by
SAMPLES/score.py's own comparison), then, with --misses FIELD, every receipt
whose FIELD is wrong: what the answer is and what the rules read.

With --learning, `bench/learning.py`'s stream is replayed on the kept readings in
seconds instead of through a daemon in minutes: each receipt of the sets, in
order, read by the rules, then with the examples its fingerprint matches (ordered and
cut as the database's lookup does), scored, then learned from its answer as a
correction would teach; it prints both means, with and without learning, and every
value learning changed on a first-seen issuer.

Confidence is checked the same way: per set, how many values came with a
confidence at or above --threshold (default 0.9, the line README
"Confidence" documents) and how often those are right, beside the same for
the values below it. A confidence means something when the values above the
line are right at least 95 % of the time.

The readings are keyed by the file's bytes, the engine and docex's OCR
parser sources, so a change to a parser re-reads; a change to the rules
does not. `bench/extract.py` remains the end-to-end figure (the daemon's
worker processes, its memory limit, its timeouts).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import load_scorer  # noqa: E402

from daemon.extraction.document import Document  # noqa: E402
from daemon.extraction.parsers.base import ParseOptions  # noqa: E402
from daemon.extraction.parsers.ocr import parse_image  # noqa: E402
from daemon.extraction.providers.rules.engine import extract_rules  # noqa: E402

PARSER_SOURCES = ("ocr.py", "rapidocr.py", "stamps.py", "trailing.py", "scanned.py", "base.py")


def parser_fingerprint(engine: str) -> str:
    digest = hashlib.sha256(engine.encode())
    for name in PARSER_SOURCES:
        digest.update((ROOT / "daemon" / "extraction" / "parsers" / name).read_bytes())
    digest.update((ROOT / "daemon" / "extraction" / "document.py").read_bytes())
    return digest.hexdigest()[:16]


def read(path: str, engine: str) -> Document:
    return parse_image(Path(path), ParseOptions(ocr_engine=engine))


def readings(files: list[Path], engine: str, cache: Path, workers: int) -> dict[str, Document]:
    """Each file's OCR reading, from the cache or read now (in `workers` processes)."""
    folder = cache / f"{engine}-{parser_fingerprint(engine)}"
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Document] = {}
    todo: dict[Path, Path] = {}
    for path in files:
        kept = folder / f"{hashlib.sha256(path.read_bytes()).hexdigest()[:20]}.pickle"
        if kept.exists():
            out[str(path)] = pickle.loads(kept.read_bytes())
        else:
            todo[path] = kept
    if todo:
        print(f"  reading {len(todo)} receipts with {engine} ...", file=sys.stderr)
        with ProcessPoolExecutor(workers) as pool:
            paths = list(todo)
            for path, document in zip(paths, pool.map(read, map(str, paths), [engine] * len(paths)), strict=True):
                todo[path].write_bytes(pickle.dumps(document))
                out[str(path)] = document
    return out



def share(tally: list[int]) -> str:
    """"right of all values (accuracy)"."""
    return f"{tally[0]}/{tally[1]} right ({tally[0] / tally[1]:.3f})" if tally[1] else "0 values"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=Path, default=ROOT.parent / "shared" / "samples")
    parser.add_argument("--engine", default="rapidocr", choices=("rapidocr", "tesseract"))
    parser.add_argument("--sets", default="receipts,receipts-extra")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "ocr")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--misses", default="", help="a field whose misses to list")
    parser.add_argument("--json", type=Path, help="write {set: {id: result}} here")
    parser.add_argument("--threshold", type=float, default=0.9, help="the confidence line to report on")
    parser.add_argument("--learning", action="store_true", help="replay bench/learning.py's stream instead")
    args = parser.parse_args()

    scorer = load_scorer(args.samples)
    fields: dict[str, str] = scorer.FIELDS["receipts"]
    schema = json.loads((args.samples / "receipts.schema.json").read_text())
    if args.learning:
        files = [p for name in args.sets.split(",") for p in sorted((args.samples / name).glob("*.jpg"))]
        replay_learning(files, readings(files, args.engine, args.cache, args.workers), scorer, schema)
        return
    everything: dict[str, dict[str, Any]] = {}
    means = []
    for name in args.sets.split(","):
        folder = args.samples / name
        files = sorted(folder.glob("*.jpg"))
        documents = readings(files, args.engine, args.cache, args.workers)
        right = dict.fromkeys(fields, 0)
        # [right, all] of the values at or above the confidence line, and of those below it
        sure, unsure = [0, 0], [0, 0]
        complete = 0  # results with every required value: the jobs that need no person (SPEC §7)
        misses: list[str] = []
        results: dict[str, Any] = {}
        for path in files:
            truth = json.loads(path.with_suffix(".json").read_text())
            result, evidence = extract_rules(documents[str(path)], schema)
            results[path.stem] = result
            complete += all(field in result for field in schema["required"])
            for field, kind in fields.items():
                correct = scorer.same(kind, truth.get(field), result.get(field))
                if field in result:
                    tally = sure if evidence[f"/{field}"]["confidence"] >= args.threshold else unsure
                    tally[0] += correct
                    tally[1] += 1
                if correct:
                    right[field] += 1
                elif field == args.misses:
                    misses.append(f"  {path.stem}: want {truth.get(field)!r}\n  {'':{len(path.stem)}}   got  "
                                  f"{result.get(field)!r}")
        everything[name] = results
        accuracy = {field: right[field] / len(files) for field in fields}
        mean = sum(accuracy.values()) / len(fields)
        means.append(mean)
        cells = "  ".join(f"{field} {value:.3f}" for field, value in accuracy.items())
        print(f"{name:15} {args.engine:9} {cells}  mean {mean:.3f}  ({len(files)})")
        print(f"{'':25} complete {complete}/{len(files)}   "
              f"confidence >= {args.threshold}: {share(sure)}   below: {share(unsure)}")
        if misses:
            print("\n".join(misses))
    if len(means) > 1:
        print(f"spread {max(means) - min(means):.3f}")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


def replay_learning(files: list[Path], documents: dict[str, Document], scorer: Any, schema: dict[str, Any]) -> None:
    """`bench/learning.py`'s stream on kept readings (see the module docstring)."""
    from learning import correction  # bench/learning.py: the answer as the API gets it

    from daemon.extraction import learning
    from daemon.storage.repos.learning import LOOKUP_LIMIT

    fields: dict[str, str] = scorer.FIELDS["receipts"]
    examples: list[tuple[set[str], dict[str, Any]]] = []  # (keys, lessons), oldest first
    tally = {side: {"seen": [0, 0], "first": [0, 0]} for side in ("with", "without")}
    seen: set[str] = set()
    changed: list[str] = []
    for path in files:
        document = documents[str(path)]
        answer = json.loads(path.with_suffix(".json").read_text())
        result, evidence = extract_rules(document, schema)
        reading = learning.reading_of(document)
        keys = set(learning.fingerprint(reading))
        shared = [(len(keys & taught), number) for number, (taught, _) in enumerate(examples)]
        closest = sorted(((n, i) for i, (n, _) in enumerate(shared) if n), reverse=True)[:LOOKUP_LIMIT]
        matches = learning.matches([learning.Match(str(i), examples[i][1], n,
                                                   sum(k.startswith("r:") for k in keys & examples[i][0]))
                                    for n, i in closest])
        learned, _ = learning.apply(reading, schema, matches, result, evidence)
        which = "seen" if scorer.norm_text(answer["company"]) in seen else "first"
        for field, kind in fields.items():
            for side, values in (("with", learned), ("without", result)):
                tally[side][which][0] += bool(scorer.same(kind, answer[field], values.get(field)))
                tally[side][which][1] += 1
            if which == "first" and learned.get(field) != result.get(field):
                changed.append(f"  {path.parent.name}/{path.stem} {field}: want {answer[field]!r}, "
                               f"learned {learned.get(field)!r}, rules {result.get(field)!r}")
        seen.add(scorer.norm_text(answer["company"]))
        examples.append((keys, learning.learn(reading, correction(scorer, answer), schema)))
    for side, counts in tally.items():
        print(f"{side + ' learning':17} issuers seen before {share(counts['seen'])}   "
              f"first-seen {share(counts['first'])}")
    if changed:
        print("values learning changed on first-seen issuers:\n" + "\n".join(changed))


if __name__ == "__main__":
    main()
