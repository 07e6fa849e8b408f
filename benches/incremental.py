"""An incremental snapshot (a table added to a running pipeline, read in chunks between
watermarks while streaming goes on) under a steady workload.

A throwaway PostgreSQL 15 holds ``other`` (10,000 rows) and ``big`` (``--rows`` rows of
the ``bench`` shape). A slot is made with ``other`` only; then ``big`` is added to the
publication and ``stream(held_tables=["public.other"])`` copies it while a writer makes
``--rate`` single-row changes per second (updates of ``other`` and of ``big``, half each).
Reports the copy's rows/s, and the commit-to-delivery lag of ``other``'s changes meanwhile
(p50 / p99). Writes ``benches/results/incremental.md``.

    .venv/bin/python benches/incremental.py [--rows 1000000] [--rate 5000] [--chunk-rows 10000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

import pgwire_cdc  # noqa: E402
import psycopg  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from bench_common import check_release_build  # noqa: E402
from live import BENCH_TABLE, SETTINGS, fill  # noqa: E402
from support.server import PgCluster  # noqa: E402


class Writer(threading.Thread):
    """``rate`` single-row updates per second, in transactions of 10."""

    def __init__(self, dsn: str, rate: int, rows: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rate, self.rows = dsn, rate, rows
        self.stop = threading.Event()
        self.changes = 0

    def run(self) -> None:
        rng = random.Random(5)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            started = time.monotonic()
            while not self.stop.is_set():
                with conn.transaction():
                    for _ in range(10):
                        if rng.random() < 0.5:
                            conn.execute(
                                "UPDATE other SET v = v + 1 WHERE id = %s",
                                (rng.randint(1, 10_000),),
                            )
                        else:
                            conn.execute(
                                "UPDATE bench SET amount = amount + 1 WHERE id = %s",
                                (rng.randint(1, self.rows),),
                            )
                self.changes += 10
                ahead = self.changes / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=5_000)
    ap.add_argument("--chunk-rows", type=int, default=10_000)
    args = ap.parse_args(argv)
    check_release_build()
    with PgCluster.for_server("pg15", settings=SETTINGS) as cluster:
        cluster.start()
        dsn = cluster.dsn_for("postgres")
        conn = cluster.connect("postgres")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY, v bigint)")
        conn.execute("INSERT INTO other SELECT g, 0 FROM generate_series(1, 10000) g")
        conn.execute(BENCH_TABLE)
        fill(conn, args.rows)
        conn.execute("VACUUM ANALYZE bench")
        for batch in pgwire_cdc.stream(
            dsn, publication="pub", slot="inc", tables=["public.other"], idle_timeout=0.5
        ):
            batch.ack()
        conn.execute("ALTER PUBLICATION pub ADD TABLE bench")
        writer = Writer(dsn, args.rate, args.rows)
        writer.start()
        time.sleep(1)
        lags: list[float] = []
        read = 0
        before = writer.changes
        started = time.perf_counter()
        for batch in pgwire_cdc.stream(
            dsn,
            publication="pub",
            slot="inc",
            held_tables=["public.other"],
            chunk_rows=args.chunk_rows,
            max_batch_ms=200,
        ):
            now = dt.datetime.now(dt.timezone.utc)
            other = batch.tables.get("public.other")
            if other is not None and other.num_rows:
                lags += [(now - t).total_seconds() for t in other["_commit_ts"].to_pylist() if t]
            big = batch.tables.get("public.bench")
            if big is not None:
                kinds = pc.cast(big["_change_type"], pa.string())
                read += pc.sum(pc.equal(kinds, "read")).as_py() or 0
            batch.ack()
            if batch.snapshot_progress.get("public.bench", []) is None:
                break
        took = time.perf_counter() - started
        changes = writer.changes - before
        writer.stop.set()
        writer.join()
    lags.sort()
    p50 = lags[len(lags) // 2] * 1000 if lags else float("nan")
    p99 = lags[int(len(lags) * 0.99)] * 1000 if lags else float("nan")
    lines = [
        "# Incremental snapshot under a workload",
        "",
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, this machine (2 cores),"
        " PostgreSQL 15, release build:"
        f" `.venv/bin/python benches/incremental.py --rows {args.rows} --rate {args.rate}"
        f" --chunk-rows {args.chunk_rows}`.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| rows of `bench` copied | {read:,} |",
        f"| copy time | {took:.1f} s |",
        f"| copy rate | {read / took:,.0f} rows/s |",
        f"| workload during the copy | {changes / max(took, 1e-9):,.0f} changes/s |",
        f"| lag of `other`'s changes, p50 | {p50:.0f} ms |",
        f"| lag of `other`'s changes, p99 | {p99:.0f} ms |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / "incremental.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
