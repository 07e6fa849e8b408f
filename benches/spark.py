"""Spark benchmarks: the Arrow hand-off, the mirror's apply rate and commit-to-mirror lag.

1. **Hand-off.** The ``bench`` change table (decoded from the binary capture of
   ``capture_stream.py``) into Spark: ``to_spark`` (``createDataFrame`` from the Arrow
   table with its exact schema) versus ``createDataFrame`` from the same rows as a pandas
   DataFrame with Arrow disabled (Spark's row-by-row path). Each DataFrame is then fully
   materialised (``write.format("noop")``); ``to_pandas`` is not timed.
2. **Mirror apply.** A throwaway PostgreSQL 15: ``--base-rows`` rows in ``bench``
   mirrored (snapshot), then 1,000,000 changes in the mix 60 % updates, 20 % inserts,
   20 % deletes, streamed into memory (not timed) and then applied with ``Mirror.apply``
   (timed: the Rust apply kernel plus the Parquet write and the state commit per batch).
   Also the end-to-end ``mirror.run`` rate for the same changes on a copy of the slot.
3. **Lag.** A writer commits 5,000 changes/s (50 transactions of 100 rows per second) for
   ``--lag-seconds``; ``mirror.run`` with ``max_batch_ms=200`` applies them; each change's
   lag is the time from its commit (``_commit_ts``, the server's clock on this machine) to
   the moment its batch is committed in the mirror. p50 / p99 / max.

Writes ``benches/results/spark.md``. Usage::

    .venv/bin/python benches/spark.py [--handoff-rows 1000000] [--pandas-rows 200000]
        [--changes 1000000] [--base-rows 500000] [--lag-seconds 30]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import capture_stream  # noqa: E402
import pgwire_cdc  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from bench_common import check_release_build, load_stream, write_ratios  # noqa: E402
from pgwire_cdc import mirror as mirror_mod  # noqa: E402
from pgwire_cdc.server import PgCluster  # noqa: E402
from pgwire_cdc.spark import session, to_spark  # noqa: E402

SETTINGS = {"max_wal_size": "8GB", "shared_buffers": "512MB", "wal_sender_timeout": "600s"}


def lsn_now(conn: Any) -> int:
    return pgwire_cdc.lsn_to_int(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def materialise(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


# -- 1. hand-off ----------------------------------------------------------------------


def bench_handoff(spark: Any, rows: int, pandas_rows: int) -> dict[str, Any]:
    stream = load_stream("binary")
    dec = pgwire_cdc.Decoder(proto_version=1, binary=True, keep_events=False)
    tables: list[pa.Table] = []
    got = 0
    for lo in range(0, stream.n, 100_000):
        dec.feed_many(stream.msgs[lo : lo + 100_000], stream.lsns[lo : lo + 100_000])
        for t in dec.take().values():
            tables.append(t)
            got += t.num_rows
        if got >= rows:
            break
    table = pa.concat_tables(tables).slice(0, rows).combine_chunks()
    print(f"hand-off: {table.num_rows:,} rows, {table.nbytes / 1e6:.0f} MB in Arrow")

    def arrow_run(t: pa.Table) -> float:
        start = time.perf_counter()
        (df,) = to_spark(spark, {"public.bench": t}).values()
        materialise(df)
        return time.perf_counter() - start

    arrow_run(table.slice(0, 10_000))  # JVM warm-up
    arrow_s = min(arrow_run(table) for _ in range(3))
    small = table.slice(0, pandas_rows)
    arrow_small_s = min(arrow_run(small) for _ in range(3))

    # Spark's row path infers types from the values: leave out the nested metadata and the
    # columns that are null in every row of an insert-only capture.
    droppable = [c for c in small.column_names if c in ("_before", "_unchanged")]
    droppable += [c for c in small.column_names if small[c].null_count == small.num_rows]
    pdf = small.drop_columns(sorted(set(droppable))).to_pandas()
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "false")
    try:
        start = time.perf_counter()
        materialise(spark.createDataFrame(pdf))
        pandas_s = time.perf_counter() - start
    finally:
        spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    return {
        "rows": table.num_rows,
        "arrow_s": arrow_s,
        "pandas_rows": small.num_rows,
        "arrow_small_s": arrow_small_s,
        "pandas_s": pandas_s,
    }


# -- 2. mirror apply ------------------------------------------------------------------


def changes_sql(conn: Any, changes: int, next_id: int, live_ids: int) -> int:
    """``changes`` changes in the mix 60/20/20, in transactions of ~10,000. Returns the
    next free id."""
    per_tx = 10_000
    done = 0
    lo_live = 1
    while done < changes:
        n = min(per_tx, changes - done)
        upd, ins = n * 6 // 10, n * 2 // 10
        dele = n - upd - ins
        with conn.transaction():
            conn.execute(
                "UPDATE bench SET score = score + 1, flag = NOT flag "
                "WHERE id IN (SELECT id FROM bench WHERE id >= %s ORDER BY id LIMIT %s)",
                (lo_live + dele, upd),
            )
            conn.execute(capture_stream.INSERT_SQL, {"lo": next_id, "hi": next_id + ins - 1})
            conn.execute(
                "DELETE FROM bench WHERE id IN "
                "(SELECT id FROM bench WHERE id >= %s ORDER BY id LIMIT %s)",
                (lo_live, dele),
            )
        lo_live += dele
        next_id += ins
        done += n
    return next_id


def bench_mirror(cluster: PgCluster, changes: int, base_rows: int) -> dict[str, Any]:
    db = cluster.create_database()
    conn = cluster.connect(db)
    dsn = cluster.dsn_for(db)
    conn.execute(capture_stream.TABLE_DDL)
    for lo in range(1, base_rows + 1, 10_000):
        conn.execute(capture_stream.INSERT_SQL, {"lo": lo, "hi": min(lo + 9_999, base_rows)})
    conn.execute("CREATE PUBLICATION pub FOR TABLE bench")
    work = Path(tempfile.mkdtemp(prefix="pgwire_cdc_bench_mirror_"))
    start = time.perf_counter()
    mirror_mod.run(dsn, work / "m", publication="pub", slot="base", until_lsn=lsn_now(conn))
    snapshot_s = time.perf_counter() - start
    conn.execute("SELECT pg_copy_logical_replication_slot('base', 'e2e')")

    changes_sql(conn, changes, base_rows + 1, base_rows)
    end = lsn_now(conn)
    batches = []
    for batch in pgwire_cdc.stream(dsn, publication="pub", slot="base", until_lsn=end):
        batches.append(batch)
    streamed = sum(b.rows for b in batches)

    # The apply rate: a copy of the snapshot mirror, the batches from memory.
    import shutil

    shutil.copytree(work / "m", work / "apply")
    m = mirror_mod.Mirror(work / "apply")
    m.table("public.bench")  # loaded before timing, as a running mirror holds it
    start = time.perf_counter()
    for batch in batches:
        m.apply(batch)
    apply_s = time.perf_counter() - start

    # End to end: stream + apply + ack, on a copy of the slot taken before the changes.
    shutil.copytree(work / "m", work / "e2e", dirs_exist_ok=True)
    start = time.perf_counter()
    total = mirror_mod.run(dsn, work / "e2e", publication="pub", slot="e2e", until_lsn=end)
    e2e_s = time.perf_counter() - start
    rows = conn.execute("SELECT count(*) FROM bench").fetchone()[0]
    assert mirror_mod.Mirror(work / "apply").table("public.bench").num_rows == rows
    assert mirror_mod.Mirror(work / "e2e").table("public.bench").num_rows == rows
    conn.close()
    shutil.rmtree(work, ignore_errors=True)
    cluster.drop_database(db)
    return {
        "base_rows": base_rows,
        "snapshot_s": snapshot_s,
        "changes": streamed,
        "batches": len(batches),
        "apply_s": apply_s,
        "e2e_changes": total.changes,
        "e2e_s": e2e_s,
        "final_rows": rows,
    }


# -- 3. lag ---------------------------------------------------------------------------


def bench_lag(cluster: PgCluster, seconds: float, rate: int = 5_000) -> dict[str, Any]:
    db = cluster.create_database()
    conn = cluster.connect(db)
    dsn = cluster.dsn_for(db)
    conn.execute(capture_stream.TABLE_DDL)
    conn.execute("CREATE PUBLICATION pub FOR TABLE bench")
    work = Path(tempfile.mkdtemp(prefix="pgwire_cdc_bench_lag_"))
    mirror_mod.run(dsn, work, publication="pub", slot="lag", until_lsn=lsn_now(conn))

    per_tx = 100
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        wconn = cluster.connect(db)
        next_id = 1
        started = time.monotonic()
        tx = 0
        while not stop.is_set():
            due = started + tx * per_tx / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            wconn.execute(capture_stream.INSERT_SQL, {"lo": next_id, "hi": next_id + per_tx - 1})
            next_id += per_tx
            tx += 1
            written[0] += per_tx
        wconn.close()

    lags: list[float] = []

    def on_batch(_m: Any, batch: Any, _stats: Any) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        for t in batch.tables.values():
            if t.num_rows:
                ts = pc.cast(t["_commit_ts"], pa.timestamp("us", tz="UTC"))
                lag = pc.subtract(pa.scalar(now, pa.timestamp("us", tz="UTC")), ts)
                lags.extend(x / 1e6 for x in pc.cast(lag, pa.int64()).to_pylist())

    thread = threading.Thread(target=writer)
    thread.start()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    mirror_mod.run(
        dsn,
        work,
        publication="pub",
        slot="lag",
        idle_timeout=2.0,
        max_batch_ms=200,
        on_batch=on_batch,
    )
    thread.join()
    conn.close()
    cluster.drop_database(db)
    lags.sort()

    def pct(p: float) -> float:
        return lags[min(len(lags) - 1, int(p * len(lags)))]

    return {
        "seconds": seconds,
        "written": written[0],
        "changes": len(lags),
        "p50": pct(0.50),
        "p99": pct(0.99),
        "max": lags[-1],
        "mean": statistics.fmean(lags),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--handoff-rows", type=int, default=1_000_000)
    parser.add_argument("--pandas-rows", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--base-rows", type=int, default=500_000)
    parser.add_argument("--lag-seconds", type=float, default=30)
    parser.add_argument("--server", default="pg15")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "spark.md")
    args = parser.parse_args()
    check_release_build()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = session(
        "pgwire_cdc-bench",
        "local[2]",
        **{"spark.ui.enabled": "false", "spark.driver.memory": "8g"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    handoff = bench_handoff(spark, args.handoff_rows, args.pandas_rows)
    print(handoff)
    spark.stop()

    cluster = PgCluster.for_server(args.server, settings=SETTINGS)
    cluster.start()
    try:
        mirror = bench_mirror(cluster, args.changes, args.base_rows)
        print(mirror)
        lag = bench_lag(cluster, args.lag_seconds)
        print(lag)
        version = cluster.version
    finally:
        cluster.stop()

    arrow_rate = handoff["rows"] / handoff["arrow_s"]
    arrow_small_rate = handoff["pandas_rows"] / handoff["arrow_small_s"]
    pandas_rate = handoff["pandas_rows"] / handoff["pandas_s"]
    lines = [
        "# Spark benchmarks: hand-off, mirror apply, commit-to-mirror lag",
        "",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: nproc = {os.cpu_count()}, {platform.platform()}",
        f"- PySpark {__import__('pyspark').__version__} (local[2]), PostgreSQL {version}, "
        "release build of pgwire_cdc. Script: `benches/spark.py`.",
        "",
        "## Arrow → Spark hand-off (`bench` change table, 25 columns)",
        "",
        "| path | rows | best s | rows/s |",
        "|---|---:|---:|---:|",
        f"| `to_spark` (Arrow) | {handoff['rows']:,} | {handoff['arrow_s']:.2f} | "
        f"{arrow_rate:,.0f} |",
        f"| `to_spark` (Arrow) | {handoff['pandas_rows']:,} | {handoff['arrow_small_s']:.2f} | "
        f"{arrow_small_rate:,.0f} |",
        f"| `createDataFrame(pandas)`, Arrow disabled | {handoff['pandas_rows']:,} | "
        f"{handoff['pandas_s']:.2f} | {pandas_rate:,.0f} |",
        "",
        f"**Ratio on the same {handoff['pandas_rows']:,} rows: "
        f"{arrow_small_rate / pandas_rate:.1f}x** the pandas path (the pandas path runs "
        "without `_before`, `_unchanged` and the all-null columns, which it cannot infer). "
        "Both include full materialisation in Spark (`write.format('noop')`).",
        "",
        "## Mirror apply (1,000,000 changes: 60 % updates, 20 % inserts, 20 % deletes)",
        "",
        f"- Base table: {mirror['base_rows']:,} rows, mirrored by the initial snapshot in "
        f"{mirror['snapshot_s']:.1f} s; {mirror['final_rows']:,} rows at the end.",
        f"- Apply only (batches held in memory; Rust apply + Parquet write + state commit per "
        f"batch): {mirror['changes']:,} changes in {mirror['batches']} batches in "
        f"{mirror['apply_s']:.1f} s = **{mirror['changes'] / mirror['apply_s']:,.0f} "
        "changes/s**.",
        f"- End to end (`mirror.run`: stream + apply + ack): {mirror['e2e_changes']:,} changes "
        f"in {mirror['e2e_s']:.1f} s = **{mirror['e2e_changes'] / mirror['e2e_s']:,.0f} "
        "changes/s**.",
        "",
        "## Commit-to-mirror lag at a steady 5,000 changes/s",
        "",
        f"- {lag['seconds']:.0f} s of 50 transactions/s x 100 inserts; `mirror.run` with "
        f"`max_batch_ms=200`; {lag['changes']:,} changes measured.",
        f"- Lag from commit to the mirror's commit: **p50 {lag['p50'] * 1000:.0f} ms, p99 "
        f"{lag['p99'] * 1000:.0f} ms**, max {lag['max'] * 1000:.0f} ms, mean "
        f"{lag['mean'] * 1000:.0f} ms.",
        "",
    ]
    args.out.write_text("\n".join(lines))
    write_ratios(
        "spark",
        {"to_spark (Arrow) vs createDataFrame(pandas)": arrow_small_rate / pandas_rate},
        {
            "mirror apply, changes/s": mirror["changes"] / mirror["apply_s"],
            "mirror end to end, changes/s": mirror["e2e_changes"] / mirror["e2e_s"],
            "lag p50 ms at 5,000 changes/s": lag["p50"] * 1000,
            "lag p99 ms at 5,000 changes/s": lag["p99"] * 1000,
        },
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
