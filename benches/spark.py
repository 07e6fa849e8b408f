"""Spark benchmark: the Arrow hand-off.

The ``bench`` change table (decoded from the binary capture of ``capture_stream.py``) into
Spark: ``to_spark`` (``createDataFrame`` from the Arrow table with its exact schema) versus
``createDataFrame`` from the same rows as a pandas DataFrame with Arrow disabled (Spark's
row-by-row path). Each DataFrame is then fully materialised (``write.format("noop")``);
``to_pandas`` is not timed.

The sink benchmarks (end-to-end changes/s into Delta tables against the Parquet mirror
baseline, MERGE cost against table size, commit-to-table lag) are in ``delta_lake.py``
(``benches/results/delta.md``); ``make bench-spark`` runs both.

Writes ``benches/results/spark.md``. Usage::

    .venv/bin/python benches/spark.py [--handoff-rows 1000000] [--pandas-rows 200000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pgwire_cdc  # noqa: E402
import pyarrow as pa  # noqa: E402
from bench_common import check_release_build, load_stream, write_ratios  # noqa: E402
from pgwire_cdc.spark import session, to_spark  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--handoff-rows", type=int, default=1_000_000)
    parser.add_argument("--pandas-rows", type=int, default=200_000)
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

    arrow_rate = handoff["rows"] / handoff["arrow_s"]
    arrow_small_rate = handoff["pandas_rows"] / handoff["arrow_small_s"]
    pandas_rate = handoff["pandas_rows"] / handoff["pandas_s"]
    lines = [
        "# Spark benchmark: the Arrow hand-off",
        "",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: nproc = {os.cpu_count()}, {platform.platform()}",
        f"- PySpark {__import__('pyspark').__version__} (local[2]), release build of "
        "pgwire_cdc. Script: `benches/spark.py` (`make bench-spark`). The Delta Lake sink "
        "and the Parquet mirror baseline: [delta.md](delta.md).",
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
    ]
    args.out.write_text("\n".join(lines))
    write_ratios(
        "spark",
        {"to_spark (Arrow) vs createDataFrame(pandas)": arrow_small_rate / pandas_rate},
        {"to_spark (Arrow), rows/s": arrow_rate},
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
