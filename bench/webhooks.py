"""Webhook dispatcher throughput and event-to-first-attempt latency.

    .venv/bin/python bench/webhooks.py [--deliveries 3000] [--rounds 3] [--concurrency 32]
                                       [--latency-events 300] [--database-url URL]

Figures and targets:

  dispatcher   deliveries/s of `run_dispatcher` draining a backlog of due deliveries
               (8 endpoints, `webhooks.concurrency` = --concurrency, 4 per endpoint),
               each signed, recorded with its attempt, status and lease in the database
  bare httpx   POSTs/s of a bare httpx.AsyncClient loop with the same concurrency, the
               same bodies and the same receiver, measured in the same run
  ratio        dispatcher ÷ bare httpx                                          ≥ 0.50
  latency      time from an event (its delivery's creation, the same transaction) to
               the first attempt of its delivery, events emitted one at a time on an
               idle dispatcher: p50 and p99                                 p50 < 50 ms

The receiver is tests/webhook_receiver.py (trio + h11) in a process of its own, so
the sender's CPU is its own. The dispatcher runs in this process on a fresh SQLite
database in a temporary directory (or --database-url, e.g. PostgreSQL), migrated,
with one user and eight endpoints pointing at the receiver; backlog rounds and bare
rounds are interleaved and medians reported. The machine is shared and noisy, hence
the ratio measured alongside.

Prints human-readable lines, then one JSON line with every figure. Exits 0 unless a
delivery failed or the set-up failed; a missed target is reported as MISS.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT), str(ROOT / "tests")]

import harness  # noqa: E402

from daemon.clock import utcnow  # noqa: E402
from daemon.config import Secret, load_config  # noqa: E402
from daemon.services import Services, open_services  # noqa: E402
from daemon.storage.ids import new_id  # noqa: E402
from daemon.storage.migrate import upgrade  # noqa: E402
from daemon.storage.outbox import record_event  # noqa: E402
from daemon.storage.repos import accounts  # noqa: E402
from daemon.storage.repos import webhooks as repo  # noqa: E402
from daemon.storage.tables import deliveries, delivery_attempts  # noqa: E402
from daemon.webhooks.bodies import encode  # noqa: E402
from daemon.webhooks.dispatcher import run_dispatcher  # noqa: E402
from daemon.webhooks.keys import seal_secret  # noqa: E402
from daemon.webhooks.models import EXAMPLES  # noqa: E402
from daemon.webhooks.sender import USER_AGENT, open_client  # noqa: E402
from daemon.webhooks.signing import new_signing_secret, signature_header  # noqa: E402

TARGET_RATIO = 0.50
TARGET_P50_MS = 50.0
ENDPOINTS = 8
DATA = EXAMPLES["job.completed"]  # a realistic event: a finished job with its result


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


# --- the receiver, in its own process ---------------------------------------------------


def serve_receiver() -> None:
    from webhook_receiver import open_receiver

    async def main() -> None:
        async with open_receiver() as receiver:
            print(receiver.port, flush=True)
            # Keep memory flat over long runs: the bench reads no request back.
            while True:
                receiver.requests.clear()
                await trio.sleep(1)

    trio.run(main)


def start_receiver() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve-receiver"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


# --- set-up -----------------------------------------------------------------------------------


async def setup(services: Services, port: int) -> tuple[str, list[str]]:
    """One user and ENDPOINTS endpoints on the receiver; returns the user id and endpoint ids."""
    await trio.to_thread.run_sync(upgrade, services.db.engine)
    config = services.config.webhooks

    def unit(conn: sa.Connection) -> tuple[str, list[str]]:
        user = accounts.create_user(conn, email="bench@example.com", name="Bench", password_hash="x", now=utcnow())
        ids = []
        for i in range(ENDPOINTS):
            endpoint_id = new_id()
            repo.create_endpoint(
                conn, endpoint_id=endpoint_id, user_id=user.id, url=f"http://127.0.0.1:{port}/hook/{i}",
                description=None, delivery_mode="MANUAL", events=[], body_format="JSON", custom_headers={},
                secret_sealed=seal_secret(config, endpoint_id, new_signing_secret()), now=utcnow(),
                max_endpoints=ENDPOINTS,
            )
            ids.append(endpoint_id)
        return user.id, ids

    return await services.db.run(unit)


async def enqueue(services: Services, user_id: str, endpoint_ids: list[str], count: int) -> None:
    """`count` due deliveries, spread over the endpoints, in transactions of 500."""
    def unit(conn: sa.Connection, start: int, n: int) -> None:
        now = utcnow()
        for i in range(start, start + n):
            record_event(conn, user_id=user_id, type="webhook.send", data=DATA, now=now,
                         endpoint_id=endpoint_ids[i % len(endpoint_ids)])

    for start in range(0, count, 500):
        await services.db.run(unit, start, min(500, count - start))


# --- the two measurements -------------------------------------------------------------------


def succeeded(services: Services) -> float:
    return float(services.metrics.webhook_deliveries.labels("succeeded")._value.get())


async def dispatcher_rate(services: Services, user_id: str, endpoint_ids: list[str], count: int) -> float:
    """Deliveries/s of the dispatcher draining `count` due deliveries."""
    await enqueue(services, user_id, endpoint_ids, count)
    services.stopping = trio.Event()
    before = succeeded(services)
    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        await nursery.start(run_dispatcher, services)
        with trio.fail_after(600):
            while succeeded(services) - before < count:
                if services.metrics.webhook_deliveries.labels("retrying")._value.get():
                    raise RuntimeError("a delivery failed; see the receiver")
                await trio.sleep(0.005)
        elapsed = time.perf_counter() - started
        services.stopping.set()
    return count / elapsed


async def bare_rate(port: int, count: int, concurrency: int) -> float:
    """POSTs/s of a bare httpx loop: the same body size, signed, the same concurrency."""
    secret = new_signing_secret()
    body = encode({"id": new_id(), "type": "webhook.send", "data": DATA, "occurredAt": "2026-01-01T00:00:00.000Z"},
                  "JSON")
    remaining = count
    async with open_client() as client:

        async def worker(i: int) -> None:
            nonlocal remaining
            url = f"http://127.0.0.1:{port}/hook/{i % ENDPOINTS}"
            while remaining > 0:
                remaining -= 1
                t = int(time.time())
                headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "X-Webhook-Id": new_id(),
                           "X-Webhook-Event": "webhook.send", "X-Webhook-Timestamp": str(t),
                           "X-Webhook-Signature": signature_header([secret], t, body)}
                response = await client.post(url, content=body, headers=headers)
                if response.status_code != 200:
                    raise RuntimeError(f"receiver answered {response.status_code}")

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(concurrency):
                nursery.start_soon(worker, i)
        return count / (time.perf_counter() - started)


async def latency(services: Services, user_id: str, endpoint_ids: list[str], events: int) -> list[float]:
    """Event → first attempt, in ms, for `events` events emitted one at a time."""
    services.stopping = trio.Event()
    ids: list[str] = []

    def emit(conn: sa.Connection, endpoint_id: str) -> str:
        event_id = record_event(conn, user_id=user_id, type="webhook.send", data=DATA, now=utcnow(),
                                endpoint_id=endpoint_id)
        return str(conn.execute(sa.select(deliveries.c.id).where(deliveries.c.event_id == event_id)).scalar_one())

    async with trio.open_nursery() as nursery:
        await nursery.start(run_dispatcher, services)
        await trio.sleep(0.5)  # idle: asleep until woken
        for i in range(events):
            ids.append(await services.db.run(emit, endpoint_ids[i % len(endpoint_ids)]))
            await trio.sleep(0.01)
        with trio.fail_after(60):
            while True:
                done = await services.db.read(lambda c: c.execute(sa.select(sa.func.count()).select_from(deliveries)
                                                                  .where(deliveries.c.id.in_(ids),
                                                                         deliveries.c.status == "SUCCEEDED")).scalar())
                if done == len(ids):
                    break
                await trio.sleep(0.05)
        services.stopping.set()

    def read(conn: sa.Connection) -> list[float]:
        rows = conn.execute(
            sa.select(deliveries.c.created_at, sa.func.min(delivery_attempts.c.attempted_at))
            .join(delivery_attempts, delivery_attempts.c.delivery_id == deliveries.c.id)
            .where(deliveries.c.id.in_(ids)).group_by(deliveries.c.id, deliveries.c.created_at)
        )
        return [(_utc(first) - created).total_seconds() * 1000 for created, first in rows]

    return await services.db.read(read)


def _utc(value: Any) -> dt.datetime:
    # min() over a SQLite column comes back as text, outside the column's type.
    parsed = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed


# --- main ---------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, port: int, workdir: Path) -> dict[str, Any]:
    base = load_config(environ={})
    config = dataclasses.replace(
        base,
        data_dir=str(workdir),
        database=dataclasses.replace(base.database, url=args.database_url or f"sqlite:///{workdir / 'bench.db'}"),
        webhooks=dataclasses.replace(base.webhooks, encryption_key=Secret(secrets.token_hex(32)), allow_http=True,
                                     allow_private_networks=True, concurrency=args.concurrency,
                                     per_endpoint_concurrency=max(1, args.concurrency // ENDPOINTS),
                                     # One user owns every endpoint here: the bench measures the
                                     # dispatcher, not the bound that keeps users from one another.
                                     per_user_concurrency=args.concurrency),
    )
    figures: dict[str, Any] = {**harness.machine_figures(),
                               "database": sa.make_url(config.database_url).get_backend_name(),
                               "deliveries": args.deliveries, "concurrency": args.concurrency,
                               "endpoints": ENDPOINTS, "rounds": args.rounds}
    async with open_services(config) as services:
        user_id, endpoint_ids = await setup(services, port)
        print(f"setup    receiver :{port} (own process), {figures['database']} database, {ENDPOINTS} endpoints, "
              f"concurrency {args.concurrency} ({config.webhooks.per_endpoint_concurrency} per endpoint)", flush=True)
        await bare_rate(port, 200, args.concurrency)  # warm both sides up
        await dispatcher_rate(services, user_id, endpoint_ids, 200)
        rates: dict[str, list[float]] = {"dispatcher": [], "bare": []}
        for r in range(args.rounds):
            rates["bare"].append(await bare_rate(port, args.deliveries, args.concurrency))
            rates["dispatcher"].append(await dispatcher_rate(services, user_id, endpoint_ids, args.deliveries))
            print(f"  round {r + 1}  dispatcher {rates['dispatcher'][-1]:7.0f}/s   "
                  f"bare httpx {rates['bare'][-1]:7.0f}/s", flush=True)
        dispatcher, bare = statistics.median(rates["dispatcher"]), statistics.median(rates["bare"])
        ratio = dispatcher / bare
        figures |= {"dispatcher_per_s": round(dispatcher, 1), "bare_httpx_per_s": round(bare, 1),
                    "ratio": round(ratio, 3), "rounds_dispatcher": [round(x, 1) for x in rates["dispatcher"]],
                    "rounds_bare": [round(x, 1) for x in rates["bare"]]}
        print(f"dispatcher {dispatcher:7.0f} deliveries/s (median)")
        print(f"bare httpx {bare:7.0f} POSTs/s (median)")
        print(f"ratio      {ratio:.3f}   target ≥ {TARGET_RATIO:.2f}   {verdict(ratio >= TARGET_RATIO)}")

        lags = await latency(services, user_id, endpoint_ids, args.latency_events)
        p50, p99 = harness.percentile(lags, 0.50), harness.percentile(lags, 0.99)
        figures |= {"latency_events": len(lags), "latency_p50_ms": round(p50, 2), "latency_p99_ms": round(p99, 2),
                    "latency_max_ms": round(max(lags), 2)}
        print(f"latency    event → first attempt over {len(lags)} events: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
              f"(max {max(lags):.1f})   target p50 < {TARGET_P50_MS:.0f} ms   {verdict(p50 < TARGET_P50_MS)}")
    figures["verdicts"] = {"ratio": verdict(ratio >= TARGET_RATIO), "latency_p50": verdict(p50 < TARGET_P50_MS)}
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deliveries", type=int, default=3000, help="backlog size (and bare POSTs) per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median reported)")
    parser.add_argument("--concurrency", type=int, default=32, help="webhooks.concurrency and the bare loop's")
    parser.add_argument("--latency-events", type=int, default=300, help="events emitted one at a time")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary directory")
    parser.add_argument("--serve-receiver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_receiver:
        serve_receiver()
        return 0

    receiver, port = start_receiver()
    figures: dict[str, Any] = {}
    failed = False
    try:
        with tempfile.TemporaryDirectory(prefix="docex-bench-webhooks-") as tmp:
            figures = trio.run(run, args, port, Path(tmp))
    except Exception as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        failed = True
    finally:
        receiver.kill()
        receiver.wait()
    figures["failed"] = failed
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
